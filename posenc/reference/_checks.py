"""Input checks shared by the reference functions (NumPy only)."""

from __future__ import annotations

import numpy as np


def positions_array(name: str, positions) -> np.ndarray:
    """Non-negative integer positions as an int64 array ``[L]`` or ``[B, L]``."""
    arr = np.asarray(positions)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape [L] or [B, L], got shape {list(arr.shape)}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, got minimum {int(arr.min())}")
    return arr.astype(np.int64)


def distance(q_positions, k_positions) -> np.ndarray:
    """``k - q`` for every pair: ``[..., Lq, Lk]``."""
    q = positions_array("q_positions", q_positions)
    k = positions_array("k_positions", k_positions)
    return k[..., None, :] - q[..., :, None]
