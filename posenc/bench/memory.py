"""The memory probe: a case runs in a fresh interpreter (``in_fresh_process``) so that its peak
resident memory (``peak_rss_gb``) is its own, and a case that would exhaust the machine fails alone."""

from __future__ import annotations

import json
import subprocess
import sys


def peak_rss_gb() -> float:
    """This process's peak resident memory so far, GiB.

    Linux's ``VmHWM`` where it exists: the ``getrusage().ru_maxrss`` of a child also counts the
    RSS its parent had when it forked (the kernel keeps the larger at ``exec``), so it would
    report the benchmark's own memory, not the case's. Elsewhere ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB -> GiB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


def in_fresh_process(module: str, function: str, spec: dict, timeout: float) -> dict:
    """``module.function(spec)`` in a fresh interpreter, merged into ``spec``; an error or a timeout
    is reported (``spec`` with ``"error"``), not raised. ``function`` returns a JSON-able dict."""
    code = (f"import json, sys; from {module} import {function}; "
            f"print(json.dumps({function}(json.loads(sys.argv[1]))))")
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {**spec, "error": last[:200]}
    return {**spec, **json.loads(proc.stdout.strip().splitlines()[-1])}
