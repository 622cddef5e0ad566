"""FoX, the Forgetting Transformer (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate", arXiv:2503.02130; official code zhixuan-lin/forgetting-transformer,
and flash-linear-attention's ``forgetting_attn``, whose ``naive.py`` is the formula below).

    f_t = σ(w_h·x_t + b_h),   c_t = Σ_{l≤t} log f_l,   s_ij = q_i·k_j · scale + c_i − c_j   (j ≤ i)

The bias ``Σ_{l=j+1..i} log f_l = c_i − c_j`` forgets the keys behind the query at a rate the
tokens set. ``gate``:

- ``"full"`` (the paper): ``w_h`` and ``b_h`` learned; reads the layer's input ``hidden``;
- ``"bias_only"``: ``f = σ(b_h)`` learned per head, the same at every token: ALiBi with learned
  slopes ``−log σ(b_h)``;
- ``"fixed"``: ``log f_h = −m_h`` with ALiBi's slopes ``m_h``, nothing learned: exactly ``alibi``.

``b_h`` starts at ``logit(e^{−m_h})``, so every variant starts as ALiBi (``w`` starts as
``nn.Linear``'s default). Precision: ``log f`` and ``c`` are float64 (``c`` grows like the
length, and ``c_i − c_j`` of nearby tokens must keep its digits); each block's bias is the
float64 difference cast once to the score dtype. On FlexAttention (``posenc.attention``,
``backend="flex"``) the ``score_mod`` reads ``c[q] − c[kv]`` as ``(hi[q] − hi[kv]) + (lo[q] −
lo[kv])`` with ``c = hi + lo`` split into float32 parts, which rounds the difference once, as the
cast does.

Packed documents (``document_ids``): ``c`` restarts at each document's first token (the running
sum of that document's gates, ``posenc.documents.cumsum_in_documents``) and the mask keeps ``j``
in ``i``'s document, so each document gets the ``c`` it has alone: a non-finite gate (from a
non-finite ``hidden``) stays in its document, and ``c`` grows like a document's length, not the
row's. Logit cap and sinks (Gemma 2, GPT-OSS; ``posenc.rowwise``): ``s_ij = c·tanh(q_i·k_j ·
scale / c) + c_i − c_j``, and a sink column of score ``sinks[h]``. KV cache: ``hidden`` holds every key's input (the gates are per token, so a cache of
``log f`` or of ``hidden`` gives the same ``c``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posenc import reference as ref
from posenc._validate import check_choice, check_int
from posenc.encodings._base import BiasEncoding, to_numpy
from posenc.limits import Dim, Heads, check_memory
from posenc.reference.fox import fox as fox_ref, fox_log_gates
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, cap_scores, softmax_rows

GATES = ("full", "bias_only", "fixed")


@register("fox", kind="content")
class FoX(RowwiseEncoding):
    """Forget gate per head and token: the score bias c_i − c_j, c = cumsum(log f) (FoX)."""

    flex_ok = True
    selects_heads = True  # its state per head: Ulysses' rank takes its heads' rows
    takes_softcap = takes_sinks = takes_dropout = True

    def __init__(self, *, num_heads: Heads, d_model: Dim | None = None, gate: str = "full") -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        check_memory("num_heads", self.num_heads, 3 * self.num_heads, bytes_per=8, what="its float64 slopes")
        self.gate = check_choice("gate", gate, GATES)
        if gate == "full" and d_model is None:
            raise ValueError("fox with gate='full' needs d_model (the width of hidden, the layer's input); "
                             "e.g. {'scheme': 'fox', 'num_heads': 8, 'd_model': 512}")
        self.d_model = None if d_model is None else check_int("d_model", d_model, min=1)
        if gate == "full":
            check_memory("d_model", self.d_model, self.num_heads * self.d_model, what="its gate weights")
        self.reads_hidden = gate == "full"
        slopes = torch.from_numpy(ref.alibi_slopes(self.num_heads))  # (H,) float64
        if gate == "fixed":
            self.register_float64("log_f", -slopes)
            return
        # logit(e^{−m}) = −m − log(1 − e^{−m}): log σ(b) = −m, ALiBi's slope
        self.bias = nn.Parameter((-slopes - torch.log(-torch.expm1(-slopes))).float())  # (H,)
        if gate == "full":
            bound = 1.0 / math.sqrt(self.d_model)
            self.weight = nn.Parameter(torch.empty(self.num_heads, self.d_model).uniform_(-bound, bound))

    def log_gates(self, hidden: torch.Tensor | None) -> torch.Tensor:
        """``log f`` in float64: ``[B, H, Lk]`` (full) or ``[1, H, 1]`` (one per head)."""
        if self.gate == "fixed":
            return self.log_f.view(1, -1, 1)
        if self.gate == "bias_only":
            return F.logsigmoid(self.bias.double()).view(1, -1, 1)
        z = torch.matmul(hidden, self.weight.to(hidden.dtype).t()) + self.bias.to(hidden.dtype)  # (B, Lk, H)
        return F.logsigmoid(z.double()).transpose(1, 2)  # (B, H, Lk)

    def state(self, k, hidden, docs):
        """``c = cumsum(log f)`` in float64, ``[B or 1, H, Lk]`` (a constant gate: ``log f · (t + 1)``),
        restarting at each document's first token when ``docs [1 or B, Lk]`` is given."""
        log_f = self.log_gates(hidden)
        if docs is None:
            if log_f.shape[-1] == 1:
                return log_f * torch.arange(1, k.shape[2] + 1, device=k.device, dtype=torch.float64)
            return torch.cumsum(log_f, dim=-1)
        from posenc.documents import cumsum_in_documents, positions_in_documents

        t = positions_in_documents(docs).unsqueeze(1)  # (1 or B, 1, Lk): the position in its document
        if log_f.shape[-1] == 1:
            return log_f * (t + 1).to(torch.float64)
        return cumsum_in_documents(log_f, t)

    def rows(self, q, k, v, c, q0, allowed, scale, softcap=None, sinks=None, dropout=None):
        bias = (c[..., q0:q0 + q.shape[2], None] - c[..., None, :k.shape[2]]).to(q.dtype)  # (B|1, H, c, n)
        return softmax_rows(cap_scores(torch.matmul(q, k.transpose(-1, -2)) * scale, softcap) + bias, v, allowed, sinks, dropout)

    def flex_bias(self, k, hidden, docs):
        """What ``posenc.attention``'s FlexAttention path needs (``ContentEncoding.flex_bias``): a bias
        scheme whose ``score_fn()`` reads indices ``b·Lk + t`` into ``c`` (flattened over the batch),
        and those indices for the keys ``[B, Lk]``."""
        c = self.state(k, hidden, docs)
        b, lk = k.shape[0], k.shape[2]
        c = c.expand(b, -1, -1).transpose(0, 1).reshape(self.num_heads, b * lk)  # (H, B·Lk)
        hi = c.float()
        lo = (c - hi.double()).float()
        index = torch.arange(b * lk, device=k.device).view(b, lk)  # (B, Lk)
        return FlexBias(self.name, hi, lo), index

    def reference(self, q, k, v, hidden=None, *, scale=None, document_ids=None, softcap=None, sinks=None,
                  window=None):
        if self.gate == "fixed":
            log_f = -ref.alibi_slopes(self.num_heads)[None, :, None]
        else:
            weight = to_numpy(self.weight) if self.gate == "full" else None
            log_f = fox_log_gates(hidden, weight, to_numpy(self.bias))
        return fox_ref(q, k, v, log_f, scale=scale, document_ids=document_ids, softcap=softcap, sinks=sinks,
                       window=window)


class FlexBias(BiasEncoding):
    """FoX's bias as a bias scheme at index "positions" for FlexAttention: ``c[q] − c[kv]`` from the
    float32 parts ``hi + lo`` of ``c [H, B·Lk]`` (float64), ``score_fn`` reading them by index. It
    has no row peak to remove (``peak_at_nearest_key`` False: ``c`` is carried in two parts)."""

    kind = "bias"

    def __init__(self, name: str, hi: torch.Tensor, lo: torch.Tensor) -> None:
        super().__init__()
        self.name, self.hi, self.lo, self.num_heads = name, hi, lo, hi.shape[0]

    def score_fn(self):
        hi, lo = self.hi, self.lo

        def bias(h, q_index, k_index):
            return (hi[h, q_index] - hi[h, k_index]) + (lo[h, q_index] - lo[h, k_index])

        return bias
