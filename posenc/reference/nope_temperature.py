"""Llama 4's attention temperature for its NoPE layers (Meta 2025, Llama 4; transformers'
``Llama4TextAttention``: ``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``; after
Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv:2501.19399).

Llama 4 leaves position out of one layer in four (no RoPE) and scales those layers' queries by a
factor that grows with the query's position ``p``, in steps of ``floor_scale`` tokens:

    τ(p) = 1 + attn_scale · log(1 + ⌊(p + 1) / floor_scale⌋)

so the softmax sharpens as the context grows (τ = 1 for the first ``floor_scale − 1`` positions).

Ministral 3 (transformers' ``get_llama_4_attn_scale``, its rope parameter ``llama_4_scaling_beta``)
scales the queries of every layer, after RoPE, by the same formula at ``p`` instead of ``p + 1``,

    τ(p) = 1 + β · log(1 + ⌊p / original_max_position_embeddings⌋)

(τ = 1 for the first ``original_max_position_embeddings`` positions, one more than Llama 4's):
:func:`query_temperature_scale` is both, with ``position_offset`` 1 (Llama 4) or 0 (Ministral 3).
"""

from __future__ import annotations

import numpy as np

from posenc.reference.positions import positions_array


def query_temperature_scale(positions, *, attn_scale: float, floor_scale: float, position_offset: int,
                            scheme: str = "") -> np.ndarray:
    """``τ(p) = 1 + attn_scale · log(1 + ⌊(p + position_offset) / floor_scale⌋)`` for integer
    positions ``[L]`` or ``[B, L]``: float64 of the same shape (Llama 4: ``position_offset=1``;
    Ministral 3: 0)."""
    p = positions_array("positions", positions, scheme=scheme).astype(np.float64)
    return 1.0 + attn_scale * np.log1p(np.floor((p + float(position_offset)) / floor_scale))


def nope_temperature_scale(positions, *, attn_scale: float = 0.1, floor_scale: float = 8192.0) -> np.ndarray:
    """``τ(p)`` for integer positions ``[L]`` or ``[B, L]``: float64 of the same shape."""
    return query_temperature_scale(positions, attn_scale=attn_scale, floor_scale=floor_scale, position_offset=1,
                                   scheme="nope_temperature")


def nope_temperature(x, positions, *, attn_scale: float = 0.1, floor_scale: float = 8192.0) -> np.ndarray:
    """Queries ``x [B, H, L, D]`` times ``τ`` of their positions (``[L]`` or ``[B, L]``)."""
    tau = nope_temperature_scale(positions, attn_scale=attn_scale, floor_scale=floor_scale)
    return np.asarray(x, dtype=np.float64) * tau.reshape((-1, 1) + tau.shape[-1:] + (1,))
