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
@pytest.mark.xdist_group("compile")  # on the worker that has paid inductor's start (imports, ISA probes)
def test_flex_score_mod_reads_c_of_q_minus_c_of_kv():
    """FlexAttention (one compile), packed documents, queries the last 200 of 300 keys: equal to
    the materialized path within float32 rounding. A non-finite ``hidden`` in the first document
    of the first row stays there (the running sum of log gates restarts in each document)."""
    torch.manual_seed(2)
    m = posenc.build({"scheme": "fox", "num_heads": 2, "d_model": 16})
    q = torch.randn(2, 2, 200, 8)
    k, v = (torch.randn(2, 2, 300, 8) for _ in range(2))
    hidden = torch.randn(2, 300, 16)
    hidden[0, int(torch.randint(130, ())), int(torch.randint(16, ()))] = float("inf")
    docs = torch.tensor([[0] * 130 + [1] * 170, [0] * 290 + [1] * 10])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FlexFallbackWarning)  # a fallback to chunked would warn
        out = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend="flex")
        expected = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend="materialize")
    torch.testing.assert_close(out[1], expected[1], rtol=0, atol=2e-6)
    torch.testing.assert_close(out[0, :, 30:], expected[0, :, 30:], rtol=0, atol=2e-6)  # the second document
    assert torch.isfinite(out[0, :, 30:]).all() and torch.isfinite(out[1]).all()


ROWS = ([6, 9, 1, 7], [11, 12])  # two rows of 23 tokens: a one-token document, a non-finite one


def _packed(bad: float, *, seed: int):
    """FoX (full gate) over two packed rows whose second document in the first row has a
    non-finite ``hidden`` at one token, drawn at random: the module, q, k, v, hidden, the ids."""
    torch.manual_seed(seed)
    m = posenc.build({"scheme": "fox", "num_heads": 3, "d_model": 5}).double()
    q, k, v = (torch.randn(2, 3, 23, 4, dtype=torch.float64) for _ in range(3))
    hidden = torch.randn(2, 23, 5, dtype=torch.float64)
    hidden[0, 6 + int(torch.randint(9, ())), int(torch.randint(5, ()))] = bad
    docs = torch.stack([posenc.packing(r).document_ids for r in ROWS])  # (2, 23)
    return m, q, k, v, hidden, docs


def _documents(row: int):
    """``(start, stop)`` of each document of a row, but the non-finite one (row 0, tokens 6..14)."""
    cut = np.cumsum([0, *ROWS[row]])
    return [(s, e) for s, e in zip(cut[:-1], cut[1:]) if (row, s) != (0, 6)]


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("backend", ["materialize", "chunked", "blockwise"])
def test_a_non_finite_hidden_stays_in_its_document(bad, backend, monkeypatch):
    """The running sum of log gates restarts in each document: every other document of the row
    (after the bad one included) gives what it gives alone, and so do its gradients into q, k
    and hidden; chunks of 2 rows (chunked, blockwise) span documents. (v's gradient is not
    contained: the bad rows' softmax is NaN on masked keys too, and ``pᵀ·dout`` reads it.)"""
    monkeypatch.setattr(posenc.rowwise, "ROW_ELEMENTS", 2 * 3 * 23)
    m, q, k, v, hidden, docs = _packed(bad, seed=3)
    leaves = [t.requires_grad_() for t in (q, k, v, hidden)]
    out = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend=backend)
    weights = torch.randn_like(out)
    alone = {}
    for row in range(2):
        for s, e in _documents(row):
            parts = [t[row:row + 1, :, s:e].detach().requires_grad_() for t in (q, k, v)]
            h = hidden[row:row + 1, s:e].detach().requires_grad_()
            got = posenc.attention(*parts, m, causal=True, hidden=h, backend=backend)
            (got * weights[row:row + 1, :, s:e]).sum().backward()
            alone[row, s, e] = got.detach(), [p.grad for p in parts], h.grad
    loss = sum((out[row:row + 1, :, s:e] * weights[row:row + 1, :, s:e]).sum() for row, s, e in alone)
    grads = torch.autograd.grad(loss, leaves)
    for (row, s, e), (expected, expected_grads, expected_hidden) in alone.items():
        where = f"row {row} document {s}:{e}"
        torch.testing.assert_close(out[row:row + 1, :, s:e].detach(), expected, rtol=0, atol=1e-12, msg=where)
        for g, eg in zip(grads[:2], expected_grads[:2]):
            torch.testing.assert_close(g[row:row + 1, :, s:e], eg, rtol=0, atol=1e-12, msg=where)
        torch.testing.assert_close(grads[3][row:row + 1, s:e], expected_hidden, rtol=0, atol=1e-12, msg=where)
    assert not torch.isfinite(out[0, :, 6:15]).all()  # the bad document is as bad as it is alone


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_reference_keeps_a_non_finite_hidden_in_its_document(bad):
    m, q, k, v, hidden, docs = _packed(bad, seed=4)
    q, k, v, hidden = (to_numpy(t) for t in (q, k, v, hidden))
    with np.errstate(invalid="ignore"):  # the bad document's own c_i − c_j is inf − inf
        out = m.reference(q, k, v, hidden, document_ids=docs.numpy())
    for row in range(2):
        for s, e in _documents(row):
            expected = m.reference(q[row:row + 1, :, s:e], k[row:row + 1, :, s:e], v[row:row + 1, :, s:e],
                                   hidden[row:row + 1, s:e])
            np.testing.assert_allclose(out[row:row + 1, :, s:e], expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("gate", ["bias_only", "fixed"])
def test_a_constant_gate_counts_from_each_documents_start(gate):
    """``c = log f · (t + 1)`` with ``t`` the position in the document: the same ``c`` as the
    document alone, exactly (a row's ``t`` would grow with the row and round differently)."""
    m = posenc.build({"scheme": "fox", "num_heads": 2, "gate": gate}).double()
    docs = torch.stack([posenc.packing(r).document_ids for r in ROWS])
    k = torch.zeros(2, 2, 23, 1, dtype=torch.float64)
    c = m.state(k, None, docs)  # (2, 2, 23)
    for row in range(2):
        cut = np.cumsum([0, *ROWS[row]])
        for s, e in zip(cut[:-1], cut[1:]):
            assert torch.equal(c[row, :, s:e], m.state(k[:1, :, s:e], None, None)[0])
