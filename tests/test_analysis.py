"""posenc.analysis against closed forms, and over every registered scheme through its kind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc import analysis, registry, scaling
from posenc import reference as ref
from posenc.reference import alibi_slopes, rope_inv_freq, sinusoidal, sinusoidal_inv_freq


def _sin_table(length: int, d: int, base: float) -> np.ndarray:
    return sinusoidal(np.arange(length), d, base)


@given(d=st.sampled_from([4, 8, 16]), base=st.sampled_from([10.0, 100.0, 10000.0]))
def test_similarity_vs_distance_is_the_cosine_sum(d, base):
    tab = analysis.table({"scheme": "sinusoidal", "d_model": d, "base": base}, length=40)
    assert np.allclose(tab, _sin_table(40, d, base), atol=1e-12)
    theta = sinusoidal_inv_freq(d, base)
    r = np.arange(40)[:, None]
    assert np.allclose(analysis.similarity_vs_distance(tab), (2 / d) * np.cos(r * theta).sum(-1), atol=1e-12)
    sim = analysis.cosine_similarity_matrix(tab)
    assert np.allclose(np.diag(sim), 1.0) and np.allclose(sim, sim.T)


def test_linear_map_is_the_block_rotation_for_sinusoids():
    d, base, k = 8, 10.0, 3
    tab = _sin_table(64, d, base)
    m, residual = analysis.linear_map(tab, k)
    expected = np.zeros((d, d))
    for i, t in enumerate(sinusoidal_inv_freq(d, base)):
        c, s = np.cos(k * t), np.sin(k * t)
        # sin((p+k)θ) = sin·cos kθ + cos·sin kθ;  cos((p+k)θ) = cos·cos kθ − sin·sin kθ
        expected[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    assert residual < 1e-10
    assert np.allclose(m, expected, atol=1e-8)


def test_linear_map_fails_for_a_random_table_and_refuses_too_few_positions():
    rng = np.random.default_rng(0)
    _, residual = analysis.linear_map(rng.standard_normal((64, 8)), 1)
    assert residual > 0.1
    with pytest.raises(ValueError, match="more position pairs than dimensions"):
        analysis.linear_map(rng.standard_normal((8, 8)), 1)


def test_fingerprint_distances_match_brute_force_and_the_closed_form():
    rng = np.random.default_rng(1)
    tab = rng.standard_normal((50, 6))
    brute = np.linalg.norm(tab[:, None] - tab[None], axis=-1)
    np.fill_diagonal(brute, np.inf)
    assert np.allclose(analysis.nearest_neighbour_distances(tab, chunk=7), brute.min(-1))
    d, p, q = analysis.min_fingerprint_distance(tab)
    assert p < q and np.isclose(d, brute.min()) and np.isclose(brute[p, q], d)
    # sinusoidal: |PE(p) − PE(p+r)|² = 2 Σ_i (1 − cos rθ_i), smallest at some r >= 1
    theta = sinusoidal_inv_freq(16, 10000.0)
    closed = np.sqrt(2 * (1 - np.cos(np.arange(1, 100)[:, None] * theta)).sum(-1)).min()
    assert np.isclose(analysis.min_fingerprint_distance(_sin_table(100, 16, 10000.0))[0], closed)



def test_fingerprint_ties_go_to_the_first_pair_and_ill_conditioned_tables_are_exact():
    # sinusoidal: every pair at the same |p − q| is equally close; rounding must not pick one
    for length, d, base in ((128, 64, 10000.0), (300, 16, 500.0), (77, 6, 10000.0)):
        dist, p, q = analysis.min_fingerprint_distance(_sin_table(length, d, base))
        theta = sinusoidal_inv_freq(d, base)
        closed = np.sqrt(2 * (1 - np.cos(np.arange(1, length)[:, None] * theta)).sum(-1))
        r = int(np.flatnonzero(closed <= closed.min() * (1 + analysis.FINGERPRINT_RTOL))[0]) + 1
        assert (p, q) == (0, r) and np.isclose(dist, closed.min(), rtol=1e-12)
    # RoPE interpolated 1e5 times: adjacent rows differ by ~1e-5, where |a|² + |b|² − 2a·b loses
    # every digit; the direct distance is still exact
    inv = rope_inv_freq(64, 10000.0) / 1e5
    ang = np.arange(50)[:, None] * inv
    tab = np.concatenate([np.cos(ang), np.sin(ang)], axis=-1)
    dist, p, q = analysis.min_fingerprint_distance(tab)
    brute = np.linalg.norm(tab[:, None] - tab[None], axis=-1)
    np.fill_diagonal(brute, np.inf)
    assert np.isclose(dist, brute.min(), rtol=1e-9) and (p, q) == (0, 1)
    # a random table: the unique closest pair
    tab = np.random.default_rng(3).standard_normal((40, 5))
    brute = np.linalg.norm(tab[:, None] - tab[None], axis=-1)
    np.fill_diagonal(brute, np.inf)
    i, j = np.unravel_index(np.argmin(brute), brute.shape)
    assert analysis.min_fingerprint_distance(tab)[1:] == (min(i, j), max(i, j))


def test_linear_map_residual_prints_noise_as_a_bound():
    numbers = dict(analysis.key_numbers("sinusoidal", length=100, dim=16))
    assert numbers["PE(p+1) = M·PE(p) residual"] == "< 1e-6 (linear)"
    numbers = dict(analysis.key_numbers("learned", length=100, dim=16))
    assert numbers["PE(p+1) = M·PE(p) residual"].endswith("(not linear)")

def test_wavelengths_and_turns():
    theta = rope_inv_freq(64, 10000.0)
    lam = analysis.wavelengths(theta)
    assert np.allclose(lam, 2 * np.pi * 10000.0 ** (np.arange(0, 64, 2) / 64))
    assert np.allclose(analysis.turns(theta, 4096) * lam, 4096)
    assert np.allclose(analysis.inv_freq({"scheme": "rope", "head_dim": 64}), theta)


def test_rope_decay_bound_closed_form_and_brute_force():
    bound = analysis.rope_decay_bound(dim=128, base=10000.0, max_distance=50)
    assert np.isclose(bound[0], (64 + 1) / 2)  # S_j = j at r = 0: mean of 1..64
    theta = rope_inv_freq(128, 10000.0)
    for r in (1, 17, 50):
        s = [abs(sum(np.exp(1j * r * theta[i]) for i in range(j))) for j in range(1, 65)]
        assert np.isclose(bound[r], sum(s) / 64)
    assert bound[50] < bound[0] / 2  # the long-term decay


@given(seed=st.integers(0, 2**16), r=st.integers(0, 300))
def test_rope_decay_bound_bounds_every_score(seed, r):
    """Abel summation: |Σ_i h_i e^{i r θ_i}| ≤ max_i |h_{i+1} − h_i| · Σ_j |S_j| (h_{d/2} = 0)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(32) + 1j * rng.standard_normal(32)
    theta = rope_inv_freq(64, 10000.0)
    score = abs((h * np.exp(1j * r * theta)).sum())
    step = np.abs(np.diff(np.append(h, 0))).max()
    bound = analysis.rope_decay_bound(dim=64, max_distance=r)[r] * 32
    assert score <= step * bound * (1 + 1e-12)


def test_rotary_scores_closed_form_with_and_without_scaling():
    theta = rope_inv_freq(32, 10000.0)
    r = np.arange(41)[:, None]
    plain = analysis.rotary_scores({"scheme": "rope", "head_dim": 32}, max_distance=40)
    assert np.allclose(plain, (2 / 32) * np.cos(r * theta).sum(-1), atol=1e-12)
    lin = analysis.rotary_scores("rope:scaling=linear,factor=4", max_distance=40, dim=32)
    assert np.allclose(lin, (2 / 32) * np.cos(r * theta / 4).sum(-1), atol=1e-12)
    with pytest.raises(analysis.NotApplicable, match="not applicable"):
        analysis.rotary_scores("alibi")


def test_bias_maps_alibi_closed_form_and_not_applicable():
    maps = analysis.bias_maps("alibi", length=9, num_heads=4)
    i = np.arange(9)
    assert np.allclose(maps, -alibi_slopes(4)[:, None, None] * np.abs(i[:, None] - i[None]))
    with pytest.raises(analysis.NotApplicable, match="'sinusoidal'"):
        analysis.bias_maps("sinusoidal")


def test_spectrum_linear_and_a_new_scaling_type_without_edits(monkeypatch):
    sp = analysis.spectrum("rope:scaling=linear,factor=8", dim=64)
    assert np.allclose(sp.after, sp.before / 8) and np.allclose(sp.wavelengths_after, 8 * sp.wavelengths_before)
    plain = analysis.spectrum("rope", dim=64)
    assert np.array_equal(plain.before, plain.after) and plain.scaling is None

    def halve(inv_freq, *, factor, original_max_positions, head_dim, base):
        return inv_freq / 2, 1.5

    monkeypatch.setitem(scaling.SCALINGS, "halve_for_test", halve)
    sp = analysis.spectrum("rope:scaling=halve_for_test,factor=3,original_max_positions=100", dim=64)
    assert np.allclose(sp.after, sp.before / 2)
    assert (sp.context, sp.extended, sp.attention_factor) == (100, 300, 1.5)


@pytest.mark.parametrize("name", registry.schemes())
def test_every_scheme_has_a_curve_and_key_numbers(name):
    curve = analysis.score_vs_distance(name, length=16, dim=16, num_heads=2)
    assert curve.kind == registry.get(name).kind and curve.score.shape == (16,)
    assert np.isfinite(curve.score).all()
    if curve.kind == "none":
        assert not curve.score.any()
    if curve.kind in ("additive", "rotary"):
        tab = analysis.table(name, length=16, dim=16)
        assert tab.shape[0] == 16 and analysis.min_fingerprint_distance(tab)[0] > 1e-6
    numbers = dict(analysis.key_numbers(name, length=16, dim=16, num_heads=2))
    assert numbers["scheme"] == name and numbers["kind"] == curve.kind


# -- grid maps ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["sinusoidal:axes=2", "rope:axes=2"])
def test_grid_map_of_factorized_encodings_is_the_closed_form(spec):
    """Half the pairs follow the row, half the column: the signal with patch (r0, c0) is
    ½·mean_i cos((r − r0)θ_i) + ½·mean_i cos((c − c0)θ_i), θ_i = 10000^(−2i/(D/2))."""
    gm = analysis.grid_map(spec, grid=(5, 7), patch=(1, 4), dim=32)
    theta = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    r = np.arange(5)[:, None, None] - 1
    c = np.arange(7)[None, :, None] - 4
    expected = 0.5 * np.cos(r * theta).mean(-1) + 0.5 * np.cos(c * theta).mean(-1)
    np.testing.assert_allclose(gm.values, expected, atol=1e-12)
    assert gm.grid == (5, 7) and gm.patch == (1, 4)


def test_grid_map_reads_one_axis_schemes_on_the_flattened_patches():
    gm = analysis.grid_map("alibi", grid=(3, 4), patch=(0, 0), num_heads=2)
    slopes = ref.alibi_slopes(2)
    np.testing.assert_allclose(gm.values.ravel(), -slopes.mean() * np.arange(12), atol=1e-12)
    with pytest.raises(ValueError, match=r"patch must lie inside the grid 3×4, got \(3, 0\)"):
        analysis.grid_map("alibi", grid=(3, 4), patch=(3, 0))
