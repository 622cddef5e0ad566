"""HiRoPE (``hirope``): RoPE's pairs split between token and higher-level positions, with a window.
The module against its float64 reference (dtypes, odd lengths, offsets, batches, real positions),
the formula re-stated here with complex numbers, plain ``rope`` recovered (all pairs on the token,
a window past every token, levels equal to tokens), zero-shot on a ``rope`` model's q and k,
positions from ``segment_positions``, cached decoding equal to recomputing, gradients, bad input.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import posenc
from conftest import DTYPES, assert_close

CODE = b"def f(x):\n    y = x + 1\n    return y\n\n\nclass A:\n    def g(self):\n        pass\n"


def line_positions(code: bytes, state=None) -> tuple[torch.Tensor, object]:
    """``(line, token)`` positions of the bytes of ``code``: lines from ``segment_positions``, tokens by index."""
    seg, state = posenc.segment_positions(code, [b"\n"], state=state)
    return seg[:, 0], state


def restated(x: np.ndarray, level: np.ndarray, token: np.ndarray, *, base: float, token_dims: int,
             window: int) -> np.ndarray:
    """The paper's split written out with complex numbers ("half" layout): pair ``j`` is ``x_j + i·x_{j+R}``,
    turned by ``p_j·θ_j`` with ``p_j`` the token position for ``j < token_dims/2`` or inside the window,
    the level position otherwise."""
    d = x.shape[-1]
    r = d // 2
    theta = base ** (-2.0 * np.arange(r) / d)
    out = np.empty_like(x)
    for j in range(r):
        p = np.where((j < token_dims // 2) | (token < window), token, level).astype(np.float64)
        z = (x[..., j] + 1j * x[..., j + r]) * np.exp(1j * p * theta[j])
        out[..., j], out[..., j + r] = z.real, z.imag
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("length,offset", [(1, 0), (37, 0), (217, 3000)])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_matches_its_reference(dtype, length, offset, layout):
    rng = random.Random(length)
    m = posenc.build({"scheme": "hirope", "head_dim": 16, "window": rng.randint(0, length),
                      "token_dims": 2 * rng.randint(0, 8), "layout": layout}).to(dtype)
    token = torch.arange(length) + offset
    level = torch.tensor(sorted(rng.randint(0, length // 5 + 1) for _ in range(length)))
    p = torch.stack([level, token], -1)
    x = torch.randn(2, 3, length, 16).to(dtype)
    y = m(x, p)
    assert y.dtype == dtype
    assert_close(y, m.reference(x.double().numpy(), p.numpy()), what=f"hirope {dtype}")
    pb = torch.stack([p, p + 7])  # (2, L, 2) batched, different rows
    assert_close(m(x, pb), m.reference(x.double().numpy(), pb.numpy()), what="batched")


def test_reference_is_the_formula_restated():
    rng = np.random.default_rng(0)
    for window, token_dims in [(0, 8), (5, 4), (40, 10), (3, 0)]:
        m = posenc.build({"scheme": "hirope", "head_dim": 20, "base": 500.0, "token_dims": token_dims,
                          "window": window})
        token = np.arange(33) + 2
        level = np.sort(rng.integers(0, 6, 33))
        x = rng.standard_normal((2, 33, 20))
        got = m.reference(x, np.stack([level, token], -1))
        np.testing.assert_allclose(got, restated(x, level, token, base=500.0, token_dims=token_dims, window=window),
                                   atol=1e-12)
        torch_got = m.double()(torch.from_numpy(x)[None], torch.from_numpy(np.stack([level, token], -1)))
        np.testing.assert_allclose(torch_got[0].numpy(), got, atol=1e-12)


def test_real_positions_are_rotated_exactly():
    m = posenc.build({"scheme": "hirope", "head_dim": 8, "window": 2}).double()
    p = torch.tensor([[0.0, 0.5], [0.25, 2.5], [1.5, 7.25]], dtype=torch.float64)
    x = torch.randn(1, 1, 3, 8, dtype=torch.float64)
    np.testing.assert_allclose(m(x, p).numpy(), m.reference(x.numpy(), p.numpy()), atol=1e-14)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_plain_rope_when_every_pair_reads_the_token_or_the_window_covers_it(layout):
    rope = posenc.build({"scheme": "rope", "head_dim": 16, "base": 10000.0, "layout": layout})
    level, _ = line_positions(CODE)
    token = torch.arange(len(CODE))
    p = torch.stack([level, token], -1)
    x = torch.randn(1, 2, len(CODE), 16)
    expected = rope(x, token)
    for spec in [{"token_dims": 16}, {"window": len(CODE)}, {"window": 10**12}]:
        h = posenc.build({"scheme": "hirope", "head_dim": 16, "layout": layout, **spec})
        torch.testing.assert_close(h(x, p), expected, rtol=0, atol=0)
    h = posenc.build({"scheme": "hirope", "head_dim": 16, "layout": layout})  # levels equal to tokens
    torch.testing.assert_close(h(x, torch.stack([token, token], -1)), expected, rtol=0, atol=0)
    assert not torch.allclose(h(x, p), expected)  # and with lines, not


def test_zero_shot_on_a_rope_model_low_pairs_see_the_line_distance():
    """With a rope model's q and k, past the window the low-frequency pairs score as RoPE at the
    line distance, the high-frequency ones as RoPE at the token distance."""
    rope = posenc.build({"scheme": "rope", "head_dim": 16}).double()
    h = posenc.build({"scheme": "hirope", "head_dim": 16, "token_dims": 8, "window": 4}).double()
    q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16, dtype=torch.float64)
    low = torch.zeros(16, dtype=torch.float64)
    low[4:8], low[12:16] = 1, 1  # "half" layout: pairs 4..7 are dims 4..7 and 12..15
    high = 1 - low
    for (lq, tq), (lk, tk) in [((9, 300), (2, 11)), ((3, 50), (3, 20))]:
        s = (h(q, torch.tensor([[lq, tq]])) * h(k, torch.tensor([[lk, tk]])))[0, 0, 0]
        by_line = (rope(q, torch.tensor([lq])) * rope(k, torch.tensor([lk])))[0, 0, 0]
        by_token = (rope(q, torch.tensor([tq])) * rope(k, torch.tensor([tk])))[0, 0, 0]
        torch.testing.assert_close((s * low).sum(), (by_line * low).sum(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close((s * high).sum(), (by_token * high).sum(), rtol=1e-12, atol=1e-12)


def test_attention_and_cached_decoding_equal_recomputing():
    h = posenc.build({"scheme": "hirope", "head_dim": 8, "window": 10}).double()
    n = len(CODE)
    level, _ = line_positions(CODE)
    whole = torch.stack([level, torch.arange(n)], -1)
    q, k, v = (torch.randn(1, 2, n, 8, dtype=torch.float64) for _ in range(3))
    full = posenc.attention(q, k, v, h, q_positions=whole, k_positions=whole, causal=True)
    lines, state = line_positions(CODE[:30])
    p = torch.stack([lines, torch.arange(30)], -1)
    for i in range(30, n, 4):
        step_lines, state = line_positions(CODE[i:i + 4], state)
        step = torch.stack([step_lines, torch.arange(i, i + len(step_lines))], -1)
        p = torch.cat([p, step])
        out = posenc.attention(q[:, :, i:p.shape[0]], k[:, :, :p.shape[0]], v[:, :, :p.shape[0]], h,
                               q_positions=step, k_positions=p, causal=True)
        torch.testing.assert_close(out, full[:, :, i:p.shape[0]], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(p, whole, rtol=0, atol=0)


def test_gradients():
    h = posenc.build({"scheme": "hirope", "head_dim": 8, "window": 3}).double()
    level, _ = line_positions(CODE[:25])
    p = torch.stack([level, torch.arange(25)], -1)
    q, k, v = (torch.randn(1, 2, 25, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: posenc.attention(q, k, v, h, q_positions=p, k_positions=p,
                                                                     causal=True), (q, k, v))


@pytest.mark.parametrize("spec,name", [
    ({"token_dims": 3}, "token_dims"), ({"token_dims": 18}, "token_dims"), ({"token_dims": -2}, "token_dims"),
    ({"window": -1}, "window"), ({"window": 1.5}, "window"), ({"head_dim": 7}, "head_dim"),
])
def test_bad_specs_are_refused_naming_the_parameter(spec, name):
    with pytest.raises((ValueError, TypeError), match=name):
        posenc.build({"scheme": "hirope", "head_dim": 16, **spec})


def test_bad_positions_are_refused_naming_them():
    h = posenc.build({"scheme": "hirope", "head_dim": 8})
    x = torch.randn(1, 1, 5, 8)
    with pytest.raises(ValueError, match=r"positions must have shape \[L, 2\]"):
        h(x, torch.arange(5))
    with pytest.raises(ValueError, match="positions must be non-negative"):
        h(x, torch.tensor([[0, 0], [0, 1], [0, 2], [-1, 3], [0, 4]]))
    with pytest.raises(ValueError, match="positions"):
        h(x, torch.zeros(4, 2, dtype=torch.long))
