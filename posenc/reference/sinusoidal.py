"""Sinusoidal absolute encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5).

    PE(pos, 2i)   = sin(pos / base^(2i/d))
    PE(pos, 2i+1) = cos(pos / base^(2i/d))
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_even, check_float, check_int
from posenc.reference._checks import positions_array


def sinusoidal_inv_freq(d_model: int, base: float = 10000.0) -> np.ndarray:
    """``1 / base^(2i/d)`` for ``i = 0 .. d/2 - 1``: ``[d/2]`` float64."""
    d_model = check_even("d_model", check_int("d_model", d_model, min=2))
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def sinusoidal(positions, d_model: int, base: float = 10000.0) -> np.ndarray:
    """``[..., L]`` positions -> ``[..., L, d_model]`` float64, sin in even and cos in odd dims."""
    inv_freq = sinusoidal_inv_freq(d_model, base)  # checks d_model and base
    pos = positions_array("positions", positions).astype(np.float64)
    angles = pos[..., None] * inv_freq  # (..., L, d/2)
    out = np.empty(pos.shape + (d_model,), dtype=np.float64)
    out[..., 0::2] = np.sin(angles)
    out[..., 1::2] = np.cos(angles)
    return out
