"""Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
Models", ICML, arXiv:2402.17463; Qwen2.5-1M, Yang et al. 2025, arXiv:2501.15383, §4; the code people
run: vLLM's ``DualChunkRotaryEmbedding`` and ``DualChunkFlashAttention``).

A RoPE model trained on distances below ``chunk_size`` reads a sequence of any length in chunks of
``l = chunk_size − local_size`` tokens. A key at position ``t`` is rotated at ``t mod l``; the query
at position ``p`` is rotated at one of three positions, chosen by how many chunks lie between them
(``c(x) = ⌊x / l⌋``):

    intra        c(t) >= c(p)        p mod l                         distance (p − t) within a chunk
    successive   c(t) = c(p) − 1     min(p mod l + l, chunk_size)    neighbouring chunks: still local
    inter        c(t) <= c(p) − 2    min(2l − 1, chunk_size)         distant chunks: one fixed position

so that ``q_pos − k_pos`` never exceeds ``chunk_size`` (intra: below ``l``; successive and inter: at
most ``chunk_size``), a distance the model was trained on, however long the sequence. (Keys of later
chunks than the query's, which causal models never see, take the intra map.) The score of the pair
is RoPE's at that distance:

    s_pt = τ_p² · scale · (R(q_pos) q_p) · (R(t mod l) k_t) = τ_p² · scale · q_p · R(k_pos − q_pos) k_t

**Temperature** (Qwen2.5-1M, after YaRN's ``0.1 ln s + 1``): with ``original_max_position_embeddings
= L₀`` given, ``τ_p = max(1, 0.1 ln(n_p / L₀) + 1)`` multiplies both query and key (vLLM scales the key
cache and the softmax scale, or the query when decoding), so the logits are multiplied by ``τ²``.
vLLM takes ``n`` as the whole sequence's length for every query of a prefill; posenc takes
``n_p = p + 1``, the length the query has seen, so that a prefix's outputs do not depend on later
tokens and decoding with a KV cache equals recomputing. The two agree at the last query (and at
every decoding step). Without ``L₀`` (vLLM's ``original_max_position_embeddings = 0``): ``τ = 1``.

``dual_chunk_scores`` is that score; ``dual_chunk`` is the relative term posenc's ``relative`` kind
adds to the plain scaled scores, ``s_pt − scale · q_p · k_t``. Pairs: ``(i, i + D/2)`` ("half",
vLLM's ``is_neox_style``, Qwen's) or ``(2i, 2i + 1)`` ("interleaved").
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_float, check_int
from posenc.reference.positions import positions_array
from posenc.reference.rope import rope_inv_freq, rotate_pairs_index


def check_chunks(chunk_size: int, local_size: int) -> tuple[int, int]:
    """``chunk_size >= 2`` and ``0 <= local_size < chunk_size`` (the chunk length ``l`` is at least 1)."""
    chunk_size = check_int("chunk_size", chunk_size, min=2)
    local_size = check_int("local_size", local_size, min=0)
    if local_size >= chunk_size:
        raise ValueError(f"local_size must be below chunk_size={chunk_size} (chunks of chunk_size − local_size "
                         f"tokens), got {local_size}")
    return chunk_size, local_size


def dual_chunk_query_positions(q_positions, k_positions, *, chunk_size: int, local_size: int) -> np.ndarray:
    """The query's rotation position for every pair, int64 ``[..., Lq, Lk]`` (module docstring's table)."""
    chunk_size, local_size = check_chunks(chunk_size, local_size)
    p = positions_array("q_positions", q_positions, scheme="dual_chunk")[..., :, None]  # (..., Lq, 1)
    t = positions_array("k_positions", k_positions, scheme="dual_chunk")[..., None, :]  # (..., 1, Lk)
    length = chunk_size - local_size
    apart = p // length - t // length  # chunks between query and key
    intra = np.broadcast_to(p % length, apart.shape)
    successive = np.minimum(p % length + length, chunk_size)
    inter = min(2 * length - 1, chunk_size)
    return np.where(apart <= 0, intra, np.where(apart == 1, successive, inter)).astype(np.int64)


def dual_chunk_key_positions(k_positions, *, chunk_size: int, local_size: int) -> np.ndarray:
    """``t mod (chunk_size − local_size)``: the key's rotation position, int64 ``[..., Lk]``."""
    chunk_size, local_size = check_chunks(chunk_size, local_size)
    return positions_array("k_positions", k_positions, scheme="dual_chunk") % (chunk_size - local_size)


def dual_chunk_temperature(q_positions, original_max_position_embeddings: int | None = None) -> np.ndarray:
    """``τ_p = max(1, 0.1 ln((p + 1) / L₀) + 1)`` per query, float64 ``[..., Lq]`` (ones without ``L₀``)."""
    p = positions_array("q_positions", q_positions, scheme="dual_chunk").astype(np.float64)
    if original_max_position_embeddings is None:
        return np.ones_like(p)
    l0 = check_int("original_max_position_embeddings", original_max_position_embeddings, min=1)
    return np.maximum(1.0, 0.1 * np.log((p + 1.0) / l0) + 1.0)


def dual_chunk_scores(q, k, q_positions, k_positions, *, chunk_size: int = 8192, local_size: int = 1024,
                      base: float = 10000.0, original_max_position_embeddings: int | None = None,
                      layout: str = "half", scale: float | None = None) -> np.ndarray:
    """The Dual Chunk Attention score ``s_pt`` of ``q [B, H, Lq, D]`` and ``k [B, H, Lk, D]``:
    ``[B, H, Lq, Lk]`` float64, from the relative rotation ``R(k_pos − q_pos)`` of every pair."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    check_choice("layout", layout, ("half", "interleaved"))
    base = check_float("base", base, min=0.0, min_open=True)
    d = q.shape[-1]
    if d % 2 or k.shape[-1] != d:
        raise ValueError(f"q and k must share an even head dimension, got shapes {list(q.shape)} and {list(k.shape)}")
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    qpos = dual_chunk_query_positions(q_positions, k_positions, chunk_size=chunk_size, local_size=local_size)
    kpos = dual_chunk_key_positions(k_positions, chunk_size=chunk_size, local_size=local_size)
    gamma = (kpos[..., None, :] - qpos)[..., None] * rope_inv_freq(d, base)  # (..., Lq, Lk, D/2)
    if gamma.ndim == 4:
        gamma = gamma[:, None]  # (B, 1, Lq, Lk, D/2)
    a, b = rotate_pairs_index(d, layout)
    qa, qb = q[..., a][..., :, None, :], q[..., b][..., :, None, :]  # (B, H, Lq, 1, D/2)
    ka, kb = k[..., a][..., None, :, :], k[..., b][..., None, :, :]  # (B, H, 1, Lk, D/2)
    # q · R(γ) k per pair: (q_a k_a + q_b k_b) cos γ + (q_b k_a − q_a k_b) sin γ
    dot = ((qa * ka + qb * kb) * np.cos(gamma) + (qb * ka - qa * kb) * np.sin(gamma)).sum(-1)  # (B, H, Lq, Lk)
    tau = dual_chunk_temperature(q_positions, original_max_position_embeddings)  # (Lq) or (B, Lq)
    tau2 = (tau**2)[..., :, None] if tau.ndim == 1 else (tau**2)[:, None, :, None]
    return tau2 * scale * dot


def dual_chunk(q, k, q_positions, k_positions, *, chunk_size: int = 8192, local_size: int = 1024,
               base: float = 10000.0, original_max_position_embeddings: int | None = None, layout: str = "half",
               scale: float | None = None) -> np.ndarray:
    """The relative term ``s_pt − scale · q_p · k_t`` (``[B, H, Lq, Lk]``), which attention adds to
    the plain scaled scores to give the Dual Chunk Attention score."""
    s = dual_chunk_scores(q, k, q_positions, k_positions, chunk_size=chunk_size, local_size=local_size, base=base,
                          original_max_position_embeddings=original_max_position_embeddings, layout=layout,
                          scale=scale)
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    return s - scale * np.einsum("bhqd,bhkd->bhqk", q, k)
