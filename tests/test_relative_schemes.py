"""Shaw, Transformer-XL, KERPLE and FIRE against their float64 references (module, attention on
every backend, gradients, torch.compile), their checks, and the papers' claims: KERPLE's kernels
are conditionally positive definite and decrease with distance; FIRE's input stays in [0, 1] and its
bias is bounded by its MLP on [0, 1]; none of the four is permutation-equivariant.

The generic tests in test_schemes.py also cover these schemes (reference at three dtypes, float64
tables, integer position dtypes); here are the parts specific to them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc import attn
from posenc import reference as ref
from conftest import DTYPES, assert_close, attention_reference

H, D = 3, 8
LENGTH = 217  # odd, and not a multiple of any block size
FAR = 10**6 + 7  # the second sequence of a batch starts here
SPECS = {
    "shaw": {"scheme": "shaw", "head_dim": D, "max_distance": 5},
    "transformer_xl": {"scheme": "transformer_xl", "num_heads": H, "head_dim": D},
    "kerple_log": {"scheme": "kerple", "num_heads": H},
    "kerple_power": {"scheme": "kerple", "num_heads": H, "variant": "power"},
    "fire": {"scheme": "fire", "num_heads": H, "hidden": 16, "L_threshold": 64.0},
}
BIAS = ["kerple_log", "kerple_power", "fire"]
RELATIVE = ["shaw", "transformer_xl"]


def build(key: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return posenc.build({**SPECS[key], **overrides})


def batched_positions(length: int, *, shift: int = 0) -> torch.Tensor:
    """``[2, length]``: one sequence from ``shift``, one from ``FAR + shift``."""
    p = torch.arange(length) + shift
    return torch.stack([p, p + FAR])


def qkv(lq: int, lk: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, H, n, D, generator=g).to(dtype) for n in (lq, lk, lk))


# -- modules against the reference ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("key", BIAS)
def test_bias_matches_reference_far_apart_batched(key, dtype):
    m = build(key).to(dtype)
    qp, kp = batched_positions(LENGTH, shift=4), batched_positions(LENGTH)
    out = m(qp, kp)
    assert out.shape == (2, H, LENGTH, LENGTH) and out.dtype == dtype
    assert_close(out, m.reference(qp.numpy(), kp.numpy()), what=f"{key} at {dtype}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_fire_blocks_without_gradient_match_the_reference(dtype):
    """``block_fn`` (blockwise's forward: the MLP as one matrix product over the hinges that a
    block's inputs reach) against the float64 reference: the diagonal (inputs from 0 to 1, across
    every breakpoint inside), a single pair (no hinge), batched positions far apart, real positions.
    Rounding of x and of each affine term: a few eps times the MLP's terms at |x| <= 1."""
    m = build("fire").double()
    w1, b1 = m.mlp[0].weight.detach().flatten(), m.mlp[0].bias.detach()
    w2, b2 = m.mlp[2].weight.detach(), m.mlp[2].bias.detach()
    with torch.no_grad():
        b1.copy_(-w1 * torch.linspace(-0.5, 1.5, len(w1), dtype=torch.float64))  # breakpoints: 8 in (0, 1)
    magnitude = float((b2.abs() + w2.abs() @ (w1.abs() + b1.abs())).max())
    real = torch.arange(30, dtype=torch.float64)
    blocks = [(torch.arange(300), torch.arange(300)), (torch.tensor([5000]), torch.tensor([1234])),
              (batched_positions(40, shift=9), batched_positions(50)), (real * 0.5 + 0.25, real[:20] * 1.5)]
    fn = m.block_fn()
    for qp, kp in blocks:
        out = fn(qp, kp, dtype)
        assert out.dtype == dtype
        assert_close(out, m.reference(qp.numpy(), kp.numpy()), magnitude=magnitude, what=f"{list(qp.shape)}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("key", RELATIVE)
def test_relative_matches_reference_far_apart_batched(key, dtype):
    m = build(key).to(dtype)
    q, k, _ = qkv(LENGTH, LENGTH, dtype)
    qp, kp = batched_positions(LENGTH, shift=4), batched_positions(LENGTH)
    out = m(q, k, qp, kp)
    assert out.shape == (2, H, LENGTH, LENGTH) and out.dtype == dtype
    assert_close(out, m.reference(q, k, qp, kp), what=f"{key} at {dtype}")
    if key == "shaw":
        p = torch.softmax(torch.randn(2, H, LENGTH, LENGTH), dim=-1).to(dtype)
        value = m.value_term(p, qp, kp)
        assert value.shape == (2, H, LENGTH, D) and value.dtype == dtype
        # a weighted mean of table rows: its size is that of the table
        assert_close(value, m.value_reference(p, qp, kp), magnitude=float(m.table_v.detach().abs().max()),
                     what=f"shaw value term at {dtype}")


def test_shaw_rows_are_the_clipped_distance():
    m = build("shaw")
    rows = m.index(torch.tensor([100, 3]), torch.tensor([0, 3, 98, 104, 10**9]))
    np.testing.assert_array_equal(rows.numpy(), [[0, 0, 3, 9, 10], [2, 5, 10, 10, 10]])
    np.testing.assert_array_equal(rows.numpy(), ref.shaw_index([100, 3], [0, 3, 98, 104, 10**9], 5))


def test_transformer_xl_relative_sinusoid_is_the_encoding_of_a_signed_distance():
    d_r, inv = 6, ref.sinusoidal_inv_freq(6)
    r = ref.relative_sinusoid([10, 2], [0, 7, 10], d_r)  # (2, 3, d_r): R_{i−j}
    distance = np.array([[10, 3, 0], [2, -5, -8]], dtype=np.float64)[..., None] * inv
    np.testing.assert_allclose(r[..., 0::2], np.sin(distance), rtol=0, atol=1e-15)
    np.testing.assert_allclose(r[..., 1::2], np.cos(distance), rtol=0, atol=1e-15)


# -- attention on every backend -------------------------------------------------------------------

def _magnitude(q, k, term) -> float:
    """The size of the scores, which bounds the output's error through the softmax."""
    qk = np.abs(np.einsum("bhqd,bhkd->bhqk", q.double().numpy(), k.double().numpy())).max() / np.sqrt(D)
    return float(qk + np.abs(term).max() + 1.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["materialize", "chunked"])
@pytest.mark.parametrize("key", BIAS + RELATIVE)
def test_attention_matches_reference_attention(key, backend, causal, monkeypatch):
    monkeypatch.setattr(attn, "CHUNK_ELEMENTS", 2 * H * 53 * 8)  # query chunks of 8 rows
    m = build(key)
    q, k, v = qkv(37, 53)
    kp = batched_positions(53, shift=2)
    qp = kp[:, -37:]  # a KV cache: queries are the last keys
    out = posenc.attention(q, k, v, m, q_positions=qp, k_positions=kp, causal=causal, backend=backend)
    expected = attention_reference(q, k, v, m, q_positions=qp, k_positions=kp, causal=causal)
    term = m.reference(qp.numpy(), kp.numpy()) if key in BIAS else m.reference(q, k, qp, kp)
    assert_close(out, expected, magnitude=_magnitude(q, k, term), what=f"{key} {backend} causal={causal}")


@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("key,causal", [("kerple_log", False), ("fire", False)])
def test_bias_attention_with_flex_matches_reference(key, causal):
    m = build(key, hidden=2) if key == "fire" else build(key)  # compile time grows with FIRE's hidden units
    q, k, v = qkv(LENGTH, LENGTH)
    p = batched_positions(LENGTH, shift=1)
    with torch.no_grad():
        out = posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=causal, backend="flex")
    expected = attention_reference(q, k, v, m, q_positions=p, k_positions=p, causal=causal)
    assert_close(out, expected, magnitude=_magnitude(q, k, m.reference(p.numpy(), p.numpy())), what=key)


@pytest.mark.parametrize("key", BIAS + RELATIVE)
def test_gradients_reach_every_parameter_and_agree_across_backends(key, monkeypatch):
    monkeypatch.setattr(attn, "CHUNK_ELEMENTS", 2 * H * 40 * 8)
    q, k, v = qkv(40, 40)
    p = torch.arange(40) + 3  # below FIRE's threshold, so L gets a gradient too
    weights = torch.randn(2, H, 40, D)
    grads = {}
    for backend in ("materialize", "chunked"):
        m = build(key)
        out = posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=True, backend=backend)
        (out * weights).sum().backward()
        grads[backend] = {n: t.grad for n, t in m.named_parameters()}
        for n, g in grads[backend].items():
            assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0, f"{key}.{n} on {backend}"
    for n, g in grads["materialize"].items():
        torch.testing.assert_close(grads["chunked"][n], g, rtol=1e-4, atol=1e-5, msg=f"{key}.{n}")


@pytest.mark.parametrize("key", BIAS + RELATIVE)
def test_attention_is_not_permutation_equivariant_with_the_scheme(key):
    q, k, v = qkv(16, 16)
    p = torch.arange(16)
    perm = torch.roll(torch.arange(16), 5)

    def run(pe, perm):
        return posenc.attention(q[:, :, perm], k[:, :, perm], v[:, :, perm], pe, q_positions=p, k_positions=p)

    plain = run(None, torch.arange(16))
    torch.testing.assert_close(run(None, perm), plain[:, :, perm])  # no position: equivariant
    m = build(key)
    moved = run(m, perm) - run(m, torch.arange(16))[:, :, perm]
    assert moved.abs().max() > 1e-2, f"{key} ignores the order of the tokens"


# -- torch.compile --------------------------------------------------------------------------------

@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("key", ["shaw", "transformer_xl", "kerple_power", "fire"])
def test_compiled_module_matches_reference(key):
    """Batched positions (one row per batch element) under ``torch.compile(fullgraph=True)``:
    dynamo's tracing and AOTAutograd's graph (``aot_eager``); inductor's C++ for each kind is
    test_compile.py's (transformer_xl under inductor took 31 s here with an empty cache)."""
    m = build(key)
    qp, kp = batched_positions(29, shift=3), batched_positions(29)
    q, k, _ = qkv(29, 29)
    p = torch.softmax(torch.randn(2, H, 29, 29), dim=-1)
    with torch.no_grad():
        if key in BIAS:
            out = torch.compile(m, fullgraph=True, dynamic=False, backend="aot_eager")(qp, kp)
            assert_close(out, m.reference(qp.numpy(), kp.numpy()), what=key)
        elif key == "shaw":
            both = torch.compile(lambda *a: (m(*a), m.value_term(p, qp, kp)), fullgraph=True, dynamic=False,
                                 backend="aot_eager")
            term, value = both(q, k, qp, kp)
            assert_close(term, m.reference(q, k, qp, kp), what=key)
            assert_close(value, m.value_reference(p, qp, kp), magnitude=float(m.table_v.detach().abs().max()),
                         what="shaw value term")
        else:
            out = torch.compile(m, fullgraph=True, dynamic=False, backend="aot_eager")(q, k, qp, kp)
            assert_close(out, m.reference(q, k, qp, kp), what=key)


# -- bad input ------------------------------------------------------------------------------------

def _q(d=D, heads=H, length=4):
    return torch.randn(1, heads, length, d)


BAD_SPECS = [
    ({"scheme": "kerple", "num_heads": 0}, ValueError, "num_heads"),
    ({"scheme": "kerple", "num_heads": 2.5}, TypeError, "num_heads"),
    ({"scheme": "kerple", "num_heads": 2, "variant": "cubic"}, ValueError, "variant"),
    ({"scheme": "kerple", "num_heads": 2, "eps": 0.0}, ValueError, "eps"),
    ({"scheme": "fire", "num_heads": 0}, ValueError, "num_heads"),
    ({"scheme": "fire", "num_heads": 2, "hidden": 0}, ValueError, "hidden"),
    ({"scheme": "fire", "num_heads": 2, "c": 0.0}, ValueError, "c must"),
    ({"scheme": "fire", "num_heads": 2, "c": "0.1"}, TypeError, "c must"),
    ({"scheme": "fire", "num_heads": 2, "L_threshold": -1.0}, ValueError, "L_threshold"),
    ({"scheme": "shaw", "head_dim": 0}, ValueError, "head_dim"),
    ({"scheme": "shaw", "head_dim": 8, "max_distance": -1}, ValueError, "max_distance"),
    ({"scheme": "shaw", "head_dim": 8, "max_dist": 3}, ValueError, "max_dist"),
    ({"scheme": "transformer_xl", "num_heads": 0, "head_dim": 8}, ValueError, "num_heads"),
    ({"scheme": "transformer_xl", "num_heads": 3, "head_dim": 3}, ValueError, "num_heads \\* head_dim"),
    ({"scheme": "transformer_xl", "num_heads": 2, "head_dim": 8, "base": 0.0}, ValueError, "base"),
]


@pytest.mark.parametrize("spec,error,match", BAD_SPECS, ids=lambda x: str(x)[:40])
def test_bad_spec_raises_naming_the_parameter(spec, error, match):
    with pytest.raises(error, match=match):
        posenc.build(spec)


BAD_CALLS = [
    ("shaw", lambda m: m(_q(d=4), _q(), torch.arange(4), torch.arange(4)), ValueError, "q must have last dim"),
    ("shaw", lambda m: m(_q(), _q(), torch.tensor([0, 1, -2, 3]), torch.arange(4)), ValueError, "q_positions"),
    ("shaw", lambda m: m(_q(), _q(), torch.arange(5), torch.arange(4)), ValueError, "q_positions"),
    ("shaw", lambda m: m.value_term(torch.rand(H, 4, 4), torch.arange(4), torch.arange(4)), ValueError, "p must"),
    ("shaw", lambda m: m.value_term(torch.rand(1, H, 4, 4), torch.arange(4), torch.arange(3)), ValueError,
     "k_positions"),
    ("transformer_xl", lambda m: m(_q(heads=2), _q(heads=2), torch.arange(4), torch.arange(4)), ValueError,
     "num_heads"),
    ("transformer_xl", lambda m: m(_q(), _q(d=6), torch.arange(4), torch.arange(4)), ValueError, "k must"),
    ("transformer_xl", lambda m: m(_q(), _q(), torch.arange(4.0), torch.arange(4)), TypeError, "q_positions"),
    ("kerple_log", lambda m: m(torch.arange(3), torch.tensor([-1, 0])), ValueError, "k_positions"),
    ("kerple_power", lambda m: m([0, 1], torch.arange(2)), TypeError, "q_positions"),
    ("fire", lambda m: m(torch.zeros(2, 2, 2, dtype=torch.long), torch.arange(2)), ValueError, "q_positions"),
    ("fire", lambda m: posenc.attention(_q(heads=2), _q(heads=2), _q(heads=2), m), ValueError, "num_heads"),
]


@pytest.mark.parametrize("key,call,error,match", BAD_CALLS, ids=[f"{c[0]}-{c[3][:12]}" for c in BAD_CALLS])
def test_bad_call_raises_naming_the_parameter(key, call, error, match):
    with pytest.raises(error, match=match):
        call(build(key))


@pytest.mark.parametrize("call,match", [
    (lambda: ref.kerple([0, 1], [0, 1], [1.0], [1.0], variant="cubic"), "variant"),
    (lambda: ref.kerple([0, 1], [0, 1], [1.0], [2.5], variant="power"), "r2"),
    (lambda: ref.kerple([0, 1], [0, 1], [0.0], [1.0]), "r1"),
    (lambda: ref.fire([0], [0], [1.0], [0.0], [[1.0]], [0.0], c=-1.0, L=8.0), "c and L"),
    (lambda: ref.shaw(np.ones((1, 1, 2, 4)), [0, 1], [0, 1], np.ones((4, 4))), "table_k"),
])
def test_reference_rejects_bad_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- KERPLE's claims ------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["kerple_log", "kerple_power"])
def test_kerple_is_zero_on_the_diagonal_negative_symmetric_and_decreasing(key):
    m = build(key).double()
    i = torch.tensor([FAR + 5000])
    j = FAR + 5000 - torch.arange(5001)  # distances 0 .. 5000
    bias = m(i, j)[:, 0]  # (H, 5001)
    assert (bias[:, 0] == 0).all()
    assert (bias[:, 1:] < 0).all() and (bias.diff(dim=-1) < 0).all()
    p = torch.tensor([3, 90, 7, 10**6])
    torch.testing.assert_close(m(p, p), m(p, p).transpose(-1, -2), rtol=0, atol=0)


@given(variant=st.sampled_from(["log", "power"]),
       points=st.lists(st.integers(0, 10**6), min_size=2, max_size=12),
       r1=st.floats(0.01, 2.0), r2=st.floats(0.01, 2.0), seed=st.integers(0, 2**31))
def test_kerple_kernel_is_conditionally_positive_definite(variant, points, r1, r2, seed):
    """Chi et al. §4: for Σc = 0, cᵀ B c >= 0, the property that lets the bias act as a kernel."""
    m = posenc.build({"scheme": "kerple", "num_heads": 1, "variant": variant}).double()
    with torch.no_grad():
        m.r1.fill_(r1)
        m.r2.fill_(r2)
    p = torch.tensor(points)
    with torch.no_grad():
        bias = m(p, p)[0]  # (n, n)
    c = torch.randn(len(points), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    c = c - c.mean()
    quad = c @ bias @ c
    assert quad >= -1e-12 * float((c.abs()[:, None] * bias.abs() * c.abs()).sum())


# -- FIRE's claims --------------------------------------------------------------------------------

def _mlp_range(m) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max of each head of the ReLU MLP on [0, 1]: at the ends or at a kink ``−b1/w1``."""
    w1, b1 = m.mlp[0].weight.double().flatten(), m.mlp[0].bias.double()
    kinks = (-b1 / w1)[(-b1 / w1 > 0) & (-b1 / w1 < 1)]
    x = torch.cat([torch.tensor([0.0, 1.0], dtype=torch.float64), kinks])
    with torch.no_grad():
        values = m.mlp.double()(x[:, None])  # (points, H)
    return values.min(0).values, values.max(0).values


@given(q=st.lists(st.integers(0, 10**9), min_size=1, max_size=8),
       k=st.lists(st.integers(0, 10**9), min_size=1, max_size=8),
       c=st.floats(1e-3, 10.0), threshold=st.floats(0.0, 5000.0))
def test_fire_input_is_in_the_unit_interval_and_the_bias_bounded_for_causal_pairs(q, k, c, threshold):
    x = ref.fire_input(q, k, c=c, L=threshold)  # (Lq, Lk)
    causal = np.array(k)[None, :] <= np.array(q)[:, None]
    assert ((x >= 0) & (x <= 1))[causal].all()
    m = build("fire", c=c, L_threshold=threshold).double()
    low, high = _mlp_range(m)
    with torch.no_grad():
        bias = m(torch.tensor(q), torch.tensor(k))  # (H, Lq, Lk)
    slack = 1e-9 * (1 + high.abs().max())
    inside = (bias >= low[:, None, None] - slack) & (bias <= high[:, None, None] + slack)
    assert inside[:, torch.from_numpy(causal)].all()


def test_fire_maps_the_first_key_to_one_and_the_query_itself_to_zero_past_the_threshold():
    m = build("fire").double()  # L = 64
    first = m(torch.tensor([64, 1000, 10**6, 10**9]), torch.tensor([0]))[:, :, 0]  # (H, 4): j = 0
    with torch.no_grad():
        at_one, at_zero = (m.mlp(torch.full((1, 1), x, dtype=torch.float64))[0] for x in (1.0, 0.0))
    # x = ψ(i) / (ψ(i) + eps) = 1 − O(eps / ψ(L)): f(1) up to 1e-6 times f's slope
    torch.testing.assert_close(first, at_one[:, None].expand(H, 4), rtol=0, atol=1e-5)
    p = torch.tensor([0, 5, 10**9])
    torch.testing.assert_close(torch.diagonal(m(p, p), dim1=-2, dim2=-1), at_zero[:, None].expand(H, 3),
                               rtol=0, atol=1e-12)
