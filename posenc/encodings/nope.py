"""NoPE: no positional encoding, the control (Kazemnejad et al. 2023, "The Impact of Positional
Encoding on Length Generalization in Transformers", arXiv:2305.19466).

Without position, attention is permutation-equivariant: shuffling the tokens shuffles the outputs
the same way. A causal mask alone still lets a decoder infer position, which is why NoPE works
at all in decoder-only models.
"""

from __future__ import annotations

import torch

from posenc.registry import register
from posenc.encodings._base import PositionalEncoding, check_batch, check_tensor


@register("nope", kind="none")
class NoPE(PositionalEncoding):
    """No positional encoding: the control. ``module(x, positions)`` returns ``x`` unchanged."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, H, L, D]`` unchanged; ``positions`` (``[L]`` or ``[B, L]``) are checked like a rotary's."""
        x = check_tensor("x", x, ndim=4)
        if positions is not None:
            check_batch("positions", self.check_positions("positions", positions), x.shape[0], x.shape[2], heads=x.shape[1])
        return x

    def reference(self, x, positions=None):
        import numpy as np

        return np.asarray(x, dtype=np.float64)
