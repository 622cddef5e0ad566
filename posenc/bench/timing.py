"""The timing harness: medians over interleaved repeats (``time_interleaved``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_interleaved(fns: dict[str, Callable[[], object]], *, repeats: int, min_sample_s: float = 0.02,
                     synchronize: Callable[[], object] | None = None) -> dict[str, float]:
    """Median seconds per call of each function, the candidates interleaved round by round.

    Each function is warmed up twice; a sample is ``n`` back-to-back calls with ``n`` chosen so
    that a sample lasts ``min_sample_s``; round ``r`` starts at candidate ``r mod len(fns)``, so
    no candidate always runs right after the same neighbour.

    ``synchronize``: for a device that runs calls asynchronously (CUDA: ``torch.cuda.synchronize``),
    called before each sample's clock starts and before it stops, so that a sample times the
    device's work on its ``n`` calls (queued back to back, as a model queues them), not their
    launches, and no other candidate's work spills into it. None (the CPU): nothing is called.
    """
    sync = synchronize or (lambda: None)
    names = list(fns)
    calls = {}
    for name in names:
        fns[name]()
        sync()
        t0 = time.perf_counter()
        fns[name]()
        sync()
        one = max(time.perf_counter() - t0, 1e-7)
        calls[name] = max(1, min(1000, int(min_sample_s / one)))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = fns[name], calls[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            samples[name].append((time.perf_counter() - t0) / n)
    return {n: statistics.median(s) for n, s in samples.items()}
