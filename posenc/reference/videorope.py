"""VideoRoPE (Wei, Liu, Zang et al. 2025, "VideoRoPE: What Makes for Good Video Rotary Position
Embedding?", ICML, arXiv:2502.05173 §4; code: Wiselnn570/VideoRoPE, ``modeling_videorope.py``).

A token has three positions ``(t, h, w)`` and RoPE's spectrum ``θ_j = base^(−2j/rotary_dim)``
(``j < R = rotary_dim/2``) as in M-RoPE (``posenc.reference.mrope``); what changes is which axis a
frequency reads and where vision tokens sit:

- **Low-frequency temporal allocation (LTA).** With ``sections = [s_t, s_h, s_w]`` (``S = s_h + s_w``),
  the highest frequencies ``j < S`` alternate row and column, ``a(j) = h`` for even ``j`` and ``w``
  for odd ``j``; time takes the lowest, ``j ≥ S`` (the code's ``apply_m_modify_multimodal_rotary_pos_emb``:
  sections ``[48, 16]`` spatial-then-time, x/y interleaved). M-RoPE's chunked map puts time on the
  highest frequencies instead.
- **Diagonal layout (DL).** A vision block of ``T × H × W`` tokens starting at position ``p`` puts
  frame ``i``, row ``r``, column ``c`` at

      t = p + δ·i,   h = t + r − ⌊(H−1)/2⌋,   w = t + c − ⌊(W−1)/2⌋

  so each frame's grid is centred on the text diagonal ``(t, t, t)``; text tokens sit at ``(m, m, m)``
  (plain RoPE).
- **Adjustable temporal spacing (ATS).** ``δ`` (the code's ``scale_factor``, 2 in the paper's runs)
  spaces frames; the next segment starts at ``p + δ·(T−1) + 1``, one past the block's last time.

Then ``angle_j = pos[a(j)]·θ_j`` and the pairs rotate as in RoPE (``mrope``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from posenc._validate import check_float, check_int
from posenc.limits import check_memory
from posenc.reference.mrope import AXES, MAX_POSITION, MAX_TOKENS, _segment, check_sections, mrope
from posenc.reference.positions import grid_positions


def videorope_axis_of_pair(sections, *, rotary_dim: int | None = None) -> np.ndarray:
    """``a(j)``: the axis (0 = time, 1 = row, 2 = column) frequency ``j`` reads, ``[sum(sections)]``
    int64: row/column alternating over the first ``s_h + s_w``, time on the rest. ``rotary_dim``, when
    given, must be ``2 · sum(sections)`` (``posenc.reference.mrope.check_sections``)."""
    s = check_sections(sections, rotary_dim=rotary_dim)
    spatial = s[1] + s[2]
    if s[1] != (spatial + 1) // 2:
        raise ValueError(f"sections {s}: VideoRoPE alternates row and column over the first s_h + s_w = {spatial} "
                         f"frequencies, so it needs sections[1] == sections[2] (or one more row when odd)")
    j = np.arange(spatial)
    return np.concatenate([np.where(j % 2 == 0, 1, 2), np.zeros(s[0], dtype=np.int64)]).astype(np.int64)


def videorope_positions(segments, *, offset: float = 0, temporal_spacing: float = 2.0) -> np.ndarray:
    """``[L, 3]`` float64 VideoRoPE positions ``(t, h, w)`` of ``{"text": n}``, ``{"image": [h, w]}``
    and ``{"video": [t, h, w]}`` segments (sizes in tokens after any patch merge; an image is a
    one-frame video), by the diagonal layout with spacing ``δ = temporal_spacing`` (module docstring).

    Every position must be non-negative (posenc's positions model): a grid centred on ``p`` reaches
    ``p − ⌊(H−1)/2⌋``, so a vision segment first in the sequence needs ``offset ≥ ⌊(max side − 1)/2⌋``
    (upstream gives it negative positions; here that is a ValueError naming the segment).
    """
    offset = check_float("offset", offset, min=0.0, max=MAX_POSITION)
    delta = check_float("temporal_spacing", temporal_spacing, min=0.0, min_open=True, max=MAX_POSITION)
    if isinstance(segments, (str, bytes, Mapping)) or not isinstance(segments, Sequence):
        raise TypeError("segments must be a list of dicts like [{'text': n}, {'video': [t, h, w]}, ...], "
                        f"got {type(segments).__name__}")
    if not segments:
        raise ValueError("segments is empty; give at least one segment, e.g. [{'text': 4}]")
    parsed = []
    for i, seg in enumerate(segments):
        if isinstance(seg, Mapping) and "time_interval" in seg:
            raise ValueError(f"segments[{i}]: VideoRoPE spaces frames by temporal_spacing (one δ for the "
                             "sequence), not a per-video time_interval")
        parsed.append(_segment(i, seg))
    total = sum(math.prod(sizes) for _, sizes, _ in parsed)
    if total > MAX_TOKENS:
        raise ValueError(f"segments hold {total} tokens; at most {MAX_TOKENS} are allowed")
    check_memory("segments", f"<{total} tokens>", total * AXES * 3, bytes_per=8, what="their positions ([L, 3])")
    p, starts = offset, []
    for i, (kind, sizes, _) in enumerate(parsed):  # every start and bound before any array
        if kind != "text":
            low = p - (max(sizes[1], sizes[2]) - 1) // 2
            if low < 0:
                raise ValueError(f"segments[{i}]: the diagonal layout centres its {sizes[1]}x{sizes[2]} grid on "
                                 f"position {p:g}, so positions reach {low:g} < 0; start at offset >= {offset - low:g} "
                                 "or put text before it")
        starts.append(p)
        p = p + (sizes[0] if kind == "text" else delta * (sizes[0] - 1) + 1)
        if p + max(sizes) > MAX_POSITION:
            raise ValueError(f"positions pass {MAX_POSITION} (2^53) at segments[{i}]")
    blocks = []
    for (kind, sizes, _), start in zip(parsed, starts):
        if kind == "text":
            blocks.append(np.repeat((start + np.arange(sizes[0], dtype=np.float64))[:, None], AXES, axis=1))
            continue
        t, h, w = sizes
        idx = grid_positions((t, h, w)).astype(np.float64)  # (t·h·w, 3) rows (i, r, c)
        time = start + delta * idx[:, 0]
        blocks.append(np.stack([time, time + idx[:, 1] - (h - 1) // 2, time + idx[:, 2] - (w - 1) // 2], axis=1))
    return np.concatenate(blocks, axis=0)


def videorope(x, positions, inv_freq, axis_of_pair, *, layout: str = "half", attention_factor: float = 1.0):
    """Rotates ``x [B, H, L, D]`` at ``positions [L, 3]`` or ``[B, L, 3]``: pair ``j`` by
    ``positions[..., a(j)]·θ_j`` with ``a = videorope_axis_of_pair(sections)`` (M-RoPE's rotation,
    ``posenc.reference.mrope``, with VideoRoPE's map)."""
    return mrope(x, positions, inv_freq, axis_of_pair, layout=layout, attention_factor=attention_factor)
