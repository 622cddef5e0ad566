"""Transformer-XL relative attention (Dai et al. 2019, "Transformer-XL: Attentive Language Models
Beyond a Fixed-Length Context", ACL, arXiv:1901.02860, §3.3).

With ``q_i = W_q E_i`` and ``k_j = W_k,E E_j``, the score of query ``i`` and key ``j`` is

    A_ij = q_i·k_j  +  q_i·W_R R_{i−j}  +  u·k_j  +  v·W_R R_{i−j}
           (a)         (b)                (c)       (d)

``R`` is the sinusoidal encoding of the relative distance ``i − j`` (Vaswani et al. §3.5, sin in
even and cos in odd dimensions, any sign: ``R_{-x}`` flips the sin dimensions), ``W_R`` a learned
per-head projection ``[H, D, d_r]`` and ``u, v [H, D]`` learned per-head biases. ``transformer_xl``
is terms (b) + (c) + (d), times ``scale``; term (a) is plain attention.
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import distance
from posenc.reference.sinusoidal import sinusoidal


def relative_sinusoid(q_positions, k_positions, d_r: int, base: float = 10000.0) -> np.ndarray:
    """``R_{i−j}`` for every pair: ``[..., Lq, Lk, d_r]`` float64."""
    d = -distance(q_positions, k_positions, scheme="transformer_xl")  # (..., Lq, Lk): i − j
    r = sinusoidal(np.abs(d).reshape(-1), d_r, base).reshape(d.shape + (d_r,))  # R_{|i−j|}
    r[..., 0::2] *= np.sign(d)[..., None]  # sin is odd, cos is even
    return r


def transformer_xl(q, k, q_positions, k_positions, w_r, u, v, *, base: float = 10000.0,
                   scale: float | None = None) -> np.ndarray:
    """``q [B, H, Lq, D]``, ``k [B, H, Lk, D]``, ``w_r [H, D, d_r]``, ``u, v [H, D]`` -> ``[B, H, Lq, Lk]``."""
    q, k, w_r, u, v = (np.asarray(t, dtype=np.float64) for t in (q, k, w_r, u, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    r = relative_sinusoid(q_positions, k_positions, w_r.shape[-1], base)  # (..., Lq, Lk, d_r)
    r = r.reshape((-1,) + r.shape[-3:])  # (1 or B, Lq, Lk, d_r)
    wr = np.einsum("hdr,bqkr->bhqkd", w_r, r)  # (1 or B, H, Lq, Lk, D): W_R R_{i−j}
    b = np.einsum("bhqd,bhqkd->bhqk", q, wr)
    c = np.einsum("hd,bhkd->bhk", u, k)[:, :, None, :]
    d = np.einsum("hd,bhqkd->bhqk", v, wr)
    return (b + c + d) * scale
