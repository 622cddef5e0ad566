"""HiRoPE (Zhang et al., ACL 2024, "HiRoPE: Length Extrapolation for Code Models Using Hierarchical
Position", arXiv:2403.19115), the float64 specification.

Positions are ``[L, 2]`` or ``[B, L, 2]``: column 0 a token's higher-level position (its function,
class, block or line index: ``posenc.segment_positions``), column 1 its token position. With
RoPE's frequencies ``θ_j`` (``j < R = rotary_dim/2``) and ``T = token_dims/2``:

    p_j(t) = token(t)   if j < T  or  token(t) < window
    p_j(t) = level(t)   otherwise
    pair j of the token at t is rotated by p_j(t) · θ_j, as in 1D RoPE

The high-frequency pairs (``j < T``) keep the token position; the low-frequency ones take the
higher-level position, except inside the window (the first ``window`` tokens), where every pair
keeps the plain token position. ``token_dims = rotary_dim`` or ``window >= L`` is plain RoPE.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice
from posenc.reference.positions import angles, positions_array
from posenc.reference.rope import rotate_pairs_index

AXES = 2  # (higher-level position, token position)


def hirope_axis_of_pair(rotary_dim: int, token_dims: int) -> np.ndarray:
    """``[rotary_dim/2]`` int64: the column of the positions each pair reads (1 token, 0 level)."""
    pairs = np.arange(rotary_dim // 2)
    return np.where(pairs < token_dims // 2, 1, 0).astype(np.int64)


def hirope_positions(positions, window) -> np.ndarray:
    """``[..., L, 2]`` with column 0 replaced by the token position inside the window."""
    pos = positions_array("positions", positions, axes=AXES, real=True, scheme="hirope")
    out = pos.copy()
    inside = pos[..., 1] < window
    out[..., 0] = np.where(inside, pos[..., 1], pos[..., 0])
    return out


def hirope(x, positions, inv_freq, *, token_dims: int, window, layout: str = "half") -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` (or ``[..., L, D]``) at ``positions [L, 2]``/``[B, L, 2]``
    (level, token): pair ``j`` by ``p_j(t)·θ_j`` (see the module), ``θ = inv_freq``."""
    check_choice("layout", layout, ("half", "interleaved"))
    x = np.asarray(x, dtype=np.float64)
    inv_freq = np.asarray(inv_freq)  # float64 θ, or exact θ (an object array)
    rd = 2 * inv_freq.size
    axis = hirope_axis_of_pair(rd, token_dims)
    theta = angles(hirope_positions(positions, window), inv_freq, axis)  # (L, R) or (B, L, R)
    if x.ndim < 2 or x.shape[-1] < rd or theta.shape[-2] != x.shape[-2]:
        raise ValueError(f"x must have shape [..., L={theta.shape[-2]}, D >= {rd}], got shape {list(x.shape)}")
    if theta.ndim == 3 and x.ndim == 4:
        theta = theta[:, None]  # (B, 1, L, R)
    cos, sin = np.cos(theta), np.sin(theta)
    a, b = rotate_pairs_index(rd, layout)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., a] * sin + x[..., b] * cos
    return out
