"""DAPE, data-adaptive positional encoding (Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive
Positional Encoding for Length Extrapolation", arXiv:2405.14722; code chuanyang-Zheng/DAPE).

Wraps a bias scheme (ALiBi, KERPLE, FIRE, T5) and corrects its bias with an MLP across heads that
reads the pair's scores:

    s_ij = A_ij + B_ij + W2 · LeakyReLU(W1 · [A_ij; B_ij] + b1) + b2,    A = q·k · scale,  [A; B] ∈ R^{2H}

as in the repository's ``AliBi_DAPE`` and ``ParallelKerpleLog_DAPE`` (``x + a + mlp2(cat(x, a))``).
The spec wraps the bias's: ``{"scheme": "dape", "num_heads": 8, "bias": {"scheme": "kerple", ...},
"hidden": 32}`` (``bias`` may be a name; its ``num_heads`` is DAPE's, and may be left out). The MLP is applied pair by
pair, so it runs tile by tile with the rows (``posenc.rowwise``): ``blockwise`` holds one block's
``[B, c, n, hidden]`` activations, recomputed in the backward. Positions are token indices (keys
``0 … Lk − 1``, queries the last Lq; restarting at 0 in each packed document). Not causal-only:
``causal=False`` attends both ways (the wrapped bias decides what ``|i − j|`` means). The paper's
convolution variant (DAPE v2) is not implemented.

Logit cap and sinks (Gemma 2, GPT-OSS; ``posenc.rowwise``): ``A = c·tanh(q·k·scale / c)``, which
the MLP reads as it reads the score the softmax gets, and a sink column of score ``sinks[h]``.

**Around FIRE.** The repository's ``FIRE_DAPE`` also changes FIRE itself: its MLP ``1 → hidden → H``
has a LeakyReLU (slope 0.01) where FIRE's paper, and the repository's own ``FIRE``, have a ReLU.
``fire_activation="leaky_relu"`` reproduces it (``posenc.reference.dape.leaky_fire``: the bias
``W2 · LeakyReLU(w1 x + b1) + b2`` of FIRE's input ``x``, computed here in float64 pair by pair,
``[c, n, hidden]`` per block of rows). The default stays ``"relu"``: DAPE is defined as a
correction of a bias scheme left as it is, so ``dape`` around ``fire`` wraps posenc's ``fire``
(the paper's FIRE, with its exact piecewise-linear fast paths), and a spec or a benchmark result
that says ``dape`` around ``fire`` keeps the model it always built. Only a FIRE bias takes
``"leaky_relu"``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posenc import registry
from posenc._validate import check_choice, check_int
from posenc.encodings._base import to_numpy
from posenc.encodings.fire import EPS as FIRE_EPS
from posenc.limits import Heads, Width, check_memory
from posenc.reference.dape import NEGATIVE_SLOPE, dape as dape_ref, leaky_fire, token_positions
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, cap_scores, softmax_rows

FIRE_ACTIVATIONS = ("relu", "leaky_relu")  # FIRE's MLP: the paper's (posenc's fire), or FIRE_DAPE's


@register("dape", kind="content")
class DAPE(RowwiseEncoding):
    """An MLP across heads corrects a bias scheme's bias from the pair's scores (DAPE)."""

    causal_only = False
    takes_softcap = takes_sinks = takes_dropout = True

    def __init__(self, *, num_heads: Heads, bias: Any = "kerple", hidden: Width = 32,
                 fire_activation: str = "relu") -> None:
        super().__init__()
        spec = {"scheme": bias} if isinstance(bias, str) else bias
        if not isinstance(spec, dict) or not isinstance(spec.get("scheme"), str):
            raise TypeError(f"bias must be a bias scheme's spec, e.g. {{'scheme': 'kerple'}} or 'alibi'; got {bias!r}")
        kind = registry.get(spec["scheme"]).kind
        if kind != "bias":
            bias_schemes = ", ".join(registry.schemes("bias"))
            raise ValueError(f"bias must name a bias scheme ({bias_schemes}); {spec['scheme']!r} is {kind}")
        spec = copy.deepcopy(spec)
        num_heads = check_int("num_heads", num_heads, min=1)
        if spec.setdefault("num_heads", num_heads) != num_heads:
            raise ValueError(f"num_heads={num_heads} but the bias has num_heads={spec['num_heads']!r}; they must agree "
                             "(the bias's num_heads may be left out)")
        self.fire_activation = check_choice("fire_activation", fire_activation, FIRE_ACTIVATIONS)
        if fire_activation != "relu" and spec["scheme"] != "fire":
            raise ValueError(f"fire_activation={fire_activation!r} is FIRE's MLP activation: it needs bias 'fire', "
                             f"got bias {spec['scheme']!r} (leave fire_activation out, or wrap 'fire')")
        self.inner = registry.build(spec)
        self.num_heads = self.inner.num_heads
        self.hidden = check_int("hidden", hidden, min=1)
        check_memory("hidden", self.hidden, 3 * self.hidden * self.num_heads, what="its MLP")
        self.mlp_in = nn.Linear(2 * self.num_heads, self.hidden)
        self.mlp_out = nn.Linear(self.hidden, self.num_heads)

    def state(self, k, hidden, docs):
        """Token positions: ``[Lk]``, or ``[1 or B, Lk]`` restarting at each document."""
        if docs is None:
            return torch.arange(k.shape[2], device=k.device)
        from posenc.documents import positions_in_documents

        return positions_in_documents(docs)

    def rows(self, q, k, v, positions, q0, allowed, scale, softcap=None, sinks=None, dropout=None):
        a = cap_scores(torch.matmul(q, k.transpose(-1, -2)) * scale, softcap)  # (B, H, c, n)
        q_pos, k_pos = positions[..., q0:q0 + q.shape[2]], positions[..., :k.shape[2]]
        if self.fire_activation == "leaky_relu":
            b = self.leaky_fire(q_pos, k_pos).to(a.dtype).expand_as(a)
        else:
            b = self.inner(q_pos, k_pos, dtype=q.dtype).expand_as(a)
        x = torch.cat([a, b], dim=1).permute(0, 2, 3, 1)  # (B, c, n, 2H)
        mlp = self.mlp_out(F.leaky_relu(self.mlp_in(x.to(self.mlp_in.weight.dtype)), NEGATIVE_SLOPE))  # (B, c, n, H)
        return softmax_rows(a + b + mlp.permute(0, 3, 1, 2).to(a.dtype), v, allowed, sinks, dropout)

    def leaky_fire(self, q_pos, k_pos) -> torch.Tensor:
        """FIRE's bias with LeakyReLU for ReLU (``FIRE_DAPE``), float64: ``[H, c, n]`` (``[B, H, c, n]``
        for batched positions), from the wrapped FIRE's parameters."""
        f64 = torch.float64
        c, L = self.inner.interpolation()
        first, second = self.inner.mlp[0], self.inner.mlp[2]
        i = q_pos.to(f64)
        x = torch.log1p(c * (i.unsqueeze(-1) - k_pos.to(f64).unsqueeze(-2)).abs())  # (..., c, n): ψ(|i − j|)
        x = x / (torch.log1p(c * torch.maximum(i, L)) + FIRE_EPS).unsqueeze(-1)
        h = F.leaky_relu(x.unsqueeze(-1) * first.weight.to(f64).flatten() + first.bias.to(f64), NEGATIVE_SLOPE)
        return (h @ second.weight.to(f64).t() + second.bias.to(f64)).movedim(-1, -3)  # (..., H, c, n)

    def reference(self, q, k, v, hidden=None, *, causal=True, scale=None, document_ids=None, softcap=None, sinks=None):
        lq, lk = q.shape[2], k.shape[2]
        pos = token_positions(lk, document_ids)
        if self.fire_activation == "leaky_relu":
            first, second = self.inner.mlp[0], self.inner.mlp[2]
            c, L = (float(t.detach()) for t in self.inner.interpolation())
            bias = leaky_fire(pos[..., lk - lq:], pos, to_numpy(first.weight).ravel(), to_numpy(first.bias),
                              to_numpy(second.weight), to_numpy(second.bias), c=c, L=L, eps=FIRE_EPS)
        else:
            bias = self.inner.reference(pos[..., lk - lq:], pos)
        return dape_ref(q, k, v, bias, to_numpy(self.mlp_in.weight), to_numpy(self.mlp_in.bias),
                        to_numpy(self.mlp_out.weight), to_numpy(self.mlp_out.bias), causal=causal, scale=scale,
                        document_ids=document_ids, softcap=softcap, sinks=sinks)
