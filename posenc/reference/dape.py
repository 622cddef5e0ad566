"""DAPE, data-adaptive positional encoding (Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive
Positional Encoding for Length Extrapolation", arXiv:2405.14722; code chuanyang-Zheng/DAPE).

A small MLP across heads reads each (query, key) pair's scaled scores and bias and corrects the bias:

    A_ij = q_i·k_j · scale  (every head),   B_ij = the wrapped bias (ALiBi, KERPLE, FIRE, ...)
    s_ij = A_ij + B_ij + W2 · LeakyReLU(W1 · [A_ij; B_ij] + b1) + b2,   W1: 2H → hidden, W2: hidden → H

as the repository's ``AliBi_DAPE``/``ParallelKerpleLog_DAPE`` (``x + a + mlp2(cat(x, a))``, LeakyReLU
of slope 0.01), then the mask and the softmax. Positions are token indices (restarting at 0 in
each packed document).

Around FIRE the repository's ``FIRE_DAPE`` also gives FIRE's own MLP a LeakyReLU (slope 0.01)
where FIRE's paper (and posenc's ``fire``) has a ReLU: ``leaky_fire`` is that bias,
``f(x) = W2 · LeakyReLU(w1 x + b1) + b2`` of FIRE's input ``x = ψ(|i − j|) / (ψ(max(L, i)) + eps)``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, logit_cap, masked_attention
from posenc.reference.fire import fire_input

NEGATIVE_SLOPE = 0.01  # torch.nn.LeakyReLU's default, which the repository's MLPs use


def leaky_relu(x):
    return np.where(x > 0, x, NEGATIVE_SLOPE * x)


def leaky_fire(q_positions, k_positions, w1, b1, w2, b2, *, c: float, L: float, eps: float = 1e-6) -> np.ndarray:
    """FIRE's bias with a LeakyReLU in its MLP (``FIRE_DAPE``): ``w1, b1 [hidden]``, ``w2 [H, hidden]``,
    ``b2 [H]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` for batched positions)."""
    w1, b1, w2, b2 = (np.asarray(t, dtype=np.float64) for t in (w1, b1, w2, b2))
    x = fire_input(q_positions, k_positions, c=c, L=L, eps=eps)  # (..., Lq, Lk)
    hidden = leaky_relu(x[..., None] * w1 + b1)  # (..., Lq, Lk, hidden)
    return np.moveaxis(hidden @ w2.T + b2, -1, -3)  # (..., H, Lq, Lk)


def token_positions(lk: int, document_ids=None) -> np.ndarray:
    """``[Lk]`` (or ``[B, Lk]``): each token's index in its document (0, 1, ... from each start)."""
    if document_ids is None:
        return np.arange(lk)
    docs = np.asarray(document_ids).reshape(-1, lk)
    out = np.zeros_like(docs)
    for b in range(docs.shape[0]):
        for t in range(1, lk):
            out[b, t] = 0 if docs[b, t] != docs[b, t - 1] else out[b, t - 1] + 1
    return out if np.ndim(document_ids) == 2 else out[0]


def dape(q, k, v, bias, w1, b1, w2, b2, *, causal: bool = True, scale: float | None = None,
         document_ids=None, softcap: float | None = None, sinks=None) -> np.ndarray:
    """``bias [H, Lq, Lk]`` or ``[B, H, Lq, Lk]``; ``w1 [hidden, 2H]``, ``b1 [hidden]``, ``w2 [H, hidden]``, ``b2 [H]``.
    ``softcap``: ``A = c · tanh(q·k·scale / c)`` (what the MLP reads too); ``sinks [H]``: one more
    logit per head in each row's softmax, of value 0."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    a = logit_cap(np.einsum("bhqd,bhkd->bhqk", q, k) * scale, softcap)
    b = np.broadcast_to(np.asarray(bias, dtype=np.float64), a.shape)
    x = np.concatenate([a, b], axis=1).transpose(0, 2, 3, 1)  # (B, Lq, Lk, 2H)
    h = x @ np.asarray(w1, dtype=np.float64).T + b1
    h = leaky_relu(h)
    mlp = (h @ np.asarray(w2, dtype=np.float64).T + b2).transpose(0, 3, 1, 2)  # (B, H, Lq, Lk)
    allowed = causal_mask(lq, lk, document_ids) if causal else np.ones((1, 1, lq, lk), dtype=bool)
    if document_ids is not None and not causal:
        docs = np.asarray(document_ids).reshape(-1, lk)
        allowed = docs[:, None, lk - lq:, None] == docs[:, None, None, :]
    return masked_attention(a + b + mlp, v, allowed, sinks=sinks)
