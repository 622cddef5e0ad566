"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Queries and keys are rotated pairwise by position-proportional angles, so attention scores depend
only on relative position:

    ⟨R(m)q, R(n)k⟩ = Re[Σ_i q_i k̄_i e^{i(m−n)θ_i}],   θ_i = base^(−2i/rotary_dim)

Long-context scalings (``scaling={"type": ...}``) only change the float64 frequencies θ and an
attention factor; see ``posenc.scaling``.
"""

from __future__ import annotations

from typing import Any

import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.registry import register
from posenc.rotary import angles_cos_sin, apply_rotary
from posenc.schemes._base import PositionalEncoding, check_batch, check_positions, check_tensor

LAYOUTS = ("half", "interleaved")


@register("rope", kind="rotary")
class RoPE(PositionalEncoding):
    """Rotary embedding of RoFormer / Llama, with optional long-context scaling."""

    def __init__(self, *, head_dim: int, base: float = 10000.0, rotary_dim: int | None = None,
                 layout: str = "half", scaling: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
        self.base = check_float("base", base, min=0.0, min_open=True)
        rd = self.head_dim if rotary_dim is None else check_int("rotary_dim", rotary_dim, min=2)
        if rd > self.head_dim:
            raise ValueError(f"rotary_dim must be <= head_dim={self.head_dim}, got {rd}")
        self.rotary_dim = check_even("rotary_dim", rd)
        self.layout = check_choice("layout", layout, LAYOUTS)
        from posenc import scaling as _scaling

        base_freq = ref.rope_inv_freq(self.rotary_dim, self.base)
        self.scaling = _scaling.resolve(scaling, base_freq, head_dim=self.head_dim, base=self.base)
        self.register_float64("inv_freq", torch.from_numpy(self.scaling.inv_freq))

    @property
    def attention_factor(self) -> float:
        """Multiplies the rotated dimensions (YaRN's mscale, LongRoPE's factor); 1 without scaling."""
        return self.scaling.attention_factor

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled ``cos, sin`` of the angles at ``positions``: ``[..., L, rotary_dim // 2]``."""
        positions = check_positions("positions", positions)
        return angles_cos_sin(positions.to(self.device), self.inv_freq, dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``positions [L]`` or ``[B, L]``; same shape and dtype."""
        x = check_tensor("x", x, ndim=4, last_dim=self.head_dim)
        positions = check_positions("positions", positions)
        check_batch("positions", positions, x.shape[0], x.shape[2])
        cos, sin = angles_cos_sin(positions.to(x.device), self.inv_freq, x.dtype, self.attention_factor)
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, L, R)
        return apply_rotary(x, cos, sin, layout=self.layout)

    def reference(self, x, positions):
        return ref.rope(x, positions, self.scaling.inv_freq, layout=self.layout,
                        attention_factor=self.attention_factor)
