"""Sinusoidal absolute encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5).

    PE(pos, 2i)   = sin(pos / base^(2i/d))
    PE(pos, 2i+1) = cos(pos / base^(2i/d))

With ``axes = A`` (positions ``[..., L, A]``), axis ``a`` takes dims ``[a·d/A, (a+1)·d/A)``, each
the encoding above with ``d/A`` dims (factorized 2D/3D sin-cos, ViT/MAE). Positions may be real.

``layout="interleaved"`` (default) is the formula above; ``layout="half"`` puts each axis's block
as ``[sin… | cos…]``: ``PE(pos, i) = sin(pos·θ_i)``, ``PE(pos, d/2 + i) = cos(pos·θ_i)`` (MAE, timm,
diffusers), the pairing ``(i, i + d/2)`` of rope's "half" layout. The frequencies are exact
(``exact_inv_freq``), reduced as double-doubles.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.reference.positions import angles, exact_inv_freq, positions_array

LAYOUTS = ("interleaved", "half")


def sinusoidal_inv_freq(d_model: int, base: float = 10000.0) -> np.ndarray:
    """``1 / base^(2i/d)`` for ``i = 0 .. d/2 - 1``: ``[d/2]`` float64."""
    d_model = check_even("d_model", check_int("d_model", d_model, min=2))
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def sinusoidal(positions, d_model: int, base: float = 10000.0, *, axes: int = 1,
               layout: str = "interleaved") -> np.ndarray:
    """``[..., L]`` (or ``[..., L, A]``) positions -> ``[..., L, d_model]`` float64: within each axis's
    block, sin in even and cos in odd dims ("interleaved") or ``[sin… | cos…]`` ("half")."""
    sinusoidal_inv_freq(d_model, base)  # checks d_model and base
    axes = check_int("axes", axes, min=1)
    check_choice("layout", layout, LAYOUTS)
    if d_model % (2 * axes):
        raise ValueError(f"d_model must be divisible by 2·axes = {2 * axes}, got d_model={d_model}")
    pos = positions_array("positions", positions, axes=axes, real=True)
    if axes == 1:
        pos = pos[..., None]  # (..., L, 1)
    d = d_model // axes
    blocks = []
    for i in range(axes):
        a = angles(pos[..., i], exact_inv_freq(d, base))  # (..., L, d/2)
        if layout == "half":
            blocks += [np.sin(a), np.cos(a)]
        else:
            blocks.append(np.stack((np.sin(a), np.cos(a)), axis=-1).reshape(a.shape[:-1] + (d,)))
    return np.concatenate(blocks, axis=-1)
