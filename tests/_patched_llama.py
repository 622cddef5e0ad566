"""A tiny transformers Llama with a scheme patched in: the check the rotary schemes that patch into
Llama share (``tests/test_pope.py``, ``tests/test_fope.py``), written once.

    check_patched_llama(spec, trained="bias", hidden_size=32, min_change=1e-3, family="llama")

``posenc.interop.patch`` (the attention-function path, grouped key/value heads: 4 query heads, 2
key/value heads): the logits change by more than ``min_change``, one SGD step changes the scheme's
parameter ``trained``, and greedy ``generate()`` with the cache equals recomputing. ``family``: a
transformers family of the same shape (``FAMILIES``: Llama, Qwen2, Mistral, Gemma), ``tiny_model``
builds its tiny model.
"""

from __future__ import annotations

import pytest
import torch


FAMILIES = {"llama": ("LlamaConfig", {}), "qwen2": ("Qwen2Config", {}),
            "mistral": ("MistralConfig", {"sliding_window": None}), "gemma": ("GemmaConfig", {"head_dim": None})}
"""family -> (its config class in transformers, what differs from Llama's arguments; Gemma's head_dim: hidden/4)."""


def tiny_model(family: str = "llama", *, hidden_size: int = 32):
    """A 2-layer causal LM of ``family`` (4 query heads, 2 key/value heads, SDPA), weights drawn after seed 0."""
    transformers = pytest.importorskip("transformers")
    name, extra = FAMILIES[family]
    extra = {k: hidden_size // 4 if k == "head_dim" else v for k, v in extra.items()}
    config = getattr(transformers, name)(vocab_size=97, hidden_size=hidden_size, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=64, attn_implementation="sdpa", **extra)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def check_patched_llama(spec: dict, *, trained: str, hidden_size: int, min_change: float,
                        family: str = "llama") -> None:
    import posenc.interop

    model = tiny_model(family, hidden_size=hidden_size)
    ids = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids).logits
        posenc.interop.patch(model, spec)
        assert (model(ids).logits - before).abs().max() > min_change
    (pe,) = model.model.posenc_modules
    start = getattr(pe, trained).detach().clone()
    model(ids, labels=ids).loss.backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    assert (getattr(pe, trained).detach() - start).abs().max() > 0
    kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(model.generate(ids[:1], **kw), model.generate(ids[:1], use_cache=False, **kw))


def sharpened(model, *, causal=(True, False)):
    """``model`` with the linear weights of its attention modules (those whose ``is_causal`` is one
    of ``causal``) times 8: random small weights leave attention almost uniform, where no position
    scheme would show; this one's rows are peaked."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "is_causal", None) in causal:
                for linear in module.modules():
                    if isinstance(linear, torch.nn.Linear):
                        linear.weight.mul_(8)
    return model
