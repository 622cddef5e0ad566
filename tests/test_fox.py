"""FoX: the reference is flash-linear-attention's naive formula, the fixed gate is ALiBi exactly,
and FlexAttention's score_mod reads c[q] − c[kv] (one compile)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.attn import FlexFallbackWarning
from posenc.encodings._base import to_numpy
from posenc.reference.fox import fox as fox_ref


def _naive(q, k, v, hidden, weight, bias, scale):
    """flash-linear-attention's ``naive.py`` equation, term by term: the gate of every token between
    key j (excluded) and query i (included), summed in a loop; the softmax over j ≤ i."""
    b, h, length, _ = q.shape
    out = np.zeros_like(v)
    for bi in range(b):
        for hi in range(h):
            log_f = [-math.log1p(math.exp(-(float(hidden[bi, t] @ weight[hi]) + bias[hi]))) for t in range(length)]
            for i in range(length):
                s = np.array([q[bi, hi, i] @ k[bi, hi, j] * scale + sum(log_f[j + 1:i + 1]) for j in range(i + 1)])
                p = np.exp(s - s.max())
                out[bi, hi, i] = (p / p.sum()) @ v[bi, hi, :i + 1]
    return out


def test_reference_and_module_are_the_naive_formula():
    torch.manual_seed(0)
    m = posenc.build({"scheme": "fox", "num_heads": 3, "d_model": 5}).double()
    q, k, v = (torch.randn(2, 3, 9, 4, dtype=torch.float64) for _ in range(3))
    hidden = torch.randn(2, 9, 5, dtype=torch.float64)
    expected = _naive(*(to_numpy(t) for t in (q, k, v, hidden, m.weight, m.bias)), scale=0.5)
    np.testing.assert_allclose(m.reference(*(to_numpy(t) for t in (q, k, v, hidden)), scale=0.5), expected,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(to_numpy(posenc.attention(q, k, v, m, causal=True, scale=0.5, hidden=hidden)),
                               expected, rtol=0, atol=1e-12)


def test_fixed_gate_is_alibi_and_bias_only_starts_as_it():
    """log f = −m_h (fixed) makes c_i − c_j = −m_h (i − j): ALiBi, causal, on every backend; float64
    to rounding, float32 within a few eps. bias_only starts there, up to its float32 parameter."""
    heads = 6  # not a power of two: ALiBi's interleaved slopes
    fox = posenc.build({"scheme": "fox", "num_heads": heads, "gate": "fixed"})
    alibi = posenc.build({"scheme": "alibi", "num_heads": heads})
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, heads, 37, 8, dtype=torch.float64) for _ in range(3))
    expected = posenc.attention(q, k, v, alibi, causal=True)
    for backend in ("materialize", "blockwise"):
        torch.testing.assert_close(posenc.attention(q, k, v, fox.double(), causal=True, backend=backend), expected,
                                   rtol=0, atol=1e-12)
    out32 = posenc.attention(q.float(), k.float(), v.float(), fox.float(), causal=True)
    torch.testing.assert_close(out32, posenc.attention(q.float(), k.float(), v.float(), alibi, causal=True),
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(fox.reference(*(to_numpy(t) for t in (q, k, v))), expected.numpy(), rtol=0, atol=1e-12)
    learned = posenc.build({"scheme": "fox", "num_heads": heads, "gate": "bias_only"}).double()
    torch.testing.assert_close(posenc.attention(q, k, v, learned, causal=True), expected, rtol=0, atol=1e-6)


def test_fixed_gate_reference_is_alibi_reference():
    slopes = ref.alibi_slopes(4)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 11, 8)) for _ in range(3))
    expected = ref.attention(q, k, v, bias=ref.alibi(np.arange(11), np.arange(11), slopes), causal=True)
    np.testing.assert_allclose(fox_ref(q, k, v, -slopes[None, :, None]), expected, rtol=0, atol=1e-13)


def test_bad_gate_and_missing_width():
    with pytest.raises(ValueError, match="gate must be one of"):
        posenc.build({"scheme": "fox", "num_heads": 2, "gate": "sometimes"})
    with pytest.raises(ValueError, match="needs d_model"):
        posenc.build({"scheme": "fox", "num_heads": 2})


@pytest.mark.slow
def test_flex_score_mod_reads_c_of_q_minus_c_of_kv():
    """FlexAttention (one compile), packed documents, queries the last 200 of 300 keys: equal to
    the materialized path within float32 rounding."""
    torch.manual_seed(2)
    m = posenc.build({"scheme": "fox", "num_heads": 2, "d_model": 16})
    q = torch.randn(2, 2, 200, 8)
    k, v = (torch.randn(2, 2, 300, 8) for _ in range(2))
    hidden = torch.randn(2, 300, 16)
    docs = torch.tensor([[0] * 130 + [1] * 170, [0] * 290 + [1] * 10])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FlexFallbackWarning)  # a fallback to chunked would warn
        out = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend="flex")
        expected = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend="materialize")
    torch.testing.assert_close(out, expected, rtol=0, atol=2e-6)
