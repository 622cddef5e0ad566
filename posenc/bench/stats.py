"""Uncertainty of the benchmark's numbers.

Perplexity: the held-out stream is cut into ``B`` fixed blocks (``posenc.bench.data``); a run
stores the mean NLL of every block at every length. With one seed the standard error of the
mean NLL is the spread over blocks, ``sd(blocks) / √B``; with several seeds the spread of the
seeds' means is added, ``SE² = SE_blocks² + sd(seeds)² / S``. A difference between two schemes
(or two lengths) is computed block by block on the same tokens (a paired difference), which
removes the variation of the text itself. Perplexity = ``exp(mean NLL)``; its 95% interval is
``exp(mean ± 1.96 SE)``.

Accuracy: the binomial standard error ``√(p(1−p)/n)`` over the ``n`` examples (all seeds
pooled), plus the seed spread when there are several seeds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

Z95 = 1.96


@dataclass(frozen=True)
class Estimate:
    mean: float  # mean NLL (nats/token) or accuracy
    se: float  # standard error
    seeds: int
    seed_sd: float = 0.0  # sd of the per-seed values (0 with one seed)

    @property
    def ppl(self) -> float:
        return math.exp(min(self.mean, 700.0))

    def ppl_interval(self) -> tuple[float, float]:
        return (math.exp(min(self.mean - Z95 * self.se, 700.0)), math.exp(min(self.mean + Z95 * self.se, 700.0)))


def _combine(per_seed_blocks: list[np.ndarray]) -> Estimate:
    """Blocks ``[S][B]`` -> mean over seeds and blocks, with block and seed standard errors."""
    arr = np.asarray(per_seed_blocks, dtype=np.float64)  # (S, B)
    blocks = arr.mean(axis=0)  # (B,)
    se_blocks = float(blocks.std(ddof=1) / math.sqrt(blocks.size)) if blocks.size > 1 else 0.0
    seed_means = arr.mean(axis=1)  # (S,)
    seed_sd = float(seed_means.std(ddof=1)) if seed_means.size > 1 else 0.0
    se = math.sqrt(se_blocks**2 + seed_sd**2 / seed_means.size)
    return Estimate(float(blocks.mean()), se, int(seed_means.size), seed_sd)


@dataclass
class LMTable:
    """``blocks[label][mode][length]`` = per-seed block NLL arrays; ``cannot[label][length]`` = reason."""

    blocks: dict[str, dict[str, dict[int, list[np.ndarray]]]]
    cannot: dict[str, dict[int, str]]
    lengths: list[int]
    train_length: int

    def labels(self) -> list[str]:
        return list(dict.fromkeys([*self.blocks, *self.cannot]))

    def estimate(self, label: str, mode: str, length: int) -> Estimate | None:
        runs = self.blocks.get(label, {}).get(mode, {}).get(length)
        return _combine(runs) if runs else None

    def diff(self, a: tuple[str, int], b: tuple[str, int], mode: str = "nonoverlap") -> Estimate | None:
        """Paired ``NLL(a) − NLL(b)`` for ``(label, length)`` pairs, on the same tokens and seeds."""
        ra = self.blocks.get(a[0], {}).get(mode, {}).get(a[1])
        rb = self.blocks.get(b[0], {}).get(mode, {}).get(b[1])
        if not ra or not rb or len(ra) != len(rb):
            return None
        return _combine([x - y for x, y in zip(ra, rb)])


def lm_table(records: Iterable[dict[str, Any]]) -> LMTable:
    blocks: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # label -> mode -> length -> [S]
    cannot: dict[str, dict[int, str]] = defaultdict(dict)
    lengths: set[int] = set()
    train_length = 0
    for rec in records:
        train_length = rec.get("train_length", train_length)
        for row in rec.get("eval", []):
            lengths.add(row["length"])
            if "cannot_run" in row:
                cannot[rec["label"]][row["length"]] = row["cannot_run"]
            else:
                blocks[rec["label"]][row["mode"]][row["length"]].append(np.asarray(row["block_nll"]))
    return LMTable({k: {m: dict(v) for m, v in d.items()} for k, d in blocks.items()}, dict(cannot),
                   sorted(lengths), train_length)


@dataclass
class TaskTable:
    """``runs[label][task][size]`` = per-seed (correct, count); ``token[...]`` = per-seed token accuracy."""

    runs: dict[str, dict[str, dict[int, list[tuple[int, int]]]]]
    token: dict[str, dict[str, dict[int, list[float]]]]
    cannot: dict[str, dict[str, dict[int, str]]]
    sizes: list[int]
    tasks: list[str]
    max_size: int

    def labels(self) -> list[str]:
        return list(dict.fromkeys([*self.runs, *self.cannot]))

    def estimate(self, label: str, task: str, size: int) -> Estimate | None:
        runs = self.runs.get(label, {}).get(task, {}).get(size)
        if not runs:
            return None
        correct = sum(c for c, _ in runs)
        count = sum(n for _, n in runs)
        p = correct / count
        per_seed = np.array([c / n for c, n in runs])
        seed_sd = float(per_seed.std(ddof=1)) if per_seed.size > 1 else 0.0
        se = math.sqrt(p * (1 - p) / count + seed_sd**2 / per_seed.size)
        return Estimate(p, se, int(per_seed.size), seed_sd)

    def token_acc(self, label: str, task: str, size: int) -> float | None:
        values = self.token.get(label, {}).get(task, {}).get(size)
        return float(np.mean(values)) if values else None


def task_table(records: Iterable[dict[str, Any]]) -> TaskTable:
    runs: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    token: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    cannot: dict = defaultdict(lambda: defaultdict(dict))
    sizes: set[int] = set()
    tasks: list[str] = []
    max_size = 0
    for rec in records:
        max_size = rec.get("max_size", max_size)
        for row in rec.get("eval", []):
            sizes.add(row["size"])
            if row["task"] not in tasks:
                tasks.append(row["task"])
            if "cannot_run" in row:
                cannot[rec["label"]][row["task"]][row["size"]] = row["cannot_run"]
            else:
                runs[rec["label"]][row["task"]][row["size"]].append((row["correct"], row["count"]))
                token[rec["label"]][row["task"]][row["size"]].append(row["token_acc"])

    def plain(d: dict) -> dict:
        return {k: {t: dict(s) for t, s in v.items()} for k, v in d.items()}

    return TaskTable(plain(runs), plain(token),
                     plain(cannot), sorted(sizes), tasks, max_size)


def learned_tasks(table: TaskTable, *, threshold: float = 0.5) -> list[str]:
    """Tasks that at least one scheme learned: exact match >= ``threshold`` at the largest trained size.

    A task no scheme learned in distribution says nothing about length generalisation."""
    out = []
    for task in table.tasks:
        best = max((e.mean for lab in table.labels() if (e := table.estimate(lab, task, table.max_size))), default=0.0)
        if best >= threshold:
            out.append(task)
    return out


def mean_reciprocal_rank(table: TaskTable, labels: list[str], *, min_size: int,
                         tasks: list[str] | None = None) -> dict[str, float]:
    """Kazemnejad et al.'s summary: for every task and every size ``>= min_size``, rank ``labels``
    by exact-match accuracy (1 = best; tied schemes share the best rank of their group; a
    scheme that cannot run scores 0), and average ``1 / rank`` per scheme."""
    scores: dict[str, list[float]] = {lab: [] for lab in labels}
    for task in table.tasks if tasks is None else tasks:
        for size in (s for s in table.sizes if s >= min_size):
            acc = {}
            for lab in labels:
                est = table.estimate(lab, task, size)
                acc[lab] = est.mean if est is not None else 0.0
            for lab in labels:
                rank = 1 + sum(1 for other in labels if acc[other] > acc[lab])
                scores[lab].append(1.0 / rank)
    return {lab: float(np.mean(v)) if v else float("nan") for lab, v in scores.items()}
