"""Sinusoidal absolute encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5).

    PE(pos, 2i) = sin(pos / base^(2i/d)),   PE(pos, 2i+1) = cos(pos / base^(2i/d))

Low dimensions oscillate fast, high ones slowly: each position gets a unique multi-frequency
fingerprint, and PE(pos + k) is a fixed rotation of PE(pos) for every pos.
"""

from __future__ import annotations

import torch

from posenc import reference as ref
from posenc._validate import check_even, check_float, check_int
from posenc.registry import register
from posenc.rotary import angles_cos_sin
from posenc.encodings._base import PositionalEncoding, check_positions
from posenc.limits import Dim, check_memory


@register("sinusoidal", kind="additive")
class Sinusoidal(PositionalEncoding):
    """Fixed sin/cos table of Vaswani et al. 2017; extrapolates to any position."""

    def __init__(self, *, d_model: Dim, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = check_even("d_model", check_int("d_model", d_model, min=2))
        self.base = check_float("base", base, min=0.0, min_open=True)
        check_memory("d_model", self.d_model, self.d_model, bytes_per=8, what="its float64 frequencies")
        self.register_float64("inv_freq", torch.from_numpy(ref.sinusoidal_inv_freq(self.d_model, self.base)))

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """``[L]`` or ``[B, L]`` -> ``[..., L, d_model]`` in the module's dtype."""
        positions = check_positions("positions", positions)
        cos, sin = angles_cos_sin(positions.to(self.device), self.inv_freq, self.dtype)  # (..., L, d/2)
        return torch.stack((sin, cos), dim=-1).flatten(-2)  # (..., L, d): sin even, cos odd

    def reference(self, positions):
        return ref.sinusoidal(positions, self.d_model, self.base)
