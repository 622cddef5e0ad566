"""``posenc.attention(..., dropout_p=, generator=)``: attention dropout on every backend and kind.

(a) with the mask fixed (the call's own, rebuilt from the same generator seed: ``posenc.dropout``),
each backend equals the float64 reference (``posenc.reference.attention`` with ``keep=``; a content
scheme's own reference weights), forward and gradients, at odd lengths, causal and not, with
documents and key padding, blocks small enough that every path crosses several; (b) in distribution
against ``torch.nn.functional.scaled_dot_product_attention(dropout_p=)``; (c) the same seed gives
the same output, twice and on another thread count; (d) the backward equals autograd of a dense
implementation with the same mask (for blockwise: the mask its backward replays); and the
arguments' checks, the chooser's choices, and ``dropout_p=0`` being the call it was before.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
import posenc.attn
import posenc.blockwise as bw
import posenc.rowwise as rowwise
import posenc.scores
from conftest import assert_directional_gradients, small_module
from posenc.dropout import AttentionDropout
from posenc.reference.attention import attention as reference_attention
from posenc.reference.attention import visibility_mask

H, D = 4, 8  # conftest's SMALL sizes
P = 0.3
NAMES = [None, "rope", "alibi", "t5", "transformer_xl", "shaw"]


@pytest.fixture
def small_blocks(monkeypatch):
    """Chunks of a few rows, blockwise tiles of 5 queries x 7 keys, content blocks of 3 rows: every
    path draws its tiles' parts of the mask at several offsets."""
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * H * 19 * 3)
    monkeypatch.setattr(bw, "BLOCK_Q", 5)
    monkeypatch.setattr(bw, "BLOCK_K", 7)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 4)
    monkeypatch.setattr(rowwise, "ROW_ELEMENTS", 2 * H * 19 * 3)


def _inputs(b, lq, lk, dtype, *, seed, grad=False, dv=D, h_kv=H):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, n_h, n, D, generator=g, dtype=torch.float64) for n_h, n in ((H, lq), (h_kv, lk)))
    v = torch.randn(b, h_kv, lk, dv, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_(grad) for t in (q, k, v)]


def _keep(seed: int, b: int, lq: int, lk: int, p: float = P) -> torch.Tensor:
    """The mask a call with ``generator=torch.Generator().manual_seed(seed)`` draws, dense ``[B, H, Lq, Lk]``."""
    return AttentionDropout.draw(p, torch.Generator().manual_seed(seed), "cpu").keep_mask(b, H, lq, lk)


def _reference(q, k, v, pe, *, qp, kp, causal, allowed, keep, p=P):
    """Float64: rotary rotates q and k, bias and relative kinds add their term; then the masks, the
    softmax, the weights times ``keep / (1 − p)``, times v (Shaw: plus its value term of those weights)."""
    qn, kn, vn = (t.detach().double().numpy() for t in (q, k, v))
    kind = "none" if pe is None else pe.kind
    bias = None
    if kind == "rotary":
        qn, kn = pe.reference(qn, qp.numpy(), role="query"), pe.reference(kn, kp.numpy(), role="key")
    elif kind == "bias":
        bias = pe.reference(qp.numpy(), kp.numpy())
    elif kind == "relative" and pe.name == "shaw":
        return _shaw_reference(qn, kn, vn, pe, qp=qp, kp=kp, causal=causal, allowed=allowed, keep=keep, p=p)
    elif kind == "relative":
        bias = pe.reference(qn, kn, qp.numpy(), kp.numpy())
    return reference_attention(qn, kn, vn, bias=bias, causal=causal, allowed=allowed, keep=keep.numpy(), dropout_p=p)


def _shaw_reference(qn, kn, vn, pe, *, qp, kp, causal, allowed, keep, p):
    """Shaw et al.'s attention with dropout on its weights: both its value terms read the dropped weights."""
    from posenc.reference.attention import dropped, masked_attention

    scale = 1.0 / math.sqrt(qn.shape[-1])
    lq, lk = qn.shape[2], kn.shape[2]
    ok = np.ones((1, 1, lq, lk), dtype=bool) & (visibility_mask(lq, lk, causal=True) if causal else True)
    if allowed is not None:
        ok = ok & allowed
    scores = np.einsum("bhqd,bhkd->bhqk", qn, kn) * scale + pe.reference(qn, kn, qp.numpy(), kp.numpy())
    eye = np.broadcast_to(np.eye(lk), (qn.shape[0], qn.shape[1], lk, lk))
    weights = dropped(masked_attention(scores, eye, ok), keep.numpy(), p)  # (B, H, Lq, Lk)
    return np.einsum("bhqk,bhkd->bhqd", weights, vn) + pe.value_reference(weights, qp.numpy(), kp.numpy())


def _visibility(case, b, lq, lk):
    """``(document_ids, attention_mask, allowed)`` of a case: two documents, or left padding that hides
    a query's every key (causal), or nothing."""
    if case == "documents":
        docs = torch.tensor([[0] * 8 + [1] * (lk - 8), [0] * 3 + [1] * (lk - 3)])
        return docs, None, visibility_mask(lq, lk, causal=False, document_ids=docs.numpy())
    if case == "padding":
        mask = torch.ones(b, lk, dtype=torch.bool)
        mask[0, :lk - lq + 3] = False
        return None, mask, mask.numpy()[:, None, None, :]
    return None, None, None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", ["plain", "documents", "padding"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("name", NAMES, ids=[str(n) for n in NAMES])
def test_each_backend_equals_the_reference_with_the_mask_fixed(name, causal, case, dtype, small_blocks):
    """Lq = 13 queries over Lk = 19 keys at positions from 3: materialize, chunked, blockwise and auto
    against the float64 reference given the call's mask (forward), and the float64 gradients of
    q, k, v along random directions against central differences of the reference."""
    b, lq, lk, seed = 2, 13, 19, 7
    pe = None if name is None else small_module(name).to(dtype)
    q, k, v = _inputs(b, lq, lk, dtype, seed=1, grad=dtype == torch.float64)
    kp = torch.arange(lk) + 3
    qp = kp[lk - lq:]
    docs, mask, allowed = _visibility(case, b, lq, lk)
    keep = _keep(seed, b, lq, lk)
    want = _reference(q, k, v, pe, qp=qp, kp=kp, causal=causal, allowed=allowed, keep=keep)
    no_drop = _reference(q, k, v, pe, qp=qp, kp=kp, causal=causal, allowed=allowed, keep=torch.ones_like(keep),
                         p=0.0)
    assert np.abs(want - no_drop).max() > 0.1  # the mask changes the output: no vacuous pass
    atol = 1e-12 if dtype == torch.float64 else 3e-5
    w = torch.randn(b, H, lq, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    first = None
    for backend in ["materialize", "chunked", "blockwise", "auto"]:
        for t in (q, k, v):
            t.grad = None
        got = posenc.attention(q, k, v, pe, q_positions=qp, k_positions=kp, causal=causal, document_ids=docs,
                               attention_mask=mask, backend=backend, dropout_p=P,
                               generator=torch.Generator().manual_seed(seed))
        assert got.dtype == dtype
        np.testing.assert_allclose(got.detach().double().numpy(), want, rtol=0, atol=atol,
                                   err_msg=f"{name} {backend}")
        if dtype != torch.float64:
            continue
        (got * w).sum().backward()
        if first is not None:  # the same gradients as the first backend's, which the reference checks
            for t, g in zip((q, k, v), first):
                torch.testing.assert_close(t.grad, g, rtol=0, atol=1e-11, msg=f"{name} {backend}")
            continue
        first = [t.grad.clone() for t in (q, k, v)]

        def loss():
            return float((_reference(q, k, v, pe, qp=qp, kp=kp, causal=causal, allowed=allowed, keep=keep)
                          * w.numpy()).sum())

        assert_directional_gradients({"q": q, "k": k, "v": v}, loss, seed=5)


def _dense(q, k, v, bias, allowed, keep, p, scale):
    """Autograd's attention with a given mask: scores, the masks, the softmax, ``· keep / (1 − p)``, v
    (grouped heads repeated: query head ``h`` reads ``h // G``)."""
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * scale + (0 if bias is None else bias)
    s = s.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, -1) * keep.to(s.dtype) / (1 - p)) @ v


@pytest.mark.parametrize("h_kv", [H, 2], ids=["MHA", "GQA"])
@pytest.mark.parametrize("name", [None, "alibi", "t5", "kerple"])
def test_the_backward_equals_autograd_of_a_dense_attention_with_the_same_mask(name, h_kv, small_blocks):
    """Gradients of q, k, v and the scheme's parameters: blockwise (whose backward replays the mask from
    the seed, nothing of it saved), chunked and materialize against autograd through a dense float64
    attention that multiplies by the mask the call drew; the causal case with a KV cache (Lq < Lk),
    with grouped heads (the mask is per query head)."""
    b, lq, lk, seed = 2, 11, 17, 9
    pe = None if name is None else small_module(name).double()
    q, k, v = _inputs(b, lq, lk, torch.float64, seed=2, grad=True, h_kv=h_kv)
    allowed = torch.from_numpy(visibility_mask(lq, lk, causal=True))
    keep = _keep(seed, b, lq, lk)
    kp = torch.arange(lk)
    qp = kp[lk - lq:]
    bias = None if pe is None else pe(qp, kp)
    params = [] if pe is None else [p for p in pe.parameters() if p.requires_grad]
    leaves = [q, k, v, *params]
    w = torch.randn(b, H, lq, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    want_out = _dense(q, k, v, bias, allowed, keep, P, 1 / math.sqrt(D))
    want = torch.autograd.grad((want_out * w).sum(), leaves)
    for backend in ["blockwise", "chunked", "materialize"]:
        out = posenc.attention(q, k, v, pe, causal=True, backend=backend, dropout_p=P,
                               generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(out, want_out, rtol=0, atol=1e-12)
        got = torch.autograd.grad((out * w).sum(), leaves)
        for i, (g, e) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-11, msg=f"{name} {backend} gradient {i}")


@pytest.mark.parametrize("name", ["fox", "cope", "dape"])
def test_content_schemes_equal_their_reference_weights_with_the_mask(name, small_blocks):
    """A content scheme's weights are its reference with the identity as values (``out = W·I``); with
    dropout every backend gives ``(W ∘ keep / (1 − p)) v``, and its blocks' recomputed backward the
    gradients of the materialized rows (which autograd differentiates through the mask itself)."""
    b, lq, lk, seed = 2, 19, 19, 3
    pe = small_module(name).double()
    q, k, v = _inputs(b, lq, lk, torch.float64, seed=6, grad=True)
    hidden = torch.randn(b, lk, pe.d_model, dtype=torch.float64) if pe.reads_hidden else None
    eye = np.broadcast_to(np.eye(lk), (b, H, lk, lk))
    weights = np.asarray(pe.reference(q.detach().numpy(), k.detach().numpy(), eye,
                                      None if hidden is None else hidden.numpy()))
    keep = _keep(seed, b, lq, lk).numpy()
    want = np.einsum("bhqk,bhkd->bhqd", weights * keep / (1 - P), v.detach().numpy())
    w = torch.randn(b, H, lq, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = {}
    for backend in ["materialize", "chunked", "blockwise"]:
        out = posenc.attention(q, k, v, pe, causal=True, hidden=hidden, backend=backend, dropout_p=P,
                               generator=torch.Generator().manual_seed(seed))
        np.testing.assert_allclose(out.detach().numpy(), want, rtol=0, atol=1e-12, err_msg=backend)
        if backend != "chunked":  # chunked keeps no graph beyond autograd's own: the same as materialize
            grads[backend] = torch.autograd.grad((out * w).sum(), (q, k, v))
    for g, e in zip(grads["blockwise"], grads["materialize"]):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_stick_breaking_drops_its_shares(small_blocks):
    """Stick-breaking's shares ``a`` (values the identity: the output's columns off the query's own)
    are dropped, the leftover on the query's own value kept as computed from ``a``, on every backend."""
    b, lq, lk, seed = 2, 19, 19, 3
    pe = small_module("stick_breaking").double()
    q, k, _ = _inputs(b, lq, lk, torch.float64, seed=6)
    eye = torch.eye(lk, dtype=torch.float64).expand(b, H, lk, lk)
    plain = posenc.attention(q, k, eye, pe, causal=True)  # a + (1 − Σa)·e_own
    own = torch.eye(lk, dtype=torch.bool)
    shares = plain.masked_fill(own, 0.0)
    keep = _keep(seed, b, lq, lk)
    want = shares * keep / (1 - P) + plain * own
    for backend in ["materialize", "chunked", "blockwise"]:
        got = posenc.attention(q, k, eye, pe, causal=True, backend=backend, dropout_p=P,
                               generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=backend)


def _zero_fraction(weights: torch.Tensor, visible: torch.Tensor) -> float:
    return float((weights[visible.expand_as(weights)] == 0).double().mean())


def test_in_distribution_it_is_sdpa_dropout():
    """Values the identity, so the output is the dropped weights: over 20 draws the fraction of
    zeroed weights is ``p`` within 5 standard errors, as SDPA's own ``dropout_p=`` gives, and the
    kept weights are ``p_ij / (1 − p)`` for both; the mean of 400 draws equals the output without
    dropout within 6 standard errors at every weight (``sd = p_ij·√(p / (1 − p) / N)``; 50 calls of
    8 copies of the batch: both another seed and another batch index give an independent mask)."""
    b, lq, lk, p = 1, 24, 32, 0.2
    q, k, _ = _inputs(b, lq, lk, torch.float32, seed=8)
    eye = torch.eye(lk).expand(b, H, lk, lk)
    weights = posenc.attention(q, k, eye)  # (B, H, Lq, Lk), no dropout
    visible = weights > 0
    g = torch.Generator().manual_seed(0)
    ours = [posenc.attention(q, k, eye, dropout_p=p, generator=g) for _ in range(20)]
    torch.manual_seed(0)
    theirs = [F.scaled_dot_product_attention(q, k, eye, dropout_p=p) for _ in range(20)]
    n = 20 * int(visible.sum())
    se = math.sqrt(p * (1 - p) / n)
    f_ours = sum(_zero_fraction(o, visible) for o in ours) / 20
    f_theirs = sum(_zero_fraction(o, visible) for o in theirs) / 20
    assert abs(f_ours - p) < 5 * se, (f_ours, p, se)
    assert abs(f_theirs - p) < 5 * se, (f_theirs, p, se)
    for draws in (ours, theirs):
        for o in draws:
            kept = o != 0
            torch.testing.assert_close(o[kept], (weights / (1 - p))[kept], rtol=1e-5, atol=1e-7)
    copies, calls = 8, 50
    draws = copies * calls
    qs, ks, vs = (t.expand(copies, -1, -1, -1) for t in (q, k, eye))
    mean = sum(posenc.attention(qs, ks, vs, dropout_p=p, generator=g).double().sum(0, keepdim=True)
               for _ in range(calls)) / draws
    sd = weights.double() * math.sqrt(p / (1 - p) / draws)
    z = ((mean - weights.double()) / sd)[visible]
    assert float(z.abs().max()) < 6.0
    assert abs(float(z.mean())) < 5 / math.sqrt(z.numel())  # no bias across the weights
    assert 0.9 < float(z.std()) < 1.1  # the spread of independent drops, no more, no less


def test_the_same_seed_gives_the_same_output_on_any_thread_count():
    """``generator`` seeded alike: the same output twice and on 1 or 2 threads (bit for bit, the mask
    being integer arithmetic); the default generator after ``torch.manual_seed`` alike; a generator's
    next call draws a new mask; another seed gives another."""
    q, k, v = _inputs(2, 37, 41, torch.float32, seed=9)
    pe = small_module("alibi")

    def run(seed, threads=None):
        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            return posenc.attention(q, k, v, pe, causal=True, backend="blockwise", dropout_p=0.25,
                                    generator=torch.Generator().manual_seed(seed))
        finally:
            torch.set_num_threads(before)

    first = run(1)
    assert torch.equal(first, run(1))
    assert torch.equal((run(1, threads=1) == 0), (first == 0))
    torch.testing.assert_close(run(1, threads=1), first, rtol=0, atol=1e-6)
    torch.testing.assert_close(run(1, threads=2), first, rtol=0, atol=1e-6)
    assert not torch.equal(first, run(2))
    torch.manual_seed(5)
    a = posenc.attention(q, k, v, pe, causal=True, dropout_p=0.25)
    b = posenc.attention(q, k, v, pe, causal=True, dropout_p=0.25)
    torch.manual_seed(5)
    assert torch.equal(a, posenc.attention(q, k, v, pe, causal=True, dropout_p=0.25))
    assert not torch.equal(a, b)


def test_the_mask_of_a_tile_is_its_part_of_the_whole():
    """``keep`` of any tile is the same slice of the whole call's mask (what lets blockwise replay it)."""
    drop = AttentionDropout.draw(0.4, torch.Generator().manual_seed(1), "cpu")
    whole = drop.keep_mask(2, 3, 29, 31)
    assert torch.equal(drop.keep(7, 11, (2, 3, 5, 13)), whole[:, :, 7:12, 11:24])
    assert abs(float(whole.double().mean()) - 0.6) < 0.05


def test_dropout_p_zero_is_the_call_it_was():
    """``dropout_p=0`` draws nothing (the generator untouched) and returns what the call without it
    returns, bit for bit (plain SDPA for no scheme, and every backend)."""
    q, k, v = _inputs(2, 13, 13, torch.float32, seed=3)
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    assert torch.equal(posenc.attention(q, k, v, dropout_p=0.0, generator=g),
                       F.scaled_dot_product_attention(q, k, v))
    pe = small_module("alibi")
    for backend in ["materialize", "chunked", "blockwise", "auto"]:
        assert torch.equal(posenc.attention(q, k, v, pe, causal=True, backend=backend, dropout_p=0, generator=g),
                           posenc.attention(q, k, v, pe, causal=True, backend=backend))
    assert torch.equal(g.get_state(), state)


@pytest.mark.parametrize("value, error", [(1.0, ValueError), (1, ValueError), (-0.1, ValueError),
                                          (float("nan"), ValueError), (True, TypeError), ("0.1", TypeError),
                                          (torch.tensor(0.1), TypeError)])
def test_dropout_p_is_checked_before_anything_is_drawn(value, error):
    q, k, v = _inputs(1, 5, 5, torch.float32, seed=1)
    g = torch.Generator().manual_seed(1)
    state = g.get_state()
    with pytest.raises(error, match=r"dropout_p must be (a float in|in) \[0, 1\)"):
        posenc.attention(q, k, v, dropout_p=value, generator=g)
    assert torch.equal(g.get_state(), state)


def test_the_generator_is_checked():
    q, k, v = _inputs(1, 5, 5, torch.float32, seed=1)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        posenc.attention(q, k, v, dropout_p=0.1, generator=1234)
    with pytest.raises(ValueError, match="generator must be on the query's device"):
        posenc.attention(q.to("meta"), k.to("meta"), v.to("meta"), dropout_p=0.1, generator=torch.Generator())


def test_flex_is_refused_by_name_and_never_chosen(monkeypatch):
    """FlexAttention's score_mod acts before the softmax: ``backend="flex"`` with dropout is refused
    naming it (bias and content kinds); past the materialize budget, where ``auto`` would take flex
    (as off the CPU), dropout takes blockwise for a bias, chunked without a scheme (blockwise under
    gradient, whose backward replays the mask), and a content scheme's own rows."""
    q, k, v = _inputs(1, 13, 13, torch.float32, seed=2)
    with pytest.raises(ValueError, match="backend='flex' cannot apply dropout_p=0.1"):
        posenc.attention(q, k, v, small_module("alibi"), backend="flex", dropout_p=0.1)
    with pytest.raises(ValueError, match="backend='flex' cannot apply dropout_p=0.1"):
        posenc.attention(q, k, v, small_module("fox"), causal=True, backend="flex", dropout_p=0.1)
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 0)
    monkeypatch.setattr(posenc.attn, "_flex_first", lambda q: True)
    choose = posenc.attn._choose_backend
    with torch.no_grad():
        assert choose("auto", q, k, v, small_module("alibi")) == "flex"
        assert choose("auto", q, k, v, small_module("alibi"), dropout=True) == "blockwise"
        assert choose("auto", q, k, v, small_module("alibi"), torch.zeros(1, 13, dtype=torch.long)) == "flex"
        assert choose("auto", q, k, v, None, torch.zeros(1, 13, dtype=torch.long), dropout=True) == "chunked"
        assert choose("auto", q, k, v, small_module("fox")) == "flex"
        assert choose("auto", q, k, v, small_module("fox"), dropout=True) == "chunked"
        with pytest.raises(ValueError, match="cannot apply attention dropout"):
            choose("flex", q, k, v, small_module("alibi"), dropout=True)
    trained = q.detach().requires_grad_()  # under gradient: blocks whose backward replays the mask
    assert choose("auto", trained, k, v, None, torch.zeros(1, 13, dtype=torch.long), dropout=True) == "blockwise"
    assert choose("auto", trained, k, v, None, torch.zeros(1, 13, dtype=torch.long)) == "chunked"


def test_a_content_scheme_that_does_not_declare_it_refuses_it():
    """A plugin's content scheme whose rows do not take ``dropout=`` refuses ``dropout_p`` by name."""
    pe = small_module("fox")
    pe.takes_dropout = False
    q, k, v = _inputs(1, 7, 7, torch.float32, seed=2)
    with pytest.raises(ValueError, match="'fox' takes no attention dropout"):
        posenc.attention(q, k, v, pe, causal=True, dropout_p=0.1)


def test_blockwise_saves_no_mask_for_its_backward():
    """The blockwise call with dropout saves for autograd what it saves without (q, k, v, o, lse and the
    scheme's parameters): no tensor of ``Lq·Lk`` elements or more; its backward replays the mask."""
    b, lq, lk = 1, 40, 48
    pe = small_module("t5")
    q, k, v = _inputs(b, lq, lk, torch.float32, seed=3, grad=True)
    saved = {}
    for p in (0.0, 0.2):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            out = posenc.attention(q, k, v, pe, causal=True, backend="blockwise", dropout_p=p,
                                   generator=torch.Generator().manual_seed(1))
        saved[p] = sorted(sizes)
        out.sum().backward()
    assert saved[0.2] == saved[0.0]
    assert max(saved[0.2]) < lq * lk
    materialized = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: materialized.append(t.numel()) or t, lambda t: t):
        posenc.attention(q, k, v, pe, causal=True, backend="materialize", dropout_p=0.2)
    assert max(materialized) >= H * lq * lk  # the check can fail: the materialized path keeps its weights
