"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with
Relative Position Representations", NAACL, arXiv:1803.02155, §3).

Two learned tables of ``2k + 1`` vectors, shared by every head, indexed by the clipped relative
distance ``clip(j - i, -k, k)``:

    e_ij = q_i · (k_j + a^K_ij) / √D,      a^K_ij = w^K[clip(j - i, -k, k)]
    z_i  = Σ_j α_ij (v_j + a^V_ij),        a^V_ij = w^V[clip(j - i, -k, k)],   α = softmax_j(e)

``shaw`` is the positional part of the score, ``q_i · a^K_ij · scale``; ``shaw_value`` is the
positional part of the output, ``Σ_j α_ij a^V_ij``; ``shaw_attention`` puts the two together.
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import distance
from posenc.reference.attention import attention


def shaw_index(q_positions, k_positions, max_distance: int) -> np.ndarray:
    """Row of the tables for each pair: ``clip(j - i, -k, k) + k`` in ``[0, 2k]``, ``[..., Lq, Lk]``."""
    return np.clip(distance(q_positions, k_positions, scheme="shaw"), -max_distance, max_distance) + max_distance


def _table(name: str, table) -> tuple[np.ndarray, int]:
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] % 2 == 0:
        raise ValueError(f"{name} must have shape [2k + 1, D], got shape {list(table.shape)}")
    return table, (table.shape[0] - 1) // 2


def shaw(q, q_positions, k_positions, table_k, *, scale: float | None = None) -> np.ndarray:
    """``q [B, H, Lq, D]``, ``table_k [2k + 1, D]`` -> ``q_i · a^K_ij · scale``: ``[B, H, Lq, Lk]``."""
    q = np.asarray(q, dtype=np.float64)
    table_k, k = _table("table_k", table_k)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    a = table_k[shaw_index(q_positions, k_positions, k)]  # (Lq, Lk, D) or (B, Lq, Lk, D)
    a = a.reshape((-1,) + a.shape[-3:])  # (1 or B, Lq, Lk, D)
    return np.einsum("bhqd,bqkd->bhqk", q, a) * scale


def shaw_value(p, q_positions, k_positions, table_v) -> np.ndarray:
    """Attention weights ``p [B, H, Lq, Lk]``, ``table_v [2k + 1, Dv]`` -> ``Σ_j p_ij a^V_ij``: ``[B, H, Lq, Dv]``."""
    p = np.asarray(p, dtype=np.float64)
    table_v, k = _table("table_v", table_v)
    a = table_v[shaw_index(q_positions, k_positions, k)]  # (Lq, Lk, Dv) or (B, Lq, Lk, Dv)
    a = a.reshape((-1,) + a.shape[-3:])  # (1 or B, Lq, Lk, Dv)
    return np.einsum("bhqk,bqkd->bhqd", p, a)


def shaw_attention(q, k, v, q_positions, k_positions, table_k, table_v, *, causal: bool = False,
                   scale: float | None = None) -> np.ndarray:
    """The whole of Shaw et al.'s attention, ``z_i = Σ_j α_ij (v_j + a^V_ij)``: ``[B, H, Lq, Dv]``.

    ``scale`` multiplies ``q·k`` (``1/√D`` by default, the paper's); the relative term keeps
    ``1/√D``, as in ``posenc.attention``, which adds a relative scheme's term to the scaled scores.
    """
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    term = shaw(q, q_positions, k_positions, table_k)  # (B, H, Lq, Lk)
    one_hot = np.broadcast_to(np.eye(k.shape[-2]), k.shape[:-1] + (k.shape[-2],))  # (B, H, Lk, Lk)
    p = attention(q, k, one_hot, bias=term, causal=causal, scale=scale)  # (B, H, Lq, Lk): the weights α
    return p @ v + shaw_value(p, q_positions, k_positions, table_v)
