"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", §2.1).

A learned scalar per head and per bucket of the relative distance ``r = j - i``. Half the buckets
(``max_exact``) hold one distance each; the rest cover distances up to ``max_distance``
logarithmically; farther distances share the last bucket. Bidirectional buckets use half the
buckets for each sign; causal buckets see only ``max(-r, 0)`` (the past).

    bias[h, i, j] = W[bucket(j - i), h]
"""

from __future__ import annotations

import numpy as np

from posenc._validate import check_bool, check_int
from posenc.reference._checks import distance


def t5_bucket(relative, *, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True) -> np.ndarray:
    """The bucket of each relative distance ``j - i`` (integer array of the same shape)."""
    bidirectional = check_bool("bidirectional", bidirectional)
    num_buckets = check_int("num_buckets", num_buckets, min=4 if bidirectional else 2)
    side = num_buckets // 2 if bidirectional else num_buckets
    max_distance = check_int("max_distance", max_distance, min=side // 2 + 1)
    r = np.asarray(relative)
    if r.dtype.kind not in "iu":
        raise TypeError(f"relative must hold integers, got dtype {r.dtype}")
    r = r.astype(np.int64)
    bucket = np.zeros_like(r)
    if bidirectional:
        num_buckets //= 2
        bucket += (r > 0) * num_buckets
        n = np.abs(r)
    else:
        n = np.maximum(-r, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        large = max_exact + (
            np.log(np.maximum(n, 1) / max_exact) / np.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return bucket + np.where(n < max_exact, n, large)


def t5(q_positions, k_positions, table, *, num_buckets: int = 32, max_distance: int = 128,
       bidirectional: bool = True) -> np.ndarray:
    """``table [num_buckets, H]`` -> bias ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` for batched positions)."""
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] != num_buckets:
        raise ValueError(f"table must have shape [num_buckets={num_buckets}, H], got shape {list(table.shape)}")
    b = t5_bucket(distance(q_positions, k_positions, scheme="t5"), num_buckets=num_buckets,
                  max_distance=max_distance, bidirectional=bidirectional)  # (..., Lq, Lk)
    values = table[b]  # (..., Lq, Lk, H)
    return np.moveaxis(values, -1, -3)
