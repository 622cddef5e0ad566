"""Learned absolute position embeddings (Gehring et al. 2017; BERT, GPT-2; ViT): a trainable table.

    PE(pos) = W[pos],   W ∈ R^{max_positions × d}
    grid [G_0, …, G_{A-1}]:   PE(p) = W[row-major index of p],   W ∈ R^{Π G_a × d}

The table has no row for ``pos >= max_positions`` (or outside the grid): a learned encoding cannot
extrapolate. Positions are integers.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.positions import positions_array


def learned(positions, table, *, grid=None) -> np.ndarray:
    """``[..., L]`` positions (``[..., L, A]`` with ``grid``) -> ``[..., L, d]`` rows of ``table``."""
    table = np.asarray(table, dtype=np.float64)
    if grid is None:
        pos = positions_array("positions", positions, scheme="learned")
        if pos.size and pos.max() >= table.shape[0]:
            raise ValueError(
                f"positions must be < max_positions={table.shape[0]} (a learned table cannot extrapolate), "
                f"got {int(pos.max())}")
        return table[pos]
    grid = [int(g) for g in grid]
    pos = positions_array("positions", positions, axes=len(grid), scheme="learned")
    if int(np.prod(grid)) != table.shape[0]:
        raise ValueError(f"table must have prod(grid)={int(np.prod(grid))} rows for grid={grid}, got {table.shape[0]}")
    if pos.size and (pos >= np.array(grid)).any():
        raise ValueError(f"positions must lie inside grid={grid} (a learned grid cannot extrapolate)")
    return table[np.ravel_multi_index(np.moveaxis(pos, -1, 0), grid)]
