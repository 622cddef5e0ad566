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

``--model`` prints the memory model of ``docs/numbers.md`` ("Context parallelism") next to each
measured point, and its predictions for 1M tokens.
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


def model_mb(length: int, world: int, method: str, *, heads: int = HEADS, head_dim: int = HEAD_DIM,
             bytes_per: int = FLOAT) -> float:
    """The step's own memory per rank, in MB (docs/numbers.md, "Context parallelism"): ``S = H·D·bytes``
    per token, ``Ll = L / P``; the blocks' scores (``posenc.blockwise``: ``H·256·512`` floats, a few
    of them) are a constant ``C``.

    - allgather: ``5·S·L`` (the gathered keys and values, their sequence-order copies, one gradient
      of them at a time) + ``4·S·Ll`` (output, its gradient, the query gradient, the all-reduce) + C
    - ring: ``10·S·Ll`` (two k/v shards in flight, then k, v, dk, dv in flight and their arrivals,
      out, dq) + C
    - ulysses: ``12·S·Ll`` (q, k, v of ``H / P`` heads over ``L`` and their gradients, the output
      and its all-to-all, before and after the reorder) + C
    """
    s = heads * head_dim * bytes_per / 2**20  # MB per token
    local = length / world
    blocks = 6 * heads * 256 * 512 * bytes_per / 2**20
    per_method = {"allgather": 5 * s * length + 4 * s * local, "ring": 10 * s * local, "ulysses": 12 * s * local}
    return per_method[method] + blocks


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
    p.add_argument("--model", action="store_true", help="print the memory model beside each point, and 1M tokens")
    args = p.parse_args(argv)
    sink = sys.stdout if args.out == "-" else open(args.out, "a")
    for length in args.lengths:
        for world in args.worlds:
            for scheme in args.schemes:
                for method in args.methods:
                    if _unsupported(scheme, method):
                        continue
                    row = run_point({"length": length, "world": world, "scheme": scheme, "method": method}, args.cap_gb)
                    if args.model:
                        row["model_mb"] = round(model_mb(length, world, method), 1)
                    print(json.dumps(row), file=sink, flush=True)
    if args.model:
        for shape, kw in (("H=8, D=64, float32", {}),
                          ("H=32, D=128, bfloat16 (a Llama-3-8B layer)",
                           {"heads": 32, "head_dim": 128, "bytes_per": 2})):
            for gb in (4, 80, 141):
                for method in ("allgather", "ring", "ulysses"):
                    fits = [w for w in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
                            if model_mb(1 << 20, w, method, **kw) <= gb * 1024]
                    print(f"# 1M tokens, {shape}, one attention step within {gb} GB per rank, {method}: "
                          f"{f'P >= {fits[0]}' if fits else 'no P <= 1024'}", file=sink)

if __name__ == "__main__":
    main()
