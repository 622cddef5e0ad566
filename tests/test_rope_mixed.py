"""RoPE-Mixed (Heo et al. 2024): the paper's formula and initialisation, relative in 2D, gradients
reaching the frequencies. (Reference parity at every dtype is in test_schemes.py.)"""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import reference as ref
from conftest import assert_close


def _build(head_dim=16, num_heads=3, seed=0, **kw):
    torch.manual_seed(seed)
    return posenc.build({"scheme": "rope_mixed", "head_dim": head_dim, "num_heads": num_heads, **kw})


def _paper_rotate(x, freqs_paper, end_x, end_y):
    """naver-ai/rope-vit: compute_mixed_cis + apply_rotary_emb, written out (t_x the column)."""
    t = torch.arange(end_x * end_y, dtype=torch.float64)
    t_x, t_y = t % end_x, torch.div(t, end_x, rounding_mode="floor")
    fx = t_x.unsqueeze(-1).unsqueeze(0) * freqs_paper[0].unsqueeze(1)  # (H, N, D/2)
    fy = t_y.unsqueeze(-1).unsqueeze(0) * freqs_paper[1].unsqueeze(1)
    cis = torch.polar(torch.ones_like(fx), fx + fy)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis).flatten(-2)


def test_rope_mixed_is_the_papers_rotation_on_a_patch_grid():
    m = _build().double()
    h, w = 3, 5
    x = torch.randn(2, 3, h * w, 16, dtype=torch.float64)
    ours = m(x, posenc.grid_positions((h, w)))
    paper_freqs = m.freqs.detach().flip(0)  # the paper's order: (column, row)
    torch.testing.assert_close(ours, _paper_rotate(x, paper_freqs, w, h), rtol=0, atol=1e-12)


def test_rope_mixed_init_is_init_random_2d_freqs():
    m = _build(head_dim=32, num_heads=4, base=10.0)
    f = m.freqs.detach().double()  # (2, H, 16)
    mag = 10.0 ** (-torch.arange(0, 32, 4, dtype=torch.float64) / 32)  # (8,)
    norms = f.norm(dim=0)  # (H, 16): each pair's frequency vector has the paper's magnitude
    torch.testing.assert_close(norms, torch.cat([mag, mag]).expand(4, 16), rtol=1e-6, atol=0)
    first, second = f[:, :, :8], f[:, :, 8:]  # the two halves are perpendicular, per head
    assert (first * second).sum(0).abs().max() < 1e-6
    alpha = torch.atan2(f[0, :, 0], f[1, :, 0])  # row = sin α, col = cos α: one random angle per head
    assert len(set(alpha.round(decimals=4).tolist())) == 4


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_mixed_scores_are_relative_in_2d(layout):
    m = _build(layout=layout).double()
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 3, 20, 16, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.randint(0, 30, (20, 2), generator=g).double() + 0.25
    scores = m(q, pos) @ m(k, pos).transpose(-1, -2)
    shift = torch.tensor([11.5, 400.0], dtype=torch.float64)
    torch.testing.assert_close(m(q, pos + shift) @ m(k, pos + shift).transpose(-1, -2), scores, rtol=0, atol=1e-9)
    swapped = pos.flip(-1)  # the axes are not interchangeable: the pairs mix them with learned weights
    assert (m(q, swapped) @ m(k, swapped).transpose(-1, -2) - scores).abs().max() > 1e-3


def test_gradients_reach_the_frequencies():
    m = _build().double()
    x = torch.randn(2, 3, 12, 16, dtype=torch.float64)
    pos = posenc.grid_positions((3, 4), offset=2)
    w = torch.randn(2, 3, 12, 16, dtype=torch.float64)
    (m(x, pos) * w).sum().backward()
    got = m.freqs.grad.clone()
    assert got.abs().max() > 0
    # the same loss with the plain angle formula, differentiated by autograd independently
    f = m.freqs.detach().clone().requires_grad_()
    phi = (pos[:, 0, None].double() * f[0][:, None, :] + pos[:, 1, None].double() * f[1][:, None, :])  # (H, L, R)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack((a * phi.cos() - b * phi.sin(), a * phi.sin() + b * phi.cos()), dim=-1).flatten(-2)
    (out * w).sum().backward()
    torch.testing.assert_close(got, f.grad, rtol=1e-9, atol=1e-12)


def test_rope_mixed_reference_takes_the_frequencies_as_an_argument():
    m = _build()
    pos = torch.tensor([[0.5, 1.0], [2.0, 3.5]])
    x = torch.randn(1, 3, 2, 16)
    freqs = m.freqs.detach().double().numpy()
    assert_close(m(x, pos), ref.rope_mixed(x.double().numpy(), pos.numpy(), freqs), what="rope_mixed")
    other = ref.rope_mixed(x.double().numpy(), pos.numpy(), freqs * 2)
    assert abs(other - ref.rope_mixed(x.double().numpy(), pos.numpy(), freqs)).max() > 1e-3


@pytest.mark.parametrize("spec, error, text", [
    ({"head_dim": 18}, ValueError, "head_dim must be divisible by 4"),
    ({"axes": 3}, ValueError, "axes must be <= 2, got 3"),
    ({"base": 0}, ValueError, "base must be > 0.0"),
    ({"layout": "neox"}, ValueError, "layout must be one of 'half', 'interleaved'"),
])
def test_rope_mixed_refuses_bad_specs(spec, error, text):
    with pytest.raises(error, match=text):
        posenc.build({"scheme": "rope_mixed", "head_dim": 16, "num_heads": 2, **spec})
    m = _build()
    with pytest.raises(ValueError, match=r"x must have num_heads=3 heads"):
        m(torch.randn(1, 2, 4, 16), posenc.grid_positions((2, 2)))
    with pytest.raises(ValueError, match=r"positions must have shape \[L, 2\] or \[B, L, 2\] \(axes=2\)"):
        m(torch.randn(1, 3, 4, 16), torch.arange(4))
    assert math.isfinite(float(m(torch.randn(1, 3, 4, 16), posenc.grid_positions((2, 2))).detach().sum()))
