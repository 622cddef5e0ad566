"""What a benchmark's numbers depend on, captured one way for every consumer: the speed
benchmark's ``meta`` (``posenc bench --json``), the ``env`` of each extrapolation record (the
JSONL lines of ``posenc extrapolate``) and the report's hardware-and-versions section.

``capture()`` returns one flat, JSON-able dict:

    posenc, python, platform, machine    this interpreter and machine
    processor       the CPU's model name (Linux's /proc/cpuinfo; else platform.processor())
    cpus            the CPUs this process may run on (its affinity mask; os.cpu_count() elsewhere)
    torch_threads   torch's intra-op threads at the time of the call
    load_avg        the 1-, 5- and 15-minute load averages of the machine
    torch, numpy, transformers, rotary-embedding-torch, x-transformers, scikit-learn, matplotlib
                    the installed versions (importlib.metadata), None where one is not installed

A consumer adds what only it knows (the extrapolation runs: device, world size, threads, jobs).
torch is imported only when ``capture`` runs.
"""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# The distributions whose versions the numbers depend on: torch and numpy compute, the peers are
# timed against (posenc bench), scikit-learn brings the digits (--part image), matplotlib draws.
DISTRIBUTIONS = ("torch", "numpy", "transformers", "rotary-embedding-torch", "x-transformers", "scikit-learn",
                 "matplotlib")


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask on Linux, ``os.cpu_count()`` elsewhere."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name: Linux's ``/proc/cpuinfo``, else ``platform.processor()`` or the machine."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions(distributions: tuple[str, ...] = DISTRIBUTIONS) -> dict[str, str | None]:
    """The installed version of each distribution, None where it is not installed."""
    out: dict[str, str | None] = {}
    for dist in distributions:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def capture() -> dict[str, Any]:
    """This process's environment, as the module docstring lists it."""
    import torch

    import posenc

    return {"posenc": posenc.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "processor": cpu_model(), "cpus": available_cpus(),
            "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()), **versions()}
