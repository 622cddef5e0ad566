"""``backend="blockwise"``: outputs and gradients (q, k, v and every parameter of every bias and
relative scheme) equal the materialized path's in float64 to 1e-9, causal or not, with a KV cache
(Lq != Lk), offsets, batched positions and odd lengths, on both of its paths (a bias per block from
``score_fn``, and the Toeplitz table of translation-invariant schemes); blocks are made tiny so
that many of them, the diagonal ones and the ragged last ones, are crossed."""

from __future__ import annotations

import pytest
import torch

import posenc
import posenc.scores
import posenc.attn
import posenc.blockwise as bw
from posenc.masking import Visibility
from conftest import (attention_parameters, attention_reference, assert_close, heads_dim, on_axes, positions,
                      schemes_of_kind, small_module)

SCHEMES = schemes_of_kind("bias", "relative")
TOEPLITZ = [n for n in SCHEMES if getattr(small_module(n), "translation_invariant", False)]


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocks of 5 queries x 7 keys (4 queries per fused call), so that L=23 crosses many."""
    monkeypatch.setattr(bw, "BLOCK_Q", 5)
    monkeypatch.setattr(bw, "BLOCK_K", 7)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 4)


def _grads(pe, q, k, v, w, backend, **kw):
    """Output and the gradients of ``(out · w).sum()`` with respect to q, k, v and pe's parameters."""
    inputs = [q, k, v, *attention_parameters(pe).values()]
    out = posenc.attention(q, k, v, pe, backend=backend, **kw)
    return [out, *torch.autograd.grad((out * w).sum(), inputs)]


def _compare(pe, *, lq, lk, batch=2, causal, q_positions=None, k_positions=None, toeplitz=None):
    h, d = heads_dim(pe)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch, h, n, d, generator=g, dtype=torch.float64, requires_grad=True)
               for n in (lq, lk, lk))
    w = torch.randn(batch, h, lq, d, generator=g, dtype=torch.float64)
    kw = {"causal": causal, "q_positions": q_positions, "k_positions": k_positions, "scale": 0.4}
    if toeplitz is not None:
        qp, kp = q_positions, k_positions
        if qp is None:
            qp, kp = posenc.attn._default_positions(lq, lk, q.device)
        form = getattr(pe, "attention_form", None)  # bipe_bias: its bias at the segment column
        bias, qp, kp = form(qp, kp) if form is not None else (pe, qp, kp)
        assert bw.TileBias(bias, qp, kp, torch.float64, vis=Visibility(lq, lk, causal)).toeplitz is toeplitz
    want = _grads(pe, q, k, v, w, "materialize", **kw)
    got = _grads(pe, q, k, v, w, "blockwise", **kw)
    names = ["out", "q", "k", "v", *attention_parameters(pe)]
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=lambda m: f"{pe.name} {name}: {m}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq, lk, offset", [(23, 23, 0), (9, 23, 5)], ids=["Lq=Lk", "kv-cache+offset"])
@pytest.mark.parametrize("name", SCHEMES)
def test_gradients_equal_the_materialized_path(name, lq, lk, offset, causal, tiny_blocks):
    pe = small_module(name).double()
    kp = on_axes(pe, torch.arange(lk) + offset)  # several axes (bipe_bias): spread over them
    _compare(pe, lq=lq, lk=lk, causal=causal, q_positions=kp[lk - lq:], k_positions=kp,
             toeplitz=name in TOEPLITZ)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", TOEPLITZ)
def test_translation_invariant_schemes_off_the_table_path(name, causal, tiny_blocks):
    """Batched positions, or positions with gaps, take the per-block ``score_fn`` path."""
    pe = small_module(name).double()
    _compare(pe, lq=11, lk=19, causal=causal, q_positions=on_axes(pe, positions(11, offset=13, batch=2)),
             k_positions=on_axes(pe, positions(19, offset=5, batch=2)), toeplitz=False)
    gaps = on_axes(pe, torch.arange(19) * 3 + 1)
    _compare(pe, lq=11, lk=19, causal=causal, q_positions=gaps[8:], k_positions=gaps, toeplitz=False)


def test_default_positions_and_one_query(tiny_blocks):
    """Default positions (a KV cache), and a decoding step: one query over many keys."""
    for name in ("alibi", "fire", "shaw"):
        pe = small_module(name).double()
        _compare(pe, lq=17, lk=17, causal=True)
        _compare(pe, lq=1, lk=17, batch=1, causal=True)


@pytest.mark.parametrize("name", ["alibi", "kerple", "fire", "transformer_xl"])
def test_float32_at_an_odd_length_matches_the_reference(name, monkeypatch):
    """Default block sizes shrunk in proportion; float32 against the float64 reference."""
    monkeypatch.setattr(bw, "BLOCK_Q", 64)
    monkeypatch.setattr(bw, "BLOCK_K", 96)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 64)
    pe = small_module(name)
    h, d = heads_dim(pe)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 217, d, generator=g) for _ in range(3))
    out = posenc.attention(q, k, v, pe, causal=True, backend="blockwise")
    assert_close(out, attention_reference(q, k, v, pe, causal=True), magnitude=10.0, what=name)


@pytest.mark.parametrize("case", ["real-positions", "large-c"])
def test_fire_in_float32_is_finite_wherever_float64_is(case, monkeypatch):
    """FIRE's float32 blocks (``block_fn``) where ``|i − j|`` (real key positions drawn in 1e39..5e39)
    or ``c·|i − j|`` (c = 1e37) overflows float32 but the MLP's input, ``ψ`` in float64, is at most 1:
    finite, and the float64 reference within float32 rounding, as the materialized path."""
    monkeypatch.setattr(bw, "BLOCK_Q", 16)
    monkeypatch.setattr(bw, "BLOCK_K", 24)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 16)
    g = torch.Generator().manual_seed(5)
    if case == "real-positions":
        pe, positions = small_module("fire"), (1e39 + 4e39 * torch.rand(57, generator=g, dtype=torch.float64)).sort()[0]
    else:
        pe, positions = small_module("fire", c=1e37), torch.arange(57)
    h, d = heads_dim(pe)
    q, k, v = (torch.randn(2, h, 57, d, generator=g) for _ in range(3))
    expected = attention_reference(q, k, v, pe, q_positions=positions, k_positions=positions, causal=True)
    for backend in ("blockwise", "materialize"):
        with torch.no_grad():
            out = posenc.attention(q, k, v, pe, q_positions=positions, k_positions=positions, causal=True,
                                   backend=backend)
        assert torch.isfinite(out).all(), backend
        assert_close(out, expected, magnitude=10.0, what=f"{case} {backend}")


def test_frozen_parameters_get_no_gradient_and_the_rest_the_true_one(tiny_blocks):
    pe = small_module("fire").double()
    pe.mlp.requires_grad_(False)
    q, k, v = (torch.randn(1, 4, 13, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    loss = posenc.attention(q, k, v, pe, causal=True, backend="blockwise").square().sum()
    loss.backward()
    assert all(p.grad is None for p in pe.mlp.parameters())
    want = [p.grad.clone() for p in (pe.c, pe.L_multiplier)]
    pe.zero_grad()
    posenc.attention(q, k, v, pe, causal=True, backend="materialize").square().sum().backward()
    for a, b in zip(want, (pe.c.grad, pe.L_multiplier.grad)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


def test_no_grad_builds_no_graph(tiny_blocks):
    pe = small_module("t5").double()
    q, k, v = (torch.randn(1, 4, 13, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, causal=True, backend="blockwise")
    assert out.grad_fn is None
    torch.testing.assert_close(out, posenc.attention(q, k, v, pe, causal=True, backend="materialize").detach(),
                               rtol=0, atol=1e-12)


def test_auto_takes_blockwise_when_gradients_are_needed_and_the_map_is_large(monkeypatch):
    calls = []
    real = posenc.attn.blockwise_attention

    def spy(*args, **kwargs):
        calls.append(args[3].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(posenc.attn, "blockwise_attention", spy)
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 4 * 9 * 9 - 1)
    pe = small_module("kerple")
    q, k, v = (torch.randn(1, 4, 9, 8) for _ in range(3))
    posenc.attention(q, k, v, pe, causal=True)  # learned r1/r2: gradients needed
    assert calls == ["kerple"]
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 4 * 9 * 9)
    posenc.attention(q, k, v, pe, causal=True)  # small enough to materialize
    assert calls == ["kerple"]


def test_auto_takes_blockwise_for_a_forward_on_the_cpu(monkeypatch):
    """Without gradients, past the materialize size, an eager CPU call takes blockwise for every
    bias scheme (faster than FlexAttention there: ``posenc.attn._flex_first``); with
    ``document_ids``, which blockwise does not take, FlexAttention; off the CPU, FlexAttention."""
    calls = []
    real = posenc.attn.blockwise_attention

    def spy(*args, **kwargs):
        calls.append(args[3].name)
        return real(*args, **kwargs)

    def flex(*args, **kwargs):
        calls.append("flex")
        return None  # as when compiling is unavailable: the call goes on to chunked

    monkeypatch.setattr(posenc.attn, "blockwise_attention", spy)
    monkeypatch.setattr(posenc.attn, "_flex", flex)
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 100)
    names = schemes_of_kind("bias")
    q, k, v = (torch.randn(1, 4, 130, 8) for _ in range(3))  # documents: flex from 128 keys (attn.FLEX_BLOCK)
    with torch.no_grad():
        for name in names:
            posenc.attention(q, k, v, small_module(name), causal=True)
        assert calls == names
        posenc.attention(q, k, v, small_module("alibi"), causal=True, document_ids=torch.arange(130) // 50)
        assert calls == [*names, "flex"]
        meta = q.to("meta")
        assert posenc.attn._choose_backend("auto", meta, meta, meta, small_module("alibi")) == "flex"


def test_antidiagonal_sums():
    x = torch.randn(2, 5, 7, dtype=torch.float64)
    want = torch.zeros(2, 11, dtype=torch.float64)
    for r in range(5):
        for c in range(7):
            want[:, r + c] += x[:, r, c]
    torch.testing.assert_close(bw._antidiagonal_sums(x), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in SCHEMES if getattr(small_module(n), "real_positions", False)])
def test_real_positions_are_never_rounded(name, tiny_blocks):
    """Real-valued positions (half steps: contiguous once rounded) take the per-block path at their value."""
    pe = small_module(name).double()
    kp = torch.arange(23, dtype=torch.float64) * 0.5 + 0.25
    _compare(pe, lq=23, lk=23, causal=True, q_positions=kp, k_positions=kp, toeplitz=False)


def test_empty_batch_on_every_backend():
    pe = small_module("alibi")
    h, d = heads_dim(pe)
    q = torch.randn(0, h, 4, d)
    for backend in ("materialize", "chunked", "blockwise"):
        assert posenc.attention(q, q, q, pe, backend=backend).shape == (0, h, 4, d)
