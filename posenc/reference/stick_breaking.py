"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", arXiv:2410.17980).

No softmax and no positional encoding: from each query back to the first key, each key takes a
share ``σ(z_ij)`` of what the nearer keys left,

    z_ij = q_i·k_j · scale,    A_ij = σ(z_ij) · Π_{j<t<i} (1 − σ(z_it)),    o_i = Σ_j A_ij v_j + (1 − Σ_j A_ij) v_i

in log space, ``log A_ij = log σ(z_ij) + Σ_{j<t<i} log σ(−z_it)``. The leftover mass goes to the
query's own value, as in shawntan/stickbreaking-attention (``sb_ref.py`` and its tests:
``o + rem · v``). Keys run over ``j < i`` (``attend_current=False``, the repository's default)
or ``j ≤ i`` (``attend_current=True``, where the product also runs over ``j < t ≤ i``).
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, log_sigmoid, logit_cap


def stick_breaking_weights(q, k, *, scale: float | None = None, attend_current: bool = False,
                           document_ids=None, softcap: float | None = None) -> np.ndarray:
    """``A [B, H, Lq, Lk]`` (queries are the last Lq keys); ``softcap``: ``z = c · tanh(q·k·scale / c)``."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    z = logit_cap(np.einsum("bhqd,bhkd->bhqk", q, k) * scale, softcap)
    allowed = causal_mask(lq, lk, document_ids, diagonal=attend_current)
    log_keep = np.where(allowed, log_sigmoid(-z), 0.0)  # log(1 − σ(z)) of every key that is there
    after = np.cumsum(log_keep[..., ::-1], axis=-1)[..., ::-1] - log_keep  # Σ_{t>j} (over the keys there)
    return np.where(allowed, np.exp(log_sigmoid(z) + after), 0.0)


def stick_breaking(q, k, v, *, scale: float | None = None, attend_current: bool = False,
                   document_ids=None, softcap: float | None = None) -> np.ndarray:
    """``[B, H, Lq, Dv]``: the weighted keys' values plus the leftover times the query's own value."""
    v = np.asarray(v, dtype=np.float64)
    a = stick_breaking_weights(q, k, scale=scale, attend_current=attend_current, document_ids=document_ids,
                               softcap=softcap)
    lq, lk = a.shape[-2:]
    return np.einsum("bhqk,bhkd->bhqd", a, v) + (1.0 - a.sum(-1))[..., None] * v[:, :, lk - lq:]
