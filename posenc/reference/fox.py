"""FoX, the Forgetting Transformer (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate", arXiv:2503.02130).

    f_t = σ(w_h · x_t + b_h)                      a forget gate per head h and token t
    o_i = Σ_{j≤i} softmax_j(q_i·k_j · scale + Σ_{l=j+1..i} log f_l) v_j
        = Σ_{j≤i} softmax_j(q_i·k_j · scale + c_i − c_j) v_j,   c = cumsum(log f)

With packed documents (``document_ids``) ``c`` is the running sum of each document's own gates,
restarting at its first token (``cumsum_in_documents``): the keys of a query's document are the
only ones it sees, so each document gives what it gives alone. No other positional encoding. With the gate reduced to its bias (``w = 0``) the bias is
``(i − j) · log σ(b_h)``: ALiBi with slope ``−log σ(b_h)``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, log_sigmoid, logit_cap, masked_attention


def fox_log_gates(hidden, weight, bias) -> np.ndarray:
    """``log f [B, H, L]`` from ``hidden [B, L, d_model]``, ``weight [H, d_model]`` (or None: the
    gate is its bias alone, ``[1, H, 1]``) and ``bias [H]``."""
    bias = np.asarray(bias, dtype=np.float64)
    if weight is None:
        return log_sigmoid(bias)[None, :, None]
    z = np.einsum("bld,hd->bhl", np.asarray(hidden, dtype=np.float64), np.asarray(weight, dtype=np.float64))
    return log_sigmoid(z + bias[None, :, None])


def fox(q, k, v, log_f, *, scale: float | None = None, document_ids=None, softcap: float | None = None,
        sinks=None, window: int | None = None) -> np.ndarray:
    """Causal FoX attention of ``q [B, H, Lq, D]`` (the last Lq keys) over ``k, v [B, H, Lk, ·]``
    with the log forget gates ``log_f [B, H, Lk]`` (``[1, H, 1]``: one per head, at every token).
    ``softcap``: ``c · tanh(q·k·scale / c)`` before the gates' bias is added (Gemma 2); ``sinks [H]``:
    one more logit per head in each row's softmax, of value 0 (GPT-OSS); ``window``: keys at most
    ``window − 1`` positions back (``causal_mask``)."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    lq, lk = q.shape[2], k.shape[2]
    log_f = np.broadcast_to(np.asarray(log_f, dtype=np.float64), (max(q.shape[0], np.shape(log_f)[0]),
                                                                    q.shape[1], lk))
    c = np.cumsum(log_f, axis=-1) if document_ids is None else cumsum_in_documents(log_f, document_ids)  # (B, H, Lk)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = logit_cap(np.einsum("bhqd,bhkd->bhqk", q, k) * scale, softcap) + c[..., lk - lq:, None] - c[..., None, :]
    return masked_attention(scores, v, causal_mask(lq, lk, document_ids, window=window), sinks=sinks)


def cumsum_in_documents(x, document_ids) -> np.ndarray:
    """The running sum of ``x [B, H, L]`` along ``L``, restarting at each document's first token
    (``document_ids [L]`` or ``[B, L]``, non-decreasing): each document summed on its own."""
    x = np.asarray(x, dtype=np.float64)
    docs = np.broadcast_to(np.asarray(document_ids).reshape(-1, x.shape[-1]), (x.shape[0], x.shape[-1]))
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        starts = np.flatnonzero(np.r_[True, docs[b, 1:] != docs[b, :-1]])  # each document's first token
        for s, e in zip(starts, np.r_[starts[1:], x.shape[-1]]):
            out[b, :, s:e] = np.cumsum(x[b, :, s:e], axis=-1)
    return out
