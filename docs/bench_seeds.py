"""Times the quick profile's training with three seeds: one by one (``train``) against one stacked
model (``train_seeds``), interleaved (A, B, A, B, ...) so a loaded machine slows both alike.

    python docs/bench_seeds.py [--steps 40] [--rounds 3] [--threads 1] [--parts lm,tasks] [--schemes alibi,rope]

Prints, per part and scheme, the median seconds per step of three seeds each way and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from posenc.extrapolate import tasks as T
from posenc.extrapolate.distributed import Dist
from posenc.extrapolate.model import TinyGPT
from posenc.extrapolate.plan import resolve_scheme, task_max_positions
from posenc.extrapolate.profiles import get_profile
from posenc.extrapolate.train import train, train_seeds

SEEDS = (0, 1, 2)


def lm_case(profile, scheme: str, steps: int):
    lm = profile.lm
    cfg = dataclasses.replace(lm.model, vocab_size=256)
    _, spec = resolve_scheme(scheme, cfg, max_positions=lm.train_length)
    data = torch.randint(0, 256, (200_000,))

    def batches(seed: int):
        g = torch.Generator().manual_seed(seed)

        def next_batch(step: int):
            starts = torch.randint(0, data.numel() - lm.train_length - 1, (lm.train.batch_size,), generator=g)
            return data[starts[:, None] + torch.arange(lm.train_length + 1)], None
        return next_batch

    return cfg, spec, dataclasses.replace(lm.train, steps=steps), batches, task_max_positions(profile)


def tasks_case(profile, scheme: str, steps: int):
    ts = profile.tasks
    _, spec = resolve_scheme(scheme, ts.model, max_positions=task_max_positions(profile))

    def batches(seed: int):
        g = torch.Generator().manual_seed(seed)

        def next_batch(step: int):
            b = T.train_batch(ts.tasks[step % len(ts.tasks)], batch=ts.train.batch_size, max_size=ts.max_size, g=g)
            return b.tokens, b.mask
        return next_batch

    return ts.model, spec, dataclasses.replace(ts.train, steps=steps), batches, None


def models(cfg, spec):
    out = []
    for seed in SEEDS:
        torch.manual_seed(seed)
        out.append(TinyGPT(cfg, spec))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parts", default="lm,tasks")
    p.add_argument("--schemes", default="nope,rope,alibi,t5")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    profile = get_profile("quick")
    cases = {"lm": lm_case, "tasks": tasks_case}
    for part in args.parts.split(","):
        for scheme in args.schemes.split(","):
            cfg, spec, tc, batches, _ = cases[part](profile, scheme, args.steps)

            def one_by_one():
                for m, s in zip(models(cfg, spec), SEEDS):
                    train(m, tc, batches(s), dist=Dist())

            def stacked():
                train_seeds(models(cfg, spec), tc, [batches(s) for s in SEEDS], dist=Dist())

            times = {"one by one": [], "stacked": []}
            dataclasses.replace(tc, steps=2)
            for _ in range(args.rounds + 1):  # the first round warms up and is dropped
                for name, f in (("one by one", one_by_one), ("stacked", stacked)):
                    t0 = time.perf_counter()
                    f()
                    times[name].append((time.perf_counter() - t0) / args.steps)
            a, b = (statistics.median(times[k][1:]) for k in ("one by one", "stacked"))
            print(f"{part:6s} {scheme:10s} 3 seeds one by one {a * 1e3:7.1f} ms/step, stacked {b * 1e3:7.1f} "
                  f"ms/step: {a / b:.2f}x", flush=True)


if __name__ == "__main__":
    main()
