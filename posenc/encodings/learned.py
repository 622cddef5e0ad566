"""Learned absolute position embeddings (Gehring et al. 2017; BERT, Devlin et al. 2019; GPT-2).

    PE(pos) = W[pos],   W ∈ R^{max_positions × d_model}

A learned table has no row past ``max_positions``: asking for one raises, it cannot extrapolate.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import MAX_INIT_STD, check_float, check_int
from posenc.registry import register
from posenc.encodings._base import PositionalEncoding, check_positions
from posenc.limits import Dim, Rows, check_memory


@register("learned", kind="additive")
class Learned(PositionalEncoding):
    """A trainable table of ``max_positions`` vectors (BERT, GPT-2); cannot extrapolate."""

    def __init__(self, *, d_model: Dim, max_positions: Rows, init_std: float = 0.02) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, min=1)
        self.max_positions = check_int("max_positions", max_positions, min=1)
        init_std = check_float("init_std", init_std, min=0.0, max=MAX_INIT_STD)
        check_memory("max_positions", self.max_positions, self.max_positions * self.d_model,
                     what=f"its table of {self.max_positions} × d_model={self.d_model}")
        self.weight = nn.Parameter(torch.randn(self.max_positions, self.d_model) * init_std)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """``[L]`` or ``[B, L]`` -> ``[..., L, d_model]``; positions >= max_positions raise."""
        positions = check_positions(
            "positions", positions, max_value=self.max_positions - 1,
            why=f"max_positions={self.max_positions}: a learned table cannot extrapolate past its length")
        return self.weight[positions.to(self.weight.device).long()]

    def reference(self, positions):
        return ref.learned(positions, self.weight.detach().double().cpu().numpy())
