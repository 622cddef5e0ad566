"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with
Relative Position Representations", arXiv:1803.02155, §3).

    e_ij = q_i · (k_j + a^K_ij) / √D,     z_i = Σ_j α_ij (v_j + a^V_ij)
    a^K_ij = w^K[clip(j − i, −k, k)],     a^V_ij = w^V[clip(j − i, −k, k)]

Two learned tables of ``2k + 1`` rows shared by the heads. Neither path builds a ``[Lq, Lk, D]``
tensor: the key term gathers ``q · w^Kᵀ`` (``[B, H, Lq, 2k + 1]``) at each pair's row, and the
value term sums the attention weights of each row (a scatter-add) before one matmul with ``w^V``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import check_int
from posenc.registry import register
from posenc.encodings._base import RelativeEncoding, relative_distance, to_numpy as _numpy
from posenc.limits import Clip, Dim, check_memory


@register("shaw", kind="relative")
class Shaw(RelativeEncoding):
    """Learned key and value embeddings of the clipped relative distance (Shaw et al. 2018)."""

    def __init__(self, *, head_dim: Dim, max_distance: Clip = 16) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.max_distance = check_int("max_distance", max_distance, min=0)
        rows = 2 * self.max_distance + 1
        check_memory("max_distance", self.max_distance, 2 * rows * self.head_dim,
                     what=f"its two tables of 2·max_distance+1 = {rows} × head_dim={self.head_dim}")
        self.table_k = nn.Parameter(torch.randn(rows, self.head_dim))  # (2k+1, D): w^K, N(0, 1) like nn.Embedding
        self.table_v = nn.Parameter(torch.randn(rows, self.head_dim))  # (2k+1, D): w^V

    def index(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """``clip(j − i, −k, k) + k``: ``[Lq, Lk]`` or ``[B, Lq, Lk]``, the table row of each pair."""
        m = self.max_distance
        return relative_distance(q_positions, k_positions).to(self.table_k.device).clamp(-m, m) + m

    def _rows(self, q_positions, k_positions, shape: tuple[int, ...]) -> torch.Tensor:
        """The table row of each pair, expanded to ``shape = (B, H, Lq, Lk)`` (a view)."""
        return self.index(q_positions, k_positions).unsqueeze(-3).expand(shape)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
                k_positions: torch.Tensor) -> torch.Tensor:
        """``q_i · a^K_ij / √D``: ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]`` -> ``[B, H, Lq, Lk]`` in q's dtype."""
        q, k, q_positions, k_positions = self.check_inputs(q, k, q_positions, k_positions)
        work = torch.promote_types(q.dtype, torch.float32)
        qa = q.to(work) @ self.table_k.to(work).t()  # (B, H, Lq, 2k+1): q_i · w^K_r for every row r
        rows = self._rows(q_positions, k_positions, (*q.shape[:3], k.shape[2]))  # (B, H, Lq, Lk)
        return (qa.gather(-1, rows) / math.sqrt(self.head_dim)).to(q.dtype)

    def value_term(self, p: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """``Σ_j p_ij a^V_ij``: attention weights ``p [B, H, Lq, Lk]`` -> ``[B, H, Lq, D]`` in p's dtype."""
        p, _, q_positions, k_positions = self.check_inputs(p, None, q_positions, k_positions, q_name="p")
        work = torch.promote_types(p.dtype, torch.float32)
        rows = self._rows(q_positions, k_positions, p.shape)  # (B, H, Lq, Lk)
        per_row = p.new_zeros(*p.shape[:3], self.table_v.shape[0], dtype=work)  # (B, H, Lq, 2k+1)
        per_row = per_row.scatter_add(-1, rows, p.to(work))  # the weight each query gives each row
        return (per_row @ self.table_v.to(work)).to(p.dtype)  # (B, H, Lq, D)

    def reference(self, q, k, q_positions, k_positions):
        return ref.shaw(_numpy(q), _numpy(q_positions), _numpy(k_positions), _numpy(self.table_k))

    def value_reference(self, p, q_positions, k_positions):
        return ref.shaw_value(_numpy(p), _numpy(q_positions), _numpy(k_positions), _numpy(self.table_v))

    def reference_attention(self, q, k, v, q_positions, k_positions, *, causal: bool = False, scale=None):
        """Float64 ``posenc.attention(q, k, v, self, ...)``: scores, softmax and the value term."""
        return ref.shaw_attention(_numpy(q), _numpy(k), _numpy(v), _numpy(q_positions), _numpy(k_positions),
                                  _numpy(self.table_k), _numpy(self.table_v), causal=causal, scale=scale)
