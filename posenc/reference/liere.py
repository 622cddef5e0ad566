"""LieRE, Lie rotational position encodings (Ostmeier, Axelrod, Moseley, Chaudhari & Langlotz 2024,
"LieRE: Lie Rotational Positional Encodings", arXiv:2406.10322 §3; code: StanfordMIMI/LieRE,
``models/rope_vit.py``): RoPE's rotations generalised to the exponential of learned
skew-symmetric generators, one per axis.

For a position ``p = (p_0, …, p_{A−1})`` in patch units (image patches: ``(row, col)``; volumes and
videos: three axes) on a training grid of ``g_a`` patches per axis, and learned skew-symmetric
``B_a`` (``b × b``), a key or query block is rotated by

    R(p) = exp(Σ_a u_a·B_a),  u_a = p_a/(g_a − 1),   x' = R(p)·x      (x a column of b dims)

(the code's positions ``u = linspace(0, 1, g)`` per axis at the training resolution, and
``linspace(0, s/g, s)`` for ``s`` patches at another one).

``B_a = U_a − U_aᵀ`` with ``U_a`` the strict upper triangle of a free parameter (the code's
``generator_raw_params``, drawn ``U[0, 2π)``). The head's first ``n·b`` dims are ``n = ⌊D/b⌋``
blocks ``[k·b, (k+1)·b)``, each with its own generators (``b = D``: one dense rotation, the
paper's default; ``b = 2``: RoPE-Mixed's learned 2D rotations); the rest pass unchanged.
Generators are shared by the heads, or one set per head (the code's ``rotary_embedding_per_head``).

``R(p)`` is orthogonal and ``R(0) = I``. ``R(p)ᵀR(p') = exp(−Σ p_a B_a)·exp(Σ p'_a B_a)``, which is
``exp(Σ (p'_a − p_a) B_a)`` (relative) only when the generators commute, as they do for one axis
and for RoPE's 2×2 blocks; LieRE's dense generators are not relative in general, by design.

``expm_skew`` is the float64 matrix exponential by scaling and squaring of the Taylor series
(no SciPy): deterministic (fixed operations, no eigensolver), exact to float64 rounding.
"""

from __future__ import annotations

import math

import numpy as np

from posenc.reference.positions import positions_array

TAYLOR_TERMS = 20
"""Taylor terms of ``exp(M/2^s)`` with ``‖M/2^s‖ ≤ 1/2``: the tail is below ``0.5^20/20! < 1e-24``."""


def expm_skew(m) -> np.ndarray:
    """``exp(M)`` of float64 square matrices ``[..., b, b]``: ``(Σ_{k<20} (M/2^s)^k/k!)^(2^s)`` with
    ``s`` the smallest integer making the 1-norm of ``M/2^s`` at most 1/2 (one ``s`` for the batch)."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise ValueError(f"m must have shape [..., b, b], got shape {list(m.shape)}")
    norm = float(np.abs(m).sum(axis=-2).max()) if m.size else 0.0
    s = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    a = m / 2.0 ** s
    out = np.broadcast_to(np.eye(m.shape[-1]), m.shape).copy()
    term = out.copy()
    for k in range(1, TAYLOR_TERMS):
        term = term @ a / k
        out = out + term
    for _ in range(s):
        out = out @ out
    return out


def liere_generators(raw) -> np.ndarray:
    """Skew-symmetric generators ``U − Uᵀ`` from raw parameters ``[..., b, b]`` (``U``: their strict
    upper triangle; the diagonal and lower triangle are unused)."""
    raw = np.asarray(raw, dtype=np.float64)
    upper = np.triu(raw, k=1)
    return upper - np.swapaxes(upper, -1, -2)


def liere_rotations(positions, raw, grid) -> np.ndarray:
    """``R(p) = exp(Σ_a p_a/(g_a − 1)·B_a)``: positions ``[..., L, A]`` (``[..., L]`` for one axis),
    raw generators ``[A, G, n, b, b]``, ``grid [A]`` -> ``[..., L, G, n, b, b]`` float64."""
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 5 or raw.shape[-1] != raw.shape[-2]:
        raise ValueError(f"raw must have shape [axes, G, blocks, b, b], got shape {list(raw.shape)}")
    pos = positions_array("positions", positions, axes=raw.shape[0], real=True)
    if raw.shape[0] == 1:
        pos = pos[..., None]  # one axis: [..., L] -> [..., L, 1]
    grid = np.asarray(grid, dtype=np.float64)
    if grid.shape != (raw.shape[0],) or (grid < 2).any():
        raise ValueError(f"grid must hold {raw.shape[0]} sizes >= 2 (one per axis), got {grid.tolist()}")
    gens = liere_generators(raw)  # (A, G, n, b, b)
    m = np.einsum("...la,agnij->...lgnij", pos.astype(np.float64) / (grid - 1), gens)
    return expm_skew(m)


def liere(x, positions, raw, grid) -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` at ``positions [L, A]`` or ``[B, L, A]`` (``[L]``/``[B, L]`` for one axis) with raw generators
    ``[A, G, n, b, b]`` on a training ``grid [A]`` (``G`` = 1, or ``H`` for one set per head; ``n·b ≤ D``): block ``k`` of head
    ``h`` becomes ``R(p)[g, k] @ x[..., k·b:(k+1)·b]`` with ``g = h`` (or 0)."""
    x = np.asarray(x, dtype=np.float64)
    raw = np.asarray(raw, dtype=np.float64)
    rot = liere_rotations(positions, raw, grid)  # (L, G, n, b, b) or (B, L, G, n, b, b)
    _, g, n, b, _ = raw.shape
    if x.ndim != 4 or x.shape[-1] < n * b or x.shape[1] % g or rot.shape[-5] != x.shape[2]:
        raise ValueError(f"x must have shape [B, H (a multiple of {g}), L={rot.shape[-5]}, D >= {n * b}], "
                         f"got shape {list(x.shape)}")
    rot = np.moveaxis(rot, -4, -5)  # (G, L, n, b, b) or (B, G, L, n, b, b)
    blocks = x[..., : n * b].reshape(*x.shape[:3], n, b)  # (B, H, L, n, b)
    out = x.copy()
    out[..., : n * b] = np.einsum("...lnij,...lnj->...lni", rot, blocks).reshape(*x.shape[:3], n * b)
    return out
