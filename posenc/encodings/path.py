"""PaTH, position encoding via accumulating Householder transformations (Yang et al. 2025, "PaTH
Attention: Position Encoding via Accumulating Householder Transformations", arXiv:2505.16381;
reference in flash-linear-attention).

    H_t = I − β_t w_t w_tᵀ,   s_ij = q_iᵀ (H_i ⋯ H_{j+1}) k_j · scale,   w_t = normalize(W_w x_t),   β_t = 2σ(W_β x_t + b)

The transform between a key and a query is the product of the reflections of the tokens between
them, each made from the layer's input (``hidden``): a position that is a rotation-like
transform learned from content, as RoPE's is a fixed rotation of the distance.

**How w is made: flash-linear-attention's options.** Its ``PaTHAttention`` layer, by default,
projects ``x`` to ``w`` through a rank-32 bottleneck and passes ``w`` through a short causal
convolution before normalizing it (``use_low_rank_w=True``, ``use_w_shortconv=True``,
``conv_size=3``, no bias, SiLU). Here both are options, off by default so that a spec (and a
benchmark result's key) keeps the model it always built (the paper's formula, a full-rank
``W_w``):

- ``w_rank=r`` (flash-linear-attention: 32): ``W_w x = W_up (W_down x)``, ``W_down [r, d_model]``
  and ``W_up [H·D, r]`` (``w_down``, ``w_up``; nn.Linear's initialization, as there);
- ``w_conv_size=K`` (flash-linear-attention: 3): ``u_t = SiLU(Σ_{s<K} c[:, K−1−s] ⊙ (W_w x)_{t−s})``,
  depthwise over the ``H·D`` channels (``w_conv [H·D, K]``, nn.Conv1d's initialization), then
  ``w_t = normalize(u_t)`` per head. It is causal: token ``t`` reads the inputs ``t − K + 1 … t``
  only (zeros before the first token), and it restarts at each packed document's first token
  (as flash-linear-attention's ``cu_seqlens``). With a cache, decoding is exact because the
  call is given ``hidden`` of every key (``[B, Lk, d_model]``): the last ``K − 1`` inputs a
  token's ``w`` needs are among them, so ``w`` is recomputed from them, never guessed.

``{"scheme": "path", ..., "w_rank": 32, "w_conv_size": 3}`` is flash-linear-attention's default
layer (without its optional forget gate and q/k norms, which are not positions). One difference
remains: its ``l2_norm`` divides by ``√(|u|² + 10⁻⁶)``, here by ``|u|`` exactly (as the paper's formula).

Logit cap and sinks (Gemma 2, GPT-OSS; ``posenc.rowwise``): the score is the transported ``q·k``
whole (content and position at once), so the cap bounds all of it, ``c·tanh(s_ij / c)``; a sink
column of score ``sinks[h]``.

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
from posenc.limits import Dim, Heads, Kernel, Rows, Width, check_memory
from posenc.reference.path import path as path_ref, path_gates
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, cap_scores, softmax_rows


@register("path", kind="content")
class PaTH(RowwiseEncoding):
    """Keys carried to the query through each token's Householder reflection (PaTH); materialized."""

    reads_hidden = True
    takes_softcap = takes_sinks = takes_dropout = True

    def __init__(self, *, num_heads: Heads, head_dim: Dim, d_model: Dim, max_length: Rows = 1024,
                 w_rank: Width | None = None, w_conv_size: Kernel | None = None) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.d_model = check_int("d_model", d_model, min=1)
        self.max_length = check_int("max_length", max_length, min=1)
        self.w_rank = None if w_rank is None else check_int("w_rank", w_rank, min=1)
        self.w_conv_size = None if w_conv_size is None else check_int("w_conv_size", w_conv_size, min=1)
        width = self.num_heads * self.head_dim
        if self.w_rank is None:
            check_memory("d_model", self.d_model, (width + self.num_heads) * self.d_model, what="its projections")
        else:
            check_memory("d_model", self.d_model, self.num_heads * self.d_model, what="its projection of β")
            check_memory("w_rank", self.w_rank, self.w_rank * (self.d_model + width),
                         what=f"its projections d_model → w_rank → num_heads·head_dim = {width}")
        if self.w_conv_size is not None:
            check_memory("w_conv_size", self.w_conv_size, width * self.w_conv_size, what="its convolution")
        if self.w_rank is None:
            self.w_weight = nn.Parameter(_uniform(width, self.d_model))  # (H·D, d_model)
        else:
            self.w_down = nn.Parameter(_uniform(self.w_rank, self.d_model))  # (r, d_model)
            self.w_up = nn.Parameter(_uniform(width, self.w_rank))  # (H·D, r)
        if self.w_conv_size is not None:
            self.w_conv = nn.Parameter(_uniform(width, self.w_conv_size))  # (H·D, K): nn.Conv1d's fan-in is K
        self.beta_weight = nn.Parameter(_uniform(self.num_heads, self.d_model))
        self.beta_bias = nn.Parameter(torch.zeros(self.num_heads))

    def check_length(self, lq: int, lk: int) -> None:
        if lk > self.max_length:
            raise ValueError(f"path is materialized only (Lk sequential reflections, O(Lq·Lk·D) memory with "
                             f"gradients): Lk={lk} is over max_length={self.max_length}; raise max_length in the "
                             f"spec if the memory allows, or use another scheme at this length")

    def state(self, k, hidden, docs):
        """``w [B, H, Lk, D]`` (unit vectors) and ``β [B, H, Lk]`` from ``hidden``."""
        b, lk, _ = hidden.shape
        if self.w_rank is None:
            w = torch.matmul(hidden, self.w_weight.to(hidden.dtype).t())  # (B, Lk, H·D)
        else:
            w = torch.matmul(torch.matmul(hidden, self.w_down.to(hidden.dtype).t()), self.w_up.to(hidden.dtype).t())
        if self.w_conv_size is not None:
            w = F.silu(self.short_convolution(w, docs))
        w = F.normalize(w.view(b, lk, self.num_heads, self.head_dim).transpose(1, 2), dim=-1)  # (B, H, Lk, D)
        beta = 2 * torch.sigmoid(torch.matmul(hidden, self.beta_weight.to(hidden.dtype).t())
                                 + self.beta_bias.to(hidden.dtype)).transpose(1, 2)  # (B, H, Lk)
        return w, beta

    def short_convolution(self, x: torch.Tensor, docs: torch.Tensor | None) -> torch.Tensor:
        """The causal depthwise convolution ``Σ_{s<K} c[:, K−1−s] ⊙ x_{t−s}`` of ``x [B, L, C]``:
        zeros before the first token and before each document's first token (``docs [1 or B, L]``)."""
        size, length = self.w_conv_size, x.shape[1]
        kernel = self.w_conv.to(x.dtype)  # (C, K)
        out = x * kernel[:, size - 1]
        for s in range(1, min(size, length)):
            back = F.pad(x[:, :length - s], (0, 0, s, 0))  # (B, L, C): x_{t−s}, zeros for t < s
            if docs is not None:
                same = F.pad(docs[:, s:] == docs[:, :length - s], (s, 0))  # (1 or B, L): t−s in t's document
                back = back * same.unsqueeze(-1).to(x.dtype)
            out = out + back * kernel[:, size - 1 - s]
        return out

    def rows(self, q, k, v, state, q0, allowed, scale, softcap=None, sinks=None, dropout=None):
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
        return softmax_rows(cap_scores(scores * scale, softcap), v, allowed, sinks, dropout)

    def reference(self, q, k, v, hidden=None, *, scale=None, document_ids=None, softcap=None, sinks=None):
        low_rank = self.w_rank is not None
        w, beta = path_gates(hidden, to_numpy(self.w_up if low_rank else self.w_weight), to_numpy(self.beta_weight),
                             to_numpy(self.beta_bias), self.num_heads, w_down=to_numpy(self.w_down) if low_rank else None,
                             w_conv=None if self.w_conv_size is None else to_numpy(self.w_conv),
                             document_ids=document_ids)
        return path_ref(q, k, v, w, beta, scale=scale, document_ids=document_ids, softcap=softcap, sinks=sinks)


def _uniform(rows: int, cols: int) -> torch.Tensor:
    """``[rows, cols]`` drawn from ``U(−1/√cols, 1/√cols)``: nn.Linear's (and a depthwise nn.Conv1d's,
    ``cols`` = its kernel size) initialization by fan-in."""
    bound = 1.0 / math.sqrt(cols)
    return torch.empty(rows, cols).uniform_(-bound, bound)
