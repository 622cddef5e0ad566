"""posenc.scaling: the RoPE long-context scalings as pure float64 functions.

Closed forms from the papers and model cards, the invariants each method claims, and the
validation that raises where transformers only warns.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from posenc import scaling as S
from posenc.reference import rope_inv_freq


def resolve(spec, dim=128, base=10000.0):
    return S.resolve(spec, rope_inv_freq(dim, base), head_dim=dim, base=base)


def test_registry_lists_every_method():
    assert list(S.SCALINGS) == ["linear", "ntk", "yarn", "llama3", "dynamic", "longrope", "xpos"]


def test_scaling_module_imports_no_torch():
    code = "import sys, posenc.scaling; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_scaling_is_identity():
    out = resolve(None)
    assert np.array_equal(out.inv_freq, rope_inv_freq(128))
    assert out.attention_factor == 1.0 and out.type == "default" and not out.length_dependent


def test_linear_divides_every_frequency():
    base = rope_inv_freq(64)
    out = resolve({"type": "linear", "factor": 4}, dim=64)
    np.testing.assert_allclose(out.inv_freq, base / 4, rtol=1e-15)
    assert out.attention_factor == 1.0 and out.type == "linear"


def test_ntk_is_a_base_change():
    d, base, factor = 128, 10000.0, 8.0
    out = resolve({"type": "ntk", "factor": factor}, dim=d, base=base)
    np.testing.assert_allclose(out.inv_freq, rope_inv_freq(d, base * factor ** (d / (d - 2))), rtol=1e-13)
    assert out.inv_freq[0] == 1.0  # the fastest pair is untouched
    np.testing.assert_allclose(out.inv_freq[-1], rope_inv_freq(d, base)[-1] / factor, rtol=1e-13)  # the slowest interpolates


def test_yarn_closed_form_dim128_base1e4_original2048_factor4():
    assert S.yarn_correction_range(128, 1e4, 2048, 32, 1) == (16, 41)
    out = resolve({"type": "yarn", "factor": 4, "original_max_positions": 2048})
    assert out.attention_factor == pytest.approx(1.13863, abs=5e-6)
    assert out.attention_factor == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)
    base = rope_inv_freq(128)
    i = np.arange(64)
    ramp = np.clip((i - 16) / (41 - 16), 0, 1)
    np.testing.assert_allclose(out.inv_freq, base / 4 * ramp + base * (1 - ramp), rtol=1e-15)
    np.testing.assert_array_equal(out.inv_freq[:17], base[:17])  # rotate > beta_fast times: extrapolate
    np.testing.assert_allclose(out.inv_freq[41:], base[41:] / 4, rtol=1e-15)  # < beta_slow times: interpolate


def test_yarn_untruncated_range_and_frequencies_between_the_two():
    low, high = S.yarn_correction_range(128, 1e4, 2048, 32, 1, truncate=False)
    assert low == pytest.approx(128 * math.log(2048 / (32 * 2 * math.pi)) / (2 * math.log(1e4)))
    assert (low, high) == pytest.approx((16.1280, 40.2104), abs=1e-4)
    base = rope_inv_freq(96, 5e5)
    for spec in ({"type": "yarn", "factor": 16, "original_max_positions": 4096, "truncate": False},
                 {"type": "yarn", "factor": 3, "original_max_positions": 512, "beta_fast": 64, "beta_slow": 2}):
        out = resolve(spec, dim=96, base=5e5)
        assert np.all(out.inv_freq <= base) and np.all(out.inv_freq >= base / spec["factor"] * (1 - 1e-15))
        assert np.all(np.diff(out.inv_freq / base) <= 1e-15)  # the ramp only moves towards interpolation


def test_yarn_attention_factor_as_deepseek_uses_mscale():
    def af(**kw):
        return resolve({"type": "yarn", "factor": 40, "original_max_positions": 4096, **kw}).attention_factor

    assert af(mscale=1.0, mscale_all_dim=1.0) == 1.0  # DeepSeek-V3: the ratio cancels (mscale goes in softmax)
    assert af(mscale=0.707, mscale_all_dim=0.0) == pytest.approx(0.1 * 0.707 * math.log(40) + 1)
    assert af(mscale=1.0, mscale_all_dim=0.707) == pytest.approx(
        (0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1))
    assert af(attention_factor=1.25) == 1.25  # an explicit value wins
    assert S.yarn_mscale(1.0) == 1.0 and S.yarn_mscale(0.5, 3.0) == 1.0


def test_llama3_closed_form_llama31_8b():
    d, base = 128, 500000.0
    theta = rope_inv_freq(d, base)
    out = resolve({"type": "llama3", "factor": 8, "original_max_positions": 8192, "low_freq_factor": 1,
                   "high_freq_factor": 4}, dim=d, base=base)
    wavelen = 2 * math.pi / theta
    high, low, mid = wavelen < 8192 / 4, wavelen > 8192, (wavelen >= 2048) & (wavelen <= 8192)
    np.testing.assert_array_equal(out.inv_freq[high], theta[high])
    np.testing.assert_allclose(out.inv_freq[low], theta[low] / 8, rtol=1e-15)
    s = (8192 / wavelen[mid] - 1) / (4 - 1)
    np.testing.assert_allclose(out.inv_freq[mid], (1 - s) * theta[mid] / 8 + s * theta[mid], rtol=1e-15)
    assert high.sum() + low.sum() + mid.sum() == d // 2 and mid.sum() > 0
    assert out.attention_factor == 1.0
    # the defaults are Llama 3.1's
    same = resolve({"type": "llama3", "factor": 8, "original_max_positions": 8192}, dim=d, base=base)
    np.testing.assert_array_equal(same.inv_freq, out.inv_freq)


def test_llama3_with_equal_factors_is_a_step_as_llama4_scout_ships_it():
    """Llama 4 Scout's config.json: low_freq_factor = high_freq_factor = 1, factor 16, L₀ = 8192."""
    d, base = 128, 500000.0
    theta = rope_inv_freq(d, base)
    out = resolve({"type": "llama3", "factor": 16, "original_max_positions": 8192, "low_freq_factor": 1,
                   "high_freq_factor": 1}, dim=d, base=base)
    long = 2 * math.pi / theta > 8192
    assert 0 < long.sum() < d // 2
    np.testing.assert_allclose(out.inv_freq[long], theta[long] / 16, rtol=1e-15)
    np.testing.assert_array_equal(out.inv_freq[~long], theta[~long])
    assert np.all(np.isfinite(out.inv_freq))


def test_dynamic_follows_the_length():
    d, orig, factor = 64, 1024, 4.0
    out = resolve({"type": "dynamic", "factor": factor, "original_max_positions": orig}, dim=d)
    base = rope_inv_freq(d)
    assert out.length_dependent and out.attention_factor == 1.0
    for length in (1, 512, orig):
        np.testing.assert_array_equal(out.at(length), base)
    previous = base
    for length in (orig + 1, 2 * orig, 4 * orig, 100 * orig):
        alpha = factor * length / orig - (factor - 1)
        want = rope_inv_freq(d, 10000.0 * alpha ** (d / (d - 2)))  # transformers' formula
        np.testing.assert_allclose(out.at(length), want, rtol=1e-12)
        assert np.all(out.at(length) <= previous)
        previous = out.at(length)
    np.testing.assert_allclose(out.at(orig + 1), base, rtol=1e-2)  # continuous at the switch


def test_longrope_switches_tables_and_phi3_attention_factor():
    d, orig = 96, 4096
    short = list(np.linspace(1.0, 1.5, d // 2))
    long = list(np.linspace(1.0, 40.0, d // 2))
    out = resolve({"type": "longrope", "short_factor": short, "long_factor": long, "factor": 32,
                   "original_max_positions": orig}, dim=d)
    base = rope_inv_freq(d)
    np.testing.assert_allclose(out.inv_freq, base / short, rtol=1e-15)
    np.testing.assert_allclose(out.at(orig), base / short, rtol=1e-15)
    np.testing.assert_allclose(out.at(orig + 1), base / long, rtol=1e-15)
    # Phi-3-mini-128k: factor 131072/4096 = 32
    assert out.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    assert out.attention_factor == pytest.approx(1.19024, abs=1e-5)
    one = resolve({"type": "longrope", "short_factor": short, "long_factor": long, "factor": 1,
                   "original_max_positions": orig}, dim=d)
    assert one.attention_factor == 1.0


def test_xpos_zeta_and_decay():
    d = 64
    out = resolve({"type": "xpos"}, dim=d)
    zeta = (np.arange(0, d, 2) + 0.4 * d) / (1.4 * d)  # torchscale / rotary-embedding-torch
    np.testing.assert_allclose(out.decay, np.log(zeta) / 512, rtol=1e-14)
    assert np.array_equal(out.inv_freq, rope_inv_freq(d)) and out.attention_factor == 1.0
    assert np.all(out.decay < 0)
    other = resolve({"type": "xpos", "scale_base": 256, "gamma": 0.2}, dim=d)
    np.testing.assert_allclose(other.decay, np.log((np.arange(0, d, 2) / d + 0.2) / 1.2) / 256, rtol=1e-14)


def test_by_length_evaluates_piecewise():
    rule = S.ByLength(switch=10, short=np.array([1.0, 0.5]), long=np.array([0.5, 0.25]), slope=0.1, intercept=0.0,
                      exponent=np.array([0.0, -1.0]))
    np.testing.assert_array_equal(rule(10), [1.0, 0.5])
    np.testing.assert_allclose(rule(20), [0.5, 0.25 / 2.0])
    np.testing.assert_array_equal(S.ByLength(switch=3, short=np.ones(1), long=np.zeros(1))(4), [0.0])


def test_scaled_records_type_and_params():
    spec = {"type": "yarn", "factor": 2, "original_max_positions": 64}
    out = resolve(spec)
    assert out.type == "yarn" and out.params == spec


@pytest.mark.parametrize("spec, message", [
    ({"type": "linear", "factor": 0.5}, "factor must be >= 1.0"),
    ({"type": "ntk", "factor": 0.99}, "factor must be >= 1.0"),
    ({"type": "dynamic", "factor": 0.5, "original_max_positions": 64}, "factor must be >= 1.0"),
    ({"type": "yarn", "factor": 0.5, "original_max_positions": 64}, "factor must be >= 1.0"),
    ({"type": "llama3", "factor": 0.5, "original_max_positions": 64}, "factor must be >= 1.0"),
    ({"type": "yarn", "factor": 4, "original_max_positions": 64, "beta_fast": 1, "beta_slow": 32},
     "beta_fast must be > beta_slow"),
    ({"type": "yarn", "factor": 4, "original_max_positions": 64, "beta_fast": 2, "beta_slow": 2},
     "beta_fast must be > beta_slow"),
    ({"type": "yarn", "factor": 4, "original_max_positions": 64, "attention_factor": 0.0}, "attention_factor must be > 0"),
    ({"type": "yarn", "factor": 4, "original_max_positions": 0}, "original_max_positions must be >= 1"),
    ({"type": "llama3", "factor": 8, "original_max_positions": 8192, "low_freq_factor": 4, "high_freq_factor": 1},
     "high_freq_factor must be >= low_freq_factor"),
    ({"type": "longrope", "short_factor": [1.0] * 63, "long_factor": [1.0] * 64, "factor": 4,
      "original_max_positions": 64}, "short_factor must have 64 entries, got 63"),
    ({"type": "longrope", "short_factor": [1.0] * 64, "long_factor": [1.0] * 32, "factor": 4,
      "original_max_positions": 64}, "long_factor must have 64 entries"),
    ({"type": "longrope", "short_factor": [0.0] * 64, "long_factor": [1.0] * 64, "factor": 4,
      "original_max_positions": 64}, "short_factor entries must be > 0"),
    ({"type": "yarn", "factor": 4}, "needs 'original_max_positions'"),
    ({"type": "llama3", "factor": 4}, "needs 'original_max_positions'"),
    ({"type": "dynamic", "factor": 4}, "needs 'original_max_positions'"),
    ({"type": "longrope", "short_factor": [1.0] * 64, "long_factor": [1.0] * 64, "factor": 4},
     "needs 'original_max_positions'"),
    ({"type": "linear"}, "needs 'factor'"),
    ({"type": "xpos", "scale_base": 0}, "scale_base must be > 0"),
    ({"type": "linear", "factor": 2, "scale": 3}, "unknown key 'scale' for scaling 'linear'; allowed keys: type, factor"),
    ({"type": "rope-magic", "factor": 2}, "'linear', 'ntk', 'yarn', 'llama3', 'dynamic', 'longrope', 'xpos'"),
    ({"factor": 2}, "scaling has no 'type' key"),
    ({"type": ["yarn"], "factor": 2}, "scaling type must be one of"),
])
def test_invalid_scalings_raise_value_error(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        resolve(spec)


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError, match="scaling must be a dict"):
        resolve("linear")
    with pytest.raises(TypeError, match="original_max_positions must be an integer"):
        resolve({"type": "yarn", "factor": 4, "original_max_positions": 2048.5})
    with pytest.raises(TypeError, match="truncate must be True or False"):
        resolve({"type": "yarn", "factor": 4, "original_max_positions": 2048, "truncate": 1})


def test_yarn_needs_a_base_above_one():
    with pytest.raises(ValueError, match="base must be > 1 for yarn"):
        resolve({"type": "yarn", "factor": 4, "original_max_positions": 64}, base=1.0)
