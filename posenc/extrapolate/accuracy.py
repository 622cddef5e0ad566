"""Accuracy on the same examples, compared example by example: the statistics of the image and
time parts (``posenc.extrapolate.parts.image``, ``parts.time``).

Every run stores, per evaluation row, each example's correctness (``bits``). Two
variants on the same test images (or one model at two grids, or one model with index and time
positions) are compared image by image: ``d_i = correct_a(i) − correct_b(i)``, the mean over
images with ``SE = sd(d) / √n``; with several seeds the per-image differences are averaged over
seeds and the spread of the seeds' means is added, ``SE² = SE_images² + sd(seeds)² / S`` (as
``posenc.stats.estimates`` does for perplexity blocks). A verdict rests on the seeds' values
(``per_seed``, the seed-level test of ``posenc.stats.procedure``); the descriptive tables
call a difference beyond two standard errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.stats.findings import Verdict, tested
from posenc.stats.page_parts import e
from posenc.stats.distributions import t_two_sided_p

@dataclass(frozen=True)
class Diff:
    mean: float
    se: float
    n: int  # examples
    seeds: int
    per_seed: tuple[float, ...] = ()  # each seed's mean difference, in seed order
    within: tuple[float, ...] = ()  # each seed's standard error over examples alone

    def p_value(self, null: float = 0.0) -> float:
        """Two-sided p-value of ``mean = null`` (t with seeds − 1 degrees of freedom, normal for one seed)."""
        if self.se == 0:
            return 0.0 if self.mean != null else 1.0
        return t_two_sided_p((self.mean - null) / self.se, float(self.seeds - 1) if self.seeds > 1 else math.inf)


def paired_examples(a: list[str], b: list[str]) -> Diff | None:
    """``mean(correct_a − correct_b)`` over the same examples, ``a`` and ``b`` the per-seed ``bits``
    strings in the same seed order (None when they do not pair up)."""
    if not a or len(a) != len(b) or any(len(x) != len(y) or not x for x, y in zip(a, b)):
        return None
    d = np.array([[int(u) - int(v) for u, v in zip(x, y)] for x, y in zip(a, b)], dtype=np.float64)  # (S, n)
    per_example = d.mean(axis=0)  # (n,)
    se_ex = float(per_example.std(ddof=1) / math.sqrt(per_example.size)) if per_example.size > 1 else 0.0
    seed_means = d.mean(axis=1)  # (S,)
    seed_sd = float(seed_means.std(ddof=1)) if seed_means.size > 1 else 0.0
    within = tuple(float(row.std(ddof=1) / math.sqrt(row.size)) if row.size > 1 else 0.0 for row in d)  # (S,)
    return Diff(float(per_example.mean()), math.sqrt(se_ex**2 + seed_sd**2 / seed_means.size),
                int(per_example.size), int(seed_means.size), tuple(map(float, seed_means)), within)


@dataclass(frozen=True)
class AccuracyCell:
    accuracy: float  # mean over seeds (every seed has the same examples)
    se: float  # binomial over examples, plus the seed spread
    bits: list[str]  # per seed, in seed order


class AccuracyTable:
    """``cells[label][column]`` from records of one part; ``column`` is a grid size (image) or
    ``(rate, seconds, positions)`` (time). ``cannot[label]`` is the reason a variant did not run."""

    def __init__(self, records: list[dict[str, Any]], column) -> None:
        self.labels: list[str] = []
        self.columns: list[Any] = []
        self.cannot: dict[str, str] = {}
        rows: dict[tuple[str, Any], list[tuple[int, dict[str, Any]]]] = {}
        for rec in records:
            if rec["label"] not in self.labels:
                self.labels.append(rec["label"])
            if rec.get("cannot_run"):
                self.cannot[rec["label"]] = rec["cannot_run"]
            for row in rec.get("eval", []):
                col = column(row)
                if col not in self.columns:
                    self.columns.append(col)
                rows.setdefault((rec["label"], col), []).append((rec["seed"], row))
        self.cells: dict[tuple[str, Any], AccuracyCell] = {}
        for key, found in rows.items():
            found.sort(key=lambda x: x[0])
            accs = np.array([r["accuracy"] for _, r in found])
            n = sum(r["count"] for _, r in found)
            p = float(accs.mean())
            seed_sd = float(accs.std(ddof=1)) if accs.size > 1 else 0.0
            se = math.sqrt(p * (1 - p) / max(n, 1) + seed_sd**2 / accs.size)
            self.cells[key] = AccuracyCell(p, se, [r.get("bits", "") for _, r in found])

    def get(self, label: str, column: Any) -> AccuracyCell | None:
        return self.cells.get((label, column))

    def diff(self, a: tuple[str, Any], b: tuple[str, Any]) -> Diff | None:
        ca, cb = self.get(*a), self.get(*b)
        return None if ca is None or cb is None else paired_examples(ca.bits, cb.bits)


def accuracy_cell(c: AccuracyCell | None, reason: str | None) -> str:
    if c is None:
        return "—" if reason is None else f'<span class=muted title="{e(reason)}">cannot run</span>'
    return f"{c.accuracy:.3f} <span class=muted>± {c.se:.3f}</span>"


def paired_claim(source: str, claim: str, d: Diff | None, what: str) -> Verdict:
    """``d`` = paired (expected better − expected worse), tested against 0 (its p-value joins the
    report's Holm family): agrees when significantly positive, disagrees when significantly negative."""
    if d is None:
        return Verdict(source, claim, f"not measured ({what} missing or cannot run)", "not measured")
    measured = f"{what}: Δaccuracy {d.mean:+.3f} ± {d.se:.3f} (paired over {d.n} examples, {d.seeds} seed(s))"
    return tested(source, claim, measured, d, expect_negative=False)


ACCURACY_MARGIN = 0.02
"""Non-inferiority margin of "holds its accuracy": a drop of at most 2 accuracy points."""


def finish_axes(ax, chance: float, xlabel: str) -> None:
    """The accuracy figures' common frame: chance dotted, 0…1, the legend beside the axes."""
    ax.axhline(chance, color="0.6", ls=":", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the data


__all__ = ["Diff", "paired_examples", "AccuracyCell", "AccuracyTable", "accuracy_cell", "paired_claim", "finish_axes", "ACCURACY_MARGIN"]
