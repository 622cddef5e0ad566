"""PaTH, position encoding via accumulating Householder transformations (Yang et al. 2025, "PaTH
Attention: Position Encoding via Accumulating Householder Transformations", arXiv:2505.16381;
reference in flash-linear-attention).

    H_t = I − β_t w_t w_tᵀ,   s_ij = q_iᵀ (H_i ⋯ H_{j+1}) k_j · scale,   w_t = normalize(W_w x_t),   β_t = 2σ(W_β x_t + b)

The transform between a key and a query is the product of the reflections of the tokens between
them, each made from the layer's input (``hidden``): a position that is a rotation-like
transform learned from content, as RoPE's is a fixed rotation of the distance.

**Materialized only.** For each block of query rows the scores are built from the query
backwards, ``u ← q_i``, then for ``j = n − 1 … 0``: ``s_ij = u·k_j`` and ``u ← H_j u`` on the rows
``i ≥ j`` — ``Lk`` sequential steps that autograd keeps (``[B, H, c, D]`` each). That is
``O(Lk²·D)`` work and, with gradients, ``O(Lq·Lk·D)`` memory: there is no bounded-memory path
(the paper's is a blockwise UT-transform kernel), so inputs longer than ``max_length`` keys are
refused with a ValueError.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posenc._validate import check_int
from posenc.encodings._base import to_numpy
from posenc.limits import Dim, Heads, Rows, check_memory
from posenc.reference.path import path as path_ref, path_gates
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, softmax_rows


@register("path", kind="content")
class PaTH(RowwiseEncoding):
    """Keys carried to the query through each token's Householder reflection (PaTH); materialized."""

    reads_hidden = True

    def __init__(self, *, num_heads: Heads, head_dim: Dim, d_model: Dim, max_length: Rows = 1024) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.d_model = check_int("d_model", d_model, min=1)
        self.max_length = check_int("max_length", max_length, min=1)
        check_memory("d_model", self.d_model, (self.num_heads * self.head_dim + self.num_heads) * self.d_model,
                     what="its projections")
        bound = 1.0 / math.sqrt(self.d_model)
        self.w_weight = nn.Parameter(torch.empty(self.num_heads * self.head_dim, self.d_model).uniform_(-bound, bound))
        self.beta_weight = nn.Parameter(torch.empty(self.num_heads, self.d_model).uniform_(-bound, bound))
        self.beta_bias = nn.Parameter(torch.zeros(self.num_heads))

    def check_length(self, lq: int, lk: int) -> None:
        if lk > self.max_length:
            raise ValueError(f"path is materialized only (Lk sequential reflections, O(Lq·Lk·D) memory with "
                             f"gradients): Lk={lk} is over max_length={self.max_length}; raise max_length in the "
                             f"spec if the memory allows, or use another scheme at this length")

    def state(self, k, hidden, docs):
        """``w [B, H, Lk, D]`` (unit vectors) and ``β [B, H, Lk]`` from ``hidden``."""
        b, lk, _ = hidden.shape
        w = torch.matmul(hidden, self.w_weight.to(hidden.dtype).t()).view(b, lk, self.num_heads, self.head_dim)
        w = F.normalize(w.transpose(1, 2), dim=-1)  # (B, H, Lk, D)
        beta = 2 * torch.sigmoid(torch.matmul(hidden, self.beta_weight.to(hidden.dtype).t())
                                 + self.beta_bias.to(hidden.dtype)).transpose(1, 2)  # (B, H, Lk)
        return w, beta

    def rows(self, q, k, v, state, q0, allowed, scale):
        w, beta = state
        c, n = q.shape[2], k.shape[2]
        rows = torch.arange(q0, q0 + c, device=q.device).view(1, 1, c, 1)  # key index of each query row
        u = q  # (B, H, c, D): H_{j+1} ⋯ H_i q_i for the rows i > j, q_i for the others
        cols = []
        for j in range(n - 1, -1, -1):
            cols.append((u * k[:, :, j:j + 1]).sum(-1))  # (B, H, c)
            wj = w[:, :, j:j + 1]  # (B, H, 1, D)
            reflected = u - beta[:, :, j, None, None] * wj * (u * wj).sum(-1, keepdim=True)
            u = torch.where(rows >= j, reflected, u)
        scores = torch.stack(cols[::-1], dim=-1)  # (B, H, c, n)
        return softmax_rows(scores * scale, v, allowed)

    def reference(self, q, k, v, hidden=None, *, scale=None, document_ids=None):
        w, beta = path_gates(hidden, to_numpy(self.w_weight), to_numpy(self.beta_weight), to_numpy(self.beta_bias),
                             self.num_heads)
        return path_ref(q, k, v, w, beta, scale=scale, document_ids=document_ids)
