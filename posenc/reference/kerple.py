"""KERPLE: kernelized relative positional embedding (Chi, Fan, Ramadge & Rudnicky 2022, "KERPLE:
Kernelized Relative Positional Embedding for Length Extrapolation", NeurIPS, arXiv:2205.09921, §4).

A per-head bias from a conditionally positive definite kernel of the distance:

    log:    bias[h, i, j] = −r1_h · log(1 + r2_h · |i − j|),     r1, r2 > 0
    power:  bias[h, i, j] = −r1_h · |i − j|^r2_h,                r1 > 0, 0 < r2 <= 2

Both are 0 on the diagonal and decrease with distance.
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import distance

KERNELS = {
    "log": lambda d, r2: np.log1p(r2 * d),
    "power": lambda d, r2: d**r2,
}


def kerple(q_positions, k_positions, r1, r2, *, variant: str = "log") -> np.ndarray:
    """``r1, r2 [H]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` for batched positions) float64."""
    if variant not in KERNELS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, KERNELS))}; got {variant!r}")
    r1 = np.asarray(r1, dtype=np.float64)[:, None, None]  # (H, 1, 1)
    r2 = np.asarray(r2, dtype=np.float64)[:, None, None]
    if not (r1 > 0).all() or not (r2 > 0).all():
        raise ValueError(f"r1 and r2 must be > 0, got minimum {r1.min()} and {r2.min()}")
    if variant == "power" and (r2 > 2).any():
        raise ValueError(f"r2 must be <= 2 for the power variant, got maximum {r2.max()}")
    d = np.abs(distance(q_positions, k_positions, real=True)).astype(np.float64)[..., None, :, :]  # (..., 1, Lq, Lk)
    return -r1 * KERNELS[variant](d, r2)
