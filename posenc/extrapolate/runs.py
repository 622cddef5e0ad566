"""What one run does, shared by every part: the context of a run, training with a progress bar,
the loss curve, and the record (``execute``). What a run of a part trains and evaluates is that
part's ``execute`` (``posenc.extrapolate.parts``).

``execute(ctx, run)`` returns the run's record, the line the results file gets: the key and
spec, the training-loss curve, the evaluation rows, timings and the environment; a run of a
``--plugin``'s scheme also its ``plugin``: ``{scheme: {"source", "sha256"}}``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from posenc import environment, plugins
from posenc.extrapolate.context_parallel import env_field
from posenc.extrapolate.model import TinyGPT
from posenc.extrapolate.part import Context, Part
from posenc.extrapolate.plan import Run
from posenc.extrapolate.train import train_seeds


def _environment(ctx: Context, run: Run | None = None) -> dict[str, Any]:
    """The record's ``env``: ``posenc.environment.capture(device)`` and how the runs were spread
    (given a run, with ``--context-parallel``: the method its training sharded sequences with, or None)."""
    return {**environment.capture(ctx.dist.device), "world_size": ctx.dist.world, "threads": ctx.threads,
            "jobs": ctx.jobs, **({} if run is None else env_field(ctx.dist, run))}


def _bar(ctx: Context, total: int, desc: str):
    """A tqdm bar on rank 0 when stderr is a terminal (None otherwise)."""
    if not (ctx.progress and ctx.dist.main and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def train_with_bar(ctx: Context, models: list[TinyGPT], cfg, next_batches: list, desc: str, **kw: Any
                   ) -> list[list[float]]:
    """Trains the models of a configuration's seeds (``train_seeds``); each seed's losses."""
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


def curve(losses: list[float], points: int = 200) -> list[float]:
    """Every step's loss, or the means of ``points`` equal bins when there are more steps."""
    if len(losses) <= points:
        return [round(x, 5) for x in losses]
    edges = [round(i * len(losses) / points) for i in range(points + 1)]
    return [round(sum(losses[a:b]) / (b - a), 5) for a, b in zip(edges, edges[1:])]


def execute(ctx: Context, run: Run, part: Part) -> dict[str, Any]:
    """Runs ``run`` (``part.execute``, ``part`` the one ``run.part`` names); returns its record (one
    line of the results file)."""
    return execute_seeds(ctx, [run], part)[0]


def execute_seeds(ctx: Context, runs: list[Run], part: Part) -> list[dict[str, Any]]:
    """Runs ``runs``, the seeds of one configuration (``plan.seed_groups``), together
    (``part.execute_seeds``); returns one record per seed, as ``execute`` writes it. ``seconds``
    and ``train_seconds`` are each seed's share of the group's time; ``cpu_seconds`` its share of the
    process's CPU time (``time.process_time``: every thread of this process, what the run cost however
    loaded the machine was; ``posenc.extrapolate.costs`` estimates a plan's time from it)."""
    if len({r.config for r in runs}) != 1:
        raise ValueError("execute_seeds takes the runs of one configuration (they may differ by seed only)")
    t0, c0 = time.perf_counter(), time.process_time()
    bodies = part.execute_seeds(ctx, runs)
    seconds = (time.perf_counter() - t0) / len(runs)
    cpu_seconds = (time.process_time() - c0) / len(runs)
    corpus = {"source": ctx.corpus_source, "sha256": ctx.corpus_sha} if ctx.corpus_sha else None
    if corpus is not None and part.split_in_record and ctx.data is not None and ctx.data.info:
        corpus["split"] = {k: v for k, v in ctx.data.info.items() if k not in ("source", "heldout_names")}
    return [{"key": run.key, "profile": ctx.profile.name, "part": run.part, "label": run.label,
             "scheme": run.spec["scheme"], "spec": run.spec, "arch": run.arch, "seed": run.seed,
             "settings": run.settings,
             **({"plugin": origin} if (origin := plugins.record_field(run.spec)) else {}),
             "corpus": corpus, **body, "seconds": round(seconds, 2),
             "cpu_seconds": round(cpu_seconds, 2), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "env": _environment(ctx, run)}
            for run, body in zip(runs, bodies)]


def summary(record: dict[str, Any], part: Part) -> str:
    """One line on a finished run (``part.summary``, ``part`` the record's)."""
    if record.get("cannot_run"):
        return f"cannot run: {record['cannot_run']}"
    return part.summary(record)
