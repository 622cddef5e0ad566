"""Memory and time of one ``posenc extend`` forward at given lengths, each in a fresh process.

    python -m posenc.extend.cost --length 8192 --length 16384 [MODEL] [--method yarn] [--threads 2]

For each length a new Python process loads the model (``posenc.extend.sources``: the converted
safetensors copy of a ``.gguf``), puts ``--method`` in with the factor ``max(1, length / L₀)``
(``posenc.extend.methods.apply``, as the grid does), refuses the length before allocating it when
``measure.forward_bytes`` says it would not fit (``measure.check_fits``), and runs one perplexity
forward on ``length`` token ids (``measure.token_nll``: the decoder with the model's SDPA, the loss
in chunks). It prints one JSON line: the seconds of the forward, the process's peak resident memory
(``VmHWM``) after loading and after the forward, and the estimate ``forward_bytes`` made before it.
A fresh process per length, because ``VmHWM`` only grows: a second length in the same process would
report the larger of the two. The token ids are fixed (a seeded generator): the cost of a forward does
not depend on which tokens it reads.

The numbers this prints on the 2-core machine are in docs/guide/extend.md ("Memory and time").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SEED = 35  # of the fixed token ids


def forwards(to: int, context: int, methods: Sequence[str], *, passages: int = 3, trials: int = 1,
             depths: Sequence[float] = (0.1, 0.5, 0.9)) -> dict[int, int]:
    """``{length: forwards}`` of the grid ``posenc extend --to TO`` runs with ``methods`` (the perplexity
    forwards of ``posenc.extend.run.ppl_todo`` and a passkey prompt per length, depth and trial)."""
    from posenc.extend import run
    from posenc.extend.methods import factor_for

    grid = run.Grid(to, context, factor_for(to, context), tuple(methods), passages, tuple(depths), trials)
    counts: dict[int, int] = {}
    for item in run.ppl_todo(grid, list(methods), passages) + run.passkey_todo(grid, list(methods)):
        counts[item["length"]] = counts.get(item["length"], 0) + 1
    return dict(sorted(counts.items(), reverse=True))


def seconds_for(counts: dict[int, int], measured: Sequence[tuple[int, float]]) -> float | None:
    """The time of ``counts`` forwards on this machine, scaled from the longest forwards ``measured``
    (``(length, seconds)``, a run's own records: their median) as ``L²`` (attention's term dominates past
    8k: docs/guide/extend.md); None without a measurement."""
    if not measured:
        return None
    longest = max(n for n, _ in measured)
    per = sorted(s for n, s in measured if n == longest)[len([1 for n, _ in measured if n == longest]) // 2]
    return sum(k * per * (n / longest) ** 2 for n, k in counts.items())


def one_forward(model: str | Path | None, length: int, *, method: str = "yarn", threads: int | None = None,
                cache: str | Path | None = None) -> dict[str, Any]:
    """One forward of ``length`` tokens in this process: ``{"length", "method", "factor", "seconds",
    "vm_hwm_loaded", "vm_hwm", "estimate", "threads"}`` (bytes; ``VmHWM`` is None off Linux)."""
    import torch
    from transformers import AutoConfig

    from posenc.extend import measure, methods, run, sources

    methods.check_methods([method])
    if threads is not None:
        torch.set_num_threads(threads)
    folder = sources.model_folder(model, cache)
    config = AutoConfig.from_pretrained(folder)
    measure.check_fits(config, length)  # before anything of that length exists
    loaded, _ = sources.load(folder)
    context = methods.context_of(config)
    factor = methods.factor_for(max(length, 2), context)
    methods.apply(loaded, method, factor)
    ids = torch.randint(0, config.vocab_size, (length,), generator=torch.Generator().manual_seed(SEED))
    before = run.vm_hwm()
    start = time.perf_counter()
    measure.token_nll(loaded, ids)
    seconds = time.perf_counter() - start
    return {"length": length, "method": method, "factor": factor, "seconds": round(seconds, 2),
            "vm_hwm_loaded": before, "vm_hwm": run.vm_hwm(), "estimate": measure.forward_bytes(config, length),
            "threads": torch.get_num_threads()}


def measure_lengths(lengths: Sequence[int], model: str | None = None, *, method: str = "yarn",
                    threads: int | None = None) -> list[dict[str, Any]]:
    """``one_forward`` at each length, each in a fresh ``python -m posenc.extend.cost --one`` process."""
    out = []
    for length in lengths:
        cmd = [sys.executable, "-m", "posenc.extend.cost", "--one", "--length", str(length), "--method", method]
        cmd += ([model] if model else []) + (["--threads", str(threads)] if threads else [])
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"length {length}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from posenc.extend.methods import METHODS

    p = argparse.ArgumentParser(prog="python -m posenc.extend.cost", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default=None, help="a transformers folder or a .gguf file (default: SmolLM2)")
    p.add_argument("--length", type=int, action="append", required=True, help="tokens of a forward, repeatable")
    p.add_argument("--method", default="yarn", choices=METHODS)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--one", action="store_true", help="measure the first length in this process (internal)")
    args = p.parse_args(argv)
    if any(n < 2 for n in args.length):
        p.error(f"--length must be at least 2, got {min(args.length)}")
    try:
        if args.one:
            print(json.dumps(one_forward(args.model, args.length[0], method=args.method, threads=args.threads)))
            return 0
        for row in measure_lengths(args.length, args.model, method=args.method, threads=args.threads):
            gib = {k: (row[k] or 0) / 2**30 for k in ("vm_hwm_loaded", "vm_hwm", "estimate")}
            print(f"L={row['length']:>6} {row['method']} x{row['factor']:g}: {row['seconds']:.1f} s on "
                  f"{row['threads']} threads; VmHWM {gib['vm_hwm_loaded']:.2f} GiB loaded, {gib['vm_hwm']:.2f} GiB "
                  f"after the forward (estimate {gib['estimate']:.2f} GiB)", flush=True)
    except (ValueError, RuntimeError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
