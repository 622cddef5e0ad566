"""Multimodal rotary position embedding, M-RoPE (Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191 §2.1;
Qwen3-VL's interleaved variant, Bai et al. 2025, arXiv:2511.21631).

A token has three positions ``(t, h, w)`` (time, row, column). RoPE's spectrum
``θ_j = base^(−2j/rotary_dim)``, ``j = 0 .. R−1`` (``R = rotary_dim/2``), is shared; each
frequency index ``j`` takes its angle from one axis ``a(j)``:

    angle_j = p[a(j)] · θ_j,      x' = R(angle) x   (the rotation of 1D RoPE, pair by pair)

The map ``a`` is given by ``sections = [s_t, s_h, s_w]`` (``s_t + s_h + s_w = R``):

- ``"chunked"`` (Qwen2-VL, Qwen2.5-VL): contiguous blocks, ``a = [0]·s_t + [1]·s_h + [2]·s_w``;
  time takes the highest frequencies;
- ``"interleaved"`` (Qwen3-VL): the cyclic pattern T, H, W, T, H, W, ... ``a(j) = 1`` if
  ``j ≡ 1 (mod 3)`` and ``j < 3·s_h``, ``a(j) = 2`` if ``j ≡ 2 (mod 3)`` and ``j < 3·s_w``, else
  ``0``; every axis then spans the whole spectrum. This needs ``3·s_h ≤ R + 1`` and
  ``3·s_w ≤ R`` (else an axis would get fewer frequencies than its section says).

Text tokens carry three equal positions ``(m, m, m)``, so ``angle_j = m·θ_j`` for every ``j``:
plain 1D RoPE, exactly. Scores stay relative on every axis: ``⟨R(p)q, R(p')k⟩`` depends only on
``p − p'`` (each pair sees one axis's difference).

``mrope_positions`` builds the ``[L, 3]`` positions of a sequence of text, image and video
segments (the rule is in its docstring).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from posenc._validate import check_choice, check_float, check_int
from posenc.limits import check_memory
from posenc.reference.positions import angles, grid_positions, positions_array
from posenc.reference.rope import rotate_pairs_index

AXES = 3
"""M-RoPE's axes: time, height (row), width (column)."""
SECTIONS_LAYOUTS = ("chunked", "interleaved")
SEGMENT_KINDS = ("text", "image", "video")


def default_sections(rotary_dim: int, sections_layout: str = "chunked") -> list[int]:
    """The sections of Qwen2-VL (chunked: ``[R − 2⌊3R/8⌋, ⌊3R/8⌋, ⌊3R/8⌋]``, ``[16, 24, 24]`` at
    ``R = rotary_dim/2 = 64``) and Qwen3-VL (interleaved: ``[R − 2⌊5R/16⌋, ⌊5R/16⌋, ⌊5R/16⌋]``,
    ``[24, 20, 20]`` at 64), scaled to any ``rotary_dim``: transformers' defaults at head_dim 128."""
    check_choice("sections_layout", sections_layout, SECTIONS_LAYOUTS)
    half = check_int("rotary_dim", rotary_dim, min=2) // 2
    side = (3 * half) // 8 if sections_layout == "chunked" else (5 * half) // 16
    return [half - 2 * side, side, side]


def check_sections(sections, *, rotary_dim: int | None = None) -> list[int]:
    """``[s_t, s_h, s_w]`` as ints: a list of ``AXES`` non-negative integers summing to at least 1
    (to ``rotary_dim/2`` when given, one entry per rotated pair). The one check of the sections
    that M-RoPE's and VideoRoPE's axis maps (``videorope_axis_of_pair``) read."""
    if isinstance(sections, (str, bytes)) or not isinstance(sections, Sequence):
        raise TypeError(f"sections must be a list of {AXES} integers [time, height, width], got {sections!r}")
    if len(sections) != AXES:
        raise ValueError(f"sections must have {AXES} entries [time, height, width] (one per axis), "
                         f"got {len(sections)}: {list(sections)}")
    s = [check_int(f"sections[{i}]", v, min=0) for i, v in enumerate(sections)]
    if rotary_dim is not None and 2 * sum(s) != rotary_dim:
        raise ValueError(f"sections must sum to rotary_dim/2 = {rotary_dim // 2} (one entry per rotated pair), "
                         f"got {s} (sum {sum(s)})")
    if sum(s) < 1:
        raise ValueError(f"sections must sum to at least 1, got {s}")
    return s


def mrope_axis_of_pair(sections, sections_layout: str = "chunked", *, rotary_dim: int | None = None) -> np.ndarray:
    """``a(j)``: the axis (0 = time, 1 = height, 2 = width) each frequency index takes its
    position from, ``[sum(sections)]`` int64 (see the module docstring).

    ``rotary_dim``, when given, must be ``2 · sum(sections)``.
    """
    check_choice("sections_layout", sections_layout, SECTIONS_LAYOUTS)
    s = check_sections(sections, rotary_dim=rotary_dim)
    half = sum(s)
    if sections_layout == "chunked":
        return np.repeat(np.arange(AXES, dtype=np.int64), s)
    j = np.arange(half)
    axis = np.zeros(half, dtype=np.int64)
    axis[(j % 3 == 1) & (j < 3 * s[1])] = 1
    axis[(j % 3 == 2) & (j < 3 * s[2])] = 2
    counts = np.bincount(axis, minlength=AXES).tolist()
    if counts != s:
        raise ValueError(f"interleaved sections {s} do not fit the cycle T,H,W over {half} frequencies "
                         f"(it gives the axes {counts}); interleaved needs 3*sections[1] <= {half + 1} "
                         f"and 3*sections[2] <= {half}")
    return axis


def mrope_angles(positions, inv_freq, axis_of_pair) -> np.ndarray:
    """``p[a(j)]·θ_j`` reduced exactly to ``[−π, π)``: ``[..., L, 3]`` positions (integer or real)
    -> ``[..., L, R]`` float64, by the shared angle function ``posenc.reference.positions.angles``."""
    pos = positions_array("positions", positions, axes=AXES, real=True, scheme="mrope")
    inv_freq = np.asarray(inv_freq)  # float64 θ, or exact θ (an object array)
    if inv_freq.dtype != object:
        inv_freq = inv_freq.astype(np.float64)
    axis_of_pair = np.asarray(axis_of_pair)
    if inv_freq.ndim != 1 or axis_of_pair.shape != inv_freq.shape:
        raise ValueError(f"inv_freq and axis_of_pair must both have shape [rotary_dim/2], got "
                         f"{list(inv_freq.shape)} and {list(axis_of_pair.shape)}")
    return angles(pos, inv_freq, axis_of_pair)


def mrope(x, positions, inv_freq, axis_of_pair, *, layout: str = "half", attention_factor: float = 1.0) -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` (or ``[..., L, D]``) at ``positions [L, 3]`` or ``[B, L, 3]``
    (integer or real).

    ``rotary_dim = 2 * len(inv_freq)``; pair ``j`` is rotated by ``positions[..., a(j)] · θ_j``,
    with the pairs of ``layout`` as in 1D RoPE; the rotated dims are multiplied by
    ``attention_factor``.
    """
    check_choice("layout", layout, ("half", "interleaved"))
    x = np.asarray(x, dtype=np.float64)
    angles = mrope_angles(positions, inv_freq, axis_of_pair)  # (L, R) or (B, L, R)
    rd = 2 * angles.shape[-1]
    if x.ndim < 2 or x.shape[-1] < rd:
        raise ValueError(f"x must have shape [..., L, D] with D >= rotary_dim={rd}, got shape {list(x.shape)}")
    if angles.shape[-2] != x.shape[-2]:
        raise ValueError(f"positions has length {angles.shape[-2]} but x has length {x.shape[-2]}")
    if angles.ndim == 3 and x.ndim == 4:
        if angles.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"positions has batch {angles.shape[0]} but x has batch {x.shape[0]}")
        angles = angles[:, None]  # (B, 1, L, R)
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = rotate_pairs_index(rd, layout)
    out = x.copy()
    out[..., a] = attention_factor * (x[..., a] * cos - x[..., b] * sin)
    out[..., b] = attention_factor * (x[..., a] * sin + x[..., b] * cos)
    return out


# -- positions of a multimodal sequence --------------------------------------------------------

def _sizes(where: str, value, n: int, names: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{where} must be a list of {n} integers [{names}], got {value!r}")
    if len(value) != n:
        raise ValueError(f"{where} must have {n} entries [{names}], got {len(value)}: {list(value)}")
    return [check_int(f"{where}[{i}]", v, min=1) for i, v in enumerate(value)]


def _segment(i: int, seg) -> tuple[str, list[int], float]:
    """One segment as ``(kind, [t, h, w] or [n], time_interval)``, checked."""
    where = f"segments[{i}]"
    if not isinstance(seg, Mapping):
        raise TypeError(f"{where} must be a dict like {{'text': n}}, {{'image': [h, w]}} or "
                        f"{{'video': [t, h, w], 'time_interval': 1.0}}, got {seg!r} ({type(seg).__name__})")
    kinds = [k for k in seg if k in SEGMENT_KINDS]
    unknown = sorted(str(k) for k in seg if k not in SEGMENT_KINDS and k != "time_interval")
    if unknown or len(kinds) != 1:
        got = unknown[0] if unknown else (", ".join(kinds) or "none")
        raise ValueError(f"{where} must have exactly one kind key, one of {', '.join(map(repr, SEGMENT_KINDS))} "
                         f"(and 'time_interval' for a video); got {got!r} in keys {sorted(map(str, seg))}")
    kind = kinds[0]
    if "time_interval" in seg and kind != "video":
        raise ValueError(f"{where}: time_interval applies to a video segment only, got it with {kind!r}")
    interval = check_float(f"{where}['time_interval']", seg.get("time_interval", 1.0), min=0.0, min_open=True)
    if kind == "text":
        return kind, [check_int(f"{where}['text']", seg["text"], min=1)], 1.0
    if kind == "image":
        return kind, [1, *_sizes(f"{where}['image']", seg["image"], 2, "height, width")], 1.0
    return kind, _sizes(f"{where}['video']", seg["video"], 3, "frames, height, width"), interval


MAX_TOKENS = 1 << 31
"""The most tokens a sequence may have (an int32 length, as attention kernels take it)."""
MAX_POSITION = 1 << 53
"""The largest position: every integer up to it is exact in float64, where angles are formed."""


TIME_DTYPES = ("float64", "float32")
"""How a video's temporal positions ``⌊i·time_interval⌋`` are rounded (``mrope_positions``'s
``time_dtype``): exactly in float64, or as transformers' ``get_rope_index`` computes them."""


def frame_positions(t: int, interval: float, time_dtype: str = "float64", *, first: int = 0) -> np.ndarray:
    """The temporal position of frames ``first..t−1``: ``⌊i·interval⌋`` int64, ``[t − first]``.

    ``"float64"``: the product rounded once, in float64 (exact for every ``i·interval`` below 2^53
    that is an integer). ``"float32"``: transformers' ``get_rope_index`` (Qwen2.5-VL), which computes
    ``(torch.arange(t) * time_interval).long()``: torch multiplies an integer tensor by a float in
    float32, so the interval is rounded to float32 (when it comes as the processor's float32
    ``tokens_per_second * second_per_grid_ts[i]`` it already is), each product is rounded to float32,
    then truncated. At 25 fps with ``tokens_per_second=5`` (interval 0.4) frame 5 lands at 1 in
    float32 (``5 · 0.4f = 1.9999999``) and at 2 in float64.
    """
    i = np.arange(first, t, dtype=np.float64)
    if time_dtype == "float32":
        return np.trunc(i.astype(np.float32) * np.float32(interval)).astype(np.int64)
    return np.floor(i * interval).astype(np.int64)


def mrope_positions(segments, *, offset: int = 0, time_dtype: str = "float64") -> np.ndarray:
    """``[L, 3]`` int64 M-RoPE positions ``(t, h, w)`` of a sequence of segments.

    Segments, sizes in tokens after any patch merge:

    - ``{"text": n}``: ``n`` tokens at ``(p, p, p), (p+1, p+1, p+1), ...``; the next starts at ``p + n``;
    - ``{"image": [h, w]}``: ``h·w`` tokens at ``(p, p + r, p + c)`` in row-major order;
    - ``{"video": [t, h, w], "time_interval": 1.0}``: ``t·h·w`` tokens at
      ``(p + ⌊i·time_interval⌋, p + r, p + c)`` for frame ``i`` (``⌊·⌋`` of the product rounded as
      ``time_dtype`` says: ``"float64"``, or ``"float32"`` as transformers computes it; see
      ``frame_positions``; Qwen2.5-VL spaces frames by ``tokens_per_second · seconds_per_frame``);

    where ``p`` (``offset`` for the first) is the current position; after a vision block, the next
    segment starts one past the block's largest position: ``p + max(⌊(t−1)·time_interval⌋, h−1, w−1) + 1``.
    Every position is at most ``MAX_POSITION`` (2^53), checked before anything is allocated.

    This equals transformers' Qwen2-VL/Qwen2.5-VL ``get_rope_index`` for text and images, and for
    videos whose time span is no longer than their side (``⌊(t−1)·time_interval⌋ < max(h, w)``)
    with ``time_dtype="float32"`` (at most intervals the two dtypes agree; they differ by one
    position at some frames of some intervals, e.g. 0.4 and 0.08·21).
    For longer videos transformers' versions disagree: 4.x (and the original Qwen2-VL code)
    start the next segment one past the block's largest position, as posenc does; 5.x advances by
    ``max(h, w)`` only, so the text after a long video reuses positions of its later frames.
    posenc follows the first rule: positions never go back. Two vision blocks in a row are two
    blocks here (transformers' ``get_rope_index`` merges adjacent tokens of one modality into
    one group, so give it a text token between them).
    """
    offset = check_int("offset", offset, min=0, max=MAX_POSITION)
    check_choice("time_dtype", time_dtype, TIME_DTYPES)
    if isinstance(segments, (str, bytes, Mapping)) or not isinstance(segments, Sequence):
        raise TypeError("segments must be a list of dicts like [{'text': n}, {'image': [h, w]}, ...], "
                        f"got {type(segments).__name__}")
    if not segments:
        raise ValueError("segments is empty; give at least one segment, e.g. [{'text': 4}]")
    parsed = [_segment(i, s) for i, s in enumerate(segments)]
    total = sum(math.prod(sizes) for _, sizes, _ in parsed)
    if total > MAX_TOKENS:
        raise ValueError(f"segments hold {total} tokens; at most {MAX_TOKENS} are allowed")
    check_memory("segments", f"<{total} tokens>", total * AXES * 3, bytes_per=8,
                 what="their positions (int64 [L, 3], with the grid temporaries)")
    # every segment's largest position, before any array: nothing can pass 2^53 (nor wrap in int64)
    ends, p = [], offset
    for i, (kind, sizes, interval) in enumerate(parsed):
        if kind == "text":
            last = p + sizes[0] - 1
        else:
            t, h, w = sizes
            if (t - 1) * interval > MAX_POSITION:
                raise ValueError(f"segments[{i}]: a video of {t} frames at time_interval={interval} spans "
                                 f"{(t - 1) * interval:g} positions; at most {MAX_POSITION} (2^53) is allowed")
            last = p + max(int(frame_positions(t, interval, time_dtype, first=t - 1)[0]), h - 1, w - 1)
        if last > MAX_POSITION:
            raise ValueError(f"positions reach {last} at segments[{i}] (offset={offset}, a large time_interval "
                             f"or many tokens); at most {MAX_POSITION} (2^53) is allowed")
        ends.append(last)
        p = last + 1
    blocks, p = [], offset
    for (kind, sizes, interval), last in zip(parsed, ends):
        if kind == "text":
            blocks.append(np.repeat((p + np.arange(sizes[0], dtype=np.int64))[:, None], AXES, axis=1))  # (n, 3)
        else:
            t, h, w = sizes
            block = grid_positions((t, h, w))  # (t·h·w, 3) rows (i, r, c), row-major
            block[:, 0] = frame_positions(t, interval, time_dtype)[block[:, 0]]
            blocks.append(p + block)
        p = last + 1
    return np.concatenate(blocks, axis=0)
