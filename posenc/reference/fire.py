"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional Interpolation
for Relative Positions Improves Long Context Transformers", ICLR 2024, arXiv:2310.04418, §3).

A small MLP of the relative distance, normalised by the query position so that its input stays in
``[0, 1]`` at any length:

    bias[h, i, j] = f_θ( ψ(i − j) / ψ(max(L, i)) )_h,     ψ(x) = log(c·x + 1)

with ``f_θ: R -> R^H`` an MLP (1 -> hidden -> H, ReLU), ``c > 0`` and the threshold ``L >= 0``
learned. As in the paper's code, the distance is ``|i − j|`` (a key after the query mirrors the
one as far before it; causal attention masks those) and the denominator gets ``+ eps``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import distance, positions_array


def fire_input(q_positions, k_positions, *, c: float, L: float, eps: float = 1e-6) -> np.ndarray:
    """The MLP's input ``ψ(|i − j|) / (ψ(max(L, i)) + eps)``: ``[..., Lq, Lk]``, in ``[0, 1]`` when ``j <= i``."""
    if c < 0 or L < 0:
        raise ValueError(f"c and L must be >= 0, got c={c}, L={L}")
    d = np.abs(distance(q_positions, k_positions, real=True)).astype(np.float64)  # (..., Lq, Lk)
    i = positions_array("q_positions", q_positions, real=True).astype(np.float64)[..., :, None]  # (..., Lq, 1)
    return np.log1p(c * d) / (np.log1p(c * np.maximum(L, i)) + eps)


def fire(q_positions, k_positions, w1, b1, w2, b2, *, c: float, L: float, eps: float = 1e-6) -> np.ndarray:
    """MLP ``w1, b1 [hidden]``, ``w2 [H, hidden]``, ``b2 [H]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` if batched)."""
    w1, b1, w2, b2 = (np.asarray(t, dtype=np.float64) for t in (w1, b1, w2, b2))
    x = fire_input(q_positions, k_positions, c=c, L=L, eps=eps)  # (..., Lq, Lk)
    hidden = np.maximum(x[..., None] * w1 + b1, 0.0)  # (..., Lq, Lk, hidden)
    return np.moveaxis(hidden @ w2.T + b2, -1, -3)  # (..., H, Lq, Lk)
