"""FoPE: Fourier position embedding (Hua et al. 2024, "Fourier Position
Embedding: Enhancing Attention's Periodic Extension for Length Generalization", arXiv:2412.17739;
code: TsinghuaC3I/Fourier-Position-Embedding, vLLM's ``FourierRotaryEmbedding``).

RoPE gives pair ``d`` one frequency. FoPE treats each pair as a Fourier series over the
frequencies that were trained, and clips the undertrained ones to zero frequency:

1. RoPE's ``θ_j = base^(−2j/D)``, ``j < D/2``; those with ``θ_j < 2π/L`` (``L = max_positions``, the
   training length: a frequency that does not make one full turn within it) are clipped to 0. The
   ``M`` kept ones (the first ``M``) are the series' frequencies.
2. Pair ``d < M`` of head ``h`` at position ``t`` has

       C_{h,d}(t) = Σ_j A_{h,j,d} cos(t θ_j),   S_{h,d}(t) = Σ_j B_{h,j,d} sin(t θ_j)

   with coefficients ``A, B [H_c, M, M]`` (identity plus noise at initialisation: RoPE is
   ``A = B = I``); pairs ``d >= M`` have zero frequency, ``C = 1``, ``S = 0`` (unchanged).
3. The pair ``(x_a, x_b)`` becomes ``(x_a C − x_b S, x_b C + x_a S)``, as RoPE's rotation with
   ``(cos, sin)`` replaced by ``(C, S)``.

``H_c`` coefficient sets serve ``H`` heads, head ``h`` reading set ``h // (H / H_c)`` (vLLM keeps
one per key/value head; the paper's repo one per head; ``H_c = 1`` shares one).
The pairs are ``(d, d + D/2)`` ("half", both upstreams) or ``(2d, 2d+1)`` ("interleaved").

**Conventions.** Both upstreams keep the frequencies that the training length turns at least
once. The paper's repo keeps ``θ_j >= 2π/L`` (as here), gives the series only ``min(M, D/4)``
output pairs and pads the rest with ``(C, S) = (1, 1)`` (a fixed ``√2``-scaled 45° turn, not
zero frequency); vLLM keeps ``θ_j > 2π/L`` (the same but at equality),
``M`` output pairs, and pads with ``(1, 0)``, as here and as the paper's text says.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.reference.positions import angles, positions_array
from posenc.reference.rope import rotate_pairs_index


def fope_inv_freq(head_dim: int, base: float = 10000.0, max_positions: int = 2048) -> np.ndarray:
    """The ``M`` frequencies FoPE keeps: RoPE's ``θ_j = base^(−2j/D)`` with ``θ_j >= 2π/max_positions``, float64."""
    head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
    base = check_float("base", base, min=0.0, min_open=True)
    max_positions = check_int("max_positions", max_positions, min=1)
    theta = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return theta[theta >= 2 * np.pi / max_positions]


def fope_cos_sin(positions, inv_freq, cos_coef, sin_coef, half: int) -> tuple[np.ndarray, np.ndarray]:
    """``C, S``: ``[..., H_c, L, half]`` float64 for positions ``[L]`` or ``[B, L]``, ``inv_freq [M]``,
    coefficients ``[H_c, M, M]``; pairs ``d >= M`` have ``C = 1, S = 0``."""
    theta = np.asarray(inv_freq, dtype=np.float64)
    a, b = np.asarray(cos_coef, dtype=np.float64), np.asarray(sin_coef, dtype=np.float64)
    m = theta.size
    if a.ndim != 3 or a.shape[1:] != (m, m) or b.shape != a.shape or m > half:
        raise ValueError(f"cos_coef and sin_coef must have shape [H_c, M={m}, M={m}] (M <= {half}), got "
                         f"{list(a.shape)} and {list(b.shape)}")
    phi = angles(positions_array("positions", positions, real=True), theta)  # (..., L, M)
    c = np.einsum("...lj,hjd->...hld", np.cos(phi), a)  # (..., H_c, L, M)
    s = np.einsum("...lj,hjd->...hld", np.sin(phi), b)
    pad = [(0, 0)] * (c.ndim - 1) + [(0, half - m)]
    return np.pad(c, pad, constant_values=1.0), np.pad(s, pad, constant_values=0.0)


def fope(x, positions, inv_freq, cos_coef, sin_coef, *, layout: str = "half") -> np.ndarray:
    """``x [B, H, L, D]`` at ``positions [L]`` or ``[B, L]``: each pair ``(x_a C − x_b S, x_b C + x_a S)``."""
    check_choice("layout", layout, ("half", "interleaved"))
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape [B, H, L, D] with D even, got shape {list(x.shape)}")
    c, s = fope_cos_sin(positions, inv_freq, cos_coef, sin_coef, x.shape[-1] // 2)  # (..., H_c, L, D/2)
    sets = c.shape[-3]
    if x.shape[1] % sets:
        raise ValueError(f"x has {x.shape[1]} heads, not a multiple of the {sets} coefficient sets")
    c, s = (np.repeat(t, x.shape[1] // sets, axis=-3) for t in (c, s))  # head h reads set h // (H / H_c)
    a, b = rotate_pairs_index(x.shape[-1], layout)
    out = x.copy()
    out[..., a] = x[..., a] * c - x[..., b] * s
    out[..., b] = x[..., b] * c + x[..., a] * s
    return out
