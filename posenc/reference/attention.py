"""Scaled dot-product attention in float64 (Vaswani et al. 2017, "Attention Is All You Need").

    attention(Q, K, V) = softmax(Q Kᵀ · scale + bias) V,   scale = 1/√D

With a logit cap ``c`` (Gemma 2's ``attn_logit_softcapping``; Gemma Team 2024, arXiv:2408.00118)
the content score is bounded before the bias and the mask are added, as transformers' Gemma 2
attention does: ``s = c · tanh(Q Kᵀ · scale / c) + bias``. With attention sinks ``σ_h`` (one
logit per head: GPT-OSS, OpenAI 2025; Xiao et al. 2023, arXiv:2309.17453) the softmax's
denominator gains ``e^{σ_h}``, as if one more key with score ``σ_h`` and value 0:
``p_ij = e^{s_ij} / (e^{σ_h} + Σ_j' e^{s_ij'})``.

Attention dropout (Srivastava et al. 2014; on the weights after the softmax, as Vaswani et al.
2017 and transformers' ``attention_dropout``) with a given keep-mask ``K ∈ {0, 1}`` and rate ``p``:
``o_i = Σ_j p_ij · K_ij / (1 − p) · v_j``, the softmax's normaliser unchanged (the dropped weights
still count in it). The mask is an input here: ``posenc.dropout`` says how ``posenc.attention``
derives it from a seed.

Which keys a query sees (``visibility_mask``) is read from key indices: query ``i`` of ``Lq`` is
key index ``i' = i + Lk − Lq`` (queries are the last ``Lq`` keys). Causal: ``j ≤ i'``. A sliding
window ``W`` (Mistral's and Gemma's local attention; Beltagy et al. 2020, arXiv:2004.05150):
``i' − j ≤ W − 1`` (at most ``W − 1`` positions back) and, without causality, ``j − i' ≤ W − 1``.
Documents: ``j`` in the document of ``i'``.
"""

from __future__ import annotations

import numpy as np


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    scores = scores - np.max(scores, axis=axis, keepdims=True)
    e = np.exp(scores)
    return e / np.sum(e, axis=axis, keepdims=True)


def attention(q, k, v, *, bias=None, causal: bool = False, scale: float | None = None,
              allowed=None, softcap: float | None = None, sinks=None, window: int | None = None,
              keep=None, dropout_p: float = 0.0) -> np.ndarray:
    """``q [B, H, Lq, D]``, ``k, v [B, H_kv, Lk, D]`` -> ``[B, H, Lq, D]``.

    ``bias`` broadcasts against the scores ``[B, H, Lq, Lk]``. ``causal`` lets query ``i`` see key
    ``j`` when ``j <= i + (Lk - Lq)`` (aligned at the bottom right, as with a KV cache). ``allowed``
    (bool, broadcasting against the scores) masks pairs further. Grouped heads: with ``H_kv < H``
    (``H % H_kv == 0``) query head ``h`` reads key/value head ``h // (H / H_kv)``. A query that sees
    no key returns zeros. ``softcap``: ``c · tanh(q·k·scale / c)`` before ``bias`` is added;
    ``sinks [H]``: one extra logit per head in each row's denominator (value 0). ``window``: query
    ``i`` sees keys at most ``window − 1`` positions back (``visibility_mask``). ``keep`` (bool or
    0/1, broadcasting against the scores) with ``dropout_p`` in ``[0, 1)``: attention dropout, each
    weight times ``keep / (1 − dropout_p)`` after the softmax (module docstring).
    """
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must have shape [B, H, L, D]; got shapes {list(q.shape)}, {list(k.shape)}, "
                         f"{list(v.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must have last dimension {q.shape[-1]} (that of q), got {k.shape[-1]}")
    if (k.shape[0] != q.shape[0] or k.shape[1] == 0 or q.shape[1] % k.shape[1] or v.shape[:3] != k.shape[:3]):
        raise ValueError(f"q, k, v must be [B, H, Lq, D], [B, H_kv, Lk, D], [B, H_kv, Lk, Dv] with the same B and "
                         f"H_kv dividing H; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # head h reads kv head h // group
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * scale  # (B, H, Lq, Lk)
    scores = logit_cap(scores, softcap)
    if bias is not None:
        scores = scores + np.asarray(bias, dtype=np.float64)
    lq, lk = q.shape[-2], k.shape[-2]
    ok = np.ones(scores.shape, dtype=bool)
    if causal or window is not None:
        ok = ok & visibility_mask(lq, lk, causal=causal, window=window)
    if allowed is not None:
        ok = ok & np.asarray(allowed, dtype=bool)
    return masked_attention(scores, v, ok, sinks=sinks, keep=keep, dropout_p=dropout_p)


def dropped(weights, keep, dropout_p: float) -> np.ndarray:
    """``weights · keep / (1 − dropout_p)`` (attention dropout with a given mask), or ``weights``
    when ``keep`` is None."""
    if keep is None:
        return weights
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
    return weights * np.asarray(keep, dtype=np.float64) / (1.0 - dropout_p)


def logit_cap(scores, softcap: float | None) -> np.ndarray:
    """``c · tanh(scores / c)`` (Gemma 2's logit cap), or ``scores`` when ``softcap`` is None."""
    return scores if softcap is None else softcap * np.tanh(np.asarray(scores, dtype=np.float64) / softcap)


def causal_mask(lq: int, lk: int, document_ids=None, *, diagonal: bool = True, window: int | None = None) -> np.ndarray:
    """``[1 or B, 1, Lq, Lk]`` bool: query ``i`` (key index ``i + Lk − Lq``) sees key ``j`` when
    ``j <= i + Lk − Lq`` (``<`` without the ``diagonal``), with ``window`` when ``j`` is at most
    ``window − 1`` positions back, and, with ``document_ids [Lk]``/``[B, Lk]``, when both are in the
    same document."""
    return visibility_mask(lq, lk, causal=True, window=window, document_ids=document_ids, diagonal=diagonal)


def visibility_mask(lq: int, lk: int, *, causal: bool = True, window: int | None = None, document_ids=None,
                    diagonal: bool = True) -> np.ndarray:
    """``[1 or B, 1, Lq, Lk]`` bool, True where query ``i`` (key index ``i' = i + Lk − Lq``) sees key
    ``j``: causal ``j <= i'`` (``<`` without the ``diagonal``); ``window`` ``W``: ``i' − j <= W − 1``
    and, not causal, ``j − i' <= W − 1``; ``document_ids [Lk]``/``[B, Lk]``: the same document."""
    rows = np.arange(lk - lq, lk)[:, None]
    cols = np.arange(lk)[None, :]
    allowed = np.ones((lq, lk), dtype=bool)
    if causal:
        allowed = (cols <= rows) if diagonal else (cols < rows)
    if window is not None:
        allowed = allowed & (rows - cols <= window - 1)
        if not causal:
            allowed = allowed & (cols - rows <= window - 1)
    allowed = allowed[None, None]
    if document_ids is not None:
        docs = np.asarray(document_ids).reshape(-1, lk)
        allowed = allowed & (docs[:, None, lk - lq:, None] == docs[:, None, None, :])
    return allowed


def log_sigmoid(x) -> np.ndarray:
    """``log σ(x) = −log(1 + e^{−x})``, without overflow."""
    return -np.logaddexp(0.0, -np.asarray(x, dtype=np.float64))


def masked_attention(scores, v, allowed, *, sinks=None, keep=None, dropout_p: float = 0.0) -> np.ndarray:
    """``softmax(scores)`` over the ``allowed`` keys (``[.., Lq, Lk]``), times ``v [B, H, Lk, Dv]``;
    a row with no allowed key gives zeros. ``sinks [H]``: a column of score ``sinks[h]`` joins each
    row of head ``h`` in the softmax and is dropped after (its value is 0). ``keep``, ``dropout_p``:
    attention dropout with that mask (``dropped``)."""
    scores = np.asarray(scores, dtype=np.float64)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), scores.shape)
    seen = allowed.any(-1, keepdims=True)  # (.., Lq, 1)
    scores = np.where(allowed, scores, -np.inf)
    if sinks is not None:
        sink = np.broadcast_to(np.asarray(sinks, dtype=np.float64).reshape(-1, 1, 1), scores.shape[:-1] + (1,))
        full = np.concatenate([np.where(seen, scores, 0.0), sink], axis=-1)  # (.., Lq, Lk + 1)
        weights = dropped(np.where(seen, softmax(full)[..., :-1], 0.0), keep, dropout_p)
        return np.einsum("bhqk,bhkd->bhqd", weights, np.asarray(v, dtype=np.float64))
    weights = dropped(np.where(seen, softmax(np.where(seen, scores, 0.0)), 0.0), keep, dropout_p)
    return np.einsum("bhqk,bhkd->bhqd", weights, np.asarray(v, dtype=np.float64))
