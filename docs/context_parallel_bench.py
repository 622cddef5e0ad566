"""Per-rank peak memory and time of one training step of context-parallel attention.

    python docs/context_parallel_bench.py --lengths 16384 32768 --worlds 1 2 4 \
        --schemes alibi rope fox --methods allgather ring ulysses --out cp.jsonl

Each point runs in fresh processes (``torch.multiprocessing.spawn``, gloo, one torch thread per
rank), so each rank's ``VmHWM`` (its peak resident memory, from ``/proc/self/status``) belongs to
that point alone. A rank builds its shard of one causal sequence (``B = 1``, ``H = 8``, ``D = 64``,
float32, ``posenc.shard_positions``), then times one step, ``context_parallel_attention`` forward
and backward. Written per point (one JSON line, the largest rank's numbers): ``base_mb`` (VmHWM
with the inputs allocated, before the step), ``peak_mb`` (after it), ``step_mb`` (their difference:
what the step itself needs) and ``ms`` (the slowest rank's step). ``resource.setrlimit`` caps each
rank's address space (``--cap-gb``), so a point that needs more fails instead of swapping a shared
machine; a failed point is written with its error.

``--fit FILE`` fits the memory model of ``docs/numbers.md`` ("Context parallelism") to the points
of ``FILE``, prints it beside each point, the longest ``L`` per rank within 4 GB, and what 1M
tokens needs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

HEADS, HEAD_DIM, FLOAT = 8, 64, 4  # the H, D; float32


def _vmhwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _rank(rank: int, world: int, store: str, point: dict, out_dir: str, cap_gb: float) -> None:
    cap = int(cap_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import torch
    import torch.distributed as dist

    import posenc

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    length, scheme = point["length"], point["scheme"]
    spec = {"scheme": scheme, "num_heads": HEADS} if scheme != "rope" else {"scheme": "rope", "head_dim": HEAD_DIM}
    if scheme == "fox":
        spec["gate"] = "bias_only"
    pe = posenc.build(spec)
    positions = posenc.shard_positions(length, world, rank)
    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(1, HEADS, length // world, HEAD_DIM, generator=g).requires_grad_(True) for _ in range(3))
    grad = torch.randn(1, HEADS, length // world, HEAD_DIM, generator=g)
    dist.barrier()
    base = _vmhwm_mb()
    start = time.perf_counter()
    out = posenc.context_parallel_attention(q, k, v, pe, positions=positions, causal=True, method=point["method"])
    out.backward(grad)
    dist.barrier()
    ms = (time.perf_counter() - start) * 1e3
    with open(f"{out_path(out_dir)}.{rank}", "w") as f:
        json.dump({"base_mb": base, "peak_mb": _vmhwm_mb(), "ms": ms}, f)
    dist.destroy_process_group()


def out_path(out_dir: str) -> str:
    return os.path.join(out_dir, "rank")


def run_point(point: dict, cap_gb: float) -> dict:
    """One point in fresh processes: the largest rank's memory and the slowest rank's time."""
    import torch.multiprocessing as mp

    world = point["world"]
    with tempfile.TemporaryDirectory() as where:
        try:
            mp.spawn(_rank, args=(world, os.path.join(where, "store"), point, where, cap_gb), nprocs=world, join=True)
        except Exception as error:  # noqa: BLE001 - the point is written with its error
            return {**point, "error": f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:200]}"}
        ranks = [json.load(open(f"{out_path(where)}.{r}")) for r in range(world)]
    peak = max(ranks, key=lambda r: r["peak_mb"])
    return {**point, "base_mb": round(peak["base_mb"], 1), "peak_mb": round(peak["peak_mb"], 1),
            "step_mb": round(peak["peak_mb"] - peak["base_mb"], 1), "ms": round(max(r["ms"] for r in ranks))}


def per_rank(length: int, world: int, method: str, *, heads: int = HEADS, head_dim: int = HEAD_DIM,
             bytes_per: int = FLOAT) -> float:
    """The model's variable, in MB: the keys and values a rank holds at once, ``S·L`` for allgather
    (the whole sequence's) and ``S·L/P`` for ring and ulysses (a shard's worth, or ``H/P`` heads of
    the whole sequence), with ``S = H·D·bytes`` per token."""
    s = heads * head_dim * bytes_per / 2**20
    return s * length if method == "allgather" else s * length / world


def fit(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Per method, ``step_mb ≈ c + a·per_rank(L, P)``: least squares over the measured points (the
    constant ``c``: allocator arenas, gloo's buffers, first-call workspaces, a block of scores)."""
    import numpy as np

    coefficients = {}
    for method in sorted({r["method"] for r in rows}):
        pts = [r for r in rows if r["method"] == method]
        x = np.array([[1.0, per_rank(r["length"], r["world"], method)] for r in pts])
        (c, a), *_ = np.linalg.lstsq(x, np.array([r["step_mb"] for r in pts]), rcond=None)
        coefficients[method] = (float(c), float(a))
    return coefficients


def model_mb(coefficients: dict, length: int, world: int, method: str, **sizes) -> float:
    c, a = coefficients[method]
    return c + a * per_rank(length, world, method, **sizes)


def _unsupported(scheme: str, method: str) -> bool:
    return scheme == "fox" and method == "allgather"  # content schemes: ring (FoX) and ulysses


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16384, 32768])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--schemes", nargs="+", default=["alibi", "rope", "fox"])
    p.add_argument("--methods", nargs="+", default=["allgather", "ring", "ulysses"])
    p.add_argument("--cap-gb", type=float, default=8.0, help="address-space cap per rank (resource.setrlimit)")
    p.add_argument("--out", default="-", help="JSON lines (default: stdout)")
    p.add_argument("--fit", metavar="JSONL", help="fit the memory model to measured points and print it, the "
                   "longest L per rank within 4 GB and 1M tokens; measures nothing")
    args = p.parse_args(argv)
    if args.fit:
        report(args.fit)
        return
    sink = sys.stdout if args.out == "-" else open(args.out, "a")
    for length in args.lengths:
        for world in args.worlds:
            for scheme in args.schemes:
                for method in args.methods:
                    if not _unsupported(scheme, method):
                        row = run_point({"length": length, "world": world, "scheme": scheme, "method": method},
                                        args.cap_gb)
                        print(json.dumps(row), file=sink, flush=True)


def report(path: str, scheme: str = "alibi") -> None:
    """The model fitted to ``scheme``'s points against each of them, then what it predicts."""
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    rows = [r for r in rows if "step_mb" in r and r["scheme"] == scheme]
    coefficients = fit(rows)
    for method, (c, a) in coefficients.items():
        print(f"{method}: step MB = {c:.0f} + {a:.2f} x {'S·L' if method == 'allgather' else 'S·L/P'} MB")
    for r in sorted(rows, key=lambda r: (r["method"], r["length"], r["world"])):
        m = model_mb(coefficients, r["length"], r["world"], r["method"])
        print(f"  {r['method']:9} P={r['world']} L={r['length']}: measured {r['step_mb']:.0f} MB, model {m:.0f} MB")
    base = min(r["base_mb"] for r in rows)  # the interpreter, torch and a shard's inputs
    for method in coefficients:
        for world in (1, 2, 4, 8):
            def total(length):  # the interpreter and torch, this rank's q, k, v and dout, and the step
                return base + 4 * per_rank(length, world, "ring") + model_mb(coefficients, length, world, method)
            length = 2 * world
            while total(2 * length) <= 4096 and length < 1 << 40:
                length *= 2
            print(f"within 4 GB per rank: {method:9} P={world}: L = {length} (a power of 2)")
    for shape, sizes in (("H=8, D=64, float32", {}),
                         ("H=32, D=128, bfloat16", {"heads": 32, "head_dim": 128, "bytes_per": 2})):
        for gb in (80, 141):
            for method in coefficients:
                fits = [w for w in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
                        if model_mb(coefficients, 1 << 20, w, method, **sizes)
                        + 4 * per_rank(1 << 20, w, "ring", **sizes) <= gb * 1024]
                print(f"1M tokens, {shape}, one attention step within {gb} GB: {method} "
                      f"{f'P >= {fits[0]}' if fits else 'no P <= 1024'}")


if __name__ == "__main__":
    main()
