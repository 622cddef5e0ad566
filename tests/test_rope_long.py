"""RoPE for long context: exact angles, cached tables, the KV-cache policy of length-dependent
scalings, incremental decoding, xPos and torch.compile.

(The basic rope tests, reference parity at several dtypes and layouts, are in test_schemes.py.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.encodings import rope as rope_module

TWO24 = 1 << 24
EPS32 = float(np.finfo(np.float32).eps)

ORIGINAL = 16  # original_max_positions of the scalings below: short enough to decode past cheaply
D = 32
SCALINGS = {
    "none": None,
    "linear": {"type": "linear", "factor": 4},
    "ntk": {"type": "ntk", "factor": 4},
    "dynamic": {"type": "dynamic", "factor": 4, "original_max_positions": ORIGINAL},
    "yarn": {"type": "yarn", "factor": 4, "original_max_positions": ORIGINAL},
    "llama3": {"type": "llama3", "factor": 8, "original_max_positions": ORIGINAL},
    "longrope": {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(D // 2)],
                 "long_factor": [1.0 + 0.5 * i for i in range(D // 2)], "factor": 4,
                 "original_max_positions": ORIGINAL},
    "xpos": {"type": "xpos", "scale_base": 64},
}
STATIC = [name for name in SCALINGS if name not in ("dynamic", "longrope")]


def build(scaling=None, head_dim=D, **kw):
    return posenc.build({"scheme": "rope", "head_dim": head_dim, "scaling": scaling, **kw})


# -- exact angles ---------------------------------------------------------------------------------

def _truth(positions: list[int], inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of m·θ_i with the product and the reduction mod 2π in 40-digit arithmetic."""
    import mpmath

    mpmath.mp.dps = 40
    theta = [mpmath.mpf(float(t)) for t in inv_freq]  # the float64 frequencies, taken as exact
    cos = np.empty((len(positions), len(theta)))
    sin = np.empty_like(cos)
    for r, m in enumerate(positions):
        for c, t in enumerate(theta):
            angle = m * t
            cos[r, c], sin[r, c] = float(mpmath.cos(angle)), float(mpmath.sin(angle))
    return cos, sin


def _sample_positions(seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    powers = [1 << k for k in range(25)]
    edges = [TWO24 - 1, TWO24 - 2, (1 << 23) + 1, 4095, 32767, 131071, 1_000_000]
    return sorted(set(powers[:-1] + edges + rng.integers(0, TWO24, 40).tolist() + [0, 1, 256, 257]))


@pytest.mark.parametrize("scaling, base", [(None, 10000.0), ({"type": "yarn", "factor": 32,
                                                               "original_max_positions": 4096}, 500000.0)])
def test_cos_sin_within_1e6_of_the_truth_below_2_24_in_float32(scaling, base):
    rope = build(scaling, head_dim=64, base=base)
    positions = _sample_positions()
    assert max(positions) == TWO24 - 1
    cos, sin = rope.cos_sin(torch.tensor(positions))
    assert cos.dtype == torch.float32 and cos.shape == (len(positions), 32)
    true_cos, true_sin = _truth(positions, rope.inv_freq.numpy())
    assert np.abs(cos.numpy() - true_cos).max() <= 1e-6
    assert np.abs(sin.numpy() - true_sin).max() <= 1e-6
    # float64 output is essentially exact
    cos64, sin64 = rope.cos_sin(torch.tensor(positions), torch.float64)
    assert np.abs(cos64.numpy() - true_cos).max() < 1e-8 and np.abs(sin64.numpy() - true_sin).max() < 1e-8


def test_float32_angles_the_way_transformers_builds_them_are_far_off():
    """The failure the exact angles avoid: float32 m·θ (transformers' tables) at 32k and 128k."""
    rope = build(head_dim=128)
    for position, at_least in ((32767, 1e-3), (131071, 5e-3)):
        positions = torch.arange(position - 63, position + 1)
        true_cos, _ = _truth(positions.tolist()[-8:], rope.inv_freq.numpy())
        inv32 = 1.0 / (10000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
        naive = torch.cos(positions[:, None].float() * inv32)
        exact = rope.cos_sin(positions)[0]
        assert (naive.double() - rope.cos_sin(positions, torch.float64)[0]).abs().max() > at_least
        assert np.abs(exact[-8:].numpy() - true_cos).max() <= 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_input_never_changes_the_position(dtype):
    rope = build(head_dim=64)
    torch.manual_seed(0)
    x = torch.randn(1, 2, 1, 64, dtype=torch.float64)
    at = {p: rope(x.to(dtype), torch.tensor([p])).double() for p in (256, 257)}
    for p in (256, 257):
        want = torch.from_numpy(rope.reference(x.numpy(), np.array([p])))
        # cos/sin rounded to the dtype and the products in it: a few of its ulps
        assert (at[p] - want).abs().max() < 4 * float(torch.finfo(dtype).eps) * x.abs().max()
    # 257 rotates as 257 (the difference from 256 is as large as the reference's)
    ref_gap = np.abs(rope.reference(x.numpy(), np.array([257])) - rope.reference(x.numpy(), np.array([256]))).max()
    assert (at[257] - at[256]).abs().max() > 0.5 * ref_gap > 0.1


def test_cos_sin_is_unscaled_and_forward_carries_the_attention_factor():
    rope = build({"type": "yarn", "factor": 16, "original_max_positions": 64})
    assert rope.attention_factor == pytest.approx(0.1 * math.log(16) + 1)
    pos = torch.arange(50)
    cos, sin = rope.cos_sin(pos, torch.float64)
    torch.testing.assert_close(cos ** 2 + sin ** 2, torch.ones_like(cos), rtol=0, atol=1e-15)
    x = torch.randn(2, 3, 50, D, dtype=torch.float64)
    y = rope(x, pos)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1) * rope.attention_factor, rtol=1e-12, atol=0)


def test_inv_freq_is_float64_and_survives_dtype_moves():
    rope = build({"type": "llama3", "factor": 8, "original_max_positions": 64})
    want = rope.inv_freq.clone()
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        rope = rope.to(dtype)
        assert rope.inv_freq.dtype == torch.float64 and torch.equal(rope.inv_freq, want)
        assert rope.dtype == dtype
    rope.half()
    assert rope.inv_freq.dtype == torch.float64


# -- tables ---------------------------------------------------------------------------------------

def test_tables_grow_by_powers_of_two_per_device_and_dtype():
    rope = build(head_dim=16)
    x = torch.randn(1, 1, 5, 16)
    rope(x, torch.arange(5))
    rope(x.double(), torch.arange(5))
    keys = {(k[2], k[3]) for k in rope._tables}
    assert keys == {(torch.float32, 1.0), (torch.float64, 1.0)}
    assert all(t[0].shape[0] == rope_module.TABLE_MIN_POSITIONS for t in rope._tables.values())
    rope(x, torch.arange(1000, 1005))
    lengths = sorted(t[0].shape[0] for t in rope._tables.values())
    assert lengths == [256, 1024]
    rope.to(torch.float64)  # any move drops the tables
    assert rope._tables == {}


def test_table_and_direct_paths_agree_bit_for_bit(monkeypatch):
    torch.manual_seed(0)
    for name in ("none", "yarn", "longrope"):
        x = torch.randn(2, 2, 40, D)
        positions = torch.randint(0, 3000, (2, 40))
        cached = build(SCALINGS[name])(x, positions)
        with monkeypatch.context() as m:
            m.setattr(rope_module, "TABLE_MAX_ELEMENTS", 0)
            direct_rope = build(SCALINGS[name])
            direct = direct_rope(x, positions)
            assert direct_rope._tables == {}
        assert torch.equal(cached, direct)


def test_positions_past_the_table_limit_are_computed_directly():
    rope = build(head_dim=64)
    positions = torch.tensor([0, TWO24 - 1])
    cos, _ = rope.cos_sin(positions)
    assert all(t[0].numel() <= rope_module.TABLE_MAX_ELEMENTS for t in rope._tables.values())
    assert rope._tables == {}
    assert cos[1, 0] == pytest.approx(math.cos(TWO24 - 1), abs=1e-6)


# -- length-dependent scalings: the KV-cache policy -----------------------------------------------

@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_torch_frequencies_equal_the_numpy_rule(name):
    rope = build(SCALINGS[name])
    for length in (0, 1, ORIGINAL - 1, ORIGINAL, ORIGINAL + 1, 3 * ORIGINAL, 1000 * ORIGINAL):
        np.testing.assert_allclose(rope.frequencies(length).numpy(), rope.scaling.at(length), rtol=1e-14)


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_seen_length_only_grows_until_reset(name):
    rope = build(SCALINGS[name])
    short = torch.from_numpy(rope.scaling.at(ORIGINAL))
    x = torch.randn(1, 1, 1, D)
    rope(x, torch.tensor([3]))
    assert rope.seen_length == 4 and torch.equal(rope.frequencies(), short)
    rope(x, torch.tensor([5 * ORIGINAL]))
    long = torch.from_numpy(rope.scaling.at(5 * ORIGINAL + 1))
    assert rope.seen_length == 5 * ORIGINAL + 1 and torch.equal(rope.frequencies(), long)
    assert not torch.equal(long, short)
    # a later short call keeps the long frequencies (transformers would switch back)
    y = rope(x, torch.tensor([2]))
    assert rope.seen_length == 5 * ORIGINAL + 1
    want = torch.from_numpy(rope.reference(x.numpy(), np.array([2]))) if name == "longrope" else None
    fresh = build(SCALINGS[name])
    fresh(x, torch.tensor([5 * ORIGINAL]))
    assert torch.equal(y, fresh(x, torch.tensor([2])))
    if want is not None:  # the stateless reference uses the short table at length 3
        assert not torch.allclose(y.double(), want)
    rope.reset_length()
    assert rope.seen_length == 0 and torch.equal(rope.frequencies(), short)
    # cos_sin counts as a use too
    rope.cos_sin(torch.arange(2 * ORIGINAL))
    assert rope.seen_length == 2 * ORIGINAL


def _decode(rope, q, k, v):
    """One token at a time with a cache of rotated keys (the transformers pattern)."""
    keys, outs = [], []
    for t in range(q.shape[2]):
        pos = torch.tensor([t])
        keys.append(rope(k[:, :, t:t + 1], pos, role="key"))
        qt = rope(q[:, :, t:t + 1], pos, role="query")
        outs.append(F.scaled_dot_product_attention(qt, torch.cat(keys, 2), v[:, :, :t + 1]))
    return torch.cat(outs, 2)


def _qkv(length, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, length, D, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("name", list(SCALINGS))
def test_incremental_decoding_equals_the_full_pass_within_the_original_length(name):
    q, k, v = _qkv(ORIGINAL)
    full = posenc.attention(q, k, v, build(SCALINGS[name]), causal=True)
    torch.testing.assert_close(_decode(build(SCALINGS[name]), q, k, v), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", STATIC)
def test_incremental_decoding_equals_the_full_pass_at_every_length_for_static_scalings(name):
    q, k, v = _qkv(3 * ORIGINAL + 5)
    full = posenc.attention(q, k, v, build(SCALINGS[name]), causal=True)
    torch.testing.assert_close(_decode(build(SCALINGS[name]), q, k, v), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_length_dependent_scalings_past_the_original_length(name):
    """Documented: decoding with rotated cached keys differs from a full pass past L₀; keeping the
    keys unrotated and letting posenc.attention rotate them gives the full pass at every step."""
    length = 3 * ORIGINAL
    q, k, v = _qkv(length)
    full = posenc.attention(q, k, v, build(SCALINGS[name]), causal=True)
    rotated_cache = _decode(build(SCALINGS[name]), q, k, v)
    # a full pass of length L rotates every position (even those below L₀) with the frequencies at L;
    # decoding rotated each key with the frequencies current at its step
    assert (rotated_cache[:, :, ORIGINAL:] - full[:, :, ORIGINAL:]).abs().max() > 1e-3
    short = posenc.attention(q[:, :, :ORIGINAL], k[:, :, :ORIGINAL], v[:, :, :ORIGINAL], build(SCALINGS[name]),
                             causal=True)
    torch.testing.assert_close(rotated_cache[:, :, :ORIGINAL], short, rtol=1e-10, atol=1e-10)

    rope = build(SCALINGS[name])
    for t in (0, ORIGINAL - 1, ORIGINAL, length - 1):
        step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], rope, causal=True)
        prefix = posenc.attention(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], build(SCALINGS[name]),
                                  causal=True)
        torch.testing.assert_close(step, prefix[:, :, -1:], rtol=1e-10, atol=1e-10)
    assert rope.seen_length == length


def test_attention_rotates_keys_first_so_q_and_k_share_the_length():
    rope = build(SCALINGS["dynamic"])
    q, k, v = _qkv(4 * ORIGINAL)
    out = posenc.attention(q[:, :, :1], k, v, rope)  # one query at the last position, keys 0..L-1
    freq = rope.frequencies(4 * ORIGINAL)
    static = build(head_dim=D)
    static.register_buffer("inv_freq", freq.clone(), persistent=False)  # the same frequencies, frozen
    want = posenc.attention(q[:, :, :1], k, v, static)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


# -- xPos -----------------------------------------------------------------------------------------

def test_xpos_needs_a_role_and_other_scalings_accept_one():
    x = torch.randn(1, 1, 3, D)
    pos = torch.arange(3)
    with pytest.raises(ValueError, match="role='query' or role='key'"):
        build(SCALINGS["xpos"])(x, pos)
    with pytest.raises(ValueError, match="role must be one of"):
        build()(x, pos, role="value")
    plain = build(SCALINGS["yarn"])
    assert torch.equal(plain(x, pos, role="query"), plain(x, pos, role="key"))
    assert torch.equal(plain(x, pos, role="query"), plain(x, pos))


def test_xpos_matches_its_reference_for_both_roles():
    rope = build(SCALINGS["xpos"], layout="interleaved")
    x = torch.randn(2, 2, 30, D, dtype=torch.float64)
    pos = torch.randint(0, 500, (2, 30))
    for role in ("query", "key"):
        want = rope.reference(x.numpy(), pos.numpy(), role=role)
        np.testing.assert_allclose(rope(x, pos, role=role).numpy(), want, rtol=1e-12, atol=1e-12)


def test_xpos_scores_are_relative_and_decay_with_distance():
    rope = build(SCALINGS["xpos"])
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, D, dtype=torch.float64).unbind(0)

    def score(m, n):
        return (rope(q, torch.tensor([m]), role="query") * rope(k, torch.tensor([n]), role="key")).sum().item()

    for delta in (0, 1, 7, 100):
        scores = [score(n + delta, n) for n in (0, 13, 250, 900)]
        assert max(scores) - min(scores) < 1e-9 * max(1.0, abs(scores[0]))
    # the envelope: per pair, |q_i'|·|k_i'| = ζ_i^((m−n)/scale_base)·|q_i|·|k_i|, shrinking with m − n
    a, b = slice(0, D // 2), slice(D // 2, D)  # the pairs of the half layout

    def envelope(m, n):
        qq, kk = rope(q, torch.tensor([m]), role="query"), rope(k, torch.tensor([n]), role="key")
        return torch.hypot(qq[..., a], qq[..., b]) * torch.hypot(kk[..., a], kk[..., b])

    env = torch.stack([envelope(10 + d, 10) for d in (0, 1, 8, 64, 512)]).flatten(1)
    assert torch.all(env[1:] < env[:-1])
    torch.testing.assert_close(env[0], (torch.hypot(q[..., a], q[..., b]) * torch.hypot(k[..., a], k[..., b])).flatten())
    # and posenc.attention passes the roles
    qs, ks, vs = _qkv(20)
    out = posenc.attention(qs, ks, vs, rope, causal=True)
    pos = torch.arange(20)
    want = F.scaled_dot_product_attention(rope(qs, pos, role="query"), rope(ks, pos, role="key"), vs, is_causal=True)
    torch.testing.assert_close(out, want)


# -- torch.compile --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, backend", [("yarn", "aot_eager"), ("dynamic", "aot_eager"), ("longrope", "aot_eager"),
                                           ("xpos", "aot_eager")])
def test_runs_under_torch_compile_fullgraph(name, backend):
    torch._dynamo.reset()
    compiled_rope, eager_rope = build(SCALINGS[name]), build(SCALINGS[name])

    def rotate(x, positions):
        return compiled_rope(x, positions, role="key")

    fn = torch.compile(rotate, fullgraph=True, backend=backend)
    x = torch.randn(1, 2, 3 * ORIGINAL, D)
    lengths = [ORIGINAL // 2, 3 * ORIGINAL] if name in ("dynamic", "longrope") else [3 * ORIGINAL]
    for length in lengths:
        pos = torch.arange(length)
        # the same float64 angles; the compiled rotation may fuse multiply-adds (a float32 ulp)
        torch.testing.assert_close(fn(x[:, :, :length], pos), eager_rope(x[:, :, :length], pos, role="key"),
                                   rtol=4 * EPS32, atol=4 * EPS32)
    assert compiled_rope._tables == {}  # computed directly under compile
    if name in ("dynamic", "longrope"):
        assert compiled_rope.seen_length == eager_rope.seen_length == 3 * ORIGINAL
