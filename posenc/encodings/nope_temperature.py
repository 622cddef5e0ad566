"""NoPE with Llama 4's attention temperature (Meta 2025; transformers' ``Llama4TextAttention``,
``attn_temperature_tuning``): no position in the scores, but queries scaled by their position,

    q_i ← τ(p_i) · q_i,     τ(p) = 1 + attn_scale · log(1 + ⌊(p + 1) / floor_scale⌋)

(``posenc.reference.nope_temperature``). Llama 4 uses it in its NoPE layers, one in four, the
others RoPE (``attn_scale = 0.1``, ``floor_scale = 8192``: τ = 1 below 8191 tokens, 1.069 at
8191, 1.11 at 16383, 1.24 at 81919). ``posenc.attention`` applies it to the queries (at
``q_positions``, so a KV cache's queries take their own positions); keys and values are untouched.

τ is computed in float64 from integer positions (``⌊(p + 1)/floor_scale⌋`` by integer division
when ``floor_scale`` is a whole number, exact at any position) and multiplies the queries in
float32 at least, then the result is cast back, as transformers does.
"""

from __future__ import annotations

import torch

from posenc import reference as ref
from posenc._validate import check_float
from posenc.encodings._base import PositionalEncoding, check_batch, check_tensor, to_numpy as _numpy
from posenc.registry import register


def temperature_scale(p: torch.Tensor, attn_scale: float, floor_scale: float, position_offset: int) -> torch.Tensor:
    """``τ(p) = 1 + attn_scale · log(1 + ⌊(p + position_offset) / floor_scale⌋)`` of checked integer
    positions, float64 (``posenc.reference.query_temperature_scale``): Llama 4's NoPE layers count
    ``p + 1`` (``position_offset=1``), Ministral 3's ``p`` (0, ``rope``'s ``query_temperature``). The
    floor is an integer division when ``floor_scale`` is a whole number (exact at any position)."""
    if float(floor_scale).is_integer() and floor_scale < 2**62:
        steps = torch.div(p + position_offset, int(floor_scale), rounding_mode="floor").to(torch.float64)
    else:
        steps = torch.floor((p.to(torch.float64) + float(position_offset)) / floor_scale)
    return 1.0 + attn_scale * torch.log1p(steps)


def temper(x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Queries ``x [B, H, L, D]`` times ``tau`` (``[L]`` or ``[B, L]``), in float32 at least, cast back."""
    work = torch.promote_types(x.dtype, torch.float32)
    tau = tau.to(device=x.device, dtype=work).unsqueeze(-1).unsqueeze(-3)  # (1, L, 1) or (B, 1, L, 1)
    return (x.to(work) * tau).to(x.dtype)


@register("nope_temperature", kind="none")
class NoPETemperature(PositionalEncoding):
    """NoPE with Llama 4's query temperature 1 + attn_scale·log1p(⌊(p+1)/floor_scale⌋) (Meta 2025)."""

    def __init__(self, *, attn_scale: float = 0.1, floor_scale: float = 8192.0) -> None:
        super().__init__()
        self.attn_scale = check_float("attn_scale", attn_scale, min=0.0)
        self.floor_scale = check_float("floor_scale", floor_scale, min=0.0, min_open=True)

    def query_scale(self, positions: torch.Tensor) -> torch.Tensor:
        """``τ(p)``: integer positions ``[L]`` or ``[B, L]`` -> float64 of the same shape."""
        p = self.check_positions("positions", positions).to(self.device)
        return temperature_scale(p, self.attn_scale, self.floor_scale, 1)

    def temper_queries(self, q: torch.Tensor, q_positions: torch.Tensor) -> torch.Tensor:
        """``posenc.attention``'s hook (``PositionalEncoding.temper_queries``): the queries times ``τ``."""
        return self(q, q_positions)

    @property
    def attends(self) -> bool:
        """A model passes it to ``posenc.attention``, which scales the queries by ``τ``."""
        return True

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Queries ``x [B, H, L, D]`` at ``positions`` (``[L]`` or ``[B, L]``) times ``τ``, in x's dtype."""
        x = check_tensor("x", x, ndim=4)
        positions = self.check_positions("positions", positions)
        check_batch("positions", positions, x.shape[0], x.shape[2], heads=x.shape[1])
        return temper(x, self.query_scale(positions))  # τ (L,) or (B, L) over heads and dims

    def reference(self, x, positions):
        return ref.nope_temperature(_numpy(x), _numpy(positions), attn_scale=self.attn_scale,
                                    floor_scale=self.floor_scale)
