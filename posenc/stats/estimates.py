"""Uncertainty of the benchmark's numbers, and the tests behind its verdicts.

Perplexity: the held-out stream is cut into ``B`` fixed blocks (``posenc.extrapolate.data``); a run
stores the mean NLL of every block at every length. Neighbouring blocks are correlated (they
continue the same document: lag-1 autocorrelation up to 0.7 was measured), so the standard error
of a mean over blocks is the Newey–West (HAC) one, ``hac_se``: the block variance plus twice
the Bartlett-weighted autocovariances up to lag ``K = ⌊4(B/100)^(2/9)⌋``, never below the plain
``sd/√B``. With several seeds the spread of the seeds' means is added,
``SE² = SE_blocks² + sd(seeds)² / S``, and intervals and p-values use Student's t with
``S − 1`` degrees of freedom (the normal with one seed). A difference between two schemes, two
lengths or two positions is computed block by block on the same tokens and the same seed (seeds
are paired by their id, never by record order), which removes the variation of the text.
Perplexity = ``exp(mean NLL)``; its 95% interval is ``exp(mean ± t·SE)``.

Accuracy: exact match pooled over seeds; its standard error is the Agresti–Coull one
``√(p̃(1−p̃)/(n+4))``, ``p̃ = (correct+2)/(n+4)`` (not 0 at 0% or 100%), plus the seed spread.
Two schemes are compared on the same examples with McNemar's exact test
(``posenc.stats.distributions.mcnemar_exact``): only the examples one scheme gets right and the
other wrong count.

Verdicts: an estimate carries each seed's value and its block-level error (``per_seed``,
``within``); the test behind a verdict is the seed-level one of ``posenc.stats.procedure``
(Holm per paper, ``posenc.stats.distributions.holm``). The block-level error alone never decides
a verdict.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.stats.distributions import t_critical, t_two_sided_p


def hac_se(x: np.ndarray) -> float:
    """Newey–West standard error of the mean of a series (Bartlett kernel, lag ``⌊4(B/100)^(2/9)⌋``),
    floored at the independent one ``sd/√B``."""
    x = np.asarray(x, dtype=np.float64)
    b = x.size
    if b < 2:
        return 0.0
    d = x - x.mean()
    lags = min(b - 1, int(4 * (b / 100) ** (2 / 9)))
    var = float(d @ d) / b
    for k in range(1, lags + 1):
        var += 2 * (1 - k / (lags + 1)) * float(d[k:] @ d[:-k]) / b
    iid = float(x.std(ddof=1)) / math.sqrt(b)
    return max(iid, math.sqrt(max(var, 0.0) * b / (b - 1)) / math.sqrt(b))


# -- estimates ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    mean: float  # mean NLL (nats/token) or accuracy
    se: float  # standard error
    seeds: int
    seed_sd: float = 0.0  # sd of the per-seed values (0 with one seed)
    per_seed: tuple[float, ...] = ()  # each seed's value, in seed order (what a verdict's test rests on)
    within: tuple[float, ...] = ()  # each seed's standard error from the held-out blocks alone (HAC)

    @property
    def df(self) -> float:
        """Degrees of freedom of the t behind intervals and p-values (inf: the normal)."""
        return float(self.seeds - 1) if self.seeds > 1 else math.inf

    @property
    def ppl(self) -> float:
        return math.exp(min(self.mean, 700.0))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        half = t_critical(self.df, level) * self.se
        return self.mean - half, self.mean + half

    def ppl_interval(self) -> tuple[float, float]:
        lo, hi = self.interval()
        return math.exp(min(lo, 700.0)), math.exp(min(hi, 700.0))

    def p_value(self, null: float = 0.0) -> float:
        """Two-sided p-value of ``mean = null``."""
        if self.se == 0:
            return 0.0 if self.mean != null else 1.0
        return t_two_sided_p((self.mean - null) / self.se, self.df)


Seeds = dict[int, np.ndarray]  # seed id -> block means


def combine(per_seed: Seeds, *, skip_blocks: int = 0) -> Estimate:
    """Blocks ``{seed: [B]}`` -> mean over seeds and blocks, with block (HAC) and seed errors."""
    arr = np.asarray([per_seed[s] for s in sorted(per_seed)], dtype=np.float64)[:, skip_blocks:]  # (S, B)
    blocks = arr.mean(axis=0)  # (B,)
    se_blocks = hac_se(blocks)
    seed_means = arr.mean(axis=1)  # (S,)
    seed_sd = float(seed_means.std(ddof=1)) if seed_means.size > 1 else 0.0
    se = math.sqrt(se_blocks**2 + seed_sd**2 / seed_means.size)
    within = tuple(hac_se(row) for row in arr)  # (S,)
    return Estimate(float(blocks.mean()), se, int(seed_means.size), seed_sd, tuple(map(float, seed_means)), within)


def paired(a: Seeds, b: Seeds) -> Seeds | None:
    """``a − b`` block by block for the seeds both have (paired by seed id); None if none."""
    common = sorted(set(a) & set(b))
    return {s: np.asarray(a[s]) - np.asarray(b[s]) for s in common} if common else None


@dataclass(frozen=True)
class Bucket:
    """Targets at window positions ``lo..hi−1`` (context ``lo..hi−1`` tokens), from one evaluation."""

    lo: int
    hi: int
    mode: str
    length: int

    def name(self, train_length: int) -> str:
        return f"{self.lo / train_length:g}L–{self.hi / train_length:g}L"


@dataclass
class LMTable:
    """``blocks[label][mode][length]`` = ``{seed: block NLLs}``; ``cannot[label][length]`` = reason."""

    blocks: dict[str, dict[str, dict[int, Seeds]]]
    cannot: dict[str, dict[int, str]]
    lengths: list[int]
    train_length: int

    def labels(self) -> list[str]:
        return list(dict.fromkeys([*self.blocks, *self.cannot]))

    def seeds(self, label: str, mode: str, length: int) -> Seeds | None:
        return self.blocks.get(label, {}).get(mode, {}).get(length) or None

    def estimate(self, label: str, mode: str, length: int) -> Estimate | None:
        runs = self.seeds(label, mode, length)
        return combine(runs) if runs else None

    def diff(self, a: tuple[str, int], b: tuple[str, int], mode: str = "nonoverlap") -> Estimate | None:
        """Paired ``NLL(a) − NLL(b)`` for ``(label, length)`` pairs, on the same tokens and seeds."""
        ra, rb = self.seeds(a[0], mode, a[1]), self.seeds(b[0], mode, b[1])
        d = paired(ra, rb) if ra and rb else None
        return combine(d) if d else None

    # -- NLL by position within the window ----------------------------------------------------
    def buckets(self) -> list[Bucket]:
        """Position buckets with the same targets: ``0–L`` (non-overlapping windows of L),
        ``L/2–L`` (sliding windows of L) and ``T/2–T`` for every length ``T >= 2L`` (sliding
        windows of T: every target scored once, at a position in the window's last half)."""
        L = self.train_length
        out = [Bucket(0, L, "nonoverlap", L), Bucket(L // 2, L, "sliding", L)]
        return out + [Bucket(t // 2, t, "sliding", t) for t in self.lengths if t >= 2 * L]

    def position(self, label: str, bucket: Bucket) -> Estimate | None:
        """NLL of the targets at positions ``bucket.lo..hi−1``; the first block (whose targets sit
        at smaller positions in every evaluation) is left out, so every bucket scores the same
        targets."""
        runs = self.seeds(label, bucket.mode, bucket.length)
        return combine(runs, skip_blocks=1) if runs and len(next(iter(runs.values()))) > 2 else None

    def position_diff(self, a: tuple[str, Bucket], b: tuple[str, Bucket]) -> Estimate | None:
        ra, rb = self.seeds(a[0], a[1].mode, a[1].length), self.seeds(b[0], b[1].mode, b[1].length)
        d = paired(ra, rb) if ra and rb else None
        return combine(d, skip_blocks=1) if d and len(next(iter(d.values()))) > 2 else None


def lm_table(records: Iterable[dict[str, Any]]) -> LMTable:
    blocks: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))  # label -> mode -> length -> seed
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
                blocks[rec["label"]][row["mode"]][row["length"]][rec.get("seed", 0)] = np.asarray(row["block_nll"])
    return LMTable({k: {m: dict(v) for m, v in d.items()} for k, d in blocks.items()}, dict(cannot),
                   sorted(lengths), train_length)


# -- tasks -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    correct: int
    count: int
    hits: str | None = None  # "0"/"1" per example (the same examples for every scheme and seed)


@dataclass
class TaskTable:
    """``runs[label][task][size]`` = ``{seed: Cell}``; ``token[...]`` = per-seed token accuracy;
    ``trained_positions``: the longest training sequence (0 when unknown)."""

    runs: dict[str, dict[str, dict[int, dict[int, Cell]]]]
    token: dict[str, dict[str, dict[int, list[float]]]]
    cannot: dict[str, dict[str, dict[int, str]]]
    sizes: list[int]
    tasks: list[str]
    max_size: int
    lengths: dict[tuple[str, int], int] | None = None  # (task, size) -> sequence length
    trained_positions: int = 0
    # (task, size) -> its sequences are longer than every training sequence of the models that learn
    # the task (the records' ``beyond_trained``: the content tasks' models have their own longest)
    beyond_trained: dict[tuple[str, int], bool] | None = None

    def labels(self) -> list[str]:
        return list(dict.fromkeys([*self.runs, *self.cannot]))

    def beyond(self, task: str, size: int) -> bool:
        """Whether the cell's sequences are longer than every training sequence (positions never
        trained); without the lengths, whether the size is past the training sizes."""
        if self.beyond_trained and (task, size) in self.beyond_trained:
            return self.beyond_trained[(task, size)]
        if self.lengths and self.trained_positions and (task, size) in self.lengths:
            return self.lengths[(task, size)] > self.trained_positions
        return size > self.max_size

    def estimate(self, label: str, task: str, size: int) -> Estimate | None:
        runs = self.runs.get(label, {}).get(task, {}).get(size)
        if not runs:
            return None
        correct = sum(c.correct for c in runs.values())
        count = sum(c.count for c in runs.values())
        p = correct / count
        tilde = (correct + 2) / (count + 4)  # Agresti–Coull: not 0 at 0% or 100%
        per_seed = np.array([c.correct / c.count for c in runs.values()])
        seed_sd = float(per_seed.std(ddof=1)) if per_seed.size > 1 else 0.0
        se = math.sqrt(tilde * (1 - tilde) / (count + 4) + seed_sd**2 / per_seed.size)
        return Estimate(p, se, int(per_seed.size), seed_sd)

    def _paired_hits(self, a: str, b: str, cells: list[tuple[str, int]]) -> list[tuple[int, str, str]] | None:
        """``(seed, hits of a, hits of b)`` for every seed both ran in every cell, paired by example;
        None when a cell lacks per-example results (or their lengths differ)."""
        out = []
        for task, size in cells:
            ra = self.runs.get(a, {}).get(task, {}).get(size, {})
            rb = self.runs.get(b, {}).get(task, {}).get(size, {})
            for seed in sorted(set(ra) & set(rb)):
                ha, hb = ra[seed].hits, rb[seed].hits
                if ha is None or hb is None or len(ha) != len(hb):
                    return None
                out.append((seed, ha, hb))
        return out

    def discordant(self, a: str, b: str, cells: list[tuple[str, int]]) -> tuple[int, int, int] | None:
        """McNemar's counts over ``cells``, examples paired by seed id and index: ``(a right and b
        wrong, a wrong and b right, pairs)``; None when a cell lacks per-example results."""
        paired = self._paired_hits(a, b, cells)
        if paired is None:
            return None
        only_a = only_b = pairs = 0
        for _, ha, hb in paired:
            only_a += sum(x == "1" and y == "0" for x, y in zip(ha, hb))
            only_b += sum(x == "0" and y == "1" for x, y in zip(ha, hb))
            pairs += len(ha)
        return only_a, only_b, pairs

    def paired_seeds(self, a: str, b: str, cells: list[tuple[str, int]]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """Per seed both have in every cell (by id): the mean over the cells' examples of
        ``right_a − right_b`` and its standard error over examples; None without per-example results."""
        paired = self._paired_hits(a, b, cells)
        if paired is None:
            return None
        per_seed: dict[int, list[int]] = defaultdict(list)
        for seed, ha, hb in paired:
            per_seed[seed] += [int(x) - int(y) for x, y in zip(ha, hb)]
        rows = [np.asarray(per_seed[s], dtype=np.float64) for s in sorted(per_seed) if len(per_seed[s]) > 1]
        if not rows:
            return None
        return (tuple(float(r.mean()) for r in rows),
                tuple(float(r.std(ddof=1) / math.sqrt(r.size)) for r in rows))

    def token_acc(self, label: str, task: str, size: int) -> float | None:
        values = self.token.get(label, {}).get(task, {}).get(size)
        return float(np.mean(values)) if values else None


def task_table(records: Iterable[dict[str, Any]]) -> TaskTable:
    runs: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    token: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    cannot: dict = defaultdict(lambda: defaultdict(dict))
    sizes: set[int] = set()
    tasks: list[str] = []
    lengths: dict[tuple[str, int], int] = {}
    beyond: dict[tuple[str, int], bool] = {}
    max_size = trained = 0
    for rec in records:
        max_size = rec.get("max_size", max_size)
        trained = rec.get("trained_positions", trained)
        for row in rec.get("eval", []):
            sizes.add(row["size"])
            if "length" in row:
                lengths[(row["task"], row["size"])] = row["length"]
            if "beyond_trained" in row:
                beyond[(row["task"], row["size"])] = bool(row["beyond_trained"])
            if row["task"] not in tasks:
                tasks.append(row["task"])
            if "cannot_run" in row:
                cannot[rec["label"]][row["task"]][row["size"]] = row["cannot_run"]
            else:
                runs[rec["label"]][row["task"]][row["size"]][rec.get("seed", 0)] = Cell(
                    row["correct"], row["count"], row.get("hits"))
                token[rec["label"]][row["task"]][row["size"]].append(row["token_acc"])

    def plain(d: dict) -> dict:
        return {k: {t: dict(s) for t, s in v.items()} for k, v in d.items()}

    return TaskTable(plain(runs), plain(token), plain(cannot), sorted(sizes), tasks, max_size, lengths, trained,
                     beyond)


def learned_tasks(table: TaskTable, *, threshold: float = 0.5) -> list[str]:
    """Tasks that at least one scheme learned: exact match >= ``threshold`` at the largest trained size.

    A task no scheme learned in distribution says nothing about length generalisation."""
    out = []
    for task in table.tasks:
        best = max((e.mean for lab in table.labels() if (e := table.estimate(lab, task, table.max_size))), default=0.0)
        if best >= threshold:
            out.append(task)
    return out


def mean_reciprocal_rank(table: TaskTable, labels: list[str], *, min_size: int = 0,
                         tasks: list[str] | None = None,
                         cells: list[tuple[str, int]] | None = None) -> dict[str, float]:
    """Kazemnejad et al.'s summary: for every ``(task, size)`` cell (``cells``, or every task at
    every size ``>= min_size``), rank ``labels`` by exact-match accuracy (1 = best; tied schemes
    share the best rank of their group; a scheme that cannot run scores 0), and average
    ``1 / rank`` per scheme."""
    if cells is None:
        cells = [(t, s) for t in (table.tasks if tasks is None else tasks) for s in table.sizes if s >= min_size]
    scores: dict[str, list[float]] = {lab: [] for lab in labels}
    for task, size in cells:
        acc = {}
        for lab in labels:
            est = table.estimate(lab, task, size)
            acc[lab] = est.mean if est is not None else 0.0
        for lab in labels:
            rank = 1 + sum(1 for other in labels if acc[other] > acc[lab])
            scores[lab].append(1.0 / rank)
    return {lab: float(np.mean(v)) if v else float("nan") for lab, v in scores.items()}


def task_cells(table: TaskTable, tasks: list[str]) -> list[tuple[str, int]]:
    """The cells the task verdicts use: ``tasks`` at the sizes whose sequences are longer than
    every training sequence (positions never trained)."""
    return [(t, s) for t in tasks for s in table.sizes if table.beyond(t, s)]


def pooled_error(table: TaskTable, label: str, cells: list[tuple[str, int]]) -> float | None:
    """``label``'s test error (1 − exact match) pooled over ``cells`` and the seeds (None: no runs there)."""
    runs = [c for t, s in cells for c in table.runs.get(label, {}).get(t, {}).get(s, {}).values()]
    if not runs:
        return None
    return 1 - sum(c.correct for c in runs) / sum(c.count for c in runs)
