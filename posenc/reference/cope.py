"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", arXiv:2405.18719).

A key's position is counted from the query backwards, by gates the query opens on the keys:

    g_ij = σ(q_i·k_j),   p_ij = min(Σ_{t=j..i} g_it, npos_max − 1)
    e(p) = (p − ⌊p⌋) e[⌈p⌉] + (1 − (p − ⌊p⌋)) e[⌊p⌋]        (learned e [npos_max, D], interpolated)

and the score gains ``q_i·e(p_ij)``. Two conventions differ in where the scale enters:

- ``"ram"`` (the official code, facebookresearch/RAM ``projects/cope``): gates on the raw
  ``q·k``, and ``s_ij = (q_i·k_j + q_i·e(p_ij)) · scale``;
- ``"scaled"`` (the paper's appendix and x-transformers): gates on the scaled ``z = q·k·scale``,
  and ``s_ij = z_ij + q_i·e(p_ij)``.

Then ``o_i = Σ_{j≤i} softmax_j(s_ij) v_j``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, masked_attention

CONVENTIONS = ("ram", "scaled")


def cope_positions(q, k, *, npos_max: int, convention: str = "ram", scale: float | None = None,
                   document_ids=None) -> np.ndarray:
    """``p [B, H, Lq, Lk]``: each key's contextual position seen from each query (0 where masked)."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 if convention == "ram" else scale)
    gates = np.where(causal_mask(lq, lk, document_ids), 1.0 / (1.0 + np.exp(-logits)), 0.0)
    return np.minimum(np.cumsum(gates[..., ::-1], axis=-1)[..., ::-1], npos_max - 1)


def cope(q, k, v, pos_emb, *, convention: str = "ram", scale: float | None = None, document_ids=None) -> np.ndarray:
    """Causal CoPE attention; ``pos_emb [npos_max, D]``."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    q, k, e = (np.asarray(t, dtype=np.float64) for t in (q, k, pos_emb))
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    p = cope_positions(q, k, npos_max=e.shape[0], convention=convention, scale=scale, document_ids=document_ids)
    lo, hi = np.floor(p).astype(np.int64), np.ceil(p).astype(np.int64)
    w = p - lo
    qe = np.einsum("bhqd,pd->bhqp", q, e)  # (B, H, Lq, npos_max): q_i·e[p] at every integer p
    term = np.take_along_axis(qe, hi, -1) * w + np.take_along_axis(qe, lo, -1) * (1 - w)
    s = np.einsum("bhqd,bhkd->bhqk", q, k)
    scores = (s + term) * scale if convention == "ram" else s * scale + term
    return masked_attention(scores, v, causal_mask(lq, lk, document_ids))
