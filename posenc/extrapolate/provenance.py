"""Where a kept number came from: the commit, the date, the machine and the command, one way for
every file of kept numbers (the measured costs, ``posenc.extrapolate.costs``; the kept records,
``posenc.extrapolate.kept``).

``capture(command, device)`` returns a JSON-able dict:

    commit      ``git rev-parse HEAD`` of the source tree posenc runs from, with ``+dirty`` when it
                has uncommitted changes under ``posenc/`` (None outside a git checkout)
    date        UTC, ISO 8601, when it was captured
    machine     processor (the CPU's model name), cpus (those this process may use), torch, device
    command     the command line that produced the numbers (what measures them again)
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from posenc import environment

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout posenc runs from (its parent folder)


def commit() -> str | None:
    """The commit of the source tree, ``+dirty`` when ``posenc/`` has uncommitted changes; None
    outside a git checkout (an installed wheel) or without git."""
    try:
        head = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(SOURCE_ROOT), "status", "--porcelain", "--", "posenc"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def machine(device: str = "cpu") -> dict[str, Any]:
    """The machine's CPU, its cores, torch and the device (``posenc.environment.capture``)."""
    env = environment.capture(device)
    return {"processor": env["processor"], "cpus": env["cpus"], "torch": env["torch"], "device": env["device"],
            **({"device_name": env["device_name"]} if "device_name" in env else {})}


def capture(command: str, device: str = "cpu") -> dict[str, Any]:
    return {"commit": commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(device), "command": command}
