"""True angles (issue 22, item 1) and the sinusoidal layouts of MAE / timm / diffusers (item 6).

Every expected value is computed here from the formula's inputs (``base``, ``i``, the scaling's
parameters, the position) with 50-digit mpmath, never from posenc's own float64 θ.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc import rotary
from posenc.rotary import angles_cos_sin

DIGITS = 50
INTEGERS = [0, 1, 4095, (1 << 21) - 1, (1 << 24) + 1, (1 << 33) + 12345, (1 << 40) + 3, (1 << 50) + 7,
            (1 << 53) - 1, 1 << 53, (1 << 53) + 1, (1 << 62) + 5, (1 << 63) - 1]
REALS = [0.5, 1234.5678, 2.0 ** 21 + 0.25, 2.0 ** 40 + 0.5, 2.0 ** 52 + 0.5, 2.0 ** 53 - 1.0, 2.0 ** 53,
         2.0 ** 62 * 1.5]


def _reals(seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return REALS + list(rng.uniform(0, 2.0 ** 53, 6)) + list(np.exp2(rng.uniform(10, 53, 6)))


def _theta(base: float, d: int) -> list:
    """``base^(−2i/d)`` with 50 digits: the true frequencies."""
    with mpmath.workdps(DIGITS):
        return [mpmath.mpf(base) ** (-mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def _cos_sin(positions, theta) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``p·θ`` with 50 digits: ``[L, R]`` (``positions [L]``) or per pair
    (``positions [L, R]``)."""
    pos = np.asarray(positions, dtype=object)
    with mpmath.workdps(DIGITS):
        out_c = np.empty((len(pos), len(theta)))
        out_s = np.empty_like(out_c)
        for r, p in enumerate(pos):
            for c, t in enumerate(theta):
                x = p[c] if np.ndim(p) else p
                a = (mpmath.mpf(int(x)) if isinstance(x, (int, np.integer)) else mpmath.mpf(float(x))) * t
                out_c[r, c], out_s[r, c] = float(mpmath.cos(a)), float(mpmath.sin(a))
    return out_c, out_s


def _check(cos, sin, positions, theta, what=""):
    tc, ts = _cos_sin(positions, theta)
    err = max(np.abs(np.asarray(cos, dtype=np.float64) - tc).max(), np.abs(np.asarray(sin, dtype=np.float64) - ts).max())
    assert err <= 1e-6, f"{what}: cos/sin off by {err:.3g}"


def _tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64 if isinstance(values[0], float) else torch.int64)


# -- scalings written out in mpmath, from base, i and the parameters ------------------------------

def _yarn(theta, d, base, factor, original, beta_fast=32.0, beta_slow=1.0):
    def dim_of(rot):
        return d * mpmath.log(original / (rot * 2 * mpmath.pi)) / (2 * mpmath.log(base))

    low, high = max(int(mpmath.floor(dim_of(beta_fast))), 0), min(int(mpmath.ceil(dim_of(beta_slow))), d - 1)
    span = (high - low) if high != low else mpmath.mpf(0.001)
    out = []
    for i, t in enumerate(theta):
        ramp = min(max((i - low) / mpmath.mpf(span), 0), 1)
        out.append(t / factor * ramp + t * (1 - ramp))
    return out


def _llama3(theta, factor, original, low, high):
    out = []
    for t in theta:
        wavelen = 2 * mpmath.pi / t
        if wavelen < original / high:
            out.append(t)
        elif wavelen > original / low:
            out.append(t / factor)
        else:
            s = (original / wavelen - low) / (high - low)
            out.append((1 - s) * t / factor + s * t)
    return out


def _scaled_cases():
    rng = np.random.default_rng(22)
    d, base = 64, float(rng.choice([10000.0, 500000.0, 1e6]))
    factor = float(np.round(rng.uniform(2, 16), 3))
    original = int(rng.choice([2048, 4096, 8192]))
    short, long = rng.uniform(1, 4, d // 2).round(4), rng.uniform(1, 40, d // 2).round(4)
    with mpmath.workdps(DIGITS):
        theta = _theta(base, d)
        ntk_base = mpmath.mpf(base) * mpmath.mpf(factor) ** (mpmath.mpf(d) / (d - 2))  # base change
        return [
            ("default", None, theta, None),
            ("linear", {"type": "linear", "factor": factor}, [t / factor for t in theta], None),
            ("ntk", {"type": "ntk", "factor": factor}, _theta(ntk_base, d), None),
            ("yarn", {"type": "yarn", "factor": factor, "original_max_positions": original},
             _yarn(theta, d, base, factor, original), None),
            ("llama3", {"type": "llama3", "factor": factor, "original_max_positions": original},
             _llama3(theta, factor, original, 1.0, 4.0), None),
            ("dynamic", {"type": "dynamic", "factor": factor, "original_max_positions": original}, theta, original),
            ("longrope short", {"type": "longrope", "factor": factor, "original_max_positions": original,
                                "short_factor": short.tolist(), "long_factor": long.tolist()},
             [t / float(f) for t, f in zip(theta, short)], original),
            ("longrope long", {"type": "longrope", "factor": factor, "original_max_positions": original,
                               "short_factor": short.tolist(), "long_factor": long.tolist()},
             [t / float(f) for t, f in zip(theta, long)], None),
        ], d, base


CASES, D, BASE = _scaled_cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rope_cos_sin_are_within_1e6_of_50_digits_at_every_position_below_2_63(case):
    """Integer and real positions up to 2^63 (tables and direct), plain rope and every scaling whose
    frequencies are a closed form: float64 θ alone is off by 0.3 at 2^53."""
    name, scaling, theta, short_only = case
    m = posenc.build({"scheme": "rope", "head_dim": D, "base": BASE, "scaling": scaling})
    if short_only is not None:  # length-dependent: positions below original_max_positions, one table
        small = [0, 1, 77, short_only - 1]
        cos, sin = m.cos_sin(_tensor(small), torch.float64)
        _check(cos, sin, small, theta, name)
        return
    for positions in (INTEGERS, _reals(), [0, 1, 300, 4095]):  # the last one: the cached table's rows
        cos, sin = m.cos_sin(_tensor(positions), torch.float64)
        _check(cos, sin, positions, theta, name)


def test_the_old_float64_frequencies_were_off_at_2_53():
    """What the double-double buys: float64 θ reduced exactly is off by far more than 1e-6 at 2^53."""
    theta = _theta(BASE, D)
    hi = ref.rope_inv_freq(D, BASE)
    cos, sin = angles_cos_sin(_tensor(INTEGERS), torch.from_numpy(hi), torch.float64)
    with pytest.raises(AssertionError, match="off by"):
        _check(cos, sin, INTEGERS, theta)


def test_axial_rope_and_mrope_are_within_1e6_of_50_digits():
    rng = np.random.default_rng(5)
    axes_dims = [16, 32]
    m = posenc.build({"scheme": "rope", "head_dim": 48, "axes": 2, "axes_dims": axes_dims, "base": 100.0})
    theta = _theta(100.0, 16) + _theta(100.0, 32)
    axis = np.repeat([0, 1], [8, 16])
    for dtype in (torch.int64, torch.float64):
        pos = np.stack([np.array(INTEGERS[::-1]), np.array(INTEGERS)], -1)
        if dtype == torch.float64:
            pos = np.stack([np.array(_reals(1)[:12]), np.array(_reals(2)[:12])], -1)
        cos, sin = m.cos_sin(torch.tensor(pos, dtype=dtype), torch.float64)
        _check(cos, sin, [[row[a] for a in axis] for row in pos.tolist()], theta, f"axial {dtype}")
    mr = posenc.build({"scheme": "mrope", "head_dim": 64, "base": 1e6})
    axis = mr.axis_of_pair.numpy()
    pos = rng.integers(0, 2 ** 62, (6, 3))
    pos[0] = [1 << 53, (1 << 53) - 1, 7]
    cos, sin = mr.cos_sin(torch.from_numpy(pos), torch.float64)
    _check(cos, sin, [[int(row[a]) for a in axis] for row in pos], _theta(1e6, 64), "mrope")


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_sinusoidal_and_transformer_xl_angles_are_within_1e6_of_50_digits(layout):
    pe = posenc.build({"scheme": "sinusoidal", "d_model": 32, "layout": layout}).double()
    for positions in (INTEGERS, _reals(3)):
        out = pe(_tensor(positions)).numpy()
        sin, cos = (out[:, 0::2], out[:, 1::2]) if layout == "interleaved" else (out[:, :16], out[:, 16:])
        _check(cos, sin, positions, _theta(10000.0, 32), f"sinusoidal {layout}")
    txl = posenc.build({"scheme": "transformer_xl", "num_heads": 2, "head_dim": 8})
    cos, sin = angles_cos_sin(_tensor(INTEGERS), txl.inv_freq, torch.float64, inv_freq_lo=txl.inv_freq_lo)
    _check(cos, sin, INTEGERS, _theta(10000.0, 16), "transformer_xl")


def test_rope_mixed_angles_are_exact_for_the_frequencies_it_holds():
    """rope_mixed's frequencies are learned parameters (no closed form): its angles are those of
    the float32 parameter values, taken as exact, at positions up to 2^62."""
    m = posenc.build({"scheme": "rope_mixed", "head_dim": 8, "num_heads": 2, "base": 10.0})
    pos = torch.tensor([[1 << 53, 3], [(1 << 62) + 5, 1 << 40], [7, (1 << 53) - 1]])
    with torch.no_grad():
        cos, sin = m.cos_sin(pos, torch.float64)  # (H, L, R)
    f = m.freqs.detach().double().numpy()  # (A, H, R)
    with mpmath.workdps(DIGITS):
        for h in range(2):
            truth = [[sum(mpmath.mpf(int(p[a])) * mpmath.mpf(float(f[a, h, i])) for a in range(2))
                      for i in range(f.shape[-1])] for p in pos.tolist()]
            tc = np.array([[float(mpmath.cos(t)) for t in row] for row in truth])
            ts = np.array([[float(mpmath.sin(t)) for t in row] for row in truth])
            assert max(np.abs(cos[h].numpy() - tc).max(), np.abs(sin[h].numpy() - ts).max()) <= 1e-6


def test_frequencies_past_pi_are_reduced_before_they_multiply_a_position():
    """Learned frequencies may leave ``[−π, π]`` (RoPE's θ never does, so ``reduced_multiples`` skips
    the reduction for those): values up to ±40 at positions below 2^21 (one level) and past it."""
    m = posenc.build({"scheme": "rope_mixed", "head_dim": 8, "num_heads": 2})
    with torch.no_grad():
        m.freqs.copy_(torch.tensor([3.5, -3.2, 10.25, -40.0, 0.5, 3.1, -7.75, 31.0]).repeat(2).view(m.freqs.shape))
    f = m.freqs.detach().double().numpy()  # (A, H, R)
    for pos in (torch.tensor([[0, 1], [3, 7], [(1 << 21) - 1, 12345]]),
                torch.tensor([[1 << 21, 5], [(1 << 40) + 3, (1 << 33) + 1]])):
        with torch.no_grad():
            cos, sin = m.cos_sin(pos, torch.float64)  # (H, L, R)
        with mpmath.workdps(DIGITS):
            for h in range(f.shape[1]):
                truth = [[sum(mpmath.mpf(int(p[a])) * mpmath.mpf(float(f[a, h, i])) for a in range(f.shape[0]))
                          for i in range(f.shape[-1])] for p in pos.tolist()]
                tc = np.array([[float(mpmath.cos(t)) for t in row] for row in truth])
                ts = np.array([[float(mpmath.sin(t)) for t in row] for row in truth])
                assert max(np.abs(cos[h].numpy() - tc).max(), np.abs(sin[h].numpy() - ts).max()) <= 1e-9, pos


@pytest.mark.parametrize("spec, shape", [
    ({"scheme": "rope", "head_dim": 8}, (1,)),
    ({"scheme": "rope", "head_dim": 8, "axes": 2}, (1, 2)),
    ({"scheme": "mrope", "head_dim": 12}, (1, 3)),
    ({"scheme": "rope_mixed", "head_dim": 8, "num_heads": 1}, (1, 2)),
], ids=["rope", "axial", "mrope", "rope_mixed"])
@pytest.mark.parametrize("value", [2.0 ** 63, 1e25])
def test_real_positions_at_or_past_2_63_are_refused_naming_the_bound(spec, shape, value):
    m = posenc.build(spec)
    x = torch.randn(1, 1, 1, spec["head_dim"])
    with pytest.raises(ValueError, match=r"positions must be below 2\^63 = 9223372036854775808 .*got"):
        m(x, torch.full(shape, value, dtype=torch.float64))
    assert rotary.POSITION_BOUND == 2 ** 63
    below = torch.full(shape, 2.0 ** 63 - 2.0 ** 11, dtype=torch.float64)  # the largest float64 below 2^63
    assert torch.isfinite(m(x, below)).all()


def test_sinusoidal_and_the_reference_refuse_real_positions_past_2_63():
    pe = posenc.build({"scheme": "sinusoidal", "d_model": 8})
    with pytest.raises(ValueError, match=r"below 2\^63"):
        pe(torch.tensor([1e25], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"below 2\^63"):
        ref.sinusoidal(np.array([1e25]), 8)


# -- sinusoidal layouts: MAE, diffusers, timm with no column permutation --------------------------

def _one_axis(d, pos, base=10000.0):
    """MAE's get_1d_sincos_pos_embed_from_grid (util/pos_embed.py): ``[sin… | cos…]``."""
    omega = np.arange(d // 2, dtype=np.float64) / (d / 2.0)
    omega = 1.0 / base ** omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _mae_2d(embed_dim, size):
    """MAE's get_2d_sincos_pos_embed (He et al. 2022): ``grid[0]`` is the column (meshgrid(w, h))."""
    grid = np.stack(np.meshgrid(np.arange(size, dtype=np.float32), np.arange(size, dtype=np.float32)), 0)
    grid = grid.reshape(2, 1, size, size)
    return np.concatenate([_one_axis(embed_dim // 2, grid[0]), _one_axis(embed_dim // 2, grid[1])], axis=1)


def _diffusers_2d(embed_dim, grid_size, base_size=16, interpolation_scale=1.0):
    """diffusers' get_2d_sincos_pos_embed (embeddings.py): MAE's order, positions scaled to base_size."""
    gh, gw = grid_size
    grid_h = np.arange(gh, dtype=np.float64) / (gh / base_size) / interpolation_scale
    grid_w = np.arange(gw, dtype=np.float64) / (gw / base_size) / interpolation_scale
    grid = np.stack(np.meshgrid(grid_w, grid_h), 0).reshape(2, 1, gh, gw)
    return np.concatenate([_one_axis(embed_dim // 2, grid[0]), _one_axis(embed_dim // 2, grid[1])], axis=1)


def _timm_2d(feat_shape, dim, temperature=10000.0, interleave_sin_cos=True):
    """timm's build_sincos2d_pos_embed (layers/pos_embed_sincos.py), in float64."""
    pos_dim = dim // 4
    bands = 1.0 / temperature ** (torch.arange(pos_dim, dtype=torch.float64) / pos_dim)
    grid = torch.stack(torch.meshgrid([torch.arange(s, dtype=torch.float64) for s in feat_shape], indexing="ij"))
    grid = grid.flatten(1).transpose(0, 1)  # (HW, 2): (row, column)
    pos2 = grid.unsqueeze(-1) * bands.unsqueeze(0)  # (HW, 2, pos_dim)
    return torch.stack([torch.sin(pos2), torch.cos(pos2)], dim=2 if interleave_sin_cos else 1).flatten(1).numpy()


def test_sinusoidal_half_is_mae_2d_sincos_with_no_permutation():
    rng = np.random.default_rng(6)
    d, s = int(rng.choice([32, 64, 96])), int(rng.integers(3, 9))
    pe = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": 2, "layout": "half"}).double()
    pos = posenc.grid_positions((s, s))[:, [1, 0]]  # (column, row): MAE's grid[0] is the column
    np.testing.assert_allclose(pe(pos).numpy(), _mae_2d(d, s), atol=1e-12)
    np.testing.assert_allclose(pe.reference(pos.numpy()), _mae_2d(d, s), atol=1e-12)


def test_sinusoidal_half_is_diffusers_2d_sincos_at_real_positions():
    rng = np.random.default_rng(7)
    d, (h, w) = 64, rng.integers(3, 9, 2).tolist()
    base_size, scale = int(rng.integers(8, 32)), float(rng.uniform(0.5, 2))
    pe = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": 2, "layout": "half"}).double()
    grid = posenc.grid_positions((h, w)).double()  # (row, column)
    pos = torch.stack([grid[:, 1] * base_size / w / scale, grid[:, 0] * base_size / h / scale], -1)
    np.testing.assert_allclose(pe(pos).numpy(), _diffusers_2d(d, (h, w), base_size, scale), atol=1e-12)


def test_sinusoidal_half_is_timms_interleaved_sin_cos_2d_table_row_first():
    rng = np.random.default_rng(8)
    d, (h, w) = 48, rng.integers(3, 9, 2).tolist()
    temperature = float(rng.uniform(100, 20000))
    pe = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": 2, "layout": "half",
                       "base": temperature}).double()
    np.testing.assert_allclose(pe(posenc.grid_positions((h, w))).numpy(), _timm_2d((h, w), d, temperature),
                               atol=1e-12)
    ours = pe(posenc.grid_positions((h, w))).numpy()  # timm's default: [sin(row), sin(col) | cos(row), cos(col)]
    q = d // 4
    perm = np.r_[0:q, 2 * q:3 * q, q:2 * q, 3 * q:4 * q]
    np.testing.assert_allclose(ours[:, perm], _timm_2d((h, w), d, temperature, interleave_sin_cos=False),
                               atol=1e-12)


@pytest.mark.parametrize("axes", [1, 3])
def test_sinusoidal_half_is_interleaved_with_each_axis_block_permuted(axes):
    d = 12 * axes
    half = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": axes, "layout": "half"}).double()
    inter = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": axes}).double()
    pos = torch.randint(0, 1 << 30, (2, 5) if axes == 1 else (2, 5, axes))
    block = d // axes
    perm = np.concatenate([a * block + np.r_[0:block:2, 1:block:2] for a in range(axes)])
    assert torch.equal(half(pos), inter(pos)[..., perm])
    np.testing.assert_allclose(half.reference(pos.numpy()), half(pos).numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="layout must be one of"):
        posenc.build({"scheme": "sinusoidal", "d_model": d, "layout": "halves"})
    assert math.isclose(float(half(torch.tensor([0]) if axes == 1 else torch.zeros(1, axes, dtype=torch.long))
                              [0, block // 2]), 1.0)  # cos(0) opens the second half


# -- angles exact to the last bits, at integer and real positions --------------------------------

def _true_angle(p, theta) -> float:
    """``p·θ`` reduced to ``[−π, π)`` with 50 digits (``p`` an int or a float64, ``θ`` an mpf)."""
    with mpmath.workdps(DIGITS):
        x = (mpmath.mpf(p) if isinstance(p, int) else mpmath.mpf(float(p))) * theta
        return float(x - 2 * mpmath.pi * mpmath.floor(x / (2 * mpmath.pi) + mpmath.mpf(1) / 2))


def _angle_error(got: float, true: float) -> float:
    e = abs(got - true)
    return min(e, abs(e - 2 * math.pi))  # −π and π are the same angle


def test_angles_are_within_4e_15_of_50_digits_at_integer_positions_below_2_53():
    """Each chunk's product ``c_j·r_j`` is formed and reduced exactly: before, it rounded by up to
    5e-10 (the angle was right to ~1e-9, and a 16384-row sinusoidal table to 1.8e-12)."""
    rng = np.random.default_rng(22)
    positions = INTEGERS + [int(rng.integers(0, 1 << int(b))) for b in rng.integers(1, 63, 40)]
    theta = _theta(10000.0, 64)
    hi, lo = ref.positions.exact_split(np.array(theta, dtype=object))
    got = rotary.angles(_tensor(positions), torch.from_numpy(hi), inv_freq_lo=torch.from_numpy(lo)).numpy()
    ref_got = ref.positions.angles(np.array(positions, dtype=np.int64), np.array(theta, dtype=object))
    for angles_of in (got, ref_got):
        errors = [max(_angle_error(a[i], _true_angle(p, t)) for i, t in enumerate(theta))
                  for a, p in zip(angles_of, positions)]
        # a few float64 roundings of an angle below 3π; past 2^53 the double-double θ's own error
        # (2^-106·θ relative, 1.1e-13 at 2^63) adds to them
        assert max(e for e, p in zip(errors, positions) if p < 1 << 53) < 4e-15, errors
        assert max(errors) < 1e-13, errors


@pytest.mark.parametrize("theta", [1.0, 3.5, 4.0, 2 * math.pi - 1e-3, 6.5, 0.001])
def test_angles_at_real_positions_take_theta_itself_not_theta_mod_2pi(theta):
    """``0.5·4.0 = 2.0``: θ reduced mod 2π before the product (what the levels do for integer
    chunks) gave −1.14 at a real position once θ > π."""
    positions = [0.5, 0.25, 1.75, 3.3, 1234.5678, 2.0 ** 21 + 0.25, 2.0 ** 40 + 0.5]
    got = rotary.angles(torch.tensor(positions, dtype=torch.float64), torch.tensor([theta], dtype=torch.float64))
    ref_got = ref.positions.angles(np.array(positions), np.array([theta]))
    t = mpmath.mpf(theta)
    for p, g, r in zip(positions, got[:, 0].tolist(), ref_got[:, 0]):
        true = _true_angle(p, t)
        assert _angle_error(g, true) < 1e-12 and _angle_error(r, true) < 1e-12, (p, g, r, true)


def test_angles_gradient_in_theta_is_the_position():
    """``∂angle/∂θ = p`` through the exact reduction (integer and real positions)."""
    theta = torch.tensor([0.3, 4.0], dtype=torch.float64, requires_grad=True)
    for positions in (torch.tensor([3, (1 << 30) + 5]), torch.tensor([2.5, 7.25], dtype=torch.float64)):
        (grad,) = torch.autograd.grad(rotary.angles(positions, theta).sum(), theta)
        assert torch.equal(grad, positions.to(torch.float64).sum().expand(2))
