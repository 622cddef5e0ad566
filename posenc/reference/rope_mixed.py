"""RoPE-Mixed (Heo, Park, Han & Yun 2024, "Rotary Position Embedding for Vision Transformer",
ECCV, arXiv:2403.13298, §3.3): rotary embedding whose every pair turns by a learned mix of the axes.

For a token at ``p = (p_0, …, p_{A−1})`` (image patches: ``(row, col)``), pair ``i`` of head ``h``
turns by

    φ_{h,i}(p) = Σ_a p_a · f[a, h, i]

with learned frequencies ``f [A, H, D/2]``, so ``⟨R(p)q, R(p')k⟩`` depends only on ``p − p'``
(relative in 2D), and a pair can follow any direction of the plane rather than one axis.
The pairs are ``(2i, 2i+1)`` ("interleaved", the paper's complex numbers) or ``(i, i + D/2)``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.positions import angles, positions_array
from posenc.reference.rope import rotate_pairs_index


def rope_mixed_angles(positions, freqs) -> np.ndarray:
    """``φ = Σ_a p_a·f[a]`` reduced to ``[−π, π)``: positions ``[..., L, A]``, ``freqs [A, H, R]``
    -> ``[..., H, L, R]`` float64."""
    freqs = np.asarray(freqs, dtype=np.float64)
    if freqs.ndim != 3:
        raise ValueError(f"freqs must have shape [axes, H, D/2], got shape {list(freqs.shape)}")
    pos = positions_array("positions", positions, axes=freqs.shape[0], real=True)
    total = sum(angles(pos[..., None, :, a], freqs[a][:, None, :]) for a in range(freqs.shape[0]))  # (..., H, L, R)
    return np.remainder(total + np.pi, 2 * np.pi) - np.pi


def rope_mixed(x, positions, freqs, *, layout: str = "interleaved") -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` at ``positions [L, A]`` or ``[B, L, A]`` with ``freqs [A, H, D/2]``."""
    x = np.asarray(x, dtype=np.float64)
    phi = rope_mixed_angles(positions, freqs)  # (H, L, R) or (B, H, L, R)
    if x.ndim != 4 or x.shape[1] != phi.shape[-3] or x.shape[-1] < 2 * phi.shape[-1] or x.shape[2] != phi.shape[-2]:
        raise ValueError(f"x must have shape [B, H={phi.shape[-3]}, L={phi.shape[-2]}, D >= {2 * phi.shape[-1]}], "
                         f"got shape {list(x.shape)}")
    cos, sin = np.cos(phi), np.sin(phi)
    a, b = rotate_pairs_index(2 * phi.shape[-1], layout)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., a] * sin + x[..., b] * cos
    return out
