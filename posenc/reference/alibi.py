"""Attention with linear biases (Press et al. 2022, "Train Short, Test Long", arXiv:2108.12409).

    bias[h, i, j] = -m_h · |i - j|

The slopes m_h form a geometric sequence starting at 2^(-8/n) with ratio 2^(-8/n) for n heads a
power of two; for other n, the paper's code takes the slopes of the nearest lower power of two
and fills the rest with every other slope of the next power of two.
"""

from __future__ import annotations

import math

import numpy as np

from posenc._validate import check_int
from posenc.reference._checks import distance


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The paper's slopes for ``num_heads`` heads, ``[H]`` float64 (1/2 ... 1/256 for 8 heads)."""
    num_heads = check_int("num_heads", num_heads, min=1)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return np.array(power_of_two(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.concatenate([power_of_two(closest), extra])


def alibi(q_positions, k_positions, slopes) -> np.ndarray:
    """``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` for batched positions) float64."""
    dist = np.abs(distance(q_positions, k_positions, real=True)).astype(np.float64)  # (..., Lq, Lk)
    slopes = np.asarray(slopes, dtype=np.float64)
    if slopes.ndim != 1:
        raise ValueError(f"slopes must have shape [H], got shape {list(slopes.shape)}")
    return -slopes[:, None, None] * dist[..., None, :, :]
