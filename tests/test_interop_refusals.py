"""``posenc.interop.patch`` never runs a model silently different (issue 51): what each attention
module is comes from the model (``is_causal``; a module that does not say is refused, and
bidirectional encoders run as such: tests/test_interop_encoders.py), every reader of the rotary's output keeps what it
had, the drop-in has an effect or is refused, a config shared by several models stays theirs, and
a scheme that cannot run on the model's heads is refused at ``patch``. Each model is built tiny
from its config class with random weights."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _patched_llama import tiny_model  # noqa: E402

def test_an_attention_that_does_not_say_whether_it_is_causal_is_refused():
    model = tiny_model("llama")
    for layer in model.model.layers:
        del layer.self_attn.is_causal
    with pytest.raises(ValueError, match="LlamaAttention.*no is_causal attribute"):
        posenc.interop.patch(model, "alibi")


def _walk_tiny(model_type: str):
    from test_hf_walk import _ids, tiny

    return tiny(model_type), *_ids(seed=3)


def test_deepseek_sparse_attention_keeps_its_indexer_or_is_refused_by_name():
    """DeepSeek-V3.2's indexer picks 16 of the 40 keys from queries and keys it rotates with the
    model's rotary output: one rope in place of its rotary module (``from_hf``: the indexer reads it
    too) leaves the logits unchanged, and every scheme through the attention function (which would
    neutralise the rotary under the indexer: its own ``hf_layer_specs``, one per layer, or ALiBi)
    is refused naming the indexer, the model left as it was."""
    model, ids, mask = _walk_tiny("deepseek_v32")
    assert model.config.index_topk < ids.shape[1]
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        posenc.interop.patch(model, posenc.interop.from_hf(model.config))
        got = model(ids, attention_mask=mask).logits
    assert (got - want)[:, 3:].abs().max() <= 1e-5 * want.abs().max()
    posenc.interop.unpatch(model)
    for pe in (hf_layer_specs(model.config), "alibi"):
        with pytest.raises(ValueError, match=r"read by model\.layers\.0\.self_attn\.indexer \(DeepseekV32Indexer\)"):
            posenc.interop.patch(model, pe)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, want)


def test_the_drop_in_is_refused_where_the_model_leaves_its_rotary_unused():
    """Granite SWA runs one rotary per base (``rotary_embs``) and never calls ``rotary_emb``: a
    drop-in placed there has no effect (a doubled base gives the same logits), so it is refused."""
    from test_hf_walk import _dropin

    model, ids, mask = _walk_tiny("granite_swa")
    with pytest.raises(ValueError, match="layer_rope_theta.*no effect"):
        posenc.interop.from_hf(model.config)
    with pytest.raises(ValueError, match="layer_rope_theta"):
        _dropin(model, ids, mask)


def test_the_walks_drop_in_check_fails_when_the_drop_in_has_no_effect(monkeypatch):
    """The walk's drop-in check can fail: a rotary whose output the model ignores passes the
    equality and fails the doubled base."""
    from test_hf_walk import _dropin

    model, ids, mask = _walk_tiny("llama")
    _dropin(model, ids, mask)
    apply = sys.modules[type(model.model.layers[0].self_attn).__module__].apply_rotary_pos_emb
    own = model.model.rotary_emb(torch.zeros(1), torch.arange(ids.shape[1])[None])
    monkeypatch.setattr(sys.modules[type(model.model.layers[0].self_attn).__module__], "apply_rotary_pos_emb",
                        lambda q, k, cos, sin, **kw: apply(q, k, *own, **kw))
    with pytest.raises(AssertionError, match="doubled base"):
        _dropin(model, ids, mask)


def test_a_baseline_and_a_patched_model_of_one_config_each_run_as_itself():
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="sdpa")
    before = config.to_dict()
    torch.manual_seed(0)
    baseline = transformers.LlamaForCausalLM(config).eval()
    torch.manual_seed(0)
    patched = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = baseline(ids).logits
        posenc.interop.patch(patched, "alibi")
        assert config.to_dict() == before and config._attn_implementation == "sdpa"
        assert torch.equal(baseline(ids).logits, want)
        assert (patched(ids).logits - want).abs().max() > 1e-3
        posenc.interop.unpatch(patched)
        assert torch.equal(patched(ids).logits, want)
    assert patched.config is config and all(m.config is config for m in patched.modules() if hasattr(m, "config")
                                            and not isinstance(m.config, dict))


@pytest.mark.parametrize("spec, words", [("rope_mixed", "x must have num_heads=4 heads"),
                                         ("fope", "a multiple of num_heads=4")])
def test_per_head_frequencies_on_grouped_keys_are_refused_at_patch(spec, words):
    model = tiny_model("llama")  # 4 query heads, 2 key/value heads
    with pytest.raises(ValueError, match=f"frequencies per head.*4 query heads and 2 key/value heads.*{words}"):
        posenc.interop.patch(model, spec)
    assert getattr(model, "_posenc_original", None) is None
    posenc.interop.patch(model, {"scheme": "fope", "num_heads": 2, "max_positions": 64})  # one set per key head


def test_a_layer_the_model_gives_no_rotary_is_refused_its_own_rope():
    """Lara-mini passes its rotary's output to its sliding layers only (``position_embeddings=None``
    to its full-attention ones, which its config does not say): posenc's reading of its rope on a
    full layer is refused at the first call, naming the layer; ``nope`` there runs as the model."""
    from test_hf_walk import _ids

    config = transformers.LaraMiniConfig(vocab_size=128, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=8, num_experts=2, num_experts_per_tok=1, sliding_window=8,
                                         layer_types=["sliding_attention", "full_attention"], pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids, mask = _ids(seed=3)
    specs = hf_layer_specs(model.config)
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        posenc.interop.patch(model, specs)
        with pytest.raises(ValueError, match=r"layer 1 \(LaraMiniAttention\) is given no rotary output"):
            model(ids, attention_mask=mask)
        posenc.interop.patch(model, [specs[0], {"scheme": "nope"}])
        got = model(ids, attention_mask=mask).logits
    assert (got - want)[:, 3:].abs().max() <= 1e-5 * want.abs().max()
