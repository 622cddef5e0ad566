"""Dual Chunk Attention (An et al. 2024, arXiv:2402.17463; Qwen2.5-1M, arXiv:2501.15383; the code
people run: vLLM's ``dual_chunk_rope`` and ``DualChunkFlashAttention``): a trained RoPE model read
past its length without training, every query–key distance remapped below ``chunk_size``.

    s_pt = τ_p² · scale · (R(q_pos(p, t)) q_p) · (R(t mod l) k_t),     l = chunk_size − local_size

with the query's position ``q_pos`` one of three by the chunks between ``p`` and ``t`` (intra,
successive, inter) and the temperature ``τ_p`` (``posenc.reference.dual_chunk``, which states the
formula and where posenc's ``τ`` differs from vLLM's).

**Its kind: relative, and why.** The score of a pair is a ``D``-long dot product of the key with
*one of three* rotations of the query, picked per pair. So it is not a rotation (one map per query
and per key, then ``q·k``: the rotary kind), nor a bias (a function of the two positions alone,
FlexAttention's elementwise ``score_mod``): a ``score_mod`` sees one score ``q·k`` and the indices,
never the other two products. It is a query/key-dependent term, the ``relative`` kind's
``module(q, k, q_positions, k_positions) -> [B, H, Lq, Lk]``, which ``posenc.attention`` adds to the
plain scaled scores on the materialize, chunked and blockwise backends (the last with its
recomputing backward: trainable at any length); flex refuses relative schemes, and ``auto``
takes blockwise. The term is ``s_pt − q_p·k_t/√D``, so the sum is DCA's score: each block computes
the three products ``Q_r K̃ᵀ`` of its queries and keys (only those of the relations present: a
block inside one chunk costs one) and picks per pair with the chunk index difference, as vLLM's
three flash-attention calls over the intra, successive and inter key ranges merged by their
log-sum-exp do. The term is relative to the default scale ``1/√D`` (as Transformer-XL's).

**Positions.** Integer, one axis; keys are rotated at ``t mod l``, within a chunk, so no angle
exceeds ``chunk_size·θ``; with ``document_ids`` positions restart in each document and so do the
chunks. **KV cache.** Each key's rotation depends on its position only and each query's on its
own and the key's, and ``τ_p`` on ``p`` alone: decoding with cached keys equals recomputing.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.encodings._base import RelativeEncoding, to_numpy as _numpy
from posenc.limits import Dim, Positions, check_memory
from posenc.reference.dual_chunk import check_chunks
from posenc.reference.positions import exact_inv_freq, exact_split
from posenc.registry import register
from posenc.rotary import LAYOUTS, angles_cos_sin, apply_rotary


@register("dual_chunk", kind="relative")
class DualChunk(RelativeEncoding):
    """Dual Chunk Attention (An et al. 2024; Qwen2.5-1M): intra, successive and inter-chunk RoPE positions.

    ``module(q [B, H, Lq, D], k [B, H, Lk, D], q_positions, k_positions) -> [B, H, Lq, Lk]``, the term
    that makes ``q·k/√D`` DCA's score.
    """

    model_sizes = ("head_dim",)  # no parameter per head: any number of heads

    def __init__(self, *, head_dim: Dim, chunk_size: Positions = 8192, local_size: Positions = 1024,
                 base: float = 10000.0, original_max_position_embeddings: Positions | None = None,
                 layout: str = "half") -> None:
        super().__init__()
        self.head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
        self.chunk_size, self.local_size = check_chunks(chunk_size, local_size)
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.original_max_position_embeddings = (None if original_max_position_embeddings is None else check_int(
            "original_max_position_embeddings", original_max_position_embeddings, min=1))
        self.layout = check_choice("layout", layout, LAYOUTS)
        check_memory("head_dim", self.head_dim, 2 * self.head_dim, bytes_per=8, what="its float64 frequencies")
        # Rotation positions stay below chunk_size: under 2^21 the float64 θ is off by < 2^21·θ·2^-53
        # (2e-10) in the angle, so the double-double θ (40-digit arithmetic per frequency) only past it.
        exact = self.chunk_size >= 1 << 21
        hi, lo = exact_split(exact_inv_freq(self.head_dim, self.base) if exact
                             else ref.rope_inv_freq(self.head_dim, self.base))
        self.register_float64("inv_freq", torch.from_numpy(hi))
        self.register_float64("inv_freq_lo", torch.from_numpy(lo))

    @property
    def chunk_len(self) -> int:
        """``l = chunk_size − local_size``: the tokens of one chunk."""
        return self.chunk_size - self.local_size

    def _rotated(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x [B, H, L, D]`` rotated at ``positions [L]`` or ``[B, L]`` (already remapped), x's dtype."""
        cos, sin = angles_cos_sin(positions, self.inv_freq, x.dtype, inv_freq_lo=self.inv_freq_lo)  # (.., L, D/2)
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, L, D/2)
        return apply_rotary(x, cos, sin, layout=self.layout)

    def temperature(self, q_positions: torch.Tensor) -> torch.Tensor:
        """``τ_p² = max(1, 0.1 ln((p + 1)/L₀) + 1)²`` per query, float64 ``[..., Lq]`` (ones without ``L₀``)."""
        p = q_positions.to(torch.float64)
        if self.original_max_position_embeddings is None:
            return torch.ones_like(p)
        return (0.1 * torch.log((p + 1.0) / self.original_max_position_embeddings) + 1.0).clamp(min=1.0) ** 2

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
                k_positions: torch.Tensor) -> torch.Tensor:
        """``s_pt − q_p·k_t/√D`` for ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]`` -> ``[B, H, Lq, Lk]`` in q's dtype."""
        q, k, q_positions, k_positions = self.check_inputs(q, k, q_positions, k_positions)
        dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k = q.to(work), k.to(work)
        length = self.chunk_len
        p, t = q_positions, k_positions  # (Lq) or (B, Lq); (Lk) or (B, Lk)
        apart = (p // length).unsqueeze(-1) - (t // length).unsqueeze(-2)  # (.., Lq, Lk): chunks between
        if apart.dim() == 3:
            apart = apart.unsqueeze(1)  # (B, 1, Lq, Lk)
        keys = self._rotated(k, t % length).transpose(-1, -2)  # (B, H, D, Lk): each key within its chunk
        inside = p % length
        query_at = {  # the relation's test on `apart`, and the query's rotation position
            "intra": (apart <= 0, inside),
            "successive": (apart == 1, (inside + length).clamp(max=self.chunk_size)),
            "inter": (apart >= 2, torch.full_like(inside, min(2 * length - 1, self.chunk_size))),
        }
        compiling = torch.compiler.is_compiling()  # no branch on data under torch.compile: all three
        present = [(where, at) for where, at in query_at.values() if compiling or bool(where.any())] \
            or [query_at["intra"]]
        scores = self._rotated(q, present[0][1]) @ keys  # (B, H, Lq, Lk); a block inside one chunk: one product
        for where, at in present[1:]:
            scores = torch.where(where, self._rotated(q, at) @ keys, scores)
        tau2 = self.temperature(p).to(work).unsqueeze(-1)  # (.., Lq, 1)
        if tau2.dim() == 3:
            tau2 = tau2.unsqueeze(1)  # (B, 1, Lq, 1)
        return ((scores * tau2 - q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)).to(dtype)

    @classmethod
    def fit_to_training(cls, given: dict[str, Any], length: int) -> dict[str, Any]:
        """Chunks of the training length with vLLM's local share (``local_size = chunk_size / 8``,
        its defaults 8192 and 1024), and the temperature from the training length."""
        chunk = given.get("chunk_size", length)
        fitted = {"chunk_size": length, "local_size": max(0, min(chunk - 1, chunk // 8)),
                  "original_max_position_embeddings": length}
        return {key: value for key, value in fitted.items() if key not in given}

    def reference(self, q, k, q_positions, k_positions):
        """Float64 NumPy term (``posenc.reference.dual_chunk``)."""
        return ref.dual_chunk(_numpy(q), _numpy(k), _numpy(q_positions), _numpy(k_positions),
                              chunk_size=self.chunk_size, local_size=self.local_size, base=self.base,
                              original_max_position_embeddings=self.original_max_position_embeddings,
                              layout=self.layout)
