"""The timing harness: medians over interleaved repeats (``time_interleaved``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_interleaved(fns: dict[str, Callable[[], object]], *, repeats: int,
                     min_sample_s: float = 0.02) -> dict[str, float]:
    """Median seconds per call of each function, the candidates interleaved round by round.

    Each function is warmed up twice; a sample is ``n`` back-to-back calls with ``n`` chosen so
    that a sample lasts ``min_sample_s``; round ``r`` starts at candidate ``r mod len(fns)``, so
    no candidate always runs right after the same neighbour.
    """
    names = list(fns)
    calls = {}
    for name in names:
        fns[name]()
        t0 = time.perf_counter()
        fns[name]()
        one = max(time.perf_counter() - t0, 1e-7)
        calls[name] = max(1, min(1000, int(min_sample_s / one)))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = fns[name], calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {n: statistics.median(s) for n, s in samples.items()}
