"""Grids: a 2D map of the positional signal over a grid of positions (images, video).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.analysis.base import build, DEFAULT_HEADS, KIND_ANALYSIS, shown_label
from posenc.spec import as_spec, label


GRID_QUANTITY = {
    "additive": "cosine similarity of PE vectors",
    "rotary": "q·k / D with q = k = 1 (mean over heads)",
    "bias": "bias added to the score (mean over heads)",
    "relative": "relative term with q = k = 1 (mean over heads)",
    "none": "no positional term (0)",
}


@dataclass(frozen=True)
class GridMap:
    """The positional signal between one patch and every patch of a grid, ``values [H, W]``."""

    label: str
    kind: str
    grid: tuple[int, int]
    patch: tuple[int, int]
    values: np.ndarray
    quantity: str = field(default="")


def grid_positions_for(module, grid: Sequence[int]):
    """The positions of an ``H × W`` grid's patches, row-major, as ``module`` takes them: ``(r, c)``
    for two axes, ``(0, …, 0, r, c)`` for more (the first frame of a clip), the flattened index
    ``r·W + c`` for one axis (a 1D encoding reading flattened patches, as the first ViTs did); a
    module with a ``grid_positions(grid)`` method places them itself (``dinov3``'s patch coordinates)."""
    import torch

    from posenc.positions import grid_positions

    own = getattr(module, "grid_positions", None)  # a scheme with its own placement (dinov3: coordinates in [−1, 1])
    if callable(own):
        return own(tuple(grid))
    pos = grid_positions(tuple(grid))  # (N, 2)
    axes = getattr(module, "axes", 1)
    if axes == 1:
        return pos[:, 0] * int(grid[1]) + pos[:, 1]
    return torch.cat((pos.new_zeros(pos.shape[0], axes - 2), pos), dim=-1)


def default_grid(module, grid: Sequence[int] | None = None) -> tuple[int, int]:
    """``grid``, else a learned grid's own last two sizes, else 14 × 14 (ViT-B/16 at 224 pixels)."""
    if grid is None:
        own = getattr(module, "grid", None)
        grid = own[-2:] if own else (14, 14)
    if isinstance(grid, (str, bytes)) or len(grid) != 2:
        raise ValueError(f"grid must be (H, W), got {grid!r}")
    return (check_int("grid[0]", grid[0], min=1), check_int("grid[1]", grid[1], min=1))


def grid_map(spec: Any, *, grid: Sequence[int] | None = None, patch: Sequence[int] | None = None, dim: int = 64,
             num_heads: int = DEFAULT_HEADS) -> GridMap:
    """Each patch's positional signal with ``patch`` (default: the centre), as ViT papers draw
    (Dosovitskiy et al. 2021, Fig. 7): ``values[r, c]`` by kind (``GRID_QUANTITY``). Works for
    every scheme: grid encodings (``axes``, a learned ``grid``) see ``(r, c)``, one-axis ones the
    flattened index."""
    if hasattr(spec, "kind") and hasattr(spec, "spec"):
        m = build(spec)
        h, w = default_grid(m, grid)
    else:
        own = as_spec(spec).get("grid")
        h, w = default_grid(type("Spec", (), {"grid": own})(), grid)
        m = build(spec, dim=dim, num_heads=num_heads, length=h * w)  # a 1D learned table: one row per patch
    pr, pc = (h // 2, w // 2) if patch is None else tuple(patch)
    if not (0 <= int(pr) < h and 0 <= int(pc) < w):
        raise ValueError(f"patch must lie inside the grid {h}×{w}, got ({pr}, {pc})")
    i = int(pr) * w + int(pc)
    values = KIND_ANALYSIS[m.kind].grid_signal(m, grid_positions_for(m, (h, w)), i, dim, num_heads)
    return GridMap(shown_label(m), m.kind, (h, w), (int(pr), int(pc)), np.asarray(values).reshape(h, w),
                   GRID_QUANTITY.get(m.kind, m.kind))


def grid_numbers(gm: GridMap) -> list[tuple[str, str]]:
    """Key numbers of a ``GridMap``: the signal at the patch, its neighbours and the far corner."""
    (h, w), (r, c), v = gm.grid, gm.patch, gm.values
    far = (0 if r >= h / 2 else h - 1, 0 if c >= w / 2 else w - 1)
    out = [("grid", f"{h} × {w} patches, signal with patch ({r}, {c}): {gm.quantity}")]
    picks = [("itself", (r, c)), ("right", (r, c + 1)), ("below", (r + 1, c)), ("far corner", far)]
    out.append(("signal at " + ", ".join(n for n, (a, b) in picks if a < h and b < w),
                ", ".join(f"{v[a, b]:.3g}" for _, (a, b) in picks if a < h and b < w)))
    return out
