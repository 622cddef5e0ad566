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

**Section map.** The angles come from the one angle function, ``posenc.rotary.angles(positions,
inv_freq, axis_of_pair)`` with ``axis_of_pair = a``, through ``rope``'s table path: with a cos/sin
table ``T[p, j] = cos(p·θ_j)`` (the one ``rope`` builds), the multimodal table is one gather,
``cos[..., l, j] = T[positions[..., l, a(j)], j]``, with no per-axis tables and no
``[..., L, 3, R]`` intermediate; past the table size, for real positions and under
``torch.compile``, ``angles`` computes them directly. Both paths give the same values.

Positions are ``[L, 3]`` or ``[B, L, 3]`` (``axes = 3``), integer or real (``posenc.positions``);
``posenc.mrope_positions`` builds them for a sequence of text, image and video segments.
Scalings behave as in ``rope`` (length-dependent ones take ``L = max over all three axes + 1``, as
transformers does); xPos is not available (its query/key scale has no multimodal definition).
"""

from __future__ import annotations

from typing import Any

import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_int
from posenc.encodings.rope import RoPE
from posenc.reference.mrope import AXES, SECTIONS_LAYOUTS
from posenc.registry import register
from posenc.limits import Dim


class SectionedRoPE(RoPE):
    """``rope`` whose rotated pairs read one axis each of ``[.., L, 3]`` positions: what ``mrope`` and
    ``videorope`` share (the checks, the ``axis_of_pair`` buffer rope's angles read, the reference);
    they differ only in the map of pairs to axes (``posenc.reference.mrope_axis_of_pair``,
    ``videorope_axis_of_pair``). Not registered itself."""

    def _take_axis_map(self, sections: list[int], axis) -> None:
        """Refuses xPos, then keeps the resolved ``sections`` and the map ``axis [R]`` (int64 NumPy)."""
        if self.scaling.decay is not None:
            raise ValueError(f"scaling 'xpos' is not available for {self._scheme_name} (its query/key scale is "
                             "defined for 1D positions only); use another scaling or scheme 'rope'")
        self.sections = [int(s) for s in sections]
        self.axes = AXES
        self.axis_of_pair = torch.from_numpy(axis)  # (R,) int64: the buffer rope's angles read

    @property
    def _scheme_name(self) -> str:
        return type(self).name

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result of a full pass: length-dependent scalings use ``L = max(positions) + 1``."""
        pos = ref.positions_array("positions", positions, axes=AXES, real=True, scheme=self._scheme_name)
        freq = self.scaling.exact_at(int(pos.max()) + 1 if pos.size else 0)
        return ref.mrope(x, pos, freq, self.axis_of_pair.cpu().numpy(), layout=self.layout,
                         attention_factor=self.attention_factor)


@register("mrope", kind="rotary")
class MRoPE(SectionedRoPE):
    """Multimodal RoPE of Qwen2-VL / Qwen3-VL: frequency sections take time, row or column positions.

    ``module(x [B, H, L, D], positions [L, 3] or [B, L, 3], *, role=None)`` and ``cos_sin`` are
    ``rope``'s calls (``role`` changes nothing here); ``sections`` holds the resolved sections.
    """

    def __init__(self, *, head_dim: Dim, sections: list[Dim] | None = None, base: float = 10000.0,
                 rotary_dim: Dim | None = None, sections_layout: str = "chunked", layout: str = "half",
                 scaling: dict[str, Any] | None = None) -> None:
        super().__init__(head_dim=head_dim, base=base, rotary_dim=rotary_dim, layout=layout, scaling=scaling)
        self.sections_layout = check_choice("sections_layout", sections_layout, SECTIONS_LAYOUTS)
        if sections is None:
            sections = ref.default_sections(self.rotary_dim, self.sections_layout)
        self._take_axis_map(sections, ref.mrope_axis_of_pair(sections, self.sections_layout,
                                                             rotary_dim=self.rotary_dim))


def mrope_positions(segments: list[dict[str, Any]], *, offset: int = 0, time_dtype: str = "float64") -> torch.Tensor:
    """``[L, 3]`` int64 positions ``(t, h, w)`` of a sequence of text, image and video segments.

    ``segments`` is a list of ``{"text": n}``, ``{"image": [h, w]}`` and
    ``{"video": [t, h, w], "time_interval": 1.0}`` (sizes in tokens after any patch merge); the
    first segment starts at ``offset``. Text advances all three axes; a vision block takes
    ``(⌊i·time_interval⌋, row, col)`` offset by the current position; the next segment starts one
    past the block's largest position. Every position is at most 2^53 (checked before anything is
    allocated, so nothing wraps in int64).

    ``time_dtype``: ``"float64"`` (default) rounds ``i·time_interval`` once, in float64, the
    product as written; ``"float32"`` rounds it as transformers' ``get_rope_index`` does (torch
    multiplies ``arange(t)`` by the interval in float32, then truncates). For Qwen2.5-VL pass
    ``time_interval = tokens_per_second * second_per_grid_ts[i]``, as a Python float or as the
    processor's float32 tensor (a one-element tensor is read exactly): with ``time_dtype="float32"``
    the positions then equal transformers' in both cases. The default stays float64 because it is
    the formula's value (and posenc's since its first release); the two differ by one at some frames
    of some intervals (25 and 50 fps at ``tokens_per_second`` 5, 9, 10, ...).

    This equals transformers' Qwen2-VL ``get_rope_index`` for text, images and videos no longer in
    time than in space; for longer videos transformers 5 advances by ``max(h, w)`` only (reusing
    positions), and posenc keeps transformers 4's and the original Qwen2-VL's rule, one past the
    largest position. Details: ``posenc.reference.mrope_positions``.
    """
    return torch.from_numpy(ref.mrope_positions(_plain_intervals(segments), offset=offset, time_dtype=time_dtype))


def _plain_intervals(segments: Any) -> Any:
    """Segments whose ``time_interval`` is a one-element floating tensor (the processor's
    ``second_per_grid_ts`` times ``tokens_per_second``) with that value as an exact Python float."""
    if not isinstance(segments, (list, tuple)):
        return segments
    out = []
    for seg in segments:
        value = seg.get("time_interval") if isinstance(seg, dict) else None
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
            seg = {**seg, "time_interval": float(value.item())}
        out.append(seg)
    return out
