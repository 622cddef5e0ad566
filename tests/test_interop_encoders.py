"""``posenc.interop.patch`` on bidirectional encoders (issue 51): self-attention that says it is not
causal (``module.is_causal`` False, or ``is_causal=False`` in the call) runs through posenc's
attention without causality, with the model's own padding mask and local windows. Each model is
built tiny from its config class with random weights, at 40 tokens (longer than ModernBERT's local
window of 8) with a padded row: its own encoding through posenc (``hf_layer_specs``) leaves the
logits equal, a doubled base changes them (no vacuous pass), and a bias scheme sees the keys after
each query."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _patched_llama import sharpened, tiny_model  # noqa: E402

LENGTH = 40
ENCODER = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4,
               num_key_value_heads=4, head_dim=8, vocab_size=64, max_position_embeddings=64, pad_token_id=0,
               global_attn_every_n_layers=2, local_attention=8)
BIDIRECTIONAL = ("modernbert", "eurobert", "nomic_bert", "gte", "jina_embeddings_v3", "ultrabert", "esmc")
"""Encoders built like Llama (a rotary module beside layers whose attention calls transformers'
attention interface) whose attention is bidirectional (``is_causal`` False): ``patch`` took them for
causal decoders, then refused them by name, and now runs them bidirectionally."""


def tiny_masked_lm(model_type: str):
    default = transformers.AutoConfig.for_model(model_type)
    config = type(default)(**{k: v for k, v in ENCODER.items() if hasattr(default, k)})
    torch.manual_seed(0)
    return transformers.AutoModelForMaskedLM.from_config(config).eval()


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ``LENGTH`` tokens, the second right-padded after 29 (an encoder's padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 60, (2, LENGTH), generator=g)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, 29:] = 0
    return ids, mask


def _sharpened(model):
    return sharpened(model)


def _logits(model, ids, mask) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.double()


def _doubled(specs: list[dict]) -> list[dict]:
    return [{**s, "base": 2 * s["base"]} if "base" in s else s for s in specs]


@pytest.mark.parametrize("model_type", BIDIRECTIONAL)
def test_a_bidirectional_encoder_runs_its_own_rope_through_posenc_unchanged(model_type):
    model = _sharpened(tiny_masked_lm(model_type))
    ids, mask = _batch()
    expected = _logits(model, ids, mask)
    specs = hf_layer_specs(model.config)
    posenc.interop.patch(model, specs)
    layers = [m for m in model.modules() if getattr(m, "is_causal", None) is False]
    assert layers and all(m.posenc_pe is not None for m in layers)  # through posenc's attention, not the drop-in
    got = _logits(model, ids, mask)
    scale = expected.abs().max()
    assert (got - expected).abs().max() / scale < 1e-5
    posenc.interop.patch(model, _doubled(specs))
    assert (_logits(model, ids, mask) - expected).abs().max() / scale > 1e-3  # the scheme has an effect
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask), expected)


@pytest.mark.parametrize("model_type", BIDIRECTIONAL)
def test_alibi_in_an_encoder_sees_the_keys_after_each_query(model_type):
    """ALiBi's symmetric distance ``−m·|i − j|`` (MosaicBERT's encoder form), non-causal: the first
    token's logits change when only the last real token changes; a padded key changes nothing."""
    model = posenc.interop.patch(_sharpened(tiny_masked_lm(model_type)), "alibi")
    ids, mask = _batch()
    base = _logits(model, ids, mask)
    later = ids.clone()
    later[0, LENGTH - 1] = (later[0, LENGTH - 1] + 1 - 3) % 57 + 3
    later[1, LENGTH - 1] = (later[1, LENGTH - 1] + 1 - 3) % 57 + 3  # row 1: a padded key
    changed = _logits(model, later, mask)
    assert (changed[0, 0] - base[0, 0]).abs().max() > 1e-6
    assert torch.allclose(changed[1, :29], base[1, :29], rtol=0, atol=1e-6)


def test_an_attention_call_with_is_causal_false_runs_bidirectionally_as_the_model_does():
    """The call's own ``is_causal`` (as SDPA reads it) is read at every call, never assumed: a Llama
    whose layers say ``is_causal=False`` runs bidirectionally under its own SDPA, and equally through
    posenc with its own rope."""
    model = tiny_model("llama")
    for layer in model.model.layers:
        layer.self_attn.is_causal = False
    ids = torch.randint(3, 60, (1, 12))
    with torch.no_grad():
        expected = model(ids).logits.double()
        posenc.interop.patch(model, hf_layer_specs(model.config))
        got = model(ids).logits.double()
    assert (got - expected).abs().max() / expected.abs().max() < 1e-5


def test_bert_runs_its_learned_table_through_posenc_unchanged():
    """BERT's attention call is made by ``attention.self`` (``BertSelfAttention``, inside
    ``BertAttention``), found there; its learned table (``embeddings.position_embeddings``, before
    the LayerNorm) is posenc's ``learned`` module started from it: logits equal, and that module is
    the one in use (zeroing it changes them)."""
    model = _sharpened(tiny_masked_lm("bert"))
    ids, mask = _batch()
    expected = _logits(model, ids, mask)
    posenc.interop.patch(model, hf_layer_specs(model.config))
    assert type(model.bert.encoder.layer[0].attention.self).__name__ == "BertSelfAttention"
    got = _logits(model, ids, mask)
    assert (got - expected).abs().max() / expected.abs().max() < 1e-5
    pe = model.bert.encoder.posenc_modules[0]
    with torch.no_grad():
        pe.weight.zero_()
    assert (_logits(model, ids, mask) - expected).abs().max() / expected.abs().max() > 1e-3
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask), expected)


def test_alibi_in_bert_is_bidirectional_and_replaces_its_table():
    """ALiBi in BERT: the learned table adds zeros, each layer's attention takes ``−m·|i − j|``
    (symmetric: the first token sees the last); token types stay BERT's."""
    model = _sharpened(tiny_masked_lm("bert"))
    ids, mask = _batch()
    own = _logits(model, ids, mask)
    posenc.interop.patch(model, "alibi")
    base = _logits(model, ids, mask)
    assert (base - own).abs().max() / own.abs().max() > 1e-3
    later = ids.clone()
    later[0, LENGTH - 1] = (later[0, LENGTH - 1] + 1 - 3) % 57 + 3
    assert (_logits(model, later, mask)[0, 0] - base[0, 0]).abs().max() > 1e-6
    with torch.no_grad():
        types = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.ones_like(ids)).logits.double()
    assert (types - base).abs().max() > 1e-6  # the token-type table still adds its rows


def test_bert_decoder_cross_attention_is_left_as_it_was():
    """A BERT decoder (``is_decoder``: causal self-attention) with cross-attention to an encoder's
    states: the self-attention takes the scheme, the cross-attention (``crossattention``, no
    positions of the queries' sequence) keeps transformers' own attention: logits equal with BERT's
    own table through posenc, and the encoder's states still reach every token."""
    default = transformers.BertConfig()
    config = transformers.BertConfig(**{k: v for k, v in ENCODER.items() if hasattr(default, k)}, is_decoder=True,
                                     add_cross_attention=True)
    torch.manual_seed(0)
    model = _sharpened(transformers.BertLMHeadModel(config).eval())
    ids, states = torch.randint(3, 60, (2, 12)), torch.randn(2, 7, 32)
    with torch.no_grad():
        expected = model(input_ids=ids, encoder_hidden_states=states).logits.double()
        posenc.interop.patch(model, hf_layer_specs(model.config))
        got = model(input_ids=ids, encoder_hidden_states=states).logits.double()
        assert (got - expected).abs().max() / expected.abs().max() < 1e-5
        assert not hasattr(model.bert.encoder.layer[0].crossattention.self, "posenc_pe")
        posenc.interop.patch(model, "alibi")
        first = model(input_ids=ids, encoder_hidden_states=states).logits
        other = model(input_ids=ids, encoder_hidden_states=states + 1).logits
    assert (first - other).abs().max() > 1e-6
