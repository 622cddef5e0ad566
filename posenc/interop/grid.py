"""Resizing a learned grid of position embeddings to another grid (ViT at a new resolution).

``resize_grid`` is transformers' ViT ``interpolate_pos_encoding`` (after DINO/DINOv2) as a pure
function of the table: the patch rows ``[H·W, D]`` are viewed as a ``D``-channel image ``H × W``,
resized with ``torch.nn.functional.interpolate(mode, align_corners=False)`` and flattened back
row-major; the ``extra_tokens`` leading rows (a class token, registers) are kept as they are.

``antialias=True`` low-pass filters before a downsampling resize (``F.interpolate``'s
``antialias``, bilinear and bicubic only): it is timm's default (``resample_abs_pos_embed``,
``interpolation="bicubic", antialias=True``), so ``resize_grid(w, old, new, extra_tokens=1,
antialias=True)`` equals timm's resize of a float32 table. The default stays ``False``: it is
transformers' ViT/DINOv2 ``interpolate_pos_encoding`` (no antialias) and what ``resize_grid`` has
always returned. The two differ for every bicubic resize, upsampling included: PyTorch's
antialiased bicubic uses PIL's kernel (``a = −0.5``), the plain one ``a = −0.75``; a bilinear
resize that shrinks no axis is the same either way (up to float32 rounding).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc._validate import check_bool, check_choice, check_int
from posenc.limits import check_memory

MODES = ("bicubic", "bilinear", "nearest")


def _grid(name: str, grid) -> list[int]:
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (list, tuple)) or len(grid) != 2:
        raise TypeError(f"{name} must be [H, W], got {grid!r}")
    return [check_int(f"{name}[{i}]", g, min=1) for i, g in enumerate(grid)]


def resize_grid(weight: torch.Tensor, old_grid, new_grid, *, extra_tokens: int = 0,
                mode: str = "bicubic", antialias: bool = False) -> torch.Tensor:
    """``weight [1, extra + H·W, D]`` (or ``[extra + H·W, D]``) on ``old_grid = [H, W]`` -> the same
    layout on ``new_grid = [H', W']``: ``[1, extra + H'·W', D]``, the extra rows untouched.

    Interpolation runs in float32 at least (bicubic is not implemented for half dtypes on CPU) and
    the result takes ``weight``'s dtype (timm always interpolates in float32, so a float64 table
    equals timm's only to float32 precision). ``antialias``: see the module docstring.
    """
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TypeError(f"weight must be a floating-point torch.Tensor, got "
                        f"{weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    old_grid, new_grid = _grid("old_grid", old_grid), _grid("new_grid", new_grid)
    extra_tokens = check_int("extra_tokens", extra_tokens, min=0)
    check_choice("mode", mode, MODES)
    if check_bool("antialias", antialias) and mode == "nearest":
        raise ValueError("antialias=True applies to mode='bilinear' or 'bicubic' (F.interpolate's antialias), "
                         "got mode='nearest'")
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
    check_memory("new_grid", new_grid, (extra_tokens + math.prod(new_grid)) * d * 3,
                 bytes_per=torch.empty((), dtype=work).element_size(), what=f"the resized table of width D={d}")
    image = patches.reshape(1, *old_grid, d).permute(0, 3, 1, 2).to(work)  # (1, D, H, W)
    kw = {} if mode == "nearest" else {"align_corners": False, "antialias": antialias}
    image = F.interpolate(image, size=tuple(new_grid), mode=mode, **kw)  # (1, D, H', W')
    patches = image.permute(0, 2, 3, 1).reshape(1, -1, d).to(w.dtype)  # (1, H'·W', D)
    out = torch.cat((extra, patches), dim=1)
    return out[0] if squeeze else out
