"""The float64 reference (posenc.reference) holds the field's claims, as properties.

The torch modules are held to this reference in test_schemes.py; here the reference itself is
held to the papers: closed forms where the papers give them, properties everywhere else.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import reference as ref

bases = st.sampled_from([10.0, 500.0, 10000.0, 1e6])
even_dims = st.integers(1, 32).map(lambda n: 2 * n)
pos = st.integers(0, 100_000)


def _angle_tol(max_angle: float, terms: int = 1) -> float:
    """sin/cos of an angle of size A carry an error of a few ulp(A): the float64 tolerance."""
    return 8 * np.finfo(np.float64).eps * (1.0 + float(max_angle)) * terms


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- sinusoidal ---------------------------------------------------------------------------------

@given(d=even_dims, base=bases, start=pos)
def test_sinusoidal_values_in_unit_interval_and_formula(d, base, start):
    p = np.arange(start, start + 50)
    pe = ref.sinusoidal(p, d, base)
    assert pe.shape == (50, d)
    assert np.all(np.abs(pe) <= 1.0)
    i = np.arange(d // 2)
    angle = p[:, None] / base ** (2 * i / d)
    atol = _angle_tol(angle.max())
    np.testing.assert_allclose(pe[:, 0::2], np.sin(angle), rtol=0, atol=atol)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(angle), rtol=0, atol=atol)


@settings(max_examples=8)
@given(d=st.sampled_from([4, 8, 16, 64]), base=bases)
def test_sinusoidal_every_position_distinct(d, base):
    pe = ref.sinusoidal(np.arange(400), d, base)
    dist = np.linalg.norm(pe[:, None, :] - pe[None, :, :], axis=-1)
    np.fill_diagonal(dist, np.inf)
    assert dist.min() > 1e-6


def _rotation(k: int, inv_freq: np.ndarray) -> np.ndarray:
    """The block-diagonal M_k with PE(pos + k) = M_k · PE(pos) on (sin, cos) pairs."""
    d = 2 * len(inv_freq)
    m = np.zeros((d, d))
    for i, w in enumerate(inv_freq):
        c, s = np.cos(k * w), np.sin(k * w)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return m


@given(d=st.sampled_from([2, 6, 16]), base=bases, k=st.integers(-300, 300), start=st.integers(300, 5000))
def test_sinusoidal_shift_is_a_fixed_rotation(d, base, k, start):
    p = np.arange(start, start + 64)
    pe, shifted = ref.sinusoidal(p, d, base), ref.sinusoidal(p + k, d, base)
    m = _rotation(k, ref.sinusoidal_inv_freq(d, base))
    np.testing.assert_allclose(m @ m.T, np.eye(d), atol=1e-12)  # a rotation
    atol = _angle_tol(p[-1] + abs(k), terms=2)
    np.testing.assert_allclose(pe @ m.T, shifted, rtol=0, atol=atol)  # the same M_k at every pos


def test_sinusoidal_shift_matrix_found_by_least_squares_is_block_diagonal():
    """Fit M from data alone: PE(p + k) ≈ M · PE(p) over many p. The fit is exact and equals the
    block-diagonal rotation (no hand-built M in the fit)."""
    d, k = 8, 37
    p = np.arange(0, 2000, 3)
    pe, shifted = ref.sinusoidal(p, d, 100.0), ref.sinusoidal(p + k, d, 100.0)
    fit, *_ = np.linalg.lstsq(pe, shifted, rcond=None)  # pe @ fit = shifted
    np.testing.assert_allclose(pe @ fit, shifted, atol=1e-9)
    mask = np.kron(np.eye(d // 2), np.ones((2, 2))).astype(bool)
    assert np.abs(fit.T[~mask]).max() < 1e-8
    np.testing.assert_allclose(fit.T, _rotation(k, ref.sinusoidal_inv_freq(d, 100.0)), atol=1e-8)


@given(d=even_dims, base=bases, p=pos, q=pos, s=st.integers(0, 10_000))
def test_sinusoidal_dot_product_depends_only_on_distance(d, base, p, q, s):
    a = ref.sinusoidal(np.array([p, q, p + s, q + s]), d, base)
    dot, shifted = a[0] @ a[1], a[2] @ a[3]
    expected = np.cos((p - q) * ref.sinusoidal_inv_freq(d, base)).sum()
    atol = _angle_tol(max(p, q) + s, terms=d)
    assert dot == pytest.approx(expected, abs=atol)
    assert shifted == pytest.approx(expected, abs=atol)


# -- rope ---------------------------------------------------------------------------------------

def _rope_args(d, base, rd, seed=0):
    x = _rng(seed).standard_normal((2, 3, 40, d))
    return x, ref.rope_inv_freq(rd, base)


@given(d=st.sampled_from([2, 8, 12, 64]), base=bases, start=pos, layout=st.sampled_from(["half", "interleaved"]),
       partial=st.booleans())
def test_rope_preserves_norm(d, base, start, layout, partial):
    rd = max(2, d // 2 // 2 * 2) if partial else d
    x, inv_freq = _rope_args(d, base, rd)
    y = ref.rope(x, np.arange(start, start + 40), inv_freq, layout=layout)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    np.testing.assert_array_equal(y[..., rd:], x[..., rd:])  # unrotated dims pass through
    assert np.abs(y[..., :rd] - x[..., :rd]).max() > 1e-3 or start == 0


@given(d=st.sampled_from([2, 8, 64]), base=bases, m=pos, n=pos, s=st.integers(0, 10_000),
       layout=st.sampled_from(["half", "interleaved"]))
def test_rope_score_depends_only_on_distance(d, base, m, n, s, layout):
    g = _rng(m + n)
    q, k = g.standard_normal((1, 1, 1, d)), g.standard_normal((1, 1, 1, d))
    inv_freq = ref.rope_inv_freq(d, base)

    def score(i, j):
        return float((ref.rope(q, [i], inv_freq, layout=layout) * ref.rope(k, [j], inv_freq, layout=layout)).sum())

    assert score(m, n) == pytest.approx(score(m + s, n + s), abs=1e-9)
    # ... and it is the complex form Re Σ q_i k̄_i e^{i(m−n)θ_i}, which moves with m − n.
    a, b = ref.rotate_pairs_index(d, layout)
    qc, kc = q[0, 0, 0, a] + 1j * q[0, 0, 0, b], k[0, 0, 0, a] + 1j * k[0, 0, 0, b]
    expected = np.real(np.sum(qc * np.conj(kc) * np.exp(1j * (m - n) * inv_freq)))
    assert score(m, n) == pytest.approx(expected, abs=1e-9)


@given(d=st.sampled_from([4, 8, 16]), partial=st.booleans(), start=pos)
def test_rope_layouts_equal_up_to_a_fixed_permutation(d, partial, start):
    rd = d // 2 if partial and d // 2 % 2 == 0 else d
    x, inv_freq = _rope_args(d, 10000.0, rd)
    p = np.arange(start, start + 40)
    # sigma sends the half layout's pair (i, i + rd/2) to the interleaved pair (2i, 2i + 1).
    sigma = np.concatenate([np.arange(0, rd, 2), np.arange(1, rd, 2), np.arange(rd, d)])
    half = ref.rope(x[..., sigma], p, inv_freq, layout="half")
    inter = ref.rope(x, p, inv_freq, layout="interleaved")
    np.testing.assert_allclose(half, inter[..., sigma], rtol=0, atol=1e-12)
    if rd >= 4:  # with one pair the layouts coincide; with more the permutation matters
        assert not np.allclose(ref.rope(x, p, inv_freq, layout="half"), inter)


def test_rope_position_zero_is_identity_and_batched_positions_broadcast():
    x, inv_freq = _rope_args(8, 10000.0, 8)
    np.testing.assert_array_equal(ref.rope(x, np.zeros(40, dtype=int), inv_freq), x)
    p = np.stack([np.arange(40), np.arange(40) + 100])
    y = ref.rope(x, p, inv_freq)
    np.testing.assert_allclose(y[1], ref.rope(x[1:], p[1], inv_freq)[0], atol=1e-15)


# -- alibi --------------------------------------------------------------------------------------

def test_alibi_slopes_closed_forms():
    np.testing.assert_allclose(ref.alibi_slopes(8), [1 / 2 ** i for i in range(1, 9)], rtol=1e-14)
    np.testing.assert_allclose(ref.alibi_slopes(1), [2.0 ** -8])
    np.testing.assert_allclose(ref.alibi_slopes(16), [2.0 ** (-0.5 * i) for i in range(1, 17)], rtol=1e-14)
    # 12 heads (not a power of two): the 8-head slopes, then 4 odd-indexed 16-head slopes.
    np.testing.assert_allclose(ref.alibi_slopes(12), [2.0 ** -i for i in range(1, 9)]
                               + [2.0 ** -(i + 0.5) for i in range(4)], rtol=1e-14)


@given(h=st.integers(1, 70))
def test_alibi_slopes_positive_distinct_at_most_one(h):
    s = ref.alibi_slopes(h)
    assert s.shape == (h,) and np.all(s > 0) and np.all(s < 1)
    assert len(np.unique(s)) == h


@given(h=st.integers(1, 16), lq=st.integers(1, 20), lk=st.integers(1, 20), off=pos, batched=st.booleans())
def test_alibi_is_minus_slope_times_distance(h, lq, lk, off, batched):
    qp, kp = np.arange(lq) + off, np.arange(lk) + off + 3
    if batched:
        qp, kp = np.stack([qp, qp + 7]), np.stack([kp, kp])
    bias = ref.alibi(qp, kp, ref.alibi_slopes(h))
    dist = np.abs(kp[..., None, :] - qp[..., :, None])  # (..., Lq, Lk)
    assert bias.shape == (*qp.shape[:-1], h, lq, lk)
    for head, slope in enumerate(ref.alibi_slopes(h)):
        np.testing.assert_array_equal(bias[..., head, :, :], -slope * dist)


# -- t5 -----------------------------------------------------------------------------------------

t5_configs = st.tuples(st.sampled_from([4, 8, 32, 64]), st.sampled_from([8, 20, 128, 1000]), st.booleans())


@given(cfg=t5_configs)
def test_t5_bucket_monotone_in_distance_and_bounded(cfg):
    nb, md, bi = cfg
    md = max(md, nb)
    r = np.arange(-3 * md, 3 * md + 1)
    b = ref.t5_bucket(r, num_buckets=nb, max_distance=md, bidirectional=bi)
    assert b.min() >= 0 and b.max() < nb
    past, future = b[r <= 0][::-1], b[r >= 0]  # ordered by growing |distance|
    assert np.all(np.diff(past) >= 0)
    if bi:
        assert np.all(np.diff(future[1:]) >= 0)
        assert np.all(future[1:] >= nb // 2) and np.all(past < nb // 2)  # each side its own half
    else:
        assert np.all(future == 0)  # a causal bucket sees only the past
    side = nb // 2 if bi else nb
    exact = side // 2
    np.testing.assert_array_equal(past[:exact], np.arange(exact))  # one bucket per small distance
    assert past[-1] == side - 1  # all far distances share the last bucket


@given(lq=st.integers(1, 12), lk=st.integers(1, 12), off=pos)
def test_t5_bias_gathers_the_table(lq, lk, off):
    table = _rng(lq * lk).standard_normal((32, 3))
    qp, kp = np.arange(lq) + off, np.arange(lk) + off
    bias = ref.t5(qp, kp, table)
    assert bias.shape == (3, lq, lk)
    buckets = ref.t5_bucket(kp[None, :] - qp[:, None])
    for h in range(3):
        np.testing.assert_array_equal(bias[h], table[buckets, h])


# -- attention and learned ----------------------------------------------------------------------

def test_attention_rows_are_averages_and_causal_is_bottom_right():
    g = _rng(1)
    q, k, v = g.standard_normal((2, 2, 9, 4)), g.standard_normal((2, 2, 9, 4)), g.standard_normal((2, 2, 9, 3))
    out = ref.attention(q, k, v, causal=True)
    np.testing.assert_allclose(out[..., 0, :], v[..., 0, :], atol=1e-15)  # the first query sees one key
    # The last 4 queries of a KV cache see what they see in the full causal attention.
    np.testing.assert_allclose(ref.attention(q[..., 5:, :], k, v, causal=True), out[..., 5:, :], atol=1e-14)
    s = ref.softmax(g.standard_normal((5, 7)) * 50)
    np.testing.assert_allclose(s.sum(-1), 1.0)
    assert np.all(s >= 0)


def test_learned_gathers_rows_and_refuses_past_the_table():
    table = _rng().standard_normal((10, 4))
    np.testing.assert_array_equal(ref.learned([[3, 9], [0, 1]], table), table[[[3, 9], [0, 1]]])
    with pytest.raises(ValueError, match=r"max_positions=10.*got 10"):
        ref.learned([2, 10], table)


# -- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, real", [
    (lambda p: ref.sinusoidal(p, 8), True),
    (lambda p: ref.rope(np.ones((1, 1, 3, 4)), p, ref.rope_inv_freq(4)), True),
    (lambda p: ref.alibi(p, p, ref.alibi_slopes(2)), True),
    (lambda p: ref.t5(p, p, np.ones((32, 2))), False),
    (lambda p: ref.learned(p, np.ones((10, 2))), False),
], ids=["sinusoidal", "rope", "alibi", "t5", "learned"])
def test_reference_rejects_bad_positions(call, real):
    with pytest.raises(ValueError, match=r"positions must be non-negative, got minimum -2"):
        call(np.array([0, -2, 1]))
    if real:  # a function of position: integer-valued floats give the integer result exactly
        assert np.array_equal(call(np.array([0.0, 1.0, 2.0])), call(np.array([0, 1, 2])))
        with pytest.raises(TypeError, match=r"positions must hold integers or real numbers, got dtype <U1"):
            call(np.array(["0", "1", "2"]))
    else:
        from posenc.reference.positions import REAL_SCHEMES

        with pytest.raises(TypeError, match=r"positions must hold integers for scheme '(t5|learned)', got dtype "
                                            r"float64; real-valued positions are accepted by: " + ", ".join(REAL_SCHEMES)):
            call(np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"positions must have shape \[L\] or \[B, L\], got shape \[1, 1, 3\]"):
        call(np.zeros((1, 1, 3), dtype=int))


@pytest.mark.parametrize("call, match", [
    (lambda: ref.rope(np.ones((1, 1, 3, 4)), [0, 1, 2], ref.rope_inv_freq(4), layout="neox"),
     r"layout must be .*'half'.*'interleaved'.*'neox'"),
    (lambda: ref.rope(np.ones((1, 1, 3, 4)), [0, 1, 2], ref.rope_inv_freq(8)),
     r"rotary_dim.*8.*4"),
    (lambda: ref.rope(np.ones((1, 1, 4, 4)), [0, 1, 2], ref.rope_inv_freq(4)), r"positions.*3.*4"),
    (lambda: ref.rope_inv_freq(5), r"rotary_dim must be even.*5"),
    (lambda: ref.rope_inv_freq(4, base=0.0), r"base must be > 0.*0"),
    (lambda: ref.sinusoidal([0, 1], 7), r"d_model must be even.*7"),
    (lambda: ref.sinusoidal([0, 1], 8, base=-1.0), r"base must be > 0.*-1"),
    (lambda: ref.alibi_slopes(0), r"num_heads must be >= 1, got 0"),
    (lambda: ref.alibi_slopes(2.5), r"num_heads must be an integer, got 2.5"),
    (lambda: ref.t5_bucket([0, 1], num_buckets=1), r"num_buckets must be >= .*got 1"),
    (lambda: ref.t5([0], [0], np.ones((8, 2)), num_buckets=32), r"table.*32.*8"),
    (lambda: ref.attention(np.ones((1, 1, 2, 4)), np.ones((1, 1, 2, 3)), np.ones((1, 1, 2, 4))),
     r"last dimension"),
], ids=["layout", "rotary_dim>D", "length", "odd rotary_dim", "base<=0", "odd d_model", "sin base",
        "heads=0", "heads float", "buckets", "t5 table", "attention dims"])
def test_reference_rejects_bad_parameters(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()

