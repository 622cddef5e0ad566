"""posenc.attention on every valid input (issue 22, items 2–4): keys far from the queries in
float32 against a bias computed from the formula at 50 digits; a value head size different from
q/k's (``Dv ≠ D``) for every kind on every backend, forward and gradients against central
differences of the float64 reference; empty inputs with and without documents; and ``auto``'s
route by what it costs (no FlexAttention compile here: the flex route runs eagerly).

Packed documents are checked against each document run by itself (``document_ids`` keeps every
query inside its document and restarts default positions: the README's promise)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import posenc
import posenc.scores
import posenc.attn
import posenc.blockwise as bw
from posenc.masking import Visibility
from posenc import reference as ref
from posenc.documents import positions_in_documents
from conftest import assert_close, attention_reference, heads_dim, schemes_of_kind, small_module, tolerance

APPLIED = schemes_of_kind("none", "rotary", "bias", "relative")
FAR = 10 ** 12  # keys this far from the queries: ALiBi's float32 bias steps by 2^16·m there


@pytest.fixture
def small_blocks(monkeypatch):
    """Blockwise blocks of 3 queries x 4 keys (2 per fused call) and chunked chunks of 2 rows, so
    that short inputs cross many blocks, the diagonal ones and the ragged last ones."""
    monkeypatch.setattr(bw, "BLOCK_Q", 3)
    monkeypatch.setattr(bw, "BLOCK_K", 4)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 2)
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * 2 * 4 * 9)  # B·H·Lk scores per row: 2 rows


@pytest.fixture
def eager_flex(monkeypatch):
    """The flex route as it runs, score_mod and block mask included, but with ``flex_attention``
    eager instead of compiled (a CPU compile takes minutes; the eager call builds the small score map)."""
    monkeypatch.setattr(posenc.attn, "_compiled_flex", lambda key: posenc.attn._flex_call)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- far keys in float32 --------------------------------------------------------------------------

def _exact_bias(pe, qp, kp) -> np.ndarray:
    """``[H, Lq, Lk]`` float64: ALiBi's or KERPLE's bias from its formula at 50 digits (slopes
    ``2^(−8(h+1)/H)``, KERPLE's clamped rates as exact binary values), each row's largest value
    subtracted before rounding; T5 and FIRE (bounded: their float64 reference is exact enough) from
    the reference, each row's largest value subtracted."""
    import mpmath

    mpmath.mp.dps = 50
    qp, kp = np.asarray(qp).tolist(), np.asarray(kp).tolist()
    heads = pe.num_heads
    if pe.name == "alibi":
        terms = [lambda d, m=mpmath.mpf(2) ** (-mpmath.mpf(8) * (h + 1) / heads): -m * d for h in range(heads)]
    elif pe.name == "kerple":
        r1, r2 = (r.detach().double().tolist() for r in pe.rates())
        if pe.variant == "log":
            terms = [lambda d, a=mpmath.mpf(a), b=mpmath.mpf(b): -a * mpmath.log1p(b * d) for a, b in zip(r1, r2)]
        else:
            terms = [lambda d, a=mpmath.mpf(a), b=mpmath.mpf(b): -a * d ** b for a, b in zip(r1, r2)]
    else:
        bias = pe.reference(np.asarray(qp), np.asarray(kp))
        return bias - bias.max(-1, keepdims=True)
    out = np.empty((heads, len(qp), len(kp)))
    for h, term in enumerate(terms):
        for i, q in enumerate(qp):
            row = [term(abs(mpmath.mpf(q) - mpmath.mpf(k))) for k in kp]
            top = max(row)
            out[h, i] = [float(x - top) for x in row]
    return out


FAR_KEYS = {  # (q_positions, k_positions): contiguous integers take blockwise's Toeplitz table
    "contiguous": (torch.arange(3), FAR + torch.arange(7)),
    "gaps": (torch.arange(3), FAR + 3 * torch.arange(7)),
    "unsorted": (torch.arange(3), FAR + torch.tensor([5, 0, 6, 2, 1, 4, 3])),
    "real": (torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64), FAR + 0.25 + torch.arange(7, dtype=torch.float64)),
}
FAR_SCHEMES = {"alibi": {}, "kerple-log": {"variant": "log"}, "kerple-power": {"variant": "power"},
               "t5": {}, "fire": {}}


def _far_keys_case(pe, dtype, backends, configs=FAR_KEYS, causals=(False, True)):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g).to(dtype) for n in (3, 7, 7))
    for where in configs:
        qp, kp = FAR_KEYS[where]
        if qp.is_floating_point() and not pe.real_positions:
            continue
        bias = _exact_bias(pe, qp, kp)
        for causal in causals:
            expected = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), bias=bias,
                                     causal=causal)
            # float32 scores of size ~10, then the output rounded to dtype
            tol = tolerance(torch.float32, 10) + tolerance(dtype, np.abs(expected).max())
            for backend in backends:
                with torch.no_grad():
                    out = posenc.attention(q, k, v, pe, q_positions=qp, k_positions=kp, causal=causal,
                                           backend=backend)
                err = float(np.abs(out.double().numpy() - expected).max())
                assert err <= tol, f"{pe.name} {where} causal={causal} {backend}: error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("scheme", list(FAR_SCHEMES))
def test_far_keys_agree_with_the_formula_on_every_backend(scheme, small_blocks):
    """Queries at 0–2, keys 10^12 away (contiguous, with gaps, unsorted, real): the bias
    differences along each row survive the cast to the float32 scores on every backend, for
    every dtype ``auto`` accepts but float64 (scores and bias are float32 whatever the input)."""
    pe = small_module(scheme.split("-")[0], **FAR_SCHEMES[scheme])
    backends = ("materialize", "chunked", "blockwise")
    _far_keys_case(pe, torch.float32, backends)
    if scheme not in ("t5", "fire"):  # bounded: no far-key term to lose in any dtype
        for dtype in (torch.bfloat16, torch.float16):
            _far_keys_case(pe, dtype, backends, configs=("gaps",))


@pytest.mark.parametrize("scheme", ["alibi", "kerple-power"])
def test_far_keys_agree_with_the_formula_on_the_flex_route(scheme, eager_flex):
    pe = small_module(scheme.split("-")[0], **FAR_SCHEMES[scheme])
    _far_keys_case(pe, torch.float32, ("flex",), configs=("real" if pe.name == "alibi" else "unsorted",),
                   causals=(True,))


def test_nearest_keys_are_the_nearest_visible_ones():
    """``nearest_keys`` (binary search where each row's keys are sorted, positions restarting in
    each document included; a scan otherwise) against a brute-force minimum over the keys each
    query sees, causal or not, with and without documents, integer and real positions."""
    pe = small_module("alibi")
    g = torch.Generator().manual_seed(7)
    ids = torch.tensor([[0] * 5 + [1] * 9 + [2] * 6, [0] * 12 + [1] * 8])  # (B, Lk) documents
    for kp in (positions_in_documents(ids) * 3, torch.randint(0, 50, (2, 20), generator=g),
               torch.rand(2, 20, generator=g, dtype=torch.float64) * 40):
        qp = kp[:, 8:] + (torch.rand(2, 12, generator=g, dtype=torch.float64) * 6 - 3 if kp.is_floating_point()
                          else torch.randint(-3, 4, (2, 12), generator=g))
        for causal in (False, True):
            for docs in (None, ids):
                vis = Visibility(12, 20, causal, None, None if docs is None else docs.long())
                first, last = vis.row_ranges(0, 12, device="cpu")
                near = pe.nearest_keys(qp, kp, first=first, last=last)
                lo = torch.zeros(2, 12, dtype=torch.long) if first is None else first.expand(2, 12)
                for b in range(2):
                    for i in range(12):
                        seen = kp[b, int(lo[b, i]):int(last.expand(2, 12)[b, i]) + 1]
                        best = (seen - qp[b, i]).abs().min()
                        assert (near[b, i] - qp[b, i]).abs() == best, (b, i, causal, docs is not None)
                        assert bool((seen == near[b, i]).any())


@pytest.mark.parametrize("variant", ["log", "power"])
def test_far_keys_keep_kerples_gradients(variant, small_blocks):
    """float32 gradients of ``Σ w·out`` with respect to q, k, v and KERPLE's r1, r2 at keys 10^12
    away, along a random direction, equal the central difference of the float64 reference with
    the bias from the formula at 50 digits (``_exact_bias``), on the backends that train."""
    pe = small_module("kerple", variant=variant)
    exact = small_module("kerple", variant=variant).double()  # perturbed for the central difference
    g = torch.Generator().manual_seed(4)
    q, k, v, w = (torch.randn(2, 4, n, 8, generator=g) for n in (3, 7, 7, 3))
    directions = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (q, k, v, *pe.parameters())]
    step = 1e-6

    def reference(sign, qp, kp):
        with torch.no_grad():
            for p, p0, u in zip(exact.parameters(), pe.parameters(), directions[3:]):
                p.copy_(p0.double() + sign * step * u)
        x = [(t.double() + sign * step * u).numpy() for t, u in zip((q, k, v), directions)]
        return float((ref.attention(*x, bias=_exact_bias(exact, qp, kp), causal=True) * w.double().numpy()).sum())

    for where in ("contiguous", "gaps"):
        qp, kp = FAR_KEYS[where]
        want = (reference(1.0, qp, kp) - reference(-1.0, qp, kp)) / (2 * step)
        for backend in ("materialize", "chunked", "blockwise"):
            inputs = [t.clone().requires_grad_() for t in (q, k, v)] + list(pe.parameters())
            out = posenc.attention(*inputs[:3], pe, q_positions=qp, k_positions=kp, causal=True, backend=backend)
            grads = torch.autograd.grad((out * w).sum(), inputs)
            got = sum(float((gr.double() * u).sum()) for gr, u in zip(grads, directions))
            assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), f"{variant} {where} {backend}: {got} != {want}"


# -- Dv != D: every kind, every backend, forward and gradients --------------------------------------

def _documents(lengths) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


def _reference(pe, q, k, v, *, causal, lengths=None) -> np.ndarray:
    """float64 reference; with documents, each document run by itself (default positions from 0)."""
    if lengths is None:
        return attention_reference(q, k, v, pe, causal=causal)
    parts, start = [], 0
    for n in lengths:
        s = slice(start, start + n)
        parts.append(attention_reference(q[:, :, s], k[:, :, s], v[:, :, s], pe, causal=causal))
        start += n
    return np.concatenate(parts, axis=2)


def _directional_reference(pe, tensors, directions, step, **kw) -> float:
    """``d/dε Σ w·ref(x + ε u)`` at 0 by a central difference of the float64 reference, over q, k, v
    (``tensors[:3]``) and the module's parameters; ``tensors[3]`` is ``w``."""
    params = [] if pe is None else list(pe.parameters())
    saved = [p.detach().clone() for p in params]
    values = []
    for sign in (1.0, -1.0):
        with torch.no_grad():
            for p, p0, u in zip(params, saved, directions[3:]):
                p.copy_(p0 + sign * step * u)
        q, k, v = (t.detach() + sign * step * u for t, u in zip(tensors[:3], directions[:3]))
        values.append(float((_reference(pe, q, k, v, **kw) * tensors[3].numpy()).sum()))
    with torch.no_grad():
        for p, p0 in zip(params, saved):
            p.copy_(p0)
    return (values[0] - values[1]) / (2 * step)


@pytest.mark.parametrize("name", APPLIED)
def test_a_value_head_size_other_than_qk_runs_everywhere(name, small_blocks, monkeypatch):
    """``v [B, H, Lk, Dv]`` with Dv = 5 and 11 against q, k of D = 8 (MLA-style), causal or not,
    with and without packed documents, on every backend that takes the call (``auto`` past the
    materialize size: blockwise, or chunked with documents): the output equals the float64
    reference, and the gradient of ``Σ w·out`` along a random direction of (q, k, v, parameters)
    equals the reference's central difference. Shaw adds value embeddings of size D, so it
    refuses Dv ≠ D by name."""
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 0)
    pe = None if name == "nope" else small_module(name).double()
    h, d = heads_dim(pe) if pe is not None else (4, 8)
    params = [] if pe is None else [p for p in pe.parameters() if p.requires_grad]  # FoPE's fixed coefficients
    for dv in (5, 11):
        g = torch.Generator().manual_seed(dv)
        q, k = (torch.randn(2, h, 9, d, generator=g, dtype=torch.float64) for _ in range(2))
        v, w = (torch.randn(2, h, 9, dv, generator=g, dtype=torch.float64) for _ in range(2))
        if getattr(pe, "value_term", None) is not None:
            with pytest.raises(ValueError, match=f"v must have last dimension {d}, got {dv}"):
                posenc.attention(q, k, v, pe)
            continue
        directions = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (q, k, v, *params)]
        for causal, docs in ((True, None), (False, [4, 2, 3])):  # causal with documents: test_documents.py
            expected = _reference(pe, q, k, v, causal=causal, lengths=docs)
            slope = _directional_reference(pe, (q, k, v, w), directions, 1e-6, causal=causal, lengths=docs)
            backends = ("materialize", "chunked", "auto") + (("blockwise",) if docs is None else ())
            for backend in backends:
                what = f"{name} {backend} Dv={dv} causal={causal} documents={docs is not None}"
                inputs = [t.clone().requires_grad_() for t in (q, k, v)]
                out = posenc.attention(*inputs, pe, causal=causal, backend=backend,
                                       document_ids=None if docs is None else _documents(docs))
                assert out.shape == (2, h, 9, dv), what
                assert_close(out, expected, magnitude=1e4, what=what)
                grads = torch.autograd.grad((out * w).sum(), inputs + params, allow_unused=True)
                got = sum(float((gr * u).sum()) for gr, u in zip(grads, directions) if gr is not None)
                assert abs(got - slope) <= 1e-6 * max(1.0, abs(slope)), f"{what}: gradient {got} != {slope}"


def test_a_value_head_size_other_than_qk_on_the_flex_route(eager_flex):
    """The flex route's score_mod (with and without a row peak) and block mask with Dv ≠ D."""
    g = torch.Generator().manual_seed(5)
    lk = posenc.attn.FLEX_BLOCK + 3  # one full block and a ragged one (documents need Lk >= one block)
    q, k = (torch.randn(1, 4, lk, 8, generator=g) for _ in range(2))
    v = torch.randn(1, 4, lk, 5, generator=g)
    lengths = [60, 71]
    with torch.no_grad():
        for name in ("alibi", "t5"):
            pe = small_module(name)
            out = posenc.attention(q, k, v, pe, causal=True, backend="flex", document_ids=_documents(lengths))
            assert_close(out, _reference(pe, q, k, v, causal=True, lengths=lengths), magnitude=10)
        out = posenc.attention(q, k, v, pe, causal=True, backend="flex")
        assert_close(out, attention_reference(q, k, v, pe, causal=True), magnitude=10)


# -- empty inputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", APPLIED)
@pytest.mark.parametrize("b, lq, lk", [(2, 0, 0), (2, 0, 5), (0, 5, 5), (0, 0, 0)])
def test_empty_inputs_run_with_and_without_documents(name, b, lq, lk):
    """No scores: ``[B, H, Lq, Dv]`` as plain SDPA returns it, on every backend that takes the call
    (blockwise refuses documents by name), documents as ``[Lk]`` or ``[B, Lk]``."""
    pe = small_module(name)
    h, d = heads_dim(pe)
    q, k, v = torch.randn(b, h, lq, d), torch.randn(b, h, lk, d), torch.randn(b, h, lk, d)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for docs in (None, torch.zeros(lk, dtype=torch.long), torch.zeros(b, lk, dtype=torch.long)):
        for backend in ("auto", "materialize", "chunked", "blockwise"):
            if docs is not None and backend == "blockwise":
                continue
            out = posenc.attention(q, k, v, pe, causal=lq <= lk, backend=backend, document_ids=docs)
            assert out.shape == (b, h, lq, d) and out.dtype == q.dtype
            torch.testing.assert_close(out, plain)


# -- auto's route by cost -----------------------------------------------------------------------------

def _route(pe, *, device="cpu", docs=True, grad=False):
    q = torch.empty(1, 4, 4096, 8, device=device, requires_grad=grad)
    k = v = torch.empty(1, 4, 4096, 8, device=device)
    ids = torch.zeros(1, 4096, dtype=torch.long, device=device) if docs else None
    return posenc.attn._choose_backend("auto", q, k, v, pe, ids)


def test_auto_never_compiles_fires_mlp_when_an_exact_route_exists(monkeypatch):
    """FIRE's score_mod unrolls its MLP (a first CPU compile of minutes): auto takes chunked with
    documents and blockwise without, on and off the CPU (a 'meta' tensor stands for an
    accelerator); the schemes that compile in seconds keep their documented flex route; under
    the caller's torch.compile flex stays the route for every scheme."""
    fire = small_module("fire", hidden=128)
    cheap = [small_module(n) for n in ("alibi", "t5", "kerple")]
    with torch.no_grad():
        assert _route(fire) == "chunked"
        assert _route(fire, device="meta", docs=False) == "blockwise"
        assert _route(fire, device="meta") == "chunked"
        assert _route(None) == "flex"
        for pe in cheap:
            assert _route(pe) == "flex", pe.name
            assert _route(pe, device="meta", docs=False) == "flex", pe.name
            assert _route(pe, docs=False) == "blockwise", pe.name  # on the CPU, eager (documented)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        assert _route(fire, docs=False) == "flex"
    assert _route(fire, grad=True) == "chunked"


def test_fire_with_documents_on_auto_runs_without_flex(monkeypatch):
    """End to end: FIRE at hidden = 128 with packed documents, no gradient, a map past the
    materialize size: the result is the reference's and FlexAttention is never called."""
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 0)

    def no_flex(*args, **kw):
        raise AssertionError("auto took FlexAttention for FIRE")

    monkeypatch.setattr(posenc.attn, "_flex", no_flex)
    pe = small_module("fire", hidden=128)
    lengths = [90, 50]
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 4, 140, 8, generator=g) for _ in range(3))
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, causal=True, document_ids=_documents(lengths))
    assert_close(out, _reference(pe, q, k, v, causal=True, lengths=lengths), magnitude=10)
