"""DINOv3's rotary (``dinov3``): patch coordinates in [−1, 1], base 100, training-time
augmentations drawn from an explicit generator; against the float64 reference, timm's
``RotaryEmbeddingDinoV3`` (re-stated below: timm cannot be installed beside the pinned torch) and
transformers' ``dinov3_vit`` rotary module, with parameters drawn at random."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.reference.dinov3 import NORMALIZE
from conftest import assert_close


# -- timm (huggingface/pytorch-image-models, timm/layers/pos_embed_sincos.py), re-stated -------------

def _timm_make_coords(height, width, normalize_coords="separate"):
    """timm's ``make_coords_dinov3`` (grid_offset 0, "ij" indexing)."""
    coords_h = torch.arange(0.5, height, dtype=torch.float32)
    coords_w = torch.arange(0.5, width, dtype=torch.float32)
    h_denom, w_denom = {"max": (max(height, width),) * 2, "min": (min(height, width),) * 2,
                        "separate": (height, width)}[normalize_coords]
    coords_h, coords_w = coords_h / float(h_denom), coords_w / float(w_denom)
    coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)
    return 2.0 * coords - 1.0


def _timm_apply_coord_augs(coords, shift, jitter, rescale):
    """timm's ``RotaryEmbeddingDinoV3._apply_coord_augs`` in training mode (torch's global generator)."""
    if shift is not None:
        coords = coords + torch.empty(2, dtype=coords.dtype).uniform_(-shift, shift)[None, :]
    if jitter is not None:
        jitter_max = math.log(jitter)
        coords = coords * torch.empty(2, dtype=coords.dtype).uniform_(-jitter_max, jitter_max).exp()[None, :]
    if rescale is not None:
        rescale_max = math.log(rescale)
        coords = coords * torch.empty(1, dtype=coords.dtype).uniform_(-rescale_max, rescale_max).exp()
    return coords


def _timm_sin_cos(coords, dim, temperature, rotate_half):
    """timm's ``_compute_periods`` + ``_get_pos_embed_from_coords``: ``(sin, cos)`` each ``(HW, dim)``."""
    periods = temperature ** (2.0 * torch.arange(dim // 4, dtype=torch.float32) / (dim // 2))
    angles = (2 * math.pi * coords[:, :, None] / periods[None, None, :]).flatten(1)
    angles = angles.tile(2) if rotate_half else angles.repeat_interleave(2, dim=-1)
    return torch.sin(angles), torch.cos(angles)


def _timm_rotate(x, sin, cos, rotate_half):
    """timm's ``apply_rot_embed_cat``: ``x·cos + rot(x)·sin`` with rot = rotate_half or the interleaved one."""
    if rotate_half:
        rot = torch.cat([-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]], dim=-1)
    else:
        rot = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape(x.shape)
    return x * cos + rot * sin


def _draw(seed):
    rng = random.Random(seed)
    return dict(head_dim=4 * rng.randint(1, 12), base=rng.choice([100.0, 10.0, 1000.0, rng.uniform(5, 500)]),
                h=rng.randint(1, 9), w=rng.randint(1, 9), normalize=rng.choice(NORMALIZE),
                shift=rng.choice([None, rng.uniform(0, 1)]), jitter=rng.choice([None, rng.uniform(1, 3)]),
                rescale=rng.choice([None, rng.uniform(1, 3)]), layout=rng.choice(["half", "interleaved"]))


@pytest.mark.parametrize("seed", range(6))
def test_dinov3_equals_timm_with_augmentations_off_and_on(seed):
    p = _draw(seed)
    m = posenc.build({"scheme": "dinov3", "head_dim": p["head_dim"], "base": p["base"], "layout": p["layout"],
                      "normalize": p["normalize"], "shift": p["shift"], "jitter": p["jitter"], "rescale": p["rescale"]})
    half = p["layout"] == "half"
    coords = m.coordinates(p["h"], p["w"])
    assert_close(_timm_make_coords(p["h"], p["w"], p["normalize"]), coords.numpy(), dtype=torch.float32)
    x = torch.randn(2, 3, p["h"] * p["w"], p["head_dim"])
    for train in (False, True):
        m.train(train)
        torch.manual_seed(seed)
        theirs_coords = _timm_make_coords(p["h"], p["w"], p["normalize"])
        if train:
            theirs_coords = _timm_apply_coord_augs(theirs_coords, p["shift"], p["jitter"], p["rescale"])
        sin, cos = _timm_sin_cos(theirs_coords, p["head_dim"], p["base"], half)
        ours_coords = m.augment(coords, generator=torch.Generator().manual_seed(seed))
        assert_close(theirs_coords, ours_coords.numpy(), dtype=torch.float32, magnitude=ours_coords.abs().max() + 1)
        # timm's float32 angles reach 2π·|c|: their rounding, not ours, bounds the difference
        mag = 2 * math.pi * (float(ours_coords.abs().max()) + 1) * float(x.abs().max())
        assert_close(_timm_rotate(x, sin, cos, half), m(x, ours_coords.float()).double().numpy(),
                     dtype=torch.float32, magnitude=mag, what=f"timm {p}")


@pytest.mark.parametrize("seed", range(4))
def test_dinov3_equals_transformers_rope_module(seed):
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTRopePositionEmbedding, rotate_half

    p = _draw(100 + seed)
    heads = random.Random(seed).randint(1, 4)
    patch = 4
    config = DINOv3ViTConfig(hidden_size=heads * p["head_dim"], num_attention_heads=heads, patch_size=patch,
                             image_size=patch * 8, rope_theta=p["base"], pos_embed_shift=p["shift"],
                             pos_embed_jitter=p["jitter"], pos_embed_rescale=p["rescale"])
    theirs = DINOv3ViTRopePositionEmbedding(config)
    m = posenc.build({"scheme": "dinov3", "head_dim": p["head_dim"], "base": p["base"], "shift": p["shift"],
                      "jitter": p["jitter"], "rescale": p["rescale"]})
    pixels = torch.zeros(1, 3, patch * p["h"], patch * p["w"])
    x = torch.randn(1, heads, p["h"] * p["w"], p["head_dim"])
    for train in (False, True):
        theirs.train(train)
        m.train(train)
        torch.manual_seed(seed)
        cos, sin = theirs(pixels)  # (HW, D) each, float32
        coords = m.augment(m.coordinates(p["h"], p["w"]), generator=torch.Generator().manual_seed(seed))
        ours_cos, ours_sin = m.cos_sin(coords, dtype=torch.float64)  # (HW, D/2)
        mag = 2 * math.pi * (float(coords.abs().max()) + 1)
        assert_close(cos, ours_cos.tile(2).numpy(), dtype=torch.float32, magnitude=mag, what="cos")
        assert_close(sin, ours_sin.tile(2).numpy(), dtype=torch.float32, magnitude=mag, what="sin")
        assert_close(x * cos + rotate_half(x) * sin, m(x, coords).double().numpy(), dtype=torch.float32,
                     magnitude=mag * float(x.abs().max()), what="rotated")


# -- the reference -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_dinov3_matches_reference_on_augmented_coordinates(dtype, layout):
    m = posenc.build({"scheme": "dinov3", "head_dim": 12, "layout": layout, "shift": 0.5, "jitter": 2.0,
                      "rescale": 2.0}).train()
    g = torch.Generator().manual_seed(3)
    coords = torch.stack([m.augment(m.coordinates(3, 7), generator=g) for _ in range(2)])  # (B=2, 21, 2)
    x = torch.randn(2, 3, 21, 12, dtype=torch.float64)
    out = m.to(dtype)(x.to(dtype), coords)
    assert out.dtype == dtype
    assert_close(out, ref.dinov3(x.numpy(), coords.numpy(), layout=layout), dtype=dtype, magnitude=float(x.abs().max()))


def test_dinov3_draws_are_the_references_augmentation_and_reproducible():
    m = posenc.build({"scheme": "dinov3", "head_dim": 8, "shift": 0.2, "jitter": 1.5, "rescale": 3.0}).train()
    coords = m.coordinates(4, 5)
    d = m.draws(generator=torch.Generator().manual_seed(7))
    assert d["shift"].abs().max() <= 0.2 and (d["jitter"].log().abs() <= math.log(1.5) + 1e-7).all()
    expected = ref.dinov3_augment(coords.numpy(), **{k: v.numpy() for k, v in d.items()})
    ours = m.augment(coords, generator=torch.Generator().manual_seed(7))
    np.testing.assert_array_equal(ours.numpy(), expected)
    assert torch.equal(ours, m.augment(coords, generator=torch.Generator().manual_seed(7)))
    assert torch.equal(m.eval().augment(coords, generator=torch.Generator().manual_seed(7)), coords)


def test_dinov3_coordinates_are_patch_centres_in_minus_one_one():
    c = ref.dinov3_coordinates(2, 4)
    np.testing.assert_array_equal(c[:4], [[-0.5, -0.75], [-0.5, -0.25], [-0.5, 0.25], [-0.5, 0.75]])
    assert np.abs(ref.dinov3_coordinates(3, 6, normalize="max")).max() < 1


def test_dinov3_gradient_is_the_inverse_rotation():
    m = posenc.build({"scheme": "dinov3", "head_dim": 8})
    coords = m.coordinates(3, 3)
    x = torch.randn(1, 2, 9, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(1, 2, 9, 8, dtype=torch.float64)
    (m(x, coords) * w).sum().backward()
    assert_close(x.grad, ref.dinov3(w.numpy(), -coords.numpy()), dtype=torch.float64)  # R(c)ᵀ = R(−c)


def test_dinov3_scores_depend_only_on_coordinate_differences():
    m = posenc.build({"scheme": "dinov3", "head_dim": 16})
    q, k = torch.randn(2, 1, 1, 6, 16, dtype=torch.float64)
    c = torch.rand(6, 2, dtype=torch.float64) * 2 - 1
    s = m(q, c) @ m(k, c).transpose(-1, -2)
    torch.testing.assert_close(s, m(q, c + 0.37) @ m(k, c + 0.37).transpose(-1, -2), rtol=0, atol=1e-12)


def test_dinov3_refuses_bad_parameters_and_coordinates():
    for spec, word in (({"head_dim": 6}, "head_dim"), ({"head_dim": 8, "jitter": 0.5}, "jitter"),
                       ({"head_dim": 8, "shift": -1}, "shift"), ({"head_dim": 8, "normalize": "mean"}, "normalize"),
                       ({"head_dim": 8, "base": 0}, "base")):
        with pytest.raises(ValueError, match=word):
            posenc.build({"scheme": "dinov3", **spec})
    m = posenc.build({"scheme": "dinov3", "head_dim": 8})
    with pytest.raises(ValueError, match="finite"):
        m(torch.randn(1, 1, 2, 8), torch.tensor([[0.0, float("nan")], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="positions"):
        m(torch.randn(1, 1, 2, 8), torch.zeros(2, 3))
