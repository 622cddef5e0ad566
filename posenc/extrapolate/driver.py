"""Train short, test long: the driver behind ``posenc extrapolate`` and ``posenc report``.

A profile expands into runs (``posenc.extrapolate.plan``); each run trains one model (or fine-tunes /
re-scales a trained RoPE model), evaluates it at every length (``posenc.extrapolate.runs``) and
appends one line to the results file (``posenc.stats.results``) the moment it finishes.
Starting again with the same arguments skips every finished run, so an interrupted benchmark
(Ctrl-C, or the process killed) resumes where it stopped, at run granularity: a run cut off in
the middle starts again from step 0, and no finished result is lost or written twice.

What each part runs and checks (text, hybrid, scalings, tasks, image, time) is that part's module,
``posenc.extrapolate.parts``; the driver knows them only through ``posenc.extrapolate.part.Part``.

Parallelism, CPU: independent runs go to ``jobs`` worker processes of one torch thread each
(default: one per CPU), spawned: each imports the driver's ``--plugin`` modules again
(``posenc.plugins``), since a spawned process inherits no registration. Small models gain
little from intra-op threads, and several OpenMP
threads on a busy machine can run many times slower than one. Under ``torchrun`` (or on a GPU)
the runs go one at a time and each run's training is spread over the ranks with DDP, or, with
``--context-parallel ring|ulysses``, each rank trains on its shard of every sequence
(``posenc.extrapolate.context_parallel``).

Parallelism, a cluster: ``--executor ray`` puts the same seed groups behind the same seam as Ray tasks
(``posenc.extrapolate.cluster``), on a CPU or one GPU each; the driver stays the only writer of the file.
At its start a run prints its plan's estimated cost (``posenc.extrapolate.costs``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch

from posenc import plugins
from posenc.environment import available_cpus
from posenc.extrapolate.distributed import Dist, barrier, broadcast, setup, teardown
from posenc.extrapolate.parts import owner, plan
from posenc.extrapolate.plan import Log, Run, available_schemes, resolve_scheme, schedule, seed_groups
from posenc.extrapolate.profiles import Profile
from posenc.stats.results import ResultStore
from posenc.extrapolate.runs import Context, execute_seeds, summary
from posenc.extrapolate.worker import keep_heap, lm_data as _lm_data


def checkpoints_dir(results: Path) -> Path:
    return results.parent / f"{results.stem}-checkpoints"


def _depends_on(run: Run, profile: Profile, corpus_sha: str) -> str | None:
    """The key of the run whose checkpoint ``run`` needs (a scaling run needs its RoPE model)."""
    return owner(run.part).depends_on(run, profile, corpus_sha)


# -- worker processes --------------------------------------------------------------------------

_WORKER: Context | None = None


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the driver dies (even by SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the driver is already gone
        os._exit(1)


def _init_worker(profile: Profile, corpus: str | None, checkpoints: str, corpus_sha: str, jobs: int,
                 plugin_sources: tuple[tuple[str, str], ...] = ()) -> None:
    global _WORKER
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    keep_heap()
    # a spawned process inherits no registration: the driver's plugins, imported again, at the same source
    found = plugins.load([source for source, _ in plugin_sources])
    if [p.sha256 for p in found] != [sha for _, sha in plugin_sources]:
        raise RuntimeError("a --plugin's source changed while the benchmark was starting")
    torch.set_num_threads(1)
    data, source, sha = _lm_data(profile, corpus)
    if sha != corpus_sha:
        raise RuntimeError("the corpus changed while the benchmark was starting")
    _WORKER = Context(profile, Dist(), Path(checkpoints), data, source, sha, 1, lambda msg: None, False, jobs)


def _work(runs: list[Run]) -> list[dict[str, Any]]:
    if _WORKER is None:
        raise RuntimeError("worker not initialised")
    return execute_seeds(_WORKER, runs, owner(runs[0].part))


def _parallel(ctx: Context, todo: list[Run], *, jobs: int, corpus: str | None) -> Iterator[dict[str, Any]]:
    """Runs ``todo`` on ``jobs`` worker processes, the seeds of a configuration together
    (``seed_groups``); yields records as they finish. A scaling run waits for its RoPE model's
    run when both are to do."""
    import multiprocessing

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker,
                               initargs=(ctx.profile, corpus, str(ctx.checkpoints), ctx.corpus_sha, jobs,
                                         tuple((p.source, p.sha256) for p in plugins.loaded())))

    def stop(_futures: list[Future]) -> None:  # stop the workers now, not after their runs
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            proc.kill()

    yield from schedule(todo, _deps(ctx, todo), submit=lambda group: pool.submit(_work, group),
                        wait_any=lambda futures: wait(futures, return_when=FIRST_COMPLETED)[0],
                        collect=lambda future: future.result(), cancel=stop)
    pool.shutdown(wait=True)


def _deps(ctx: Context, todo: list[Run]) -> dict[str, str]:
    """A run's key → the key of the run of ``todo`` it needs first (a scaling run: its RoPE model's)."""
    keys = {r.key for r in todo}
    return {r.key: d for r in todo if (d := _depends_on(r, ctx.profile, ctx.corpus_sha)) in keys}


def _estimate(profile: Profile, runs: list[Run], workers: int) -> str:
    """The plan's estimated cost (``posenc.extrapolate.costs``), or why there is none."""
    from posenc.extrapolate import costs

    try:
        return costs.estimate(profile, runs).line(workers)
    except (OSError, ValueError, KeyError) as e:  # a damaged costs file stops no benchmark
        return f"estimate: none ({e})"


def estimate_plan(profile: Profile, *, schemes: list[str | dict[str, Any]] | None = None, jobs: int | str = "auto",
                  threads: int | None = None, device: str | None = None, executor: str | None = None) -> str:
    """What ``--dry-run`` prints: the estimate of the whole plan, run by ``jobs`` workers (``"auto"``:
    one per CPU, or per ``threads``; a Ray executor: this machine's CPUs, its cluster unknown until it runs)."""
    from posenc.extrapolate.cluster import check_executor

    check_executor(executor)
    names = list(schemes) if schemes else list(available_schemes(profile.schemes, lambda msg: None))
    runs = plan(profile, names, corpus_sha="", log=lambda msg: None)
    if device == "cuda" or (device is None and torch.cuda.is_available()):
        workers = 1 if jobs == "auto" else int(jobs)
    elif jobs == "auto":
        workers = max(1, available_cpus() // (threads or 1))
    else:
        workers = int(jobs)
    return _estimate(profile, runs, workers)


def _serial(ctx: Context, todo: list[Run]) -> Iterator[dict[str, Any]]:
    if todo:
        keep_heap()
    for group in seed_groups(todo):
        yield from execute_seeds(ctx, group, owner(group[0].part))
        barrier(ctx.dist)  # ranks start the next run together


# -- driver ------------------------------------------------------------------------------------

def _jobs_and_threads(dist: Dist, jobs: int | str, threads: int | None) -> tuple[int, int]:
    """``jobs="auto"``: one worker per CPU (or per ``threads`` CPUs); 1 under torchrun or on a GPU."""
    cpus = available_cpus()
    if dist.active or dist.device.type == "cuda":
        if jobs not in ("auto", 1):
            raise ValueError(f"--jobs must be 1 under torchrun or on a GPU, got {jobs}")
        return 1, threads or max(1, cpus // dist.local_world)
    if jobs == "auto":
        jobs = cpus if threads is None else max(1, cpus // threads)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer or 'auto', got {jobs!r}")
    return jobs, threads or max(1, cpus // jobs)


def iter_runs(profile: Profile, *, results: str | os.PathLike, schemes: list[str | dict[str, Any]] | None = None,
              corpus: str | None = None, threads: int | None = None, jobs: int | str = 1,
              device: str | None = None, log: Log | None = None, progress: bool = True,
              run_missing: bool = True, context_parallel: str | None = None,
              executor: str | None = None) -> Iterator[dict[str, Any]]:
    """Runs every planned run that is not already in ``results`` and yields every record of the
    plan in plan order (finished ones from the file). Rank 0 alone writes the file and yields.
    With ``run_missing=False`` nothing is run: only the plan's finished records are yielded.

    ``jobs > 1`` (or ``"auto"``, what the command line uses) runs independent runs in spawned
    worker processes: a script that calls this needs the usual ``if __name__ == "__main__":``.

    ``context_parallel`` (``"ring"``, ``"ulysses"``; under ``torchrun`` with 2 or more processes):
    each rank trains on its shard of every sequence (``posenc.extrapolate.context_parallel``), what
    the method cannot shard refused before any run.

    ``executor`` (``"ray"``, ``"ray://HOST:PORT"``; None or ``"local"``: ``jobs``): the runs go to a
    Ray cluster as tasks of ``threads`` CPUs (default 1) or one GPU each (``posenc.extrapolate.cluster``);
    ``jobs`` is then the cluster's.

    At its start a run says what its plan is estimated to cost (``posenc.extrapolate.costs``).
    """
    from posenc.extrapolate.cluster import check_executor, is_ray

    on_ray = is_ray(check_executor(executor))
    if on_ray and (context_parallel is not None or int(os.environ.get("WORLD_SIZE", "1")) > 1):
        raise ValueError("--executor ray runs each run as a task of its own; it does not run under torchrun")
    dist = setup(device, context_parallel)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    say = log if dist.main else (lambda msg: None)
    try:
        if on_ray:
            jobs, threads = 1, threads or 1
        else:
            jobs, threads = _jobs_and_threads(dist, jobs, threads)
            torch.set_num_threads(threads)
        names = list(schemes) if schemes else list(available_schemes(profile.schemes, say))
        if not names:
            raise ValueError("no schemes to run")
        data, source, sha = _lm_data(profile, corpus)
        runs = plan(profile, names, corpus_sha=sha, log=say)
        if context_parallel is not None:
            _check_context_parallel(profile, runs, dist, say)
        results = Path(results)
        store = ResultStore(results).open() if dist.main else None
        try:
            done = set(broadcast(sorted(store.records) if store else None, dist))
            todo = [r for r in runs if r.key not in done] if run_missing else []
            started = False
            if on_ray and todo:
                from posenc.extrapolate import cluster

                started = cluster.connect(executor, num_cpus=None, log=say)
                jobs = cluster.workers(dist.device.type, threads)
            jobs = min(jobs, max(1, len(seed_groups(todo))))
            ctx = Context(profile, dist, checkpoints_dir(results), data, source, sha, threads, say, progress, jobs)
            say(f"posenc extrapolate: profile {profile.name}, {len(runs)} runs, {len(runs) - len(todo)} already in "
                f"{results}, {len(todo)} to run ({_workers(dist, jobs, threads, on_ray)})")
            if todo:
                say(_estimate(profile, todo, jobs))
            try:
                if on_ray and todo:
                    new = cluster.run_on_ray(ctx, todo, executor=executor, corpus=corpus, deps=_deps(ctx, todo),
                                             plugin_sources=tuple((p.source, p.sha256) for p in plugins.loaded()))
                else:
                    new = _parallel(ctx, todo, jobs=jobs, corpus=corpus) if jobs > 1 else _serial(ctx, todo)
                yield from _in_plan_order(runs, store, new, say, progress and dist.main)
            finally:
                if started:
                    import ray

                    ray.shutdown()
        finally:
            if store is not None:
                store.close()
    finally:
        teardown(dist)


def _check_context_parallel(profile: Profile, runs: list[Run], dist: Dist, say: Log) -> None:
    """``check_runs`` of ``--context-parallel``, and a line on the runs that train as under DDP."""
    from posenc.extrapolate.context_parallel import check_runs

    shards = check_runs(profile, runs, dist.context_parallel, dist.world)
    if len(shards) < len(runs):
        say(f"--context-parallel {dist.context_parallel}: {len(runs) - len(shards)} of {len(runs)} runs train as "
            "under DDP (hybrid ssm blocks, positions made from the tokens, the image and time parts: their "
            "sequences are not split)")


def _workers(dist: Dist, jobs: int, threads: int, on_ray: bool = False) -> str:
    if on_ray:
        each = "one GPU" if dist.device.type == "cuda" else f"{threads} CPU{'s' * (threads > 1)}"
        return f"Ray tasks of {each} each, up to {jobs} at once"
    if dist.context_parallel is not None:
        return (f"{dist.world} processes of {threads} thread{'s' * (threads > 1)}, {dist.device}, each holding a "
                f"shard of every sequence ({dist.context_parallel})")
    if dist.active:
        return f"{dist.world} DDP processes of {threads} thread{'s' * (threads > 1)}, {dist.device}"
    if jobs > 1:
        return f"{jobs} worker processes of 1 thread"
    return f"1 process of {threads} thread{'s' * (threads > 1)}, {dist.device}"


def _in_plan_order(runs: list[Run], store: ResultStore | None, new: Iterator[dict[str, Any]], say: Log,
                   bar: bool) -> Iterator[dict[str, Any]]:
    """Appends each new record as it arrives and yields every record of the plan in plan order."""
    total, count = len(runs), (sum(r.key in store for r in runs) if store is not None else 0)
    overall = _overall_bar(total, count) if bar else None
    next_index = 0
    try:
        for record in new:
            if store is None:  # ranks other than 0 only compute
                continue
            store.append(record)
            count += 1
            if overall is not None:
                overall.update(1)
            say(f"[{count}/{total}] {record['part']} {record['label']} seed {record['seed']}: {summary(record, owner(record['part']))} "
                f"({record['seconds']:.1f} s)")
            while next_index < total and runs[next_index].key in store:
                yield store.records[runs[next_index].key]
                next_index += 1
        if store is not None:
            yield from (store.records[r.key] for r in runs[next_index:] if r.key in store)
    finally:
        if overall is not None:
            overall.close()


def _overall_bar(total: int, done: int):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="runs", position=1, leave=False, dynamic_ncols=True)


def run(profile: Profile, **kw: Any) -> list[dict[str, Any]]:
    """Every record of the plan, in plan order (see ``iter_runs``); empty on ranks other than 0."""
    return list(iter_runs(profile, **kw))


__all__ = ["Run", "plan", "run", "iter_runs", "resolve_scheme", "checkpoints_dir"]
