"""PoPE: polar coordinate position embeddings (Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025,
"Decoupling the 'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv:2509.10534).

Each of the first ``R`` features ``c`` of a query or key becomes one complex number whose
magnitude is *what* (the feature through softplus) and whose phase is *where* (position only):

    q̃_c(t) = μ(q_c)·e^{i t θ_c},   k̃_c(s) = μ(k_c)·e^{i (s θ_c + δ_c)},   μ = softplus,
    θ_c = base^(−c/R),  c = 0 … R−1,   δ_{h,c} ∈ [−2π, 0] learned per head (clamped)

    a_ts = Re Σ_c q̃_c(t)·conj(k̃_c(s)) = Σ_c μ(q_c) μ(k_c) cos((t − s)θ_c − δ_{h,c})

so a score depends on the positions only through ``t − s``, and on the content only through the
magnitudes (RoPE mixes the two: the phase of a RoPE pair is also set by its content). Written
out as reals, ``q̃`` is ``[μ cos, μ sin]`` per feature: twice the width. Features past ``R``
(partial PoPE, ``rotary_dim < D``) pass through unchanged and add their plain product.

**Where the learned phase goes.** Only the difference of the two phases enters a score, so posenc
subtracts δ from the *query* phase, ``q̃_c = μ(q_c)·e^{i(t θ_c − δ_{h,c})}``, and keys carry no
per-head term (the same ``a_ts``; PoPE-pytorch and x-transformers add ``+δ`` to the key phase, which
needs keys repeated to every query head under grouped-query attention).

Pairs: ``(2c, 2c+1)`` hold ``(μ cos, μ sin)`` ("interleaved", PoPE-pytorch's ``(d two)``) or
``c`` and ``R + c`` ("half", x-transformers' ``cat``).
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_float, check_int
from posenc.reference.positions import angles, positions_array

ROLES = (None, "query", "key")
BIAS_RANGE = (-2 * np.pi, 0.0)  # δ is clamped to it, as the paper's code does


def pope_inv_freq(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """``θ_c = base^(−c/rotary_dim)``, ``c = 0 … rotary_dim − 1``: one frequency per feature, ``[R]`` float64."""
    rotary_dim = check_int("rotary_dim", rotary_dim, min=1)
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-np.arange(rotary_dim, dtype=np.float64) / rotary_dim)


def softplus(x) -> np.ndarray:
    """``log(1 + e^x)`` in float64, without overflow."""
    x = np.asarray(x, dtype=np.float64)
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _phase(positions, inv_freq, bias, role) -> np.ndarray:
    """``t θ_c`` (keys), or ``t θ_c − δ_{h,c}`` (queries): ``[..., 1 or H, L, R]`` float64."""
    check_choice("role", role, ROLES)
    pos = positions_array("positions", positions, real=True)
    phi = angles(pos, np.asarray(inv_freq, dtype=np.float64))[..., None, :, :]  # (..., 1, L, R)
    if role == "query":
        delta = np.clip(np.asarray(bias, dtype=np.float64), *BIAS_RANGE)  # (H, R)
        phi = phi - delta[:, None, :]  # (..., H, L, R)
    return phi


def pope(x, positions, inv_freq, bias, *, role: str | None = None, layout: str = "interleaved") -> np.ndarray:
    """``x [B, H, L, D]`` in polar form at ``positions [L]`` or ``[B, L]``: ``[B, H, L, 2R + D − R]``.

    ``inv_freq [R]`` (``pope_inv_freq``), ``bias [H, R]`` (δ; used when ``role="query"``; a key, or
    ``role=None``, has phase ``t θ_c`` alone). ``q̃·k̃`` of a query and a key so mapped is ``a_ts``.
    """
    check_choice("layout", layout, ("half", "interleaved"))
    x = np.asarray(x, dtype=np.float64)
    r = len(inv_freq)
    if x.ndim != 4 or x.shape[-1] < r:
        raise ValueError(f"x must have shape [B, H, L, D] with D >= rotary_dim={r}, got shape {list(x.shape)}")
    phi = _phase(positions, inv_freq, bias, role)
    mu = softplus(x[..., :r])  # (B, H, L, R)
    re, im = mu * np.cos(phi), mu * np.sin(phi)
    polar = np.stack((re, im), axis=-1).reshape(*re.shape[:-1], 2 * r) if layout == "interleaved" \
        else np.concatenate((re, im), axis=-1)
    return np.concatenate((polar, x[..., r:]), axis=-1)


def pope_scores(q, k, q_positions, k_positions, inv_freq, bias) -> np.ndarray:
    """The paper's score, written from its formula: ``[B, H, Lq, Lk]`` (before the ``1/√D`` scale),

        a_ts = Σ_{c<R} μ(q_c) μ(k_c) cos((t − s)θ_c − δ_{h,c}) + Σ_{c≥R} q_c k_c

    for ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]``, one-axis positions ``[L]``."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    r = len(inv_freq)
    qp = positions_array("q_positions", q_positions, real=True)
    kp = positions_array("k_positions", k_positions, real=True)
    theta = np.asarray(inv_freq, dtype=np.float64)
    delta = np.clip(np.asarray(bias, dtype=np.float64), *BIAS_RANGE)  # (H, R)
    diff = angles(qp, theta)[:, None, :] - angles(kp, theta)[None, :, :]  # (Lq, Lk, R): (t − s)θ mod 2π
    cos = np.cos(diff[None] - delta[:, None, None, :])  # (H, Lq, Lk, R)
    mq, mk = softplus(q[..., :r]), softplus(k[..., :r])
    polar = np.einsum("bhqc,bhkc,hqkc->bhqk", mq, mk, cos)
    return polar + np.einsum("bhqc,bhkc->bhqk", q[..., r:], k[..., r:])
