"""Content schemes with Gemma 2's logit cap and GPT-OSS's attention sinks (``softcap=``,
``sinks=``): every backend equals each scheme's float64 reference (which computes the cap and the
sink column from the formula's inputs), with packed documents, Lq < Lk, padding masks and
gradients into q, k, v, the layer input, the scheme's parameters and the sinks; stick-breaking
takes the cap and refuses sinks; bad values are refused before anything runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.rowwise as rowwise
from conftest import assert_directional_gradients, schemes_of_kind, small_module

CONTENT = schemes_of_kind("content")
SOFTMAX = [n for n in CONTENT if n != "stick_breaking"]  # the schemes with a softmax for a sink to join
TERMS = {"softcap": {"softcap": 0.7}, "sinks": {"sinks": True}, "both": {"softcap": 0.7, "sinks": True}}
BACKENDS = ("materialize", "chunked", "blockwise")
# every scheme with every term it takes (stick-breaking: the cap; its refusal of sinks is tested below)
CASES = [(n, t) for n in CONTENT for t in TERMS if n in SOFTMAX or "sinks" not in TERMS[t]]


def _module(name: str, seed: int = 0, dtype=torch.float64):
    m = small_module(name, seed=seed).to(dtype)
    with torch.no_grad():  # every parameter away from its start (CoPE's table starts at zeros)
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def _inputs(m, lq: int, lk: int, *, batch: int = 2, seed: int = 0, dtype=torch.float64, grad: bool = False,
            spread: float = 2.0):
    """q, k, v (q and k scaled by ``spread`` so that scores reach the cap), ``hidden`` if read, sinks [H]."""
    g = torch.Generator().manual_seed(seed)
    h, d = getattr(m, "num_heads", None) or 4, getattr(m, "head_dim", None) or 8
    q = spread * torch.randn(batch, h, lq, d, generator=g, dtype=torch.float64)
    k = spread * torch.randn(batch, h, lk, d, generator=g, dtype=torch.float64)
    v = torch.randn(batch, h, lk, d, generator=g, dtype=torch.float64)
    hidden = torch.randn(batch, lk, m.d_model, generator=g, dtype=torch.float64) if m.reads_hidden else None
    sinks = torch.randn(h, generator=g, dtype=torch.float64)
    out = [t if t is None else t.to(dtype).requires_grad_(grad) for t in (q, k, v, hidden, sinks)]
    return out


def _kwargs(terms: dict, sinks):
    kw = dict(terms)
    if kw.pop("sinks", False):
        kw["sinks"] = sinks
    return kw


def _reference(m, q, k, v, hidden, *, docs=None, softcap=None, sinks=None):
    """The scheme's float64 reference from the inputs (NumPy); sinks as NumPy."""
    f = (lambda t: None if t is None else t.detach().double().numpy())
    kw = {} if sinks is None else {"sinks": f(sinks)}
    if softcap is not None:
        kw["softcap"] = softcap
    return m.reference(f(q), f(k), f(v), f(hidden), document_ids=None if docs is None else docs.numpy(), **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, terms", CASES)
def test_every_backend_equals_the_reference_with_documents_and_fewer_queries(name, terms, backend, monkeypatch):
    """float64, several row blocks (chunked, blockwise), three packed documents, Lq < Lk."""
    monkeypatch.setattr(rowwise, "ROW_ELEMENTS", 2 * 4 * 19 * 3)  # blocks of 3 rows
    m = _module(name)
    q, k, v, hidden, sinks = _inputs(m, 13, 19)
    docs = torch.tensor([0] * 5 + [1] * 9 + [2] * 5)
    kw = _kwargs(TERMS[terms], sinks)
    with torch.no_grad():
        got = posenc.attention(q, k, v, m, hidden=hidden, causal=True, document_ids=docs, backend=backend, **kw)
    want = _reference(m, q, k, v, hidden, docs=docs, **kw)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name, terms", CASES)
def test_the_terms_change_the_output(name, terms):
    """A cap of 0.7 on scores spread to about ±10, a sink per head: the output moves (so the tests
    above hold each term to the reference, not to an ignored keyword)."""
    m = _module(name)
    q, k, v, hidden, sinks = _inputs(m, 9, 9)
    with torch.no_grad():
        plain = posenc.attention(q, k, v, m, hidden=hidden, causal=True)
        capped = posenc.attention(q, k, v, m, hidden=hidden, causal=True, **_kwargs(TERMS[terms], sinks))
    assert float((plain - capped).abs().max()) > 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", SOFTMAX)
def test_lower_precision_follows_the_reference(name, dtype):
    """float32 and bfloat16 inputs (scores in float32 at least): within their rounding of the
    float64 reference at the rounded inputs."""
    m = _module(name, dtype=dtype)
    q, k, v, hidden, sinks = _inputs(m, 11, 11, seed=3, dtype=dtype, spread=1.5)
    with torch.no_grad():
        got = posenc.attention(q, k, v, m, hidden=hidden, causal=True, softcap=0.9, sinks=sinks)
    assert got.dtype == dtype
    want = _reference(m, q, k, v, hidden, softcap=0.9, sinks=sinks)
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=tol)


@pytest.mark.parametrize("backend", ["materialize", "blockwise"])
@pytest.mark.parametrize("name", CONTENT)
def test_gradients_equal_the_reference_derivatives(name, backend, monkeypatch):
    """Along a random direction, the gradients into q, k, v, hidden, the sinks and every parameter
    equal central differences of the float64 reference's loss (blockwise: blocks of 2 rows)."""
    monkeypatch.setattr(rowwise, "ROW_ELEMENTS", 1 * 4 * 7 * 2)
    m = _module(name, seed=1)
    # scores of about ±0.5 against a cap of 0.4: on tanh's curve, away from DAPE's LeakyReLU kinks
    q, k, v, hidden, sinks = _inputs(m, 7, 7, batch=1, seed=4, grad=True, spread=0.7)
    kw = {"softcap": 0.4} if name not in SOFTMAX else {"softcap": 0.4, "sinks": sinks}
    weight = torch.cos(torch.arange(1 * 4 * 7 * 8, dtype=torch.float64)).view(1, 4, 7, 8).numpy()
    out = posenc.attention(q, k, v, m, hidden=hidden, causal=True, backend=backend, **kw)
    (out * torch.from_numpy(weight)).sum().backward()
    leaves = {"q": q, "k": k, "v": v, **({"hidden": hidden} if hidden is not None else {}),
              **({"sinks": sinks} if "sinks" in kw else {}),
              **{n: p for n, p in m.named_parameters() if p.requires_grad}}

    def loss():
        return float((_reference(m, q, k, v, hidden, **kw) * weight).sum())

    assert_directional_gradients(leaves, loss, seed=5, eps=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", SOFTMAX)
def test_padding_and_a_query_with_no_key_give_zeros_with_sinks(name):
    """A key padding mask with the cap and the sinks: the unpadded rows equal the reference on the
    real keys alone; a query whose every key is masked returns zeros (the sink alone: value 0)."""
    m = _module(name)
    q, k, v, hidden, sinks = _inputs(m, 10, 10, batch=2, seed=6)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, :3] = False  # row 1 left-padded by 3
    with torch.no_grad():
        got = posenc.attention(q, k, v, m, hidden=hidden, causal=True, attention_mask=mask, softcap=0.7, sinks=sinks)
    assert torch.equal(got[1, :, :3], torch.zeros_like(got[1, :, :3]))
    real = slice(3, 10)
    alone = _reference(m, q[1:, :, real], k[1:, :, real], v[1:, :, real],
                       None if hidden is None else hidden[1:, real], softcap=0.7, sinks=sinks)
    np.testing.assert_allclose(got[1:, :, real].numpy(), alone, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", SOFTMAX)
def test_decoding_with_a_cache_equals_recomputation(name):
    """One query at a time over the cached keys with the cap and the sinks equals the full pass."""
    m = _module(name)
    q, k, v, hidden, sinks = _inputs(m, 9, 9, seed=7)
    with torch.no_grad():
        full = posenc.attention(q, k, v, m, hidden=hidden, causal=True, softcap=0.7, sinks=sinks)
        for t in range(9):
            step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], m, causal=True,
                                    hidden=None if hidden is None else hidden[:, :t + 1], softcap=0.7, sinks=sinks)
            torch.testing.assert_close(step[:, :, 0], full[:, :, t], rtol=0, atol=1e-12)


def test_cope_gates_read_the_uncapped_scores():
    """CoPE's positions come from σ(q·k), not from the capped logits: with a cap the positions the
    reference reports are those without it, and the output is the reference's."""
    m = _module("cope")
    q, k, v, _, _ = _inputs(m, 8, 8, seed=8, spread=3.0)
    f = (lambda t: t.detach().numpy())
    p = m.reference_positions(f(q), f(k))
    s = np.einsum("bhqd,bhkd->bhqk", f(q), f(k))
    assert np.abs(s).max() > 5  # scores far past the cap, so a capped gate would count differently
    capped = np.where(np.tril(np.ones((8, 8), bool)), 1 / (1 + np.exp(-0.5 * np.tanh(s / 0.5))), 0)
    assert np.abs(np.cumsum(capped[..., ::-1], -1)[..., ::-1] - p).max() > 0.1
    with torch.no_grad():
        got = posenc.attention(q, k, v, m, causal=True, softcap=0.5)
    np.testing.assert_allclose(got.numpy(), _reference(m, q, k, v, None, softcap=0.5), rtol=0, atol=1e-10)


def test_stick_breaking_takes_the_cap_and_refuses_sinks():
    m = _module("stick_breaking")
    q, k, v, _, sinks = _inputs(m, 6, 6)
    with pytest.raises(ValueError, match="scheme 'stick_breaking' takes no sinks= .*no softmax"):
        posenc.attention(q, k, v, m, causal=True, sinks=sinks)
    with pytest.raises(ValueError, match="no softmax"):
        m(q, k, v, sinks=sinks)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"softcap": 0.0}, ValueError, "softcap must be finite and > 0"),
    ({"softcap": math.inf}, ValueError, "softcap must be finite and > 0"),
    ({"softcap": "1"}, TypeError, "softcap must be a float > 0"),
    ({"sinks": torch.zeros(3)}, ValueError, r"sinks must have shape \[H=4\]"),
    ({"sinks": torch.zeros(4, dtype=torch.long)}, TypeError, "sinks must be floating point"),
], ids=["zero", "inf", "str", "shape", "dtype"])
def test_bad_terms_are_refused_on_the_scheme_itself(kwargs, error, match):
    m = _module("fox")
    q, k, v, hidden, _ = _inputs(m, 5, 5)
    with pytest.raises(error, match=match):
        m(q, k, v, hidden, **kwargs)


def test_a_scheme_that_does_not_declare_them_refuses_them():
    """A plugin's content scheme whose ``rows`` know nothing of the cap or the sinks (no
    ``takes_softcap``/``takes_sinks``) gets a ValueError, never a cap silently dropped."""

    class Plain(rowwise.RowwiseEncoding):
        name = "plain_content"

        def rows(self, q, k, v, state, q0, allowed, scale):
            return rowwise.softmax_rows(torch.matmul(q, k.transpose(-1, -2)) * scale, v, allowed)

    m = Plain()
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    assert torch.isfinite(m(q, k, v)).all()
    with pytest.raises(ValueError, match="'plain_content' takes no softcap="):
        m(q, k, v, softcap=1.0)
    with pytest.raises(ValueError, match="'plain_content' takes no sinks="):
        m(q, k, v, sinks=torch.zeros(2))


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # on the worker that has paid inductor's start (imports, ISA probes)
def test_fox_on_flex_takes_the_cap_and_refuses_sinks():
    """FoX's FlexAttention path (forward, compiled on the CPU): the cap in its score_mod, then the
    gates' ``c_i − c_j``, equals the reference; sinks are refused there, and ``auto`` with sinks
    runs the rows (never flex)."""
    m = _module("fox", dtype=torch.float32)
    q, k, v, hidden, sinks = _inputs(m, 16, 16, dtype=torch.float32)
    with torch.no_grad():
        got = posenc.attention(q, k, v, m, hidden=hidden, causal=True, softcap=0.7, backend="flex")
    np.testing.assert_allclose(got.double().numpy(), _reference(m, q, k, v, hidden, softcap=0.7), rtol=0, atol=3e-5)
    with pytest.raises(ValueError, match="backend='flex' does not take sinks="):
        posenc.attention(q, k, v, m, hidden=hidden, causal=True, sinks=sinks, backend="flex")
