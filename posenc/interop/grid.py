"""Resizing a learned grid of position embeddings to another grid (ViT at a new resolution).

``resize_grid`` is transformers' ViT ``interpolate_pos_encoding`` (after DINO/DINOv2) as a pure
function of the table: the patch rows ``[H·W, D]`` are viewed as a ``D``-channel image ``H × W``,
resized with ``torch.nn.functional.interpolate(mode, align_corners=False)`` and flattened back
row-major; the ``extra_tokens`` leading rows (a class token, registers) are kept as they are.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc._validate import check_choice, check_int

MODES = ("bicubic", "bilinear", "nearest")


def _grid(name: str, grid) -> list[int]:
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (list, tuple)) or len(grid) != 2:
        raise TypeError(f"{name} must be [H, W], got {grid!r}")
    return [check_int(f"{name}[{i}]", g, min=1) for i, g in enumerate(grid)]


def resize_grid(weight: torch.Tensor, old_grid, new_grid, *, extra_tokens: int = 0,
                mode: str = "bicubic") -> torch.Tensor:
    """``weight [1, extra + H·W, D]`` (or ``[extra + H·W, D]``) on ``old_grid = [H, W]`` -> the same
    layout on ``new_grid = [H', W']``: ``[1, extra + H'·W', D]``, the extra rows untouched.

    Interpolation runs in float32 at least (bicubic is not implemented for half dtypes on CPU) and
    the result takes ``weight``'s dtype.
    """
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TypeError(f"weight must be a floating-point torch.Tensor, got "
                        f"{weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    old_grid, new_grid = _grid("old_grid", old_grid), _grid("new_grid", new_grid)
    extra_tokens = check_int("extra_tokens", extra_tokens, min=0)
    check_choice("mode", mode, MODES)
    squeeze = weight.dim() == 2
    w = weight[None] if squeeze else weight
    if w.dim() != 3 or w.shape[0] != 1:
        raise ValueError(f"weight must have shape [1, extra_tokens + H·W, D] or [extra_tokens + H·W, D], "
                         f"got shape {list(weight.shape)}")
    rows = extra_tokens + math.prod(old_grid)
    if w.shape[1] != rows:
        raise ValueError(f"weight has {w.shape[1]} rows but extra_tokens={extra_tokens} + old_grid "
                         f"{old_grid[0]}×{old_grid[1]} needs {rows}")
    extra, patches = w[:, :extra_tokens], w[:, extra_tokens:]
    d = w.shape[-1]
    work = torch.promote_types(w.dtype, torch.float32)
    image = patches.reshape(1, *old_grid, d).permute(0, 3, 1, 2).to(work)  # (1, D, H, W)
    kw = {} if mode == "nearest" else {"align_corners": False}
    image = F.interpolate(image, size=tuple(new_grid), mode=mode, **kw)  # (1, D, H', W')
    patches = image.permute(0, 2, 3, 1).reshape(1, -1, d).to(w.dtype)  # (1, H'·W', D)
    out = torch.cat((extra, patches), dim=1)
    return out[0] if squeeze else out
