"""``posenc bench``: the speed and memory benchmark (rotary and attention with a bias) of ``posenc.bench``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from posenc.cli import CLIError, check_output_file, int_arg


def _device(value: str) -> str:
    """``cpu``, or ``cuda`` / ``cuda:N`` when torch sees that CUDA device."""
    import re

    if value == "cpu":
        return value
    match = re.fullmatch(r"cuda(?::(\d+))?", value)
    if match is None:
        raise CLIError(f"--device must be cpu, cuda or cuda:N; got {value!r}")
    import torch

    if not torch.cuda.is_available():
        raise CLIError(f"--device {value}: no CUDA device is available (torch {torch.__version__} sees none)")
    count = torch.cuda.device_count()
    if match.group(1) is not None and int(match.group(1)) >= count:
        raise CLIError(f"--device {value}: no such CUDA device ({count} available: cuda:0 to cuda:{count - 1})")
    return value


def _what(value: str | None, device: str) -> tuple[str, ...]:
    """The parts to run; by default every part that runs on ``device`` (``DEVICES``)."""
    from posenc.bench.profiles import DEVICES, WHATS

    device_type = device.split(":")[0]
    if value is None:
        return tuple(w for w in WHATS if device_type in DEVICES[w])
    parts = tuple(p.strip() for p in value.split(",") if p.strip())
    bad = [p for p in parts if p not in WHATS]
    if bad or not parts:
        raise CLIError(f"--what must be a comma-separated list of {', '.join(WHATS)}; got {value!r}")
    for part in parts:
        if device_type not in DEVICES[part]:
            raise CLIError(f"--what {part} runs on {' or '.join(DEVICES[part])} only for now (its peak memory is "
                           f"the process's resident memory), not on --device {device}; use --what rotary")
    return parts


def _lengths(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and 16 <= int(p) <= 1 << 20 for p in parts):
        raise CLIError(f"--lengths must be a comma-separated list of integers from 16 to {1 << 20}; got {value!r}")
    return tuple(int(p) for p in parts)


def _schemes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from posenc import registry

    timed = {*registry.schemes("bias"), *registry.schemes("content")} - {"path"}  # PaTH: materialized only
    allowed = [n for n in registry.schemes() if n in timed]
    parts = tuple(p.strip() for p in value.split(",") if p.strip())
    if not parts or any(p not in allowed for p in parts):
        raise CLIError(f"--schemes must be a comma-separated list of {', '.join(allowed)}; got {value!r}")
    return parts


def bench(args: argparse.Namespace) -> int:
    """Runs the benchmark, prints the tables, writes the JSON if asked."""
    from posenc.bench import run
    from posenc.bench.tables import report

    device = _device(args.device)
    what = _what(args.what, device)
    lengths, schemes = _lengths(args.lengths), _schemes(args.schemes)
    if args.json is not None and Path(args.json).is_dir():
        raise CLIError(f"--json must be a file path, got the directory {args.json!r}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be >= 1, got {args.threads}")
    if args.json is not None:  # fail now, not after minutes of benchmarking
        path = Path(check_output_file("--json", args.json))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    result = run(what, "quick" if args.quick else "full", threads=args.threads,
                 progress=lambda line: print(f"  done: {line}", file=sys.stderr, flush=True),
                 lengths=lengths, schemes=schemes, device=device)
    print(report(result))
    if args.json is not None:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(result), indent=1) + "\n")
        print(f"wrote {path}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="time rotary and attention against the peers and a same-size copy",
                       description="Times posenc's rotary module and bias attention against the peers "
                                   "(transformers, rotary-embedding-torch; on CUDA also Liger-Kernel and "
                                   "flash-attn), a same-size copy (the memory roofline) and plain SDPA; peak "
                                   "memory from a fresh process per case.")
    p.add_argument("--quick", action="store_true", help="fewer cases and repeats (about 2 minutes)")
    p.add_argument("--json", metavar="FILE", help="also write every measurement to FILE as JSON")
    p.add_argument("--what", metavar="LIST",
                   help="comma-separated: rotary, attention (default: both on the CPU, rotary on CUDA)")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu (default), or cuda / cuda:N: the rotary cases on the GPU, posenc's Triton kernel "
                        "against copy_ (the HBM roofline) and Liger-Kernel's and flash-attn's rotary if installed")
    p.add_argument("--lengths", metavar="LIST",
                   help="attention lengths, comma-separated (default: the profile's); each also gets a "
                        "forward+backward case up to 32768")
    p.add_argument("--schemes", metavar="LIST",
                   help="attention bias schemes, comma-separated: alibi, t5, kerple, fire (default: the profile's)")
    p.add_argument("--threads", type=int_arg("--threads"), metavar="N",
                   help="torch intra-op threads (default: torch's own); 1 is steadier on a busy machine")
    p.set_defaults(func=bench)
