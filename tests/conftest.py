"""The test session's set-up: each pytest-xdist worker pinned to its own CPUs, the shared test
helpers handed on by name (``from conftest import tolerance``: they live in ``tests/helpers.py``),
a seed before every test, and one session fixture, ``smoke_results``: the smoke profile's results
file, run once for the tests of the ``extrapolate`` xdist group (the driver's and the report's).

Only a process that runs tests imports torch and the helpers: pytest-xdist's controller (``make
test`` runs ``-n 2``) starts the workers without them, 1.2 s sooner (5 s in a new environment,
whose bytecode the workers then compile each for itself).
"""

from __future__ import annotations

import os


def _share_of_the_cpus() -> int | None:
    """Under pytest-xdist (``make test`` runs ``-n 2``), pins this worker to its own share of the
    CPUs (``len(CPUs) // workers``, at least one) and returns its size; ``None`` outside xdist.

    Every worker (and the benchmark runs it starts, which take "CPUs / processes" threads from the
    affinity mask, and the subprocesses it spawns, which inherit it) then runs as many threads as
    it has CPUs, instead of each of two workers running a thread per CPU of the machine: tiny
    models on two processes of two threads each spin more than they compute. Measured on a 2-core
    machine beside another 2-thread process: ``posenc report --profile smoke`` used 61 s of user
    CPU with 2 threads and 15 s with 1.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return None
    cpus, workers, index = sorted(os.sched_getaffinity(0)), int(count), int(worker.removeprefix("gw"))
    share = max(1, len(cpus) // workers)
    start = (index * share) % len(cpus)
    mine = cpus[start:start + share]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(len(mine))
    return len(mine)


WORKER_CPUS = _share_of_the_cpus()  # before torch is imported: its thread pool follows OMP_NUM_THREADS

import pytest  # noqa: E402


def __getattr__(name: str):
    """``from conftest import NAME``: the helper of that name (``tests/helpers.py``). Not the names
    pytest itself looks up on a conftest (its hooks, ``collect_ignore``, dunders), which stay absent."""
    if name.startswith(("_", "pytest_", "collect_ignore")):
        raise AttributeError(f"module 'conftest' has no attribute {name!r}")
    import helpers

    try:
        return getattr(helpers, name)
    except AttributeError:
        raise AttributeError(f"module 'conftest' has no attribute {name!r} (nor has tests/helpers.py)") from None


def pytest_configure(config):
    """The helpers (and with them torch, the thread count and hypothesis's profile) in every process
    that runs tests: an xdist worker, or pytest alone; not in the controller of ``-n N``."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        import helpers  # noqa: F401


@pytest.fixture(autouse=True)
def _seed():
    import helpers

    helpers.manual_seed(0)


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory):
    """``posenc extrapolate --profile smoke`` (every part, serially): its results file. One run for
    tests/test_extrapolate_driver.py and tests/test_extrapolate_report.py (whose report renders a copy):
    their tests are in the xdist group ``extrapolate``, so one worker builds it once."""
    from posenc.cli import main

    path = tmp_path_factory.mktemp("smoke") / "results.jsonl"
    assert main(["extrapolate", "--profile", "smoke", "--threads", "1", "--no-progress", "--jobs", "1",
                 "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The documentation site, built once as ``make docs`` builds it (``mkdocs build --strict``): for
    tests/test_docs_site.py and tests/test_cells_browser.py, both in the xdist group ``docs_site``, so
    one worker builds it once (a build takes 18 s of CPU)."""
    from test_docs_site import _build

    return _build(tmp_path_factory.mktemp("site") / "site")
