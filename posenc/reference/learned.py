"""Learned absolute position embeddings (Gehring et al. 2017; BERT, GPT-2): a trainable table.

    PE(pos) = W[pos],   W ∈ R^{max_positions × d}

The table has no row for ``pos >= max_positions``: a learned encoding cannot extrapolate.
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import positions_array


def learned(positions, table) -> np.ndarray:
    """``[..., L]`` positions -> ``[..., L, d]`` rows of ``table [max_positions, d]``."""
    pos = positions_array("positions", positions)
    table = np.asarray(table, dtype=np.float64)
    if pos.size and pos.max() >= table.shape[0]:
        raise ValueError(
            f"positions must be < max_positions={table.shape[0]} (a learned table cannot extrapolate), "
            f"got {int(pos.max())}")
    return table[pos]
