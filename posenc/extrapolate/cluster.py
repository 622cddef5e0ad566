"""The benchmark's runs on a Ray cluster (``--executor ray``, ``--executor ray://HOST:PORT``; the
``cluster`` extra: ``pip install 'posenc[cluster]'``; docs/guide/benchmark.md#cluster).

The driver's seam is the one ``--jobs`` uses (``posenc.extrapolate.driver``): an executor takes the
runs still to do and yields their records as they finish; the driver alone appends them to the
resumable JSONL (``posenc.stats.results``), in the order they arrive, and keeps the progress bar.
Here each configuration's seeds (``plan.seed_groups``, as ``--jobs`` gives them to a worker process)
are one Ray task with its resources: ``threads`` CPUs (one torch thread each), or one GPU with
``--device cuda`` (several GPUs on a machine run several runs at once). A scaling run's task is
submitted once its RoPE model's has finished, as ``--jobs`` does.

A worker that dies mid-run (killed, its machine lost) loses only its task's return value: Ray runs
the task again (``MAX_RETRIES`` times, a system failure; an error raised by the run itself is not
retried, it stops the benchmark as under ``--jobs``); nothing reached the file before the driver
received the records, so nothing is lost or written twice. Ctrl-C, or an error, cancels every task
still running.

Where: ``--executor ray`` starts a local cluster for the run and stops it at the end, bound to
127.0.0.1 only (``_node_ip_address``), no dashboard, usage statistics off
(``RAY_USAGE_STATS_ENABLED=0``): nothing listens on, or is sent to, any other address, this
machine's own network address included. ``--executor ray://HOST:PORT`` (Ray Client), or
``--executor ray`` with ``RAY_ADDRESS`` set, joins an existing cluster; its nodes need posenc (the same
version: a worker checks the corpus hash and the plugins' sources against the driver's) and a shared
folder for the checkpoints the scaling runs read (the results file's ``-checkpoints`` folder).

Numbers: a task builds the same Context as a ``--jobs`` worker process and runs the same
``execute_seeds``: for the same seeds on a CPU of the same kind, with the same threads per run, the
records equal ``--jobs 1``'s (tests/test_extrapolate_cluster.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.extrapolate.plan import Run, schedule

EXECUTORS = ("local", "ray")  # --executor: worker processes on this machine (--jobs), or Ray; also ray://HOST:PORT
MAX_RETRIES = 3  # a task whose worker died runs again this many times before the benchmark stops
LOOPBACK = "127.0.0.1"


def check_executor(value: str | None) -> str | None:
    """``--executor``: ``local`` (the default: ``--jobs`` worker processes), ``ray``, or
    ``ray://HOST:PORT``; anything else is a ValueError naming it."""
    if value is None or value in EXECUTORS:
        return value
    if value.startswith("ray://"):
        host, sep, port = value[len("ray://"):].rpartition(":")
        if host and sep and port.isdigit() and 0 < int(port) < 65536:
            return value
    raise ValueError(f"--executor must be 'local', 'ray' or 'ray://HOST:PORT', got {value!r}")


def is_ray(executor: str | None) -> bool:
    return executor is not None and executor != "local"


def require_ray():
    """``import ray``, or a one-line error naming the extra."""
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'posenc[cluster]'") from None
    return ray


@dataclass(frozen=True)
class WorkerSetup:
    """What a task needs to build its run's Context (a ``--jobs`` worker's ``_init_worker`` arguments)."""

    profile: Any
    corpus: str | None
    checkpoints: str
    corpus_sha: str
    jobs: int
    threads: int
    device: str
    plugin_sources: tuple[tuple[str, str], ...] = ()


_CONTEXT: tuple[WorkerSetup, Any] | None = None  # a Ray worker's Context, built by its first task


def _context(setup: WorkerSetup):
    """The Context of a Ray worker process, built once per set-up (the corpus split is loaded once)."""
    global _CONTEXT
    if _CONTEXT is not None and _CONTEXT[0] == setup:
        return _CONTEXT[1]
    import torch

    from posenc import plugins
    from posenc.extrapolate.distributed import Dist
    from posenc.extrapolate.worker import keep_heap, lm_data as _lm_data
    from posenc.extrapolate.part import Context

    keep_heap()
    found = plugins.load([source for source, _ in setup.plugin_sources])
    if [p.sha256 for p in found] != [sha for _, sha in setup.plugin_sources]:
        raise RuntimeError("a --plugin's source differs on this Ray worker from the driver's")
    torch.set_num_threads(setup.threads)
    data, source, sha = _lm_data(setup.profile, setup.corpus)
    if sha != setup.corpus_sha:
        raise RuntimeError("the corpus on this Ray worker differs from the driver's (its hash)")
    device = torch.device("cuda", 0) if setup.device == "cuda" else torch.device("cpu")  # Ray sets CUDA_VISIBLE_DEVICES
    ctx = Context(setup.profile, Dist(device=device), Path(setup.checkpoints), data, source, sha, setup.threads,
                  lambda msg: None, False, setup.jobs)
    _CONTEXT = (setup, ctx)
    return ctx


def work(setup: WorkerSetup, runs: list[Run]) -> list[dict[str, Any]]:
    """One task: the seeds of one configuration, run as a ``--jobs`` worker runs them."""
    from posenc.extrapolate.parts import owner
    from posenc.extrapolate.runs import execute_seeds

    return execute_seeds(_context(setup), runs, owner(runs[0].part))


LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""A local cluster's environment: no usage statistics; and Ray's switch for a cluster of this machine
alone, without which Ray replaces a loopback ``_node_ip_address`` by the machine's network address
(``ray._private.services.resolve_ip_for_localhost``, Ray 2.60) and its servers listen there."""


def connect(executor: str, *, num_cpus: int | None = None, log=lambda msg: None) -> bool:
    """Joins ``executor``'s cluster (``ray://HOST:PORT``, or ``RAY_ADDRESS`` under ``ray``), or starts a
    local one of ``num_cpus`` CPUs (None: this machine's) bound to 127.0.0.1, checked: a node address
    other than 127.0.0.1 stops it with an error. True when it started one (the caller stops it:
    ``ray.shutdown``)."""
    address = executor if executor.startswith("ray://") else os.environ.get("RAY_ADDRESS") or None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        os.environ.update(LOCAL_ENV)
    ray = require_ray()
    if ray.is_initialized():
        return False
    env_vars = {"RAY_USAGE_STATS_ENABLED": "0"}
    if os.environ.get("PYTHONPATH"):  # workers import posenc from where the driver does
        env_vars["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if address is not None:
        log(f"--executor: joining the Ray cluster at {address}")
        ray.init(address=address, runtime_env={"env_vars": env_vars}, logging_level="WARNING", log_to_driver=False)
        return False
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # the switch above, where Ray was imported before it was set
    ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, num_cpus=num_cpus, logging_level="WARNING",
             log_to_driver=False, configure_logging=False, runtime_env={"env_vars": {**env_vars, **LOCAL_ENV}})
    node = ray.util.get_node_ip_address()
    if node != LOOPBACK:
        ray.shutdown()
        raise RuntimeError(f"the local Ray cluster took the address {node}, not {LOOPBACK}; stopped it")
    return True


def run_on_ray(ctx, todo: list[Run], *, executor: str, corpus: str | None, deps: dict[str, str],
               plugin_sources: tuple[tuple[str, str], ...] = ()) -> Iterator[dict[str, Any]]:
    """Runs ``todo`` as Ray tasks, one per configuration's seeds; yields each task's records as it
    finishes (the driver writes them). ``deps``: a run's key → the key of the run it needs first."""
    ray = require_ray()
    device = ctx.dist.device.type
    setup = ray.put(WorkerSetup(ctx.profile, corpus, str(ctx.checkpoints), ctx.corpus_sha, ctx.jobs, ctx.threads,
                                device, plugin_sources))
    resources = {"num_gpus": 1, "num_cpus": ctx.threads} if device == "cuda" else {"num_cpus": ctx.threads}
    task = ray.remote(work).options(max_retries=MAX_RETRIES, retry_exceptions=False, **resources)

    def cancel(refs: list[Any]) -> None:
        for ref in refs:
            ray.cancel(ref, force=True)

    yield from schedule(todo, deps, submit=lambda group: task.remote(setup, group),
                        wait_any=lambda refs: ray.wait(refs, num_returns=1)[0], collect=ray.get, cancel=cancel)


def workers(device: str, threads: int) -> int:
    """How many runs the cluster runs at once: its GPUs (``--device cuda``), or its CPUs / ``threads``."""
    ray = require_ray()
    resources = ray.cluster_resources()
    if device == "cuda":
        return max(1, int(resources.get("GPU", 0)))
    return max(1, int(resources.get("CPU", 1)) // max(1, threads))
