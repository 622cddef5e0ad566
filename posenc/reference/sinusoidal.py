"""Sinusoidal absolute encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5).

    PE(pos, 2i)   = sin(pos / base^(2i/d))
    PE(pos, 2i+1) = cos(pos / base^(2i/d))

With ``axes = A`` (positions ``[..., L, A]``), axis ``a`` takes dims ``[a·d/A, (a+1)·d/A)``, each
the encoding above with ``d/A`` dims (factorized 2D/3D sin-cos, ViT/MAE). Positions may be real.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_even, check_float, check_int
from posenc.reference.positions import angles, positions_array


def sinusoidal_inv_freq(d_model: int, base: float = 10000.0) -> np.ndarray:
    """``1 / base^(2i/d)`` for ``i = 0 .. d/2 - 1``: ``[d/2]`` float64."""
    d_model = check_even("d_model", check_int("d_model", d_model, min=2))
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def sinusoidal(positions, d_model: int, base: float = 10000.0, *, axes: int = 1) -> np.ndarray:
    """``[..., L]`` (or ``[..., L, A]``) positions -> ``[..., L, d_model]`` float64, sin in even and
    cos in odd dims (within each axis's block)."""
    sinusoidal_inv_freq(d_model, base)  # checks d_model and base
    axes = check_int("axes", axes, min=1)
    if d_model % (2 * axes):
        raise ValueError(f"d_model must be divisible by 2·axes = {2 * axes}, got d_model={d_model}")
    pos = positions_array("positions", positions, axes=axes, real=True)
    if axes == 1:
        a = angles(pos, sinusoidal_inv_freq(d_model, base))  # (..., L, d/2)
    else:
        blocks = [angles(pos[..., i], sinusoidal_inv_freq(d_model // axes, base)) for i in range(axes)]
        a = np.concatenate(blocks, axis=-1)  # (..., L, d/2): axis i's pairs in block i
    out = np.empty(a.shape[:-1] + (d_model,), dtype=np.float64)
    out[..., 0::2] = np.sin(a)
    out[..., 1::2] = np.cos(a)
    return out
