"""PaTH, position encoding via accumulating Householder transformations (Yang et al. 2025, "PaTH
Attention: Position Encoding via Accumulating Householder Transformations", arXiv:2505.16381;
reference in flash-linear-attention).

Between key ``j`` and query ``i`` the key is carried through every token's reflection on the path:

    H_t = I − β_t w_t w_tᵀ,   s_ij = q_iᵀ (H_i H_{i−1} ⋯ H_{j+1}) k_j · scale   (j ≤ i),   o_i = Σ_j softmax_j(s_ij) v_j

with ``w_t = normalize(W_w x_t)`` (a unit vector per head) and ``β_t = 2σ(W_β x_t + b_β)`` ∈ (0, 2)
from the layer's input ``x``. Two options of flash-linear-attention's ``PaTHAttention`` change
how ``w`` is made (``path_gates``):

- low rank: ``W_w = W_up W_down`` (``W_down [r, d_model]``, ``W_up [H·D, r]``; its default r = 32);
- a short convolution before the normalization: ``u_t = SiLU(Σ_{s=0}^{K−1} c[:, K−1−s] ⊙ (W_w x)_{t−s})``,
  depthwise over the ``H·D`` channels, causal (zeros before the first token, and before each
  packed document's first token: it restarts as flash-linear-attention's ``cu_seqlens`` does),
  no bias; its default ``K = 3``. Then ``w_t = normalize(u_t)`` per head. Computed from the query backwards: ``u ← q_i``; for ``j = i, i − 1,
…``: ``s_ij = u·k_j``, then ``u ← H_j u`` (each ``H`` is symmetric, so ``q_iᵀ H_i ⋯ H_{j+1} =
(H_{j+1} ⋯ H_i q_i)ᵀ``).
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, log_sigmoid, logit_cap, masked_attention


def path_gates(hidden, w_weight, beta_weight, beta_bias, num_heads: int, *, w_down=None, w_conv=None,
               document_ids=None):
    """``w [B, H, L, D]`` unit vectors and ``β [B, H, L]`` from ``hidden [B, L, d_model]``,
    ``w_weight [H·D, d_model]`` (``[H·D, r]`` with ``w_down [r, d_model]``: low rank),
    ``beta_weight [H, d_model]``, ``beta_bias [H]``; ``w_conv [H·D, K]`` a short causal convolution
    (SiLU after it) restarting at each document of ``document_ids`` (``[L]`` or ``[B, L]``)."""
    x = np.asarray(hidden, dtype=np.float64)
    b, length, _ = x.shape
    projection = np.asarray(w_weight, dtype=np.float64)  # (H·D, d_model), or (H·D, r) with w_down
    if w_down is not None:
        projection = projection @ np.asarray(w_down, dtype=np.float64)  # W_up W_down: (H·D, d_model)
    w = x @ projection.T  # (B, L, H·D)
    if w_conv is not None:
        kernel = np.asarray(w_conv, dtype=np.float64)
        size = kernel.shape[-1]
        docs = np.zeros((1, length), dtype=np.int64) if document_ids is None else np.asarray(document_ids).reshape(-1, length)
        conv = np.zeros_like(w)
        for t in range(length):
            for s in range(min(size, t + 1)):  # the input s tokens back, in the same document only
                same = (docs[:, t - s] == docs[:, t])[:, None]  # (1 or B, 1)
                conv[:, t] += np.where(same, kernel[:, size - 1 - s] * w[:, t - s], 0.0)
        w = conv / (1.0 + np.exp(-conv))  # SiLU
    w = w.reshape(b, length, num_heads, -1).transpose(0, 2, 1, 3)
    w = w / np.linalg.norm(w, axis=-1, keepdims=True)
    beta = 2 * np.exp(log_sigmoid(x @ np.asarray(beta_weight, dtype=np.float64).T + beta_bias)).transpose(0, 2, 1)
    return w, beta


def path(q, k, v, w, beta, *, scale: float | None = None, document_ids=None, softcap: float | None = None,
         sinks=None) -> np.ndarray:
    """Causal PaTH attention; ``w [B, H, Lk, D]``, ``beta [B, H, Lk]``. ``softcap``: the whole score
    ``c · tanh(s / c)``; ``sinks [H]``: one more logit per head in each row's softmax, of value 0."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    bsz, heads, lq, _ = q.shape
    lk = k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.zeros((bsz, heads, lq, lk))
    for b in range(bsz):
        for h in range(heads):
            for r in range(lq):
                i = r + lk - lq
                u = q[b, h, r].copy()
                for j in range(i, -1, -1):
                    scores[b, h, r, j] = u @ k[b, h, j]
                    u = u - beta[b, h, j] * w[b, h, j] * (w[b, h, j] @ u)
    return masked_attention(logit_cap(scores * scale, softcap), v, causal_mask(lq, lk, document_ids), sinks=sinks)
