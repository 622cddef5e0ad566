"""The image part's runs: the digits, the variants, scale augmentation, the test conditions.

Training (``augment``): ``none``, the digits as they are on the training grid; ``scale``, each
training image drawn anew at a random scale and offset on the training grid (the analogue of
RandomResizedCrop, as DeiT and Heo et al. train): the side's scale log-uniform in
``ImageSettings.scale_range``, below 1 a smaller digit at a random place, above 1 a random crop
of a larger one, by one ``affine_grid``/``grid_sample`` per batch (bilinear, zeros outside).

Test conditions (``condition``, every row): ``zoom``, the test image resampled (bilinear) to the
larger grid, so the digit spans more tokens (Heo et al.'s higher resolution at a fixed patch
size); ``canvas``, the digit at its trained size on a larger blank grid at a random offset (fixed
per image and grid), so only the positions grow.

Positions (``positions``, every row): ``integer``, the grid's integer positions, past the training
range on a larger grid (extrapolation); ``rescaled``, rescaled into the training range,
``p' = p·(g−1)/(s−1)`` (interpolation, as EVA-02 and timm do with ``ref_feat_shape``); for the
learned table ``rescaled`` is its resize (``posenc.interop.resize_grid``, bicubic) and ``integer``
does not apply (it has no rows past its grid). A scheme without real-valued positions is
evaluated at ``integer`` only; ``none`` (no position) at ``integer``, which it ignores.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F

import posenc
from posenc import registry
from posenc.extrapolate.profiles import ImageSettings
from posenc.extrapolate.vision import SetTransformer, accuracy_row, fit_seeds, pattern_cannot, right_or_wrong
from posenc.spec import fill_sizes

NUM_CLASSES = 10


# -- settings ------------------------------------------------------------------------------------

IMAGE_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "none": ({"scheme": "nope"}, "grid"),
    # init_std 0.5, near the sinusoidal table's rms (1/√2): at the default 0.02 the table had barely
    # grown after 300 steps (46% at 8×8, measured) where the other variants reached ~90%; at 0.5, 88% in 200
    "learned grid (resized)": ({"scheme": "learned", "init_std": 0.5}, "resize"),
    "2D sinusoidal": ({"scheme": "sinusoidal", "axes": 2}, "grid"),
    "axial RoPE": ({"scheme": "rope", "axes": 2}, "grid"),
    "RoPE-Mixed": ({"scheme": "rope_mixed", "axes": 2}, "grid"),
    # DINOv3 (Siméoni et al. 2025): patch centres in [−1, 1], base 100; its released config trains with the
    # coordinates rescaled by a log-uniform factor in [1/2, 2] per forward pass (transformers' pos_embed_rescale=2.0)
    "DINOv3 RoPE": ({"scheme": "dinov3"}, "coords"),
    "DINOv3 RoPE (rescale 2)": ({"scheme": "dinov3", "rescale": 2.0}, "coords"),
}
"""label -> (spec without sizes, how test positions are made: ``grid`` the grid's positions, integer or
rescaled (``position_modes``), ``resize`` the learned table, ``coords`` DINOv3's normalised
coordinates (``coordinate_positions``), augmented at training time as the spec says). Before the
image protocol a variant "2D sinusoidal (rescaled)" was its own run; its records still render."""
AUGMENTS = ("none", "scale")
CONDITIONS = ("zoom", "canvas")
POSITIONS = ("integer", "rescaled")


def image_spec(label: str, s: ImageSettings) -> tuple[dict[str, Any], str]:
    """The full spec of an image variant, sized for the model, and its test-position mode."""
    if label not in IMAGE_VARIANTS:
        raise ValueError(f"image variant must be one of {', '.join(map(repr, IMAGE_VARIANTS))}; got {label!r}")
    base, mode = IMAGE_VARIANTS[label]
    spec = dict(base)
    sizes = {"d_model": s.model.n_embd, "head_dim": s.model.head_dim, "num_heads": s.model.n_head,
             "grid": [s.grid, s.grid]}
    params = registry.get(spec["scheme"]).params
    spec.update({k: v for k, v in sizes.items() if k in params and k not in spec})
    return registry.normalize_spec(spec), mode


def image_items(settings: ImageSettings, schemes: list[Any] | None) -> list[tuple[str, dict[str, Any], str]]:
    """``(label, spec, positions mode)`` of the image runs: the profile's variants, or the user's
    schemes made two-axis where they can be (``axes=2``; a learned table becomes a grid). A scheme
    that cannot take grid positions keeps its spec and gets the mode ``cannot: REASON``, recorded
    as "cannot run" (never a crash)."""
    if not schemes:
        return [(label, *image_spec(label, settings)) for label in settings.variants]
    from posenc.spec import as_spec, label as spec_label

    out = []
    for text in schemes:
        if (cannot := pattern_cannot(text, "image")) is not None:
            out.append(cannot)
            continue
        given = as_spec(text)
        name = given["scheme"]
        label = name if isinstance(text, str) and text.strip() == name else str(text).strip()
        scheme = registry.get(name)
        params, table = scheme.params, scheme.cls.position_table  # a table is sized to the grid, then resized
        extra = {}
        if table and "grid" not in given:
            extra = {"grid": [settings.grid, settings.grid], "max_positions": None}
        elif "axes" in params and "axes" not in given:
            extra = {"axes": 2}
        try:
            spec = fill_sizes({**given, **extra}, dim=settings.model.n_embd, num_heads=settings.model.n_head,
                              head_dim=settings.model.head_dim, length=settings.grid ** 2)
            spec = registry.normalize_spec(spec)
            pe = posenc.build(spec)
        except (ValueError, TypeError) as e:
            out.append((label, dict(given), f"cannot: {str(e).splitlines()[0]}"))
            continue
        if label != name:
            label = spec_label({**given, **{k: spec[k] for k in spec if k not in given}})
        if pe.needs_axes and getattr(pe, "axes", 1) != 2:
            out.append((label, spec, f"cannot: {name!r} takes one-axis positions; image patches need two "
                                     "(row, col)"))
            continue
        out.append((label, spec, "resize" if table else "coords" if hasattr(pe, "coordinates") else "grid"))
    return out


# -- data ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def digits(test_fraction: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 8×8 digits in [0, 1]: ``(train_x [N, 8, 8], train_y, test_x, test_y)``,
    split once by a fixed permutation (the same for every seed and scheme)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - scikit-learn is in the extrapolate extra
        raise ValueError("--part image needs scikit-learn (its bundled digits): pip install '.[extrapolate]' from "
                         "a clone of posenc") from None
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    n_test = int(round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def resample(images: torch.Tensor, size: int) -> torch.Tensor:
    """``[N, h, w]`` -> ``[N, size, size]`` by bilinear interpolation (identity at the same size)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    return F.interpolate(images[:, None], size=(size, size), mode="bilinear", align_corners=False)[:, 0]


def image_positions(size: int, grid: int, mode: str) -> torch.Tensor:
    """``[size², 2]`` (row, col) positions: ``integer``, or ``rescaled`` into ``0 .. grid-1`` (float64)."""
    pos = posenc.grid_positions((size, size))
    if mode == "rescaled" and size != grid:
        return pos.double() * ((grid - 1) / (size - 1))
    return pos


def coordinate_positions(size: int, grid: int, mode: str) -> torch.Tensor:
    """``[size², 2]`` float64 DINOv3 coordinates ``(y, x)``, patch centres ``2·(p + ½)/n − 1``:
    ``rescaled``, ``n = size`` (DINOv3's own: the test grid spans [−1, 1], interpolation);
    ``integer``, ``n = grid`` (the training grid's spacing, so a larger grid reaches past 1:
    extrapolation). On the training grid both are ``posenc.encodings.dinov3.dinov3_coordinates``."""
    centres = (torch.arange(size, dtype=torch.float64) + 0.5) / (grid if mode == "integer" else size)  # (size,)
    ys, xs = torch.meshgrid(centres, centres, indexing="ij")
    return 2.0 * torch.stack([ys, xs], dim=-1).reshape(-1, 2) - 1.0  # (size², 2)


def augments_coordinates(spec: dict[str, Any]) -> bool:
    """Whether ``spec`` draws DINOv3's coordinate augmentations at training time (shift, jitter, rescale)."""
    return any(spec.get(k) is not None for k in ("shift", "jitter", "rescale"))


# -- the runs ------------------------------------------------------------------------------------

def position_modes(pe: torch.nn.Module, how: str) -> tuple[str, ...]:
    """The position modes a variant is evaluated with (see the module docstring)."""
    if how == "resize":
        return ("rescaled",)
    if how == "coords":  # DINOv3's coordinates: the training spacing, or normalised to the test grid
        return POSITIONS
    if not getattr(pe, "real_positions", False):  # NoPE's included
        return ("integer",)
    return POSITIONS


def canvas(images: torch.Tensor, size: int) -> torch.Tensor:
    """``[N, g, g]`` -> ``[N, size, size]``: each image at its own size on a blank grid, at a random
    offset drawn once per (image, size) with a fixed seed (the same for every run)."""
    n, g = images.shape[0], images.shape[-1]
    if size == g:
        return images
    gen = torch.Generator().manual_seed(7_000 + size)
    oy, ox = torch.randint(0, size - g + 1, (2, n), generator=gen)  # (n,) each
    span = torch.arange(g)
    out = images.new_zeros(n, size, size)
    out[torch.arange(n)[:, None, None], (oy[:, None] + span)[:, :, None], (ox[:, None] + span)[:, None, :]] = images
    return out


def scale_augment(images: torch.Tensor, scale_range: tuple[float, float], g: torch.Generator) -> torch.Tensor:
    """``[B, G, G]`` -> ``[B, G, G]``: each image drawn at a random scale ``s`` (log-uniform in
    ``scale_range``) and offset on its grid: output point ``u`` (normalised to [−1, 1]) reads the
    input at ``u/s + t``, ``|t| ≤ |1/s − 1|``, so a smaller digit stays whole and a larger one is a crop."""
    b, side = images.shape[0], images.shape[-1]
    lo, hi = scale_range
    s = torch.empty(b, dtype=torch.float64).uniform_(math.log(lo), math.log(hi), generator=g).exp()  # (B,)
    room = (1 / s - 1).abs()
    t = (torch.rand(b, 2, generator=g, dtype=torch.float64) * 2 - 1) * room[:, None]  # (B, 2)
    theta = torch.zeros(b, 2, 3, dtype=torch.float64)
    theta[:, 0, 0] = theta[:, 1, 1] = 1 / s
    theta[:, :, 2] = t
    grid = F.affine_grid(theta.float(), [b, 1, side, side], align_corners=False)  # (B, G, G, 2)
    return F.grid_sample(images[:, None], grid, mode="bilinear", padding_mode="zeros", align_corners=False)[:, 0]


def test_images(test_x: torch.Tensor, condition: str, size: int) -> torch.Tensor:
    """The test images under ``condition`` on a ``size`` grid, one token per pixel: ``[N, size², 1]``."""
    x = resample(test_x, size) if condition == "zoom" else canvas(test_x, size)
    return x.flatten(1)[..., None]


def run_image(settings: ImageSettings, spec: dict[str, Any], how: str, seeds: list[int],
              augment: str = "none") -> list[dict[str, Any]]:
    """Trains one variant's ``seeds`` together (``augment``: see the module docstring) and evaluates
    each under every condition, test grid and position mode that applies; a body per seed."""
    s = settings
    if how.startswith("cannot: "):
        return [{"cannot_run": how[len("cannot: "):], "train_size": s.grid, "augment": augment, "eval": []}
                for _ in seeds]
    train_x, train_y, test_x, test_y = digits(s.test_fraction)
    coords = how == "coords"
    pos = coordinate_positions(s.grid, s.grid, "integer") if coords else image_positions(s.grid, s.grid, "integer")
    drawn = coords and augments_coordinates(spec)  # DINOv3's augmentations: a draw per step from the seed's generator
    x_train = resample(train_x, s.grid)  # (N, g, g)
    def batches(g: torch.Generator):
        draw = posenc.build(spec).train() if drawn else None
        def next_batch(step: int):
            idx = torch.randint(len(train_y), (s.train.batch_size,), generator=g)
            x = x_train[idx] if augment == "none" else scale_augment(x_train[idx], s.scale_range, g)
            p = draw.augment(pos, generator=g) if draw is not None else pos
            return x.flatten(1)[..., None], p, train_y[idx]  # (B, g², 1)
        return next_batch

    models, curves, seconds = fit_seeds(  # drawn positions differ per seed: the stacked model shares one set
        seeds, s.train, lambda: SetTransformer(s.model, spec, in_dim=1, classes=NUM_CLASSES), batches,
        stacked=False if drawn else None)
    out = []
    for model, losses in zip(models, curves):
        rows = []
        for condition in s.conditions:
            for size in s.test_grids:
                if condition != "zoom" and (size == s.grid or (s.canvas_grids is not None
                                                               and size not in s.canvas_grids)):
                    continue  # the trained size on the trained grid is the zoom row
                x = test_images(test_x, condition, size)
                for mode in position_modes(model.pe, how):
                    pe = model.pe.resized([size, size]) if how == "resize" and size != s.grid else None
                    positions = (coordinate_positions(size, s.grid, mode) if coords else
                                 image_positions(size, s.grid, "integer" if how == "resize" else mode))  # resized table
                    right = right_or_wrong(model, x, test_y, positions, pe)
                    rows.append(accuracy_row(right, condition=condition, positions=mode, size=size,
                                             tokens=size * size))
        out.append({"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                    "train_seconds": round(seconds, 2), "params": model.num_params(), "train_size": s.grid,
                    "positions": how, "augment": augment, "eval": rows})
    return out
