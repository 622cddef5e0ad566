"""LieRE (``liere``): rotations as the exponential of learned skew-symmetric generators per axis,
against the float64 reference (its own float64 matrix exponential) and the official code
(StanfordMIMI/LieRE, ``models/rope_vit.py``, re-stated below: it needs PyTorch Lightning and a
ViT), with parameters drawn at random; gradients; cached decoding."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
posenc.schemes()  # the registry loads in its own order before a scheme module is imported directly
from posenc.encodings.liere import liere_positions  # noqa: E402
from conftest import assert_close, assert_directional_gradients


# -- the official code, re-stated ------------------------------------------------------------------

def _official_positions(steps_per_axis, expected_steps_per_axis):
    """``PositionEncoderBase.forward``: ``(1, N, A)`` float32, ``linspace(0, s/t, s)`` per axis."""
    scales = [s / t for s, t in zip(steps_per_axis, expected_steps_per_axis)]
    return torch.cartesian_prod(*(torch.linspace(0, c, s) for c, s in zip(scales, steps_per_axis))).reshape(
        1, -1, len(steps_per_axis))


def _official_rotations(raw, positions, cls_token=True):
    """``LierePositionEncoder.forward`` ("learned" phase): raw ``(A, layers=1, G·n, b, b)``,
    positions ``(1, N, A)`` -> ``(1, N + cls, 1, G·n, b, b)``."""
    upper_triangle = torch.triu(raw, diagonal=1) - 0.5
    bases = upper_triangle - torch.transpose(upper_triangle, -1, -2)
    generator_pos = torch.sum(positions.reshape(list(positions.shape) + [1] * 4) * bases, dim=-5)
    if cls_token:
        generator_pos = torch.cat((torch.zeros_like(generator_pos[:, 0, ...]).unsqueeze(1), generator_pos), dim=1)
    return torch.matrix_exp(generator_pos.to(dtype=torch.float32))


def _official_apply(x, positional_transforms, heads_rotations):
    """``FlexibleAttention.apply_transforms`` (without its head-size-64 assertion)."""
    generator_dim = positional_transforms.shape[-1]
    batch_size, num_heads, num_tokens, head_size = x.shape
    num_rotators = positional_transforms.shape[-3] // heads_rotations
    rotatable_dim = generator_dim * num_rotators
    states_split = x[..., :rotatable_dim].reshape(batch_size, num_heads, num_tokens, num_rotators, generator_dim, 1)
    transforms = positional_transforms.squeeze(2).view(1, num_tokens, heads_rotations, num_rotators, generator_dim,
                                                       generator_dim).transpose(1, 2)
    rotated = torch.matmul(transforms, states_split)
    return torch.cat([rotated.flatten(start_dim=-3), x[..., rotatable_dim:]], axis=-1)


@pytest.mark.parametrize("seed", range(6))
def test_liere_equals_the_official_code(seed):
    rng = random.Random(seed)
    axes = rng.choice([2, 2, 3])
    heads = rng.randint(1, 3)
    head_dim = rng.randint(2, 12)
    block = rng.choice([head_dim, 2, rng.randint(2, head_dim)])
    per_head = rng.random() < 0.5
    trained = [rng.randint(2, 6) for _ in range(axes)]
    steps = [t if rng.random() < 0.5 else rng.randint(1, 7) for t in trained]  # the training grid, or another one
    torch.manual_seed(seed)
    m = posenc.build({"scheme": "liere", "head_dim": head_dim, "axes": axes, "grid": trained, "block_dim": block,
                      "per_head": per_head, "num_heads": heads})
    raw = m.generators.detach().reshape(axes, 1, -1, block, block)  # the official layout: (A, layers, G·n, b, b)
    theirs_rot = _official_rotations(raw, _official_positions(steps, trained))
    n = math.prod(steps) + 1
    x = torch.randn(2, heads, n, head_dim)
    theirs = _official_apply(x, theirs_rot, heads if per_head else 1)
    pos = torch.cat([torch.zeros(1, axes, dtype=torch.float64), liere_positions(steps, trained)])  # CLS at 0: R = I
    ours = m(x.double(), pos)
    # float32 matrix_exp of Σ u·B (entries up to 2π·Σ_a u_a): its rounding bounds the difference
    mag = float(x.abs().max()) * block * (1 + 2 * math.pi * sum(s / t for s, t in zip(steps, trained)))
    assert_close(theirs, ours.detach().numpy(), dtype=torch.float32, magnitude=mag,
                 what=f"axes={axes} D={head_dim} b={block} per_head={per_head} grid={trained} steps={steps}")


# -- the reference ------------------------------------------------------------------------------

def test_expm_skew_is_orthogonal_and_equals_the_eigendecomposition():
    g = np.random.default_rng(0)
    a = g.normal(size=(3, 7, 7)) * 4
    skew = a - np.swapaxes(a, -1, -2)
    r = ref.expm_skew(skew)
    np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(7), r.shape), atol=1e-13)
    w, v = np.linalg.eigh(1j * skew)  # iS is Hermitian: exp(S) = V exp(−iΛ) Vᴴ
    eig = ((v * np.exp(-1j * w)[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))).real
    np.testing.assert_allclose(r, eig, atol=1e-12)
    np.testing.assert_array_equal(ref.expm_skew(np.zeros((2, 2))), np.eye(2))


def test_liere_with_2x2_blocks_is_a_rotation_by_the_summed_angles():
    torch.manual_seed(1)
    m = posenc.build({"scheme": "liere", "head_dim": 6, "axes": 2, "grid": [5, 9], "block_dim": 2}).double()
    pos = torch.tensor([[1.0, 3.0], [2.5, 0.0]], dtype=torch.float64)
    b01 = torch.triu(m.generators.detach().double(), 1)[:, 0, :, 0, 1]  # (A, n): each block's angle per unit
    angle = pos[:, 0:1] / 4 * b01[0] + pos[:, 1:2] / 8 * b01[1]  # (L, n): u_a = p_a / (g_a − 1)
    rot = m.rotations(pos)[:, 0]  # (L, n, 2, 2)
    torch.testing.assert_close(rot[..., 0, 0], torch.cos(angle), rtol=0, atol=1e-14)
    torch.testing.assert_close(rot[..., 0, 1], torch.sin(angle), rtol=0, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_liere_matches_reference_with_blocks_leftover_dims_and_per_head(dtype):
    torch.manual_seed(2)
    m = posenc.build({"scheme": "liere", "head_dim": 11, "axes": 3, "grid": [3, 4, 5], "block_dim": 4,
                      "per_head": True, "num_heads": 3})  # two 4×4 blocks, three dims pass through
    pos = torch.rand(2, 13, 3, dtype=torch.float64) * 6  # (B, L, 3): real, odd length, batched
    x = torch.randn(2, 3, 13, 11, dtype=torch.float64)
    expected = ref.liere(x.numpy(), pos.numpy(), m.generators.detach().double().numpy(), [3, 4, 5])
    out = m.to(dtype)(x.to(dtype), pos)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out[..., 8:].detach().double().numpy(), x[..., 8:].to(dtype).double().numpy())
    # a rounded dtype: R's entries (at most 1) and x rounded; float64: exp's conditioning, ‖Σ u_a·B_a‖ (entries < 2π)
    conditioning = 1 + 2 * math.pi * sum(6 / (g - 1) for g in (3, 4, 5)) if dtype == torch.float64 else 1
    assert_close(out, expected, dtype=dtype, magnitude=4 * float(x.abs().max()) * conditioning)


def test_liere_gradients_reach_the_generators_and_the_input():
    torch.manual_seed(3)
    m = posenc.build({"scheme": "liere", "head_dim": 4, "axes": 2, "grid": [3, 3]}).double()
    pos = posenc.grid_positions((2, 2)).double()
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    (m(x, pos) * w).sum().backward()
    assert m.generators.grad.tril().abs().max() == 0  # only the strict upper triangle is read

    def loss():  # the float64 reference of the same scalar
        return float((ref.liere(x.detach().numpy(), pos.numpy(), m.generators.detach().numpy(), [3, 3]) * w.numpy()).sum())

    assert_directional_gradients({"x": x, "generators": m.generators}, loss, seed=0)


def test_liere_at_zero_is_the_identity_and_decoding_rotates_each_token_alone():
    torch.manual_seed(4)
    m = posenc.build({"scheme": "liere", "head_dim": 8, "axes": 2}).double()
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    assert torch.equal(m(x[:, :, :1], torch.zeros(1, 2, dtype=torch.float64)), x[:, :, :1])
    pos = posenc.grid_positions((1, 5)).double()
    full = m(x, pos)
    steps = torch.cat([m(x[:, :, i:i + 1], pos[i:i + 1]) for i in range(5)], dim=2)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-14)


def test_liere_refuses_bad_parameters():
    for spec, word in (({"grid": [14]}, "grid"), ({"grid": [14, 1]}, r"grid\[1\]"), ({"block_dim": 1}, "block_dim"),
                       ({"block_dim": 9}, "block_dim"), ({"per_head": True}, "num_heads"), ({"axes": 0}, "axes")):
        with pytest.raises((ValueError, TypeError), match=word):
            posenc.build({"scheme": "liere", "head_dim": 8, **spec})
    m = posenc.build({"scheme": "liere", "head_dim": 8, "per_head": True, "num_heads": 2})
    with pytest.raises(ValueError, match="num_heads=2"):
        m(torch.randn(1, 3, 2, 8), torch.zeros(2, 2))
    assert not hasattr(m, "cos_sin")
