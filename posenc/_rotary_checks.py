"""The entry check every rotation shares: ``posenc.rotary.apply_rotary`` and the Triton kernel's
``posenc.rotary_triton.rotate``. It lives below both, so that ``posenc.rotary`` reaches the kernel
in one direction only (rotary -> rotary_triton -> this module)."""

from __future__ import annotations

import torch

LAYOUTS = ("half", "interleaved")
"""How the rotated dims pair up: ``(i, i + R)`` ("half", transformers) or ``(2i, 2i + 1)`` ("interleaved", Meta)."""


def check_rotation_args(layout: str, x, cos, sin) -> None:
    """The layout is known and ``x``, ``cos``, ``sin`` are floating-point tensors (every rotation's entry check)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got "
                            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
