"""DeBERTa's disentangled attention (He, Liu, Gao & Chen 2021, "DeBERTa: Decoding-enhanced BERT
with Disentangled Attention", ICLR, arXiv:2006.03654, §3.1; log buckets from DeBERTa-v2, as in
microsoft/DeBERTa and transformers' ``DebertaV2`` attention).

A table ``E`` of ``2s`` relative-position embeddings (``s`` = ``position_buckets``, or
``max_relative_positions`` without buckets) is projected per layer to position keys
``K^r = E W_k^r + b_k^r`` and position queries ``Q^r = E W_q^r + b_q^r`` (``[2s, H·D]``, split
in heads). With the row of each (query ``i``, key ``j``) pair

    δ(i, j) = clip(bucket(p_i − p_j) + s, 0, 2s − 1)

the score is the content term plus content-to-position (c2p) and position-to-content (p2c):

    A_ij = (q_i·k_j + q_i·K^r_δ(i,j) + k_j·Q^r_δ(i,j)) / √(D·f),     f = 1 + (number of c2p, p2c used)

``bucket`` is ``make_log_bucket_position``: distances below ``m = position_buckets // 2`` keep
their value, longer ones are compressed logarithmically so that ``max_relative_positions − 1``
reaches bucket ``±(2m − 1)``:

    bucket(r) = r                                                     if |r| <= m
              = sign(r)·(m + ⌈log(|r|/m) / log((max − 1)/m) · (m − 1)⌉)   otherwise

Both terms read row ``δ(i, j)``, the distance of the query from the key: the paper writes
``K^r_δ(i,j)`` for c2p and ``Q^r_δ(j,i)`` for p2c, but the code it released (and transformers)
gathers p2c at ``−δ`` of the key-to-query distance and transposes, which is ``δ(i, j)`` again.
``deberta`` is the c2p + p2c term times ``scale`` (``1/√(D·f)`` by default); ``deberta_attention``
the whole attention, whose content term also takes ``1/√(D·f)`` (not attention's usual ``1/√D``).
"""

from __future__ import annotations

import numpy as np

from posenc.reference._checks import distance
from posenc.reference.attention import attention


def deberta_bucket(relative, position_buckets: int, max_relative_positions: int) -> np.ndarray:
    """``make_log_bucket_position`` of the distances ``relative = p_i − p_j`` (integers), in float64.
    ``position_buckets = 0`` (transformers' ``-1``): no buckets, the distance itself."""
    r = np.asarray(relative, dtype=np.int64)
    if position_buckets <= 0:
        return r
    m = position_buckets // 2
    a = np.abs(r)
    a_log = np.maximum(a, m).astype(np.float64)  # short distances (|r| <= m keep r): any value, not used
    far = np.ceil(np.log(a_log / m) / np.log((max_relative_positions - 1) / m) * (m - 1)) + m
    return np.where(a <= m, r, np.sign(r) * far.astype(np.int64))


def deberta_span(position_buckets: int, max_relative_positions: int) -> int:
    """``s``: the table has ``2s`` rows."""
    return position_buckets if position_buckets > 0 else max_relative_positions


def deberta_index(q_positions, k_positions, position_buckets: int, max_relative_positions: int) -> np.ndarray:
    """``δ(i, j) = clip(bucket(p_i − p_j) + s, 0, 2s − 1)``: ``[..., Lq, Lk]``, the table row of each pair."""
    s = deberta_span(position_buckets, max_relative_positions)
    rel = -distance(q_positions, k_positions, scheme="deberta")  # p_i − p_j
    return np.clip(deberta_bucket(rel, position_buckets, max_relative_positions) + s, 0, 2 * s - 1)


def deberta_project(rel_embeddings, weight, bias, num_heads: int) -> np.ndarray:
    """``E Wᵀ + b`` split in heads: ``E [2s, d_model]``, ``W [H·D, d_model]``, ``b [H·D]`` -> ``[H, 2s, D]``."""
    e = np.asarray(rel_embeddings, dtype=np.float64)
    out = e @ np.asarray(weight, dtype=np.float64).T + np.asarray(bias, dtype=np.float64)  # (2s, H·D)
    return out.reshape(e.shape[0], num_heads, -1).transpose(1, 0, 2)


def deberta(q, k, q_positions, k_positions, *, pos_key=None, pos_query=None, position_buckets: int = 256,
            max_relative_positions: int = 512, scale: float | None = None) -> np.ndarray:
    """c2p + p2c times ``scale``: ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]``, projected tables
    ``pos_key`` (c2p) and ``pos_query`` (p2c) ``[H, 2s, D]``, each None when its term is off
    -> ``[B, H, Lq, Lk]``. ``scale`` defaults to ``1/√(D·f)``, ``f = 1 +`` the terms given."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    terms = [t for t in (pos_key, pos_query) if t is not None]
    scale = 1.0 / np.sqrt(q.shape[-1] * (1 + len(terms))) if scale is None else scale
    idx = deberta_index(q_positions, k_positions, position_buckets, max_relative_positions)  # (..., Lq, Lk)
    idx = idx.reshape((-1,) + idx.shape[-2:])  # (1 or B, Lq, Lk)
    out = np.zeros(q.shape[:3] + k.shape[2:3])
    if pos_key is not None:  # q_i · K^r_δ(i,j)
        rows = np.asarray(pos_key, dtype=np.float64)[:, idx]  # (H, 1 or B, Lq, Lk, D)
        out = out + np.einsum("bhqd,hbqkd->bhqk", q, rows)
    if pos_query is not None:  # k_j · Q^r_δ(i,j)
        rows = np.asarray(pos_query, dtype=np.float64)[:, idx]  # (H, 1 or B, Lq, Lk, D)
        out = out + np.einsum("bhkd,hbqkd->bhqk", k, rows)
    return out * scale


def deberta_attention(q, k, v, q_positions, k_positions, *, pos_key=None, pos_query=None,
                      position_buckets: int = 256, max_relative_positions: int = 512, causal: bool = False,
                      scale: float | None = None) -> np.ndarray:
    """``softmax((q·k + c2p + p2c)/√(D·f)) v``: ``[B, H, Lq, Dv]``. ``scale`` replaces the content
    term's ``1/√(D·f)`` (as ``posenc.attention``'s ``scale=``); c2p + p2c keep theirs."""
    q = np.asarray(q, dtype=np.float64)
    f = 1 + sum(t is not None for t in (pos_key, pos_query))
    scale = 1.0 / np.sqrt(q.shape[-1] * f) if scale is None else scale
    term = deberta(q, k, q_positions, k_positions, pos_key=pos_key, pos_query=pos_query,
                   position_buckets=position_buckets, max_relative_positions=max_relative_positions)
    return attention(q, k, v, bias=term, causal=causal, scale=scale)
