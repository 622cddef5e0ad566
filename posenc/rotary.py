"""Rotation of queries and keys, shared by every rotary scheme (no copies of this code elsewhere).

Angles are computed in float64 from integer positions and only then cast, so a bfloat16 or
float16 input never changes which position is used.
"""

from __future__ import annotations

import torch


def angles_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype = torch.float32,
                   scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos(m·θ)·scale`` and ``sin(m·θ)·scale``: ``[..., L]`` positions, ``[R]`` float64 θ -> ``[..., L, R]``.

    The product and the trigonometry run in float64, with the angle reduced to [-π, π) first.
    """
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq.to(torch.float64)  # (..., L, R)
    angles = torch.remainder(angles + torch.pi, 2 * torch.pi) - torch.pi
    cos, sin = torch.cos(angles), torch.sin(angles)
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype), sin.to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half") -> torch.Tensor:
    """Rotates the first ``rotary_dim = 2 * cos.shape[-1]`` dims of ``x [..., L, D]``.

    ``cos`` and ``sin`` ``[..., L, rotary_dim/2]`` broadcast against ``x[..., :rotary_dim/2]``;
    ``layout`` pairs ``(i, i + rotary_dim/2)`` ("half") or ``(2i, 2i+1)`` ("interleaved").
    The remaining dims pass through unchanged.
    """
    rd = 2 * cos.shape[-1]
    rot, rest = x[..., :rd], x[..., rd:]
    if layout == "half":
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    elif layout == "interleaved":
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    else:
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    return out if rd == x.shape[-1] else torch.cat((out, rest), dim=-1)
