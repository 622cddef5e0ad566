"""Multimodal rotary position embedding, M-RoPE (Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191;
Qwen3-VL's interleaved sections).

Each token has three positions ``(t, h, w)``: time, row, column. The frequencies
``θ_j = base^(−2j/rotary_dim)`` (and any long-context scaling of them) are 1D RoPE's; frequency
index ``j`` takes its angle from the axis ``a(j)`` that ``sections = [s_t, s_h, s_w]`` assigns it:

    angle_j = p[a(j)] · θ_j,   then pair j is rotated as in 1D RoPE (``layout`` "half"/"interleaved")

- ``sections_layout="chunked"`` (Qwen2-VL, Qwen2.5-VL): ``a = [t]·s_t + [h]·s_h + [w]·s_w``;
- ``sections_layout="interleaved"`` (Qwen3-VL): the cycle T, H, W, T, H, W, ... for the first
  ``3·s_h`` (resp. ``3·s_w``) frequencies, time for the rest; see ``posenc.reference.mrope``.

``sections`` defaults to Qwen2-VL's ``[16, 24, 24]`` (chunked) or Qwen3-VL's ``[24, 20, 20]``
(interleaved) scaled to ``rotary_dim`` (``posenc.reference.mrope.default_sections``).

**Text is 1D RoPE.** A text token at ``(m, m, m)`` gets ``angle_j = m·θ_j`` for every ``j``: the
same float64 angles, the same table entries, so the result equals ``rope`` of the same
``head_dim``, ``base``, ``layout`` and ``scaling`` bit for bit.

**Section map.** With a cos/sin table ``T[p, j] = cos(p·θ_j)`` for ``p = 0..n−1`` (the one
``rope`` builds, see its docstring), the multimodal table is one gather,
``cos[..., l, j] = T[positions[..., l, a(j)], j]``: no per-axis tables, no ``[..., L, 3, R]``
intermediate. Past the table size (or under ``torch.compile``) each axis's angles are computed
directly by the shared angle code (``posenc.rotary.angles_cos_sin``) on its own frequencies and
scattered into their columns. Both paths give the same values.

Positions are ``[L, 3]`` or ``[B, L, 3]`` integer tensors; ``posenc.mrope_positions`` builds them
for a sequence of text, image and video segments. Scalings behave as in ``rope`` (length-dependent
ones take ``L = max over all three axes + 1``, as transformers does); xPos is not available (its
query/key scale has no multimodal definition).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_int
from posenc.encodings._base import INDEX_DTYPES, check_batch, check_tensor
from posenc.encodings.rope import ROLES, TABLE_MAX_ELEMENTS, TABLE_MIN_POSITIONS, RoPE
from posenc.reference.mrope import AXES, SECTIONS_LAYOUTS
from posenc.registry import register
from posenc.rotary import angles_cos_sin, apply_rotary


def check_mrope_positions(name: str, positions: Any) -> torch.Tensor:
    """``[L, 3]`` or ``[B, L, 3]`` non-negative integer positions (time, height, width)."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be an integer torch.Tensor of shape [L, {AXES}] or [B, L, {AXES}], "
                        f"got {type(positions).__name__}")
    if positions.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long), got {positions.dtype}")
    if positions.dim() not in (2, 3) or positions.shape[-1] != AXES:
        raise ValueError(f"{name} must have shape [L, {AXES}] or [B, L, {AXES}] (time, height, width per token; "
                         f"posenc.mrope_positions builds them), got shape {list(positions.shape)}")
    if not torch.compiler.is_compiling() and positions.numel():
        low = int(positions.min())
        if low < 0:
            raise ValueError(f"{name} must be non-negative, got minimum {low}")
    return positions


@register("mrope", kind="rotary")
class MRoPE(RoPE):
    """Multimodal RoPE of Qwen2-VL / Qwen3-VL: frequency sections take time, row or column positions."""

    axes = AXES

    def __init__(self, *, head_dim: int, sections: list[int] | None = None, base: float = 10000.0,
                 rotary_dim: int | None = None, sections_layout: str = "chunked", layout: str = "half",
                 scaling: dict[str, Any] | None = None) -> None:
        super().__init__(head_dim=head_dim, base=base, rotary_dim=rotary_dim, layout=layout, scaling=scaling)
        if self.scaling.decay is not None:
            raise ValueError("scaling 'xpos' is not available for mrope (its query/key scale is defined for "
                             "1D positions only); use another scaling or scheme 'rope'")
        self.sections_layout = check_choice("sections_layout", sections_layout, SECTIONS_LAYOUTS)
        if sections is None:
            sections = ref.default_sections(self.rotary_dim, self.sections_layout)
        axis = ref.mrope_axis_of_pair(sections, self.sections_layout, rotary_dim=self.rotary_dim)
        self.sections = [int(s) for s in sections]
        self.register_buffer("axis_of_pair", torch.from_numpy(axis), persistent=False)  # (R,) int64

    # -- cos and sin ----------------------------------------------------------------------------
    def _direct(self, positions: torch.Tensor, freq: torch.Tensor, dtype: torch.dtype,
                scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Each axis's columns from the shared angle code: ``[..., L, 3]`` -> ``[..., L, R]`` twice."""
        axis = self.axis_of_pair.to(positions.device)
        cos = torch.empty(positions.shape[:-1] + freq.shape, dtype=dtype, device=positions.device)
        sin = torch.empty_like(cos)
        for a in range(AXES):
            cols = (axis == a).nonzero().squeeze(-1)
            if cols.numel():
                cos[..., cols], sin[..., cols] = angles_cos_sin(positions[..., a], freq[cols], dtype, scale)
        return cos, sin

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, scale: float,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = positions.to(device)
        freq, key = self._observe(positions)
        freq = freq.to(device)
        if key is None or torch.compiler.is_compiling() or positions.numel() == 0:
            return self._direct(positions, freq, dtype, scale)
        top = int(positions.max())
        width = freq.shape[0]
        if (top + 1) * width > TABLE_MAX_ELEMENTS:
            return self._direct(positions, freq, dtype, scale)
        key = (key, device, dtype, scale)
        table = self._tables.get(key)
        if table is None or table[0].shape[0] <= top:
            n = max(TABLE_MIN_POSITIONS, 1 << top.bit_length())  # a power of two > top, as in rope
            n = max(top + 1, min(n, TABLE_MAX_ELEMENTS // width))
            table = angles_cos_sin(torch.arange(n, device=device), freq, dtype, scale)  # (n, R) each
            self._tables[key] = table
        rows = positions.long()[..., self.axis_of_pair.to(device)]  # (..., L, R): p[a(j)]
        cols = torch.arange(width, device=device)
        return table[0][rows, cols], table[1][rows, cols]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled ``cos, sin`` at ``positions [..., L, 3]``: ``[..., L, rotary_dim // 2]`` (no attention factor)."""
        positions = check_mrope_positions("positions", positions)
        return self._cos_sin(positions, dtype, 1.0, self.device)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``positions [L, 3]`` or ``[B, L, 3]``; same shape and dtype.

        The rotated dims are multiplied by ``attention_factor``; ``role`` is accepted as every
        rotary module accepts it, and changes nothing.
        """
        x = check_tensor("x", x, ndim=4, last_dim=self.head_dim)
        positions = check_mrope_positions("positions", positions)
        check_batch("positions", positions[..., 0], x.shape[0], x.shape[2])
        check_choice("role", role, ROLES)
        cos, sin = self._cos_sin(positions.to(x.device), x.dtype, self.attention_factor, x.device)
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, L, R)
        return apply_rotary(x, cos, sin, layout=self.layout)

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result of a full pass: length-dependent scalings use ``L = max(positions) + 1``."""
        pos = np.asarray(positions)
        freq = self.scaling.at(int(pos.max()) + 1 if pos.size else 0)
        return ref.mrope(x, positions, freq, self.axis_of_pair.cpu().numpy(), layout=self.layout,
                         attention_factor=self.attention_factor)


def mrope_positions(segments: list[dict[str, Any]], *, offset: int = 0) -> torch.Tensor:
    """``[L, 3]`` int64 positions ``(t, h, w)`` of a sequence of text, image and video segments.

    ``segments`` is a list of ``{"text": n}``, ``{"image": [h, w]}`` and
    ``{"video": [t, h, w], "time_interval": 1.0}`` (sizes in tokens after any patch merge); the
    first segment starts at ``offset``. Text advances all three axes; a vision block takes
    ``(⌊i·time_interval⌋, row, col)`` offset by the current position; the next segment starts one
    past the block's largest position. This equals transformers' Qwen2-VL ``get_rope_index`` for
    text, images and videos no longer in time than in space; for longer videos transformers 5
    advances by ``max(h, w)`` only (reusing positions), and posenc keeps transformers 4's and the
    original Qwen2-VL's rule, one past the largest position. Details: ``posenc.reference.mrope_positions``.
    """
    return torch.from_numpy(ref.mrope_positions(segments, offset=check_int("offset", offset, min=0)))
