"""What one run does: train (or fine-tune, or re-scale) a model and evaluate it at every length.

``execute(ctx, run)`` returns the run's record, the line the results file gets: the key and
spec, the training-loss curve, the evaluation rows, timings and the environment.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc import environment
from posenc.extrapolate import tasks as T
from posenc.extrapolate.data import LMData, sample_batch
from posenc.extrapolate.distributed import Dist, broadcast
from posenc.extrapolate.evaluate import cannot_run, lm_block_nll, task_scores
from posenc.extrapolate.model import TinyGPT
from posenc.extrapolate.plan import Log, Run, scaling_dict, task_max_positions
from posenc.extrapolate.profiles import Profile, settings_hash
from posenc.extrapolate.train import train_seeds


@dataclass
class Context:
    profile: Profile
    dist: Dist
    checkpoints: Path  # where the trained RoPE models wait for the scaling runs
    data: LMData | None
    corpus_source: str
    corpus_sha: str
    threads: int
    log: Log
    progress: bool
    jobs: int = 1  # runs going on at once (worker processes)


def _environment(ctx: Context) -> dict[str, Any]:
    """The record's ``env``: ``posenc.environment.capture(device)`` and how this run was spread."""
    return {**environment.capture(ctx.dist.device), "world_size": ctx.dist.world, "threads": ctx.threads,
            "jobs": ctx.jobs}


def _bar(ctx: Context, total: int, desc: str):
    """A tqdm bar on rank 0 when stderr is a terminal (None otherwise)."""
    if not (ctx.progress and ctx.dist.main and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def _train(ctx: Context, models: list[TinyGPT], cfg, next_batches: list, desc: str, **kw: Any) -> list[list[float]]:
    """Trains the models of a run's seeds as one (``train_seeds``); returns each seed's losses."""
    steps = kw.get("steps") or cfg.steps
    bar = _bar(ctx, steps, desc)

    def on_step(step: int, loss: float) -> None:
        if bar is not None:
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")

    try:
        return train_seeds(models, cfg, next_batches, dist=ctx.dist, on_step=on_step, **kw)
    finally:
        if bar is not None:
            bar.close()


def _curve(losses: list[float], points: int = 200) -> list[float]:
    """Every step's loss, or the means of ``points`` equal bins when there are more steps."""
    if len(losses) <= points:
        return [round(x, 5) for x in losses]
    edges = [round(i * len(losses) / points) for i in range(points + 1)]
    return [round(sum(losses[a:b]) / (b - a), 5) for a, b in zip(edges, edges[1:])]


# -- language modelling ------------------------------------------------------------------------

def _lm_model(ctx: Context, spec: dict[str, Any], seed: int, arch: str = "transformer") -> TinyGPT:
    torch.manual_seed(seed)  # same initial weights for every scheme of an arch (the pe is built last)
    return TinyGPT(dataclasses.replace(ctx.profile.lm.model, vocab_size=256), spec, arch=arch).to(ctx.dist.device)


def _lm_batches(ctx: Context, seed: int, *, batch: int, length: int):
    g = torch.Generator().manual_seed(seed)
    if ctx.data is None:
        raise RuntimeError("language-modelling data were not loaded")
    train_tokens = ctx.data.train
    return lambda step: (sample_batch(train_tokens, batch=batch, length=length, generator=g), None)


def _lm_eval(ctx: Context, model: TinyGPT, *, set_pe: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """NLL per length and mode; ``set_pe(length)`` re-scales RoPE per length (zero-shot scaling)."""
    lm = ctx.profile.lm
    out: list[dict[str, Any]] = []
    for length, mult in zip(lm.lengths(), lm.multipliers):
        if set_pe is not None:
            set_pe(length)
        reason = cannot_run(model, length)
        for mode in ("nonoverlap", "sliding"):
            row: dict[str, Any] = {"mode": mode, "length": length, "mult": mult}
            if reason is not None:
                row["cannot_run"] = reason
            else:
                blocks = lm_block_nll(model, ctx.data, length, mode, eval_tokens=lm.eval_tokens, dist=ctx.dist)
                row["nll"] = round(float(blocks.mean()), 6)
                row["block_nll"] = [round(float(b), 6) for b in blocks]
            out.append(row)
    return out


def _checkpoint_path(ctx: Context, run: Run) -> Path:
    return ctx.checkpoints / f"{run.key}.pt"


def _save_checkpoint(ctx: Context, run: Run, model: TinyGPT) -> None:
    if not ctx.dist.main:
        return
    ctx.checkpoints.mkdir(parents=True, exist_ok=True)
    path = _checkpoint_path(ctx, run)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)  # atomic: a killed save leaves no half checkpoint


def run_lm(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One LM configuration, each of ``runs`` (its seeds) trained as one stacked model."""
    lm, run = ctx.profile.lm, runs[0]
    models = [_lm_model(ctx, run.spec, r.seed, run.arch) for r in runs]
    t0 = time.perf_counter()
    curves = _train(ctx, models, lm.train, [_lm_batches(ctx, r.seed, batch=lm.train.batch_size,
                                                        length=lm.train_length) for r in runs], f"lm {run.label}")
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    out = []
    for r, model, losses in zip(runs, models, curves):
        if r.spec["scheme"] == "rope" and r.arch == ctx.profile.arch:
            _save_checkpoint(ctx, r, model)  # the base of the scaling runs
        out.append({"train_loss": _curve(losses), "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "train_length": lm.train_length, "eval": _lm_eval(ctx, model)})
    return out


# -- RoPE scalings -----------------------------------------------------------------------------

def _base_model(ctx: Context, run: Run) -> TinyGPT:
    """The trained RoPE model of the same seed: its checkpoint, or trained again (deterministic)."""
    base = Run("lm", run.seed, "rope", run.spec, settings_hash({"lm": ctx.profile.lm, "corpus": ctx.corpus_sha}),
               profile=ctx.profile.name, arch=run.arch)
    model = _lm_model(ctx, run.spec, run.seed, run.arch)
    path = _checkpoint_path(ctx, base)
    have = broadcast(path.is_file(), ctx.dist)
    if have:
        model.load_state_dict(torch.load(path, map_location=ctx.dist.device, weights_only=True))
    else:
        ctx.log(f"checkpoint of the RoPE model (seed {run.seed}) not found; training it again")
        lm = ctx.profile.lm
        _train(ctx, [model], lm.train, [_lm_batches(ctx, run.seed, batch=lm.train.batch_size,
                                                    length=lm.train_length)], "lm rope (base)")
        _save_checkpoint(ctx, base, model)
    model.eval()
    return model


def run_scaling(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One scaling of the trained RoPE model, for each of ``runs`` (its seeds); a fine-tune trains
    the seeds as one stacked model."""
    lm, sc, run = ctx.profile.lm, ctx.profile.scaling, runs[0]
    models = [_base_model(ctx, r) for r in runs]
    kind, mode = run.variant["type"], run.variant["mode"]
    L = lm.train_length

    def scaled(factor: float) -> dict[str, Any]:
        if kind == "none" or factor <= 1:
            return copy.deepcopy(run.spec)
        return {**run.spec, "scaling": scaling_dict(kind, factor, L, head_dim=run.spec.get("head_dim"),
                                                    base=run.spec.get("base", 10000.0))}

    records: list[dict[str, Any]] = [{"train_length": L, "variant": run.variant} for _ in runs]
    if mode == "zero-shot":
        for record, model in zip(records, models):
            record["eval"] = _lm_eval(ctx, model, set_pe=lambda length, m=model: m.set_pe(scaled(length / L)))
        return records
    f = sc.finetune_factor
    for model in models:
        model.set_pe(scaled(f))
    batch = max(1, lm.train.batch_size // f)  # the same tokens per step as training (not world-dependent)
    cfg = dataclasses.replace(lm.train, steps=sc.finetune_steps, batch_size=batch,
                              warmup=max(1, sc.finetune_steps // 10))
    t0 = time.perf_counter()
    curves = _train(ctx, models, cfg, [_lm_batches(ctx, r.seed + 10_000, batch=batch, length=f * L) for r in runs],
                    f"finetune {kind}", lr=sc.finetune_lr)
    seconds = (time.perf_counter() - t0) / len(runs)
    for record, model, losses in zip(records, models, curves):
        record.update(train_loss=_curve(losses), train_seconds=round(seconds, 2), eval=_lm_eval(ctx, model))
    return records


# -- tasks -------------------------------------------------------------------------------------

def run_tasks(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One task configuration, each of ``runs`` (its seeds) trained as one stacked model."""
    ts, run = ctx.profile.tasks, runs[0]
    models, batches = [], []
    for r in runs:
        torch.manual_seed(r.seed)
        models.append(TinyGPT(dataclasses.replace(ts.model, vocab_size=max(ts.model.vocab_size, T.VOCAB_SIZE)),
                              run.spec, arch=run.arch).to(ctx.dist.device))
        g = torch.Generator().manual_seed(r.seed)

        def next_batch(step: int, g: torch.Generator = g):
            b = T.train_batch(ts.tasks[step % len(ts.tasks)], batch=ts.train.batch_size, max_size=ts.max_size, g=g)
            return b.tokens, b.mask
        batches.append(next_batch)

    t0 = time.perf_counter()
    curves = _train(ctx, models, ts.train, batches, f"tasks {run.label}")
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    trained = task_max_positions(ctx.profile)  # one model learns every task: its longest training sequence
    out = []
    for model, losses in zip(models, curves):
        rows: list[dict[str, Any]] = []
        for task in ts.tasks:
            for size in ts.sizes():
                mult = round(size / ts.max_size, 4)
                length = T.seq_len(task, size)
                row: dict[str, Any] = {"task": task, "size": size, "mult": mult, "length": length,
                                       "beyond_trained": length > trained}
                reason = cannot_run(model, length)
                if reason is not None:
                    row["cannot_run"] = reason
                else:
                    row.update(task_scores(model, task, size, count=ts.eval_examples, dist=ctx.dist))
                rows.append(row)
        out.append({"train_loss": _curve(losses), "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "max_size": ts.max_size, "trained_positions": trained, "eval": rows})
    return out


def run_image(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    from posenc.extrapolate import vision

    return vision.run_image_seeds(ctx.profile.image, runs[0].spec, runs[0].variant["positions"],
                                  [r.seed for r in runs])


def run_time(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    from posenc.extrapolate import vision

    return vision.run_time_seeds(ctx.profile.time, runs[0].spec, [r.seed for r in runs],
                                 runs[0].variant.get("cannot", ""))


RUNNERS = {"lm": run_lm, "scaling": run_scaling, "tasks": run_tasks, "image": run_image, "time": run_time}


def execute(ctx: Context, run: Run) -> dict[str, Any]:
    """Runs ``run``; returns its record (one line of the results file)."""
    return execute_seeds(ctx, [run])[0]


def execute_seeds(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """Runs ``runs``, the seeds of one configuration (``plan.seed_groups``), training them as one
    stacked model; returns their records, one per seed, as ``execute`` writes them."""
    if len({r.config for r in runs}) != 1:
        raise ValueError("execute_seeds takes the runs of one configuration (they may differ by seed only)")
    t0 = time.perf_counter()
    bodies = RUNNERS[runs[0].part](ctx, runs)
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    corpus = {"source": ctx.corpus_source, "sha256": ctx.corpus_sha} if ctx.corpus_sha else None
    if corpus is not None and runs[0].part != "tasks" and ctx.data is not None and ctx.data.info:
        corpus["split"] = {k: v for k, v in ctx.data.info.items() if k not in ("source", "heldout_names")}
    return [{"key": run.key, "profile": ctx.profile.name, "part": run.part, "label": run.label,
             "scheme": run.spec["scheme"], "spec": run.spec, "arch": run.arch, "seed": run.seed,
             "settings": run.settings,
             "corpus": corpus, **body, "seconds": round(seconds, 2),
             "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "env": _environment(ctx),
             "seeds_together": len(runs)}
            for run, body in zip(runs, bodies)]


def summary(record: dict[str, Any]) -> str:
    """One line on a finished run: perplexity at the shortest and longest length, or mean exact match."""
    if record.get("cannot_run"):
        return f"cannot run: {record['cannot_run']}"
    if record["part"] in ("image", "time"):
        rows = record.get("eval", [])
        where = "size" if record["part"] == "image" else "rate"
        first, last = rows[0], rows[-1]
        return (f"accuracy {first['accuracy']:.2f} at {where} {first[where]:g} -> "
                f"{last['accuracy']:.2f} at {where} {last[where]:g}")
    rows = [r for r in record.get("eval", []) if r.get("mode", "nonoverlap") == "nonoverlap"]
    if record["part"] == "tasks":
        ok = [r for r in rows if "correct" in r]
        acc = sum(r["correct"] for r in ok) / max(1, sum(r["count"] for r in ok))
        return f"mean exact match {acc:.2f}"
    done = [r for r in rows if "nll" in r]
    if not done:
        return "no length could run"
    first, last = done[0], done[-1]
    return (f"ppl {math.exp(first['nll']):.2f} at {first['length']} -> "
            f"{math.exp(last['nll']):.2f} at {last['length']}")

