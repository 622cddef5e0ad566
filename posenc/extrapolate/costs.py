"""A plan's cost, known before it runs: CPU-seconds per seed of every row, measured, kept as data.

``costs.json`` (beside this module) holds measurements written by ``docs/measure_costs.py``, never
by hand: each one a profile's rows run on one seed by one process of one torch thread, every row's
CPU-seconds (the record's ``cpu_seconds``: ``time.process_time`` of the run, what it cost however
loaded the machine was) with its provenance (commit, date, machine, command, the load at its start).

A run's estimate (``run_cost``), in order of trust:

1. ``measured``: its row (part, architecture, label) measured at its profile;
2. ``scaled``: its row measured at another profile, times the ratio of the two profiles' work for
   that part (``work``: training tokens × blocks × width², the arithmetic of a training step; the
   evaluation is taken to scale the same way);
3. ``part``: the median of its part's measured rows at its profile (or at another profile, scaled).

``estimate(profile, runs)`` sums them: ``Estimate.line(workers)`` is what a run prints at its start,
"about N CPU-hours; with J workers about H h", and ``posenc extrapolate --dry-run`` prints only that.
An estimate is as good as its measurements: rows measured on a loaded machine, scaled from a smaller
profile, or standing in for their part are counted in the line.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.extrapolate.plan import Run
from posenc.extrapolate.profiles import Profile, get_profile

COSTS_FILE = Path(__file__).with_name("costs.json")


def run_row(run: Run) -> str:
    """A run's row in ``costs.json``: ``part|arch|label``, then the words of its variant that say what
    kind of model it is (``tasks=content``, ``augment=scale``; its numbers, which differ by profile, left
    out). A hybrid run's label names its architecture already."""
    kind = ",".join(f"{k}={v}" for k, v in sorted(run.variant.items()) if isinstance(v, str))
    return f"{run.part}|{run.arch}|{run.label}" + (f"|{kind}" if kind else "")


def _settings(profile: Profile, run: Run):
    """The settings whose model and training decide ``run``'s cost, and its tokens per training sequence."""
    part = run.part
    if part in ("lm", "scaling"):
        return profile.lm, profile.lm.train_length
    if part == "tasks":
        which = run.variant.get("tasks")
        tasks = (profile.content_tasks if which == "content" else
                 profile.addition.tasks if which == "addition" and profile.addition is not None else profile.tasks)
        tasks = tasks or profile.tasks
        return tasks, 4 * max(tasks.max_size, 1)  # sequences grow with the items
    if part == "image":
        return profile.image, profile.image.grid ** 2
    if part == "time":
        return profile.time, int(profile.time.train_rate * profile.time.train_seconds)
    return None, 0


def work(profile: Profile, run: Run) -> float:
    """Training tokens × blocks × width²: the arithmetic of ``run``'s training at ``profile``, up to
    a constant (what a measured row is scaled by to another profile)."""
    settings, tokens = _settings(profile, run)
    if settings is None:
        return 1.0
    m, t = settings.model, settings.train
    return float(t.steps * t.batch_size * tokens * m.n_layer * m.n_embd ** 2)


def load(path: str | Path = COSTS_FILE) -> list[dict[str, Any]]:
    """The measurements (``[]`` when there is no file)."""
    path = Path(path)
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("measurements"), list):
        raise ValueError(f"{path}: not a costs file (expected {{'measurements': [...]}})")
    return data["measurements"]


def table(measurements: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{profile: {row: CPU-seconds per seed}}``; a later measurement of a row replaces an earlier one."""
    out: dict[str, dict[str, float]] = {}
    for m in measurements:
        out.setdefault(m["profile"], {}).update(m["rows"])
    return out


@dataclass
class Estimate:
    cpu_seconds: float = 0.0
    runs: int = 0
    how: dict[str, int] = field(default_factory=lambda: {"measured": 0, "scaled": 0, "part": 0, "none": 0})
    per_part: dict[str, float] = field(default_factory=dict)

    def hours(self, workers: int = 1) -> float:
        return self.cpu_seconds / 3600 / max(1, workers)

    def line(self, workers: int = 1) -> str:
        """``about N CPU-hours; with J workers about H h`` and what the estimate rests on."""
        words = {"measured": "measured", "scaled": "scaled from another profile", "part": "their part's median",
                 "none": "not estimated (no measurement of their part)"}
        how = ", ".join(f"{n} {words[k]}" for k, n in self.how.items() if n)
        per = ", ".join(f"{p} {_hours(s)}" for p, s in self.per_part.items())
        about = "at least" if self.how["none"] else "about"  # a run not estimated counts 0 s
        return (f"estimate: {about} {self.cpu_seconds / 3600:.2g} CPU-hours for {self.runs} runs; with {workers} "
                f"worker{'s' * (workers != 1)} {about} {_hours(self.cpu_seconds / max(1, workers))} "
                f"({per}; rows: {how or 'none'}; docs/guide/benchmark.md#cost)")


def _hours(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.2g} min"
    return f"{seconds / 3600:.2g} h"


MAX_SCALE = 100
"""The largest work ratio a measurement is scaled by: a row measured at a profile with less than a
hundredth of the work (the smoke profile's few steps, against the quick or full profile's) is
mostly set-up and evaluation, and scaled by thousands it would say hours for what takes minutes."""


def run_cost(run: Run, profile: Profile, costs: dict[str, dict[str, float]]) -> tuple[float, str]:
    """One run's CPU-seconds and how it was found: ``measured``, ``scaled``, ``part`` or ``none``
    (the module docstring). Scaled from the other profile with the most work for the run, within
    ``MAX_SCALE``; the medians of its part likewise; ``none`` (0 s) where no measurement is within it."""
    key = run_row(run)
    here = costs.get(profile.name, {})
    if key in here:
        return here[key], "measured"
    others = sorted(((_ratio(profile, name, run), name) for name in costs if name != profile.name))
    usable = [(ratio, name) for ratio, name in others if ratio <= MAX_SCALE]
    for ratio, name in usable:
        if key in costs[name]:
            return costs[name][key] * ratio, "scaled"
    same = [v for k, v in here.items() if k.split("|")[0] == run.part]
    if same:
        return statistics.median(same), "part"
    for ratio, name in usable:
        vals = [v for k, v in costs[name].items() if k.split("|")[0] == run.part]
        if vals:
            return statistics.median(vals) * ratio, "part"
    return 0.0, "none"


def _ratio(profile: Profile, other: str, run: Run) -> float:
    """``run``'s work at ``profile`` over its work at the profile named ``other`` (inf: not a profile)."""
    try:
        base = get_profile(other)
    except ValueError:
        return float("inf")
    return work(profile, run) / work(base, run)


def estimate(profile: Profile, runs: list[Run], costs: dict[str, dict[str, float]] | None = None) -> Estimate:
    """The CPU-seconds of ``runs`` (a plan of ``profile``), run by run (``run_cost``)."""
    costs = table(load()) if costs is None else costs
    out = Estimate()
    for run in runs:
        seconds, how = run_cost(run, profile, costs)
        out.cpu_seconds += seconds
        out.runs += 1
        out.how[how] += 1
        out.per_part[run.part] = out.per_part.get(run.part, 0.0) + seconds
    return out
