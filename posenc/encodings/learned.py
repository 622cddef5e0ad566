"""Learned absolute position embeddings (Gehring et al. 2017; BERT, Devlin et al. 2019; GPT-2;
ViT, Dosovitskiy et al. 2021).

    PE(pos) = W[pos],   W ∈ R^{max_positions × d_model}
    grid [H, W]:   PE(r, c) = W[r·W + c],   W ∈ R^{H·W × d_model}   (row-major, as ViT flattens patches)

A learned table has no row past ``max_positions`` (or past the grid): asking for one raises, it
cannot extrapolate; positions must be integers (a table has no row 2.5). A grid table can be
resized to another grid (``resized``, ``posenc.interop.resize_grid``), as ViT does for a new
image resolution.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import MAX_INIT_STD, check_choice, check_float, check_int
from posenc.registry import register
from posenc.encodings._base import AdditiveEncoding
from posenc.limits import Dim, Rows, check_memory


def check_grid(name: str, grid) -> list[int]:
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (list, tuple)) or not grid:
        raise TypeError(f"{name} must be a list of sizes such as [H, W], got {grid!r} ({type(grid).__name__})")
    if len(grid) < 2:
        raise ValueError(f"{name} must have at least two sizes such as [H, W], got {list(grid)}; "
                         "a table of one axis is max_positions=N")
    return [check_int(f"{name}[{i}]", g, min=1) for i, g in enumerate(grid)]


@register("learned", kind="additive")
class Learned(AdditiveEncoding):
    """A trainable table of ``max_positions`` vectors (BERT, GPT-2) or of a grid (ViT); cannot extrapolate."""

    position_table = True  # the kind protocol: a row per position, resized on an image grid

    def __init__(self, *, d_model: Dim, max_positions: Rows | None = None, init_std: float = 0.02,
                 grid: list[Rows] | None = None) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, min=1)
        self.grid = None if grid is None else check_grid("grid", grid)
        if self.grid is None:
            if max_positions is None:
                raise ValueError("scheme 'learned' needs 'max_positions' (a table of rows) or 'grid' "
                                 "(e.g. grid=[14, 14] for image patches)")
            self.max_positions = check_int("max_positions", max_positions, min=1)
        else:
            self.axes = len(self.grid)
            cells = math.prod(self.grid)
            if max_positions is not None and check_int("max_positions", max_positions, min=1) != cells:
                raise ValueError(f"max_positions must equal the grid's size {cells} (grid={self.grid}) or be "
                                 f"left out, got {max_positions}")
            self.max_positions = cells
        init_std = check_float("init_std", init_std, min=0.0, max=MAX_INIT_STD)
        check_memory("max_positions", self.max_positions, self.max_positions * self.d_model,
                     what=f"its table of {self.max_positions} × d_model={self.d_model}")
        self.weight = nn.Parameter(torch.randn(self.max_positions, self.d_model) * init_std)

    def _index(self, positions: torch.Tensor) -> torch.Tensor:
        """The table row of each (checked) position: itself, or the row-major cell of a grid position."""
        if self.grid is None:
            return positions.long()
        index = torch.zeros(positions.shape[:-1], dtype=torch.long, device=positions.device)
        for a, size in enumerate(self.grid):
            index = index * size + positions[..., a].long()
        return index

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """``[L]``/``[B, L]`` (grid: ``[L, A]``/``[B, L, A]``) -> ``[..., L, d_model]``; positions past
        the table (or grid) raise."""
        if self.grid is None:
            positions = self.check_positions(
                "positions", positions, max_value=self.max_positions - 1,
                why=f"max_positions={self.max_positions}: a learned table cannot extrapolate past its length")
        else:
            positions = self.check_positions("positions", positions)
            if not torch.compiler.is_compiling() and positions.numel():
                for a, size in enumerate(self.grid):
                    high = int(positions[..., a].max())
                    if high >= size:
                        raise ValueError(f"positions[..., {a}] must be <= {size - 1} (grid={self.grid}: a learned "
                                         f"grid cannot extrapolate; resize it with .resized(new_grid)), got {high}")
        return self.weight[self._index(positions.to(self.weight.device))]

    def resized(self, new_grid: list[int], *, mode: str = "bicubic") -> "Learned":
        """A copy of this grid table interpolated to ``new_grid`` (``posenc.interop.resize_grid``,
        equal to transformers' ViT ``interpolate_pos_encoding``)."""
        from posenc.interop.grid import resize_grid

        if self.grid is None:
            raise ValueError("resized() needs a grid table: build it with grid=[H, W]")
        new_grid = check_grid("new_grid", new_grid)
        check_choice("mode", mode, ("bicubic", "bilinear", "nearest"))
        spec = {**self.spec, "grid": new_grid, "max_positions": None}
        from posenc.registry import build

        out = build(spec).to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(resize_grid(self.weight.detach()[None], self.grid, new_grid, mode=mode)[0])
        return out

    def reference(self, positions):
        if self.grid is None:
            return ref.learned(positions, self.weight.detach().double().cpu().numpy())
        return ref.learned(positions, self.weight.detach().double().cpu().numpy(), grid=self.grid)
