"""``rope``'s ``query_temperature`` (Ministral 3's ``llama_4_scaling_beta``: queries times
``τ(p) = 1 + β·log(1 + ⌊(p + position_offset)/L⌋)`` after rotation) against a float64 reference
computed from the formula's inputs (β, L and the offset, with NumPy's floor and log1p, times
``posenc.reference.rope``), not from the module's tables. Ministral 3 itself is walked in
tests/test_hf_walk.py; its τ against transformers' ``get_llama_4_attn_scale`` below."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close

import posenc
from posenc import reference as ref

BETA, STEP = 0.37, 5


def _tempered(offset=0):
    return posenc.build({"scheme": "rope", "head_dim": 16, "rotary_dim": 12,
                         "query_temperature": {"attn_scale": BETA, "floor_scale": STEP, "position_offset": offset}})


@pytest.mark.parametrize("dtype", DTYPES)
def test_queries_are_rotated_then_tempered_and_keys_only_rotated(dtype):
    gen = torch.Generator().manual_seed(0)
    m = _tempered()
    x = torch.randn(2, 3, 23, 16, generator=gen).to(dtype)  # odd length
    p = torch.arange(23) + 3  # an offset: steps at 5, 10, 15, 20, 25
    rotated = ref.rope(x.double().numpy(), p.numpy(), ref.rope_inv_freq_exact(12, 10000.0))
    tau = 1.0 + BETA * np.log1p(np.floor(p.numpy() / STEP))  # (L,)
    assert_close(m(x, p, role="query"), rotated * tau[:, None])
    assert_close(m(x, p, role="key"), rotated)
    assert_close(m.reference(x.double().numpy(), p.numpy(), role="query"), rotated * tau[:, None],
                 dtype=torch.float64)
    offset = _tempered(offset=1).query_scale(p).numpy()  # Llama 4's count, p + 1: one step earlier
    np.testing.assert_array_equal(offset, 1.0 + BETA * np.log1p(np.floor((p.numpy() + 1) / STEP)))


def test_attention_tempers_the_queries_of_each_row_at_its_positions():
    """``posenc.attention`` (``rotate``) gives rope's temperature per batch row (left padding) and
    its gradient; a call without ``role`` is refused rather than left untempered."""
    m = _tempered().double()
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    p = torch.stack([torch.arange(9), torch.arange(9) - 3]).clamp(min=0)  # (B, L): the second row left-padded
    got = posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=True)
    want = posenc.attention(m(q, p, role="query"), m(k, p, role="key"), v, None, causal=True)
    torch.testing.assert_close(got, want)
    plain = posenc.build({**m.spec, "query_temperature": None}).double()
    assert (posenc.attention(q, k, v, plain, q_positions=p, k_positions=p, causal=True) - got).abs().max() > 1e-3
    small = q[:1, :1, :6].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t, p[0, :6], role="query"), (small,))
    with pytest.raises(ValueError, match="role='query' or role='key'"):
        m(q, p)


@pytest.mark.parametrize("value, error, message", [
    ({"attn_scale": 0.1, "floor_scale": 16}, ValueError, "exactly the keys attn_scale, floor_scale, position_offset"),
    ({"attn_scale": -0.1, "floor_scale": 16, "position_offset": 0}, ValueError, r"attn_scale'\] must be"),
    ({"attn_scale": 0.1, "floor_scale": 0, "position_offset": 0}, ValueError, r"floor_scale'\] must be"),
    (0.1, TypeError, "query_temperature must be None or a dict"),
])
def test_bad_temperatures_are_refused_by_name(value, error, message):
    with pytest.raises(error, match=message):
        posenc.build({"scheme": "rope", "head_dim": 8, "query_temperature": value})


def test_ministral3_temperature_is_transformers_and_only_hf_layer_specs_carry_it():
    """hf_layer_specs of a Ministral 3 config gives every layer its temperature, equal to transformers'
    ``get_llama_4_attn_scale`` around its steps; from_hf gives the rotary alone (the drop-in), and
    ``HFRotaryEmbedding`` refuses a tempered rope by name."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    from posenc.interop import HFRotaryEmbedding, from_hf, hf_layer_specs

    rp = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 8,
          "llama_4_scaling_beta": 0.25}
    config = transformers.Ministral3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                           num_hidden_layers=2, max_position_embeddings=64, rope_parameters=rp)
    specs = hf_layer_specs(config)
    assert [s["query_temperature"] for s in specs] == [{"attn_scale": 0.25, "floor_scale": 8, "position_offset": 0}] * 2
    assert from_hf(config).query_temperature is None
    p = torch.arange(40)
    want = get_llama_4_attn_scale(p[None], 0.25, 8)[0, 0, :, 0].double()
    torch.testing.assert_close(posenc.build(specs[0]).query_scale(p), want, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="query_temperature scales the queries only"):
        HFRotaryEmbedding(posenc.build(specs[0]))
    with pytest.raises(ValueError, match="'llama_4_scaling_beta'.*does not read"):  # a family that does not read it
        from_hf({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_parameters": rp})
