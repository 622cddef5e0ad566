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

``capture(device)`` adds the device the numbers were measured on:

    device          the device, as torch names it ("cpu", "cuda:0": with its index)
    and on CUDA:
    device_name     torch.cuda.get_device_name (e.g. "NVIDIA H100 80GB HBM3")
    device_capability, device_memory_gb   its compute capability ("9.0") and memory (GiB)
    cuda            the CUDA version torch was built with (torch.version.cuda)
    triton, liger-kernel, flash-attn      the installed versions, None where one is not installed
                    (the GPU kernels: posenc's own, and the peers ``posenc bench --device cuda``
                    times it against)

A consumer adds what only it knows (the extrapolation runs: world size, threads, jobs).
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
# ... and on a CUDA device: Triton compiles posenc's kernel and the peers', which are timed against it.
CUDA_DISTRIBUTIONS = ("triton", "liger-kernel", "flash-attn")


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


def capture(device: str | Any | None = None) -> dict[str, Any]:
    """This process's environment, as the module docstring lists it; with ``device`` (a name such as
    "cuda:1" or a ``torch.device``), also that device's entries."""
    import torch

    from posenc import __version__

    env = {"posenc": __version__, "python": platform.python_version(), "platform": platform.platform(),
           "machine": platform.machine(), "processor": cpu_model(), "cpus": available_cpus(),
           "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()), **versions()}
    if device is None:
        return env
    device = torch.device(device)
    env["device"] = str(device)
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        props = torch.cuda.get_device_properties(index)
        env.update({"device": f"cuda:{index}", "device_name": torch.cuda.get_device_name(index),
                    "device_capability": f"{props.major}.{props.minor}",
                    "device_memory_gb": props.total_memory / 2**30, "cuda": torch.version.cuda,
                    **versions(CUDA_DISTRIBUTIONS)})
        if env["triton"] is None:  # PyTorch's nightly builds ship Triton under another name
            env["triton"] = versions(("pytorch-triton",))["pytorch-triton"]
    return env
