"""VideoRoPE (Wei, Liu, Zang et al. 2025, arXiv:2502.05173; official code Wiselnn570/VideoRoPE):
M-RoPE's three axes ``(t, h, w)`` with time on the lowest frequencies, row and column interleaved
on the highest, and vision tokens laid along the text diagonal with temporal spacing ``δ``.

    angle_j = p[a(j)]·θ_j,   a(j) = h (j < s_h + s_w, j even), w (j odd), t (j ≥ s_h + s_w)

``sections = [s_t, s_h, s_w]`` defaults to Qwen2-VL's ``[16, 24, 24]`` scaled to ``rotary_dim``
(``posenc.reference.default_sections``), the paper's split. Positions ``[L, 3]`` or ``[B, L, 3]``
come from ``videorope_positions(segments, temporal_spacing=δ)`` (real when ``δ`` is not an
integer); the formulas are in ``posenc.reference.videorope``.

**Beside M-RoPE.** The rotation is ``mrope``'s (this class is ``rope`` with an ``axis_of_pair``,
as ``mrope`` is): the one angle function ``posenc.rotary.angles``, rope's table and its KV-cache
policy. Text tokens at ``(m, m, m)`` are 1D RoPE bit for bit; a decoding step at one position
reads the same table, so cached decoding equals the full pass (every scaling but the
length-dependent ones, as for ``rope``). xPos is refused (its scale has no multimodal definition).
"""

from __future__ import annotations

from typing import Any

import torch

from posenc import reference as ref
from posenc.encodings.mrope import SectionedRoPE
from posenc.limits import Dim
from posenc.reference.videorope import videorope_axis_of_pair
from posenc.registry import register


@register("videorope", kind="rotary")
class VideoRoPE(SectionedRoPE):
    """VideoRoPE: time on the lowest frequencies, a diagonal layout of frames, temporal spacing δ."""

    def __init__(self, *, head_dim: Dim, sections: list[Dim] | None = None, base: float = 10000.0,
                 rotary_dim: Dim | None = None, layout: str = "half", scaling: dict[str, Any] | None = None) -> None:
        super().__init__(head_dim=head_dim, base=base, rotary_dim=rotary_dim, layout=layout, scaling=scaling)
        if sections is None:
            sections = ref.default_sections(self.rotary_dim, "chunked")
        self._take_axis_map(sections, videorope_axis_of_pair(sections, rotary_dim=self.rotary_dim))


def videorope_positions(segments: list[dict[str, Any]], *, offset: float = 0,
                        temporal_spacing: float = 2.0) -> torch.Tensor:
    """``[L, 3]`` float64 positions ``(t, h, w)`` of text, image and video segments by VideoRoPE's
    diagonal layout with frame spacing ``δ = temporal_spacing`` (``posenc.reference.videorope_positions``)."""
    return torch.from_numpy(ref.videorope_positions(segments, offset=offset, temporal_spacing=temporal_spacing))
