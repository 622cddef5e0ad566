"""Speed and memory benchmark behind ``posenc bench``.

Performance is measured, never assumed: every number is a median over interleaved repeats,
reported as a ratio, in the same run, to two baselines and to the peers (transformers,
rotary-embedding-torch):

- ``copy_``: ``out.copy_(x)`` into a warm preallocated tensor (the same bytes read and written,
  no allocation: the memory roofline). ``apply_rotary(..., out=out)`` is divided by it.
- ``clone``: ``x.clone()`` (a copy into fresh memory: for large tensors the allocation's page
  faults cost several times the copy). The allocating ``apply_rotary`` is divided by it.

Cases:

- ``rotary``: posenc's rope module forward ``(x, positions)`` (cos/sin from float64 angles, or
  from the module's table of them where it keeps one), posenc's ``apply_rotary`` with cos/sin
  precomputed, allocating and into a warm ``out`` (so the reader sees what the float64 angles
  and the allocation cost), the cos/sin alone, transformers' ``apply_rotary_pos_emb`` with
  cos/sin precomputed as transformers does, rotary-embedding-torch's ``rotate_queries_or_keys``
  (its cache warmed); forward and forward+backward. Plus a decoding step: one token per sequence
  at a position offset (``Profile.decode``), where per-call overhead, not memory, decides.
- ``attention``: the bias schemes through ``posenc.attention`` (auto backend, and
  ``backend="flex"``), a materialized bias map + SDPA, and plain causal SDPA (the floor);
  forward, and (up to ``train_max``) forward+backward with gradients for q, k, v and the scheme's
  parameters. Each case runs in a fresh subprocess, its address space capped at
  ``memory_cap_gb`` (``RLIMIT_AS``), so that its peak RSS is its own (see
  ``memory.peak_rss_gb``) and a case that would exhaust a shared machine fails alone.

With ``device="cuda"`` (``posenc bench --device cuda``) the rotary cases run on the GPU (see
``rotary``): posenc's Triton kernel against ``copy_`` (the HBM roofline), ``clone`` and the peers,
Liger-Kernel's and flash-attn's Triton rotations among them; the attention cases, whose memory
is measured as the process's resident memory, run on the CPU only (``profiles.DEVICES``). The
meta records the date, the device's name, and the CUDA, Triton, liger-kernel and flash-attn versions
(``posenc.environment.capture``).

Peers are imported lazily (``peers``); a missing peer is reported as such and the benchmark goes on.
Notation used for tensor shapes: B batch, H heads, L length, D head dim.

Modules, by job: ``profiles`` (``Profile``, ``PROFILES``: sizes and repeats), ``timing`` (the
interleaved-median harness), ``peers`` (the transformers, rotary-embedding-torch, Liger-Kernel
and flash-attn adapters), ``rotary`` (the rotary cases, their candidates, the rotary goals),
``memory`` (peak RSS and the fresh-process runner), ``attention`` (the attention cases and issue
10's training goals), ``tables`` (what the command prints); here, ``run`` and its ``Result``. The command line is
``posenc/commands/bench.py``. Nothing here is imported by ``import posenc``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from posenc import environment
from posenc.bench.attention import attention_specs, run_attention_case
from posenc.bench.profiles import DEVICES, PROFILES, WHATS
from posenc.bench.rotary import bench_rotary_case, rotary_cases, rotary_goals


@dataclass
class Result:
    profile: str
    meta: dict = field(default_factory=dict)
    rotary: list[dict] = field(default_factory=list)
    rotary_goals: dict = field(default_factory=dict)  # rotary_goals(rotary)
    attention: list[dict] = field(default_factory=list)


def run(what: tuple[str, ...] = WHATS, profile_name: str = "full", *, threads: int | None = None,
        progress: Callable[[str], None] | None = None, lengths: tuple[int, ...] | None = None,
        schemes: tuple[str, ...] | None = None, device: str = "cpu") -> Result:
    """Runs the benchmark. ``threads`` sets torch's intra-op threads (default: torch's own);
    ``progress`` gets one line per finished case; ``lengths``/``schemes`` replace the profile's
    attention lengths and schemes; ``device``: "cpu", or "cuda"/"cuda:N" for the rotary part
    (``DEVICES``). The meta is ``environment.capture(device)``, the profile and the date."""
    import torch

    device_type = torch.device(device).type
    refused = [w for w in what if device_type not in DEVICES[w]]
    if refused:
        raise ValueError(f"{', '.join(refused)} runs on {' or '.join(DEVICES[refused[0]])} only, not on {device!r}")
    profile = PROFILES[profile_name]
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    say = progress or (lambda line: None)
    try:
        result = Result(profile=profile_name, meta={"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                    **environment.capture(device), "profile": asdict(profile)})
        if "rotary" in what:
            # cuda:N is made the current device: Triton kernels (Liger-Kernel's among them) launch there
            with torch.cuda.device(torch.device(device)) if device_type == "cuda" else contextlib.nullcontext():
                for case in rotary_cases(profile, device):
                    result.rotary.append(bench_rotary_case(case, profile, device))
                    say(f"{time.perf_counter() - start:6.1f} s  rotary {case.label}")
            result.rotary_goals = rotary_goals(result.rotary)
        if "attention" in what:
            for spec in attention_specs(profile, threads, lengths=lengths, schemes=schemes):
                result.attention.append(run_attention_case(spec))
                say(f"{time.perf_counter() - start:6.1f} s  attention {spec['pass']} {spec['scheme']} "
                    f"{spec['method']} L={spec['length']}")
    finally:
        torch.set_num_threads(before)
    result.meta["load_avg_end"] = list(os.getloadavg())
    result.meta["wall_s"] = time.perf_counter() - start
    return result
