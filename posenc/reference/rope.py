"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Each pair of dimensions (x_a, x_b) of a query or key at position m is rotated by m·θ_i:

    [x_a']   [cos mθ_i  -sin mθ_i] [x_a]
    [x_b'] = [sin mθ_i   cos mθ_i] [x_b],     θ_i = base^(-2i / rotary_dim)

so ⟨R(m)q, R(n)k⟩ depends only on m − n. The pairs are ``(i, i + rotary_dim/2)`` in the "half"
layout (transformers' Llama) and ``(2i, 2i+1)`` in the "interleaved" layout (GPT-J, Meta's
reference). Dimensions past ``rotary_dim`` pass through unchanged.

**Partial rotary, two conventions** (``rotary_dim < head_dim``):

- GPT-NeoX's (``rope_inv_freq(rotary_dim, base)``): the first ``rotary_dim`` dimensions are a
  RoPE of their own, ``θ_i = base^(−2i/rotary_dim)`` for ``i < rotary_dim/2``, pairs
  ``(i, i + rotary_dim/2)``; the rest pass through. GPT-NeoX, Phi, StableLM and every rope type of
  transformers but ``proportional``.
- p-RoPE's (``proportional_rope_inv_freq(head_dim, rotary_dim, base)``; Barbero et al. 2025,
  "Round and Round We Go! What makes Rotary Positional Encodings useful?", arXiv:2410.06205;
  Gemma 4's full-attention layers, transformers' ``proportional``): the frequencies are those of
  the whole head, ``θ_i = base^(−2i/head_dim)``, the first ``rotary_dim/2`` kept and the other
  ``(head_dim − rotary_dim)/2`` set to 0 (those pairs never rotate: the lowest frequencies are
  removed, not the highest squeezed), and the pairs span the whole head, ``(i, i + head_dim/2)``.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.reference.positions import angles, exact_inv_freq, positions_array


def rope_inv_freq(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """``θ_i = base^(-2i/rotary_dim)``, ``[rotary_dim/2]`` float64."""
    rotary_dim = check_even("rotary_dim", check_int("rotary_dim", rotary_dim, min=2))
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def rope_inv_freq_exact(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """``θ_i = base^(-2i/rotary_dim)`` with 40 digits (``posenc.reference.positions.exact_inv_freq``):
    ``[rotary_dim/2]`` object array, which ``rope``/``angles`` reduce as double-doubles."""
    rope_inv_freq(rotary_dim, base)  # checks rotary_dim and base
    return exact_inv_freq(rotary_dim, base)


def proportional_rope_inv_freq(head_dim: int, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """p-RoPE's frequencies (Barbero et al. 2025): ``[head_dim/2]`` float64,
    ``θ_i = base^(−2i/head_dim)`` for ``i < rotary_dim/2`` and 0 for ``rotary_dim/2 <= i < head_dim/2``."""
    head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
    rotary_dim = check_even("rotary_dim", check_int("rotary_dim", rotary_dim, min=2, max=head_dim))
    freq = rope_inv_freq(head_dim, base)
    freq[rotary_dim // 2:] = 0.0
    return freq


def proportional_rope_inv_freq_exact(head_dim: int, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """``proportional_rope_inv_freq`` with 40 digits (an object array, as ``rope_inv_freq_exact``)."""
    proportional_rope_inv_freq(head_dim, rotary_dim, base)  # checks the arguments
    import mpmath

    freq = exact_inv_freq(head_dim, base)
    freq[rotary_dim // 2:] = mpmath.mpf(0)
    return freq


def rope_angles(positions, inv_freq) -> np.ndarray:
    """``m·θ_i`` reduced exactly to ``[−π, π)``: ``[..., L]`` positions (integer or real) ->
    ``[..., L, rotary_dim/2]`` float64."""
    pos = positions_array("positions", positions, real=True)
    return angles(pos, inv_freq)


def rotate_pairs_index(rotary_dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The dimensions ``(a_i, b_i)`` that pair ``i`` rotates."""
    half = rotary_dim // 2
    if layout == "half":
        return np.arange(half), np.arange(half) + half
    if layout == "interleaved":
        return np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    check_choice("layout", layout, ("half", "interleaved"))
    raise AssertionError("unreachable")  # pragma: no cover


def rope_axial(x, positions, axes_dims, base: float = 10000.0, *, layout: str = "half",
               direction: str = "counterclockwise") -> np.ndarray:
    """Axial RoPE (FLUX, EVA-02): ``positions [..., L, A]``; axis ``a`` applies a 1D ``rope`` of
    ``rotary_dim = axes_dims[a]`` (its own spectrum ``base^(−2i/axes_dims[a])``) to its contiguous
    slice of ``x``; dims past ``sum(axes_dims)`` pass through."""
    dims = [int(d) for d in axes_dims]
    pos = positions_array("positions", positions, axes=len(dims), real=True)
    x = np.asarray(x, dtype=np.float64)
    out, start = x.copy(), 0
    for a, d in enumerate(dims):
        out[..., start:start + d] = rope(x[..., start:start + d], pos[..., a], rope_inv_freq_exact(d, base),
                                           layout=layout, direction=direction)
        start += d
    return out


def rope(x, positions, inv_freq, *, layout: str = "half", attention_factor: float = 1.0,
         direction: str = "counterclockwise") -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` (or ``[..., L, D]``) at ``positions [L]`` or ``[B, L]``.

    ``rotary_dim = 2 * len(inv_freq)``; the rotated dimensions are multiplied by
    ``attention_factor`` (1 unless a scaling method says otherwise). ``inv_freq``: float64 θ, or
    exact θ (``rope_inv_freq_exact``, an object array). ``direction``: each pair ``(a, b)`` turns
    by ``φ = p·θ`` counterclockwise, ``(a cos φ − b sin φ, b cos φ + a sin φ)`` (RoFormer), or
    ``"clockwise"``, by ``−φ`` (NanoChat: ``(a cos φ + b sin φ, b cos φ − a sin φ)``).
    """
    check_choice("layout", layout, ("half", "interleaved"))
    check_choice("direction", direction, ("counterclockwise", "clockwise"))
    x = np.asarray(x, dtype=np.float64)
    inv_freq = np.asarray(inv_freq)
    if inv_freq.dtype != object:
        inv_freq = inv_freq.astype(np.float64)
    if inv_freq.ndim != 1:
        raise ValueError(f"inv_freq must have shape [rotary_dim/2], got shape {list(inv_freq.shape)}")
    if x.ndim < 2 or x.shape[-1] < 2 * len(inv_freq):
        raise ValueError(f"x must have shape [..., L, D] with D >= rotary_dim={2 * len(inv_freq)} "
                         f"(2 * len(inv_freq)), got shape {list(x.shape)}")
    angles = rope_angles(positions, inv_freq)  # (L, rd/2) or (B, L, rd/2)
    if angles.shape[-2] != x.shape[-2]:
        raise ValueError(f"positions has length {angles.shape[-2]} but x has length {x.shape[-2]}")
    if angles.ndim == 3 and x.ndim == 4 and angles.shape[0] not in (1, x.shape[0]):
        raise ValueError(f"positions has batch {angles.shape[0]} but x has batch {x.shape[0]}")
    if angles.ndim == 3 and x.ndim == 4:
        angles = angles[:, None]  # (B, 1, L, rd/2)
    if direction == "clockwise":
        angles = -angles
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = rotate_pairs_index(2 * len(inv_freq), layout)
    out = x.copy()
    out[..., a] = attention_factor * (x[..., a] * cos - x[..., b] * sin)
    out[..., b] = attention_factor * (x[..., a] * sin + x[..., b] * cos)
    return out
