"""Times the quick profile's training with three seeds: one by one (``train``, ``fit_classifier``)
against one stacked model (``train_seeds``, ``fit_classifiers``), interleaved (A, B, A, B, ...) so
a loaded machine slows both alike.

    python docs/bench_seeds.py [--steps 20] [--rounds 3] [--threads 1] [--parts lm,tasks,image,time]
    python docs/bench_seeds.py --compile [--steps 30]   # one seed's LM step (alibi): eager vs torch.compile
    python docs/bench_seeds.py --thread-counts 1,2 [--parts lm,tasks]   # one seed's training at 1 and 2 threads

Prints, per part and scheme, the median milliseconds per step of three seeds each way and their ratio;
with ``--compile``, the first compiled step's seconds and the eager/compiled ratio per round.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from posenc.extrapolate import task_generators as T
from posenc.extrapolate import vision
from posenc.extrapolate.distributed import Dist
from posenc.extrapolate.model import TinyGPT
from posenc.extrapolate.parts import time as timepart
from posenc.extrapolate.parts.image import image_runs as image
from posenc.extrapolate.parts.tasks import task_max_positions
from posenc.extrapolate.plan import resolve_scheme
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

    return lambda: TinyGPT(cfg, spec), dataclasses.replace(lm.train, steps=steps), batches, "decoder"


def tasks_case(profile, scheme: str, steps: int):
    ts = profile.tasks
    cfg = dataclasses.replace(ts.model, vocab_size=max(ts.model.vocab_size, T.VOCAB_SIZE))
    _, spec = resolve_scheme(scheme, cfg, max_positions=task_max_positions(profile))

    def batches(seed: int):
        g = torch.Generator().manual_seed(seed)

        def next_batch(step: int):
            b = T.train_batch(ts.tasks[step % len(ts.tasks)], batch=ts.train.batch_size, max_size=ts.max_size, g=g)
            return b.tokens, b.mask
        return next_batch

    return lambda: TinyGPT(cfg, spec), dataclasses.replace(ts.train, steps=steps), batches, "decoder"


def image_case(profile, variant: str, steps: int):
    s = profile.image
    spec, _ = image.image_spec(variant, s)
    train_x, train_y, _, _ = image.digits(s.test_fraction)
    x_train = image.resample(train_x, s.grid).flatten(1)[..., None]  # (N, g², 1)
    pos = image.image_positions(s.grid, s.grid, "integer")

    def batches(seed: int):
        g = torch.Generator().manual_seed(seed)

        def next_batch(step: int):
            idx = torch.randint(len(train_y), (s.train.batch_size,), generator=g)
            return x_train[idx], pos, train_y[idx]
        return next_batch

    model = lambda: vision.SetTransformer(s.model, spec, in_dim=1, classes=image.NUM_CLASSES)  # noqa: E731
    return model, dataclasses.replace(s.train, steps=steps), batches, "classifier"


def time_case(profile, scheme: str, steps: int):
    s = profile.time
    spec = timepart.time_spec(scheme, s)
    pos = torch.arange(int(round(s.train_seconds * s.train_rate)))

    def batches(seed: int):
        g = torch.Generator().manual_seed(seed)

        def next_batch(step: int):
            x, y, _ = timepart.time_batch(s.train.batch_size, rate=s.train_rate, seconds=s.train_seconds, s=s, g=g)
            return x, pos, y
        return next_batch

    model = lambda: vision.SetTransformer(s.model, spec, in_dim=s.frame_dim, classes=4)  # noqa: E731
    return model, dataclasses.replace(s.train, steps=steps), batches, "classifier"


CASES = {"lm": (lm_case, ("nope", "rope", "alibi", "t5")), "tasks": (tasks_case, ("rope", "alibi")),
         "image": (image_case, ("learned grid (resized)", "RoPE-Mixed")), "time": (time_case, ("rope",))}


def models(build):
    out = []
    for seed in SEEDS:
        torch.manual_seed(seed)
        out.append(build())
    return out


def compile_case(profile, steps: int, rounds: int) -> None:
    """One seed's quick LM training step (alibi), eager against ``torch.compile`` of the forward and loss."""
    from posenc.extrapolate.model import token_nll

    build, tc, batches, _ = lm_case(profile, "alibi", steps)
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, _ = batches(0)(0)
    compiled = torch.compile(lambda a: token_nll(model(a[:, :-1]), a[:, 1:]).mean())

    def step(loss_fn):
        loss = loss_fn(x)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    eager = lambda a: token_nll(model(a[:, :-1]), a[:, 1:]).mean()  # noqa: E731
    step(eager)
    t0 = time.perf_counter()
    step(compiled)
    print(f"first compiled step (compiling): {time.perf_counter() - t0:.1f} s", flush=True)
    for _ in range(rounds):
        per = {}
        for name, fn in (("eager", eager), ("compiled", compiled)):
            t0 = time.perf_counter()
            for _ in range(steps):
                step(fn)
            per[name] = (time.perf_counter() - t0) / steps
        print(f"eager {per['eager'] * 1e3:.1f} ms/step, compiled {per['compiled'] * 1e3:.1f} ms/step: "
              f"{per['eager'] / per['compiled']:.2f}x", flush=True)


def threads_case(profile, parts: list[str], counts: list[int], steps: int, rounds: int) -> None:
    """One seed's training (the first scheme of each part) at each of ``counts`` torch threads, interleaved."""
    for part in parts:
        case, schemes = CASES[part]
        build, tc, batches, kind = case(profile, schemes[0], steps)
        times: dict[int, list[float]] = {n: [] for n in counts}
        for _ in range(rounds + 1):  # the first round warms up and is dropped
            for n in counts:
                torch.set_num_threads(n)
                torch.manual_seed(0)
                model = build()
                t0 = time.perf_counter()
                if kind == "decoder":
                    train(model, tc, batches(0), dist=Dist())
                else:
                    vision.fit_classifier(model, tc, batches(0))
                times[n].append((time.perf_counter() - t0) / steps)
        base = statistics.median(times[counts[0]][1:])
        print(f"{part:6s} {schemes[0]:24s} " + ", ".join(
            f"{n} thread(s) {statistics.median(times[n][1:]) * 1e3:.1f} ms/step "
            f"({base / statistics.median(times[n][1:]):.2f}x)" for n in counts), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parts", default="lm,tasks,image,time")
    p.add_argument("--compile", action="store_true", help="time torch.compile of one seed's LM step instead")
    p.add_argument("--thread-counts", default="", help="time one seed's training at these torch thread counts")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    profile = get_profile("quick")
    if args.compile:
        compile_case(profile, args.steps, args.rounds)
        return
    if args.thread_counts:
        threads_case(profile, args.parts.split(","), [int(n) for n in args.thread_counts.split(",")], args.steps,
                     args.rounds)
        return
    for part in args.parts.split(","):
        case, schemes = CASES[part]
        for scheme in schemes:
            build, tc, batches, kind = case(profile, scheme, args.steps)

            def one_by_one():
                for m, s in zip(models(build), SEEDS):
                    if kind == "decoder":
                        train(m, tc, batches(s), dist=Dist())
                    else:
                        vision.fit_classifier(m, tc, batches(s))

            def stacked():
                if kind == "decoder":
                    train_seeds(models(build), tc, [batches(s) for s in SEEDS], dist=Dist(), stacked=True)
                else:
                    vision.fit_classifiers(models(build), tc, [batches(s) for s in SEEDS], stacked=True)

            times = {"one by one": [], "stacked": []}
            for _ in range(args.rounds + 1):  # the first round warms up and is dropped
                for name, f in (("one by one", one_by_one), ("stacked", stacked)):
                    t0 = time.perf_counter()
                    f()
                    times[name].append((time.perf_counter() - t0) / args.steps)
            a, b = (statistics.median(times[k][1:]) for k in ("one by one", "stacked"))
            ratios = [x / y for x, y in zip(times["one by one"][1:], times["stacked"][1:])]
            print(f"{part:6s} {scheme:24s} 3 seeds one by one {a * 1e3:7.1f} ms/step, stacked {b * 1e3:7.1f} "
                  f"ms/step: {a / b:.2f}x (rounds {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)


if __name__ == "__main__":
    main()
