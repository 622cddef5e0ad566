"""PoPE, FoPE and Dual Chunk Attention patched into transformers families beyond Llama (issue 38):
Qwen2 with every scheme, Gemma (scaled embeddings, its own head size) with PoPE, Mistral with Dual
Chunk Attention (lean: a tiny model each), found from their structure by ``posenc.interop.patch``
(no family table entry of their own for these schemes). The checks are the Llama ones
(``tests/_patched_llama.py``, ``tests/test_dual_chunk.py``): the logits change, one step trains,
and greedy ``generate()`` with the cache equals recomputing; Dual Chunk Attention leaves the
logits as they are while every distance is kept and changes them after."""

from __future__ import annotations

import pytest
import torch

from _patched_llama import check_patched_llama, tiny_model

@pytest.mark.parametrize("family", ["qwen2", "gemma"])
def test_pope_patched_trains_and_decodes_through_the_cache(family):
    check_patched_llama({"scheme": "pope", "bias_init": "uniform"}, trained="bias", hidden_size=32, min_change=1e-3,
                        family=family)


def test_fope_patched_into_qwen2_trains_and_decodes_through_the_cache():
    check_patched_llama({"scheme": "fope", "num_heads": 2, "max_positions": 64, "learned": True, "init_gain": 1.0},
                        trained="cos_coef", hidden_size=32, min_change=5e-5, family="qwen2")


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_dual_chunk_patched_is_rope_while_distances_are_kept_and_decodes_through_the_cache(family):
    import posenc.interop

    model = tiny_model(family)
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids).logits
        posenc.interop.patch(model, {"scheme": "dual_chunk", "chunk_size": 6, "local_size": 2,
                                     "original_max_position_embeddings": 8})
        change = (model(ids).logits - before).abs().amax(dim=(0, 2))  # (L,): chunks of 4, every distance kept to 6
    assert change[:7].max() < 1e-5 and change[7:].min() > 1e-5, change
    model(ids, labels=ids).loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 0
    kw = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(model.generate(ids[:1], **kw), model.generate(ids[:1], use_cache=False, **kw))
