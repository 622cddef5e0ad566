"""What every process that runs the benchmark's runs sets up, whichever executor started it (the
driver itself, a ``--jobs`` worker process, a Ray task: ``posenc.extrapolate.driver``,
``posenc.extrapolate.cluster``): its heap kept (``keep_heap``) and the data the profile's parts share
(``lm_data``)."""

from __future__ import annotations

import sys

from posenc.extrapolate.parts import PARTS
from posenc.extrapolate.profiles import Profile


def lm_data(profile: Profile, corpus: str | None):
    """The data the profile's parts share (the language-modelling corpus split; None when no part
    needs it), its source and hash: the first part's ``load`` that gives something."""
    for part in PARTS:
        loaded = part.load(profile, corpus)
        if loaded is not None:
            return loaded
    return None, "", ""


def keep_heap() -> None:
    """Linux (glibc): freed memory stays in this process's heap, for the next allocation, instead of
    going back to the system (``mallopt``: no ``mmap`` below 2 GB, no trimming of the heap's top
    below 1 GB). Evaluating at 16L allocates and frees the same large score blocks over and over; by
    default glibc maps each block above its threshold afresh and the kernel zeroes and faults in its
    pages every time. One evaluation pass at 512 tokens (2 layers, width 64, 32 windows, one thread)
    went from 453 to 283 ms for KERPLE (system time 149 → 5 ms) and from 848 to 497 ms for CoPE
    (294 → 3 ms); nothing a run computes changes. The benchmark's processes only (their memory is a
    few hundred MB); not the library's. So the content kind's trim after each block of rows
    (``posenc.rowwise.trim_rows``, which bounds the library's memory at long lengths) is off here too."""
    if not sys.platform.startswith("linux"):
        return
    from posenc import rowwise

    rowwise.trim_rows(False)
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, ctypes.c_int(2**31 - 1))  # M_MMAP_THRESHOLD
        libc.mallopt(-1, ctypes.c_int(2**30))  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # another C library (musl): its defaults
        pass
