"""DINOv3's rotary embedding (Siméoni et al. 2025, "DINOv3", arXiv:2508.10104 §3; code:
facebookresearch/dinov3 ``RopePositionEmbedding``, timm ``RotaryEmbeddingDinoV3``, transformers
``dinov3_vit``): axial RoPE on patch coordinates normalised to ``[−1, 1]``.

A patch of an ``h × w`` grid at row ``r``, column ``c`` has the coordinates of its centre

    y = 2·(r + ½)/h − 1,   x = 2·(c + ½)/w − 1            (``normalize="separate"``)

(``"max"``/``"min"`` divide both by ``max(h, w)``/``min(h, w)``). With ``D = head_dim``,
``θ_j = base^(−4j/D)`` for ``j < D/4`` (periods ``base^(4j/D)``, base 100), pair ``k`` turns by

    φ_k = 2π·y·θ_k            (k < D/4: the row)
    φ_k = 2π·x·θ_{k−D/4}      (D/4 ≤ k < D/2: the column)

and the pairs are ``(k, k + D/2)`` ("half": the angles tiled twice, DINOv3's ``rotate_half``) or
``(2k, 2k+1)`` ("interleaved"). Training augments the coordinates before the angles:

    (y, x) ← ((y, x) + s) ⊙ j · ρ,   s ~ U(−shift, shift)², log j ~ U(−log jitter, log jitter)²,
                                     log ρ ~ U(−log rescale, log rescale)

one draw per image batch; ``dinov3_augment`` takes the draws as inputs.
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_choice, check_float, check_int
from posenc.reference.positions import positions_array
from posenc.reference.rope import rotate_pairs_index

NORMALIZE = ("separate", "max", "min")


def dinov3_coordinates(height: int, width: int, *, normalize: str = "separate") -> np.ndarray:
    """``[h·w, 2]`` float64 ``(y, x)`` patch centres in ``[−1, 1]``, row-major."""
    h = check_int("height", height, min=1)
    w = check_int("width", width, min=1)
    check_choice("normalize", normalize, NORMALIZE)
    den_h, den_w = {"separate": (h, w), "max": (max(h, w),) * 2, "min": (min(h, w),) * 2}[normalize]
    ys = (np.arange(h, dtype=np.float64) + 0.5) / den_h
    xs = (np.arange(w, dtype=np.float64) + 0.5) / den_w
    grid = np.stack(np.meshgrid(ys, xs, indexing="ij"), axis=-1).reshape(-1, 2)  # (h·w, 2)
    return 2.0 * grid - 1.0


def dinov3_augment(coords, *, shift=None, jitter=None, rescale=None) -> np.ndarray:
    """``((coords + shift) ⊙ jitter) · rescale`` for the drawn values (``shift``, ``jitter``: 2
    numbers, one per axis; ``rescale``: one); None skips that step."""
    out = np.asarray(coords, dtype=np.float64)
    if shift is not None:
        out = out + np.asarray(shift, dtype=np.float64).reshape(2)
    if jitter is not None:
        out = out * np.asarray(jitter, dtype=np.float64).reshape(2)
    if rescale is not None:
        out = out * float(np.asarray(rescale, dtype=np.float64).reshape(()))
    return out


def dinov3_inv_freq(head_dim: int, base: float = 100.0) -> np.ndarray:
    """``θ_j = base^(−4j/D)``, ``j < D/4``: float64 ``[D/4]`` (cycles per unit of coordinate)."""
    d = check_int("head_dim", head_dim, min=4)
    base = check_float("base", base, min=0.0, min_open=True)
    return base ** (-4.0 * np.arange(d // 4, dtype=np.float64) / d)


def dinov3_angles(coords, head_dim: int, base: float = 100.0) -> np.ndarray:
    """``φ [..., L, D/2]``: ``2π·y·θ`` then ``2π·x·θ`` for coordinates ``[..., L, 2]``."""
    pos = np.asarray(coords)
    positions_array("coords", np.abs(pos), axes=2, real=True)  # the positions model's checks; coordinates may be < 0
    pos = pos.astype(np.float64)
    theta = dinov3_inv_freq(head_dim, base)
    return np.concatenate([2 * np.pi * pos[..., 0:1] * theta, 2 * np.pi * pos[..., 1:2] * theta], axis=-1)


def dinov3(x, coords, *, base: float = 100.0, layout: str = "half") -> np.ndarray:
    """Rotates ``x [B, H, L, D]`` at coordinates ``[L, 2]`` or ``[B, L, 2]``."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 4 or x.shape[-1] % 4:
        raise ValueError(f"x must have shape [B, H, L, D] with D divisible by 4, got shape {list(x.shape)}")
    phi = dinov3_angles(coords, x.shape[-1], base)  # (L, D/2) or (B, L, D/2)
    if phi.shape[-2] != x.shape[2]:
        raise ValueError(f"coords has length {phi.shape[-2]} but x has length {x.shape[2]}")
    if phi.ndim == 3:
        phi = phi[:, None]  # (B, 1, L, D/2)
    cos, sin = np.cos(phi), np.sin(phi)
    a, b = rotate_pairs_index(x.shape[-1], layout)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., a] * sin + x[..., b] * cos
    return out
