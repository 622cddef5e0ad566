"""The report's sections beyond text: images at larger grids (resolution) and positions in time.

``image_section(page, records)`` and ``time_section(page, records)`` add their HTML, a table and a
figure to ``page`` and return their verdicts (``posenc.extrapolate.findings.Verdict``), which the
report's summary lists with the text part's.

Statistics. Every run stores, per evaluation row, each example's correctness (``bits``). Two
variants on the same test images (or one model at two grids, or one model with index and time
positions) are compared image by image: ``d_i = correct_a(i) − correct_b(i)``, the mean over
images with ``SE = sd(d) / √n``; with several seeds the per-image differences are averaged over
seeds and the spread of the seeds' means is added, ``SE² = SE_images² + sd(seeds)² / S`` (as
``posenc.extrapolate.stats`` does for perplexity blocks). A claim is called only beyond two standard
errors; otherwise "no clear difference".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.extrapolate.findings import Verdict, _tested
from posenc.extrapolate.stats import t_two_sided_p
from posenc.extrapolate.page import Page, e, status
from posenc.extrapolate.page import table as html_table

HEO = "Heo et al. 2024 (RoPE for ViT)"
HEO_SETTING = ("ImageNet-1k, ViT-S/B/L and Swin trained at 224 px (14×14 patches), evaluated at 64–512 px; "
               "learned absolute positions interpolated (bicubic) at other sizes")
CONTINUOUS = "positions as continuous time"
CHANCE_IMAGE = 0.1  # ten digits
CHANCE_TIME = 0.25  # four labels: order × (gap over the threshold)


@dataclass(frozen=True)
class Diff:
    mean: float
    se: float
    n: int  # examples
    seeds: int

    def p_value(self, null: float = 0.0) -> float:
        """Two-sided p-value of ``mean = null`` (t with seeds − 1 degrees of freedom, normal for one seed)."""
        if self.se == 0:
            return 0.0 if self.mean != null else 1.0
        return t_two_sided_p((self.mean - null) / self.se, float(self.seeds - 1) if self.seeds > 1 else math.inf)


def paired(a: list[str], b: list[str]) -> Diff | None:
    """``mean(correct_a − correct_b)`` over the same examples, ``a`` and ``b`` the per-seed ``bits``
    strings in the same seed order (None when they do not pair up)."""
    if not a or len(a) != len(b) or any(len(x) != len(y) or not x for x, y in zip(a, b)):
        return None
    d = np.array([[int(u) - int(v) for u, v in zip(x, y)] for x, y in zip(a, b)], dtype=np.float64)  # (S, n)
    per_example = d.mean(axis=0)  # (n,)
    se_ex = float(per_example.std(ddof=1) / math.sqrt(per_example.size)) if per_example.size > 1 else 0.0
    seed_means = d.mean(axis=1)  # (S,)
    seed_sd = float(seed_means.std(ddof=1)) if seed_means.size > 1 else 0.0
    return Diff(float(per_example.mean()), math.sqrt(se_ex**2 + seed_sd**2 / seed_means.size),
                int(per_example.size), int(seed_means.size))


@dataclass(frozen=True)
class Cell:
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
        self.cells: dict[tuple[str, Any], Cell] = {}
        for key, found in rows.items():
            found.sort(key=lambda x: x[0])
            accs = np.array([r["accuracy"] for _, r in found])
            n = sum(r["count"] for _, r in found)
            p = float(accs.mean())
            seed_sd = float(accs.std(ddof=1)) if accs.size > 1 else 0.0
            se = math.sqrt(p * (1 - p) / max(n, 1) + seed_sd**2 / accs.size)
            self.cells[key] = Cell(p, se, [r.get("bits", "") for _, r in found])

    def get(self, label: str, column: Any) -> Cell | None:
        return self.cells.get((label, column))

    def diff(self, a: tuple[str, Any], b: tuple[str, Any]) -> Diff | None:
        ca, cb = self.get(*a), self.get(*b)
        return None if ca is None or cb is None else paired(ca.bits, cb.bits)


def _cell(c: Cell | None, reason: str | None) -> str:
    if c is None:
        return "—" if reason is None else f'<span class=muted title="{e(reason)}">cannot run</span>'
    return f"{c.accuracy:.3f} <span class=muted>± {c.se:.3f}</span>"


def _claim(source: str, claim: str, d: Diff | None, what: str) -> Verdict:
    """``d`` = paired (expected better − expected worse), tested against 0 (its p-value joins the
    report's Holm family): agrees when significantly positive, disagrees when significantly negative."""
    if d is None:
        return Verdict(source, claim, f"not measured ({what} missing or cannot run)", "not measured")
    measured = f"{what}: Δaccuracy {d.mean:+.3f} ± {d.se:.3f} (paired over {d.n} examples, {d.seeds} seed(s))"
    return _tested(source, claim, measured, d, expect_negative=False)


ACCURACY_MARGIN = 0.02
"""Non-inferiority margin of "holds its accuracy": a drop of at most 2 accuracy points."""


# -- images --------------------------------------------------------------------------------------

LEARNED, SIN, SIN_RESCALED, AXIAL, MIXED = ("learned grid (resized)", "2D sinusoidal", "2D sinusoidal (rescaled)",
                                            "axial RoPE", "RoPE-Mixed")  # posenc.extrapolate.vision.IMAGE_VARIANTS


def _probe(sizes: list[int], train: int) -> int | None:
    """The test grid the claims are checked at: the one nearest 2× the training grid (Heo et al.
    went from 224 to 448 px at most in their main tables), among the grids larger than training."""
    larger = [s for s in sizes if s > train]
    return min(larger, key=lambda s: (abs(s - 2 * train), s)) if larger else None


def image_verdicts(t: AccuracyTable, train: int) -> list[Verdict]:
    at = _probe(t.columns, train)
    if at is None:
        return [Verdict(HEO, "RoPE holds accuracy at larger grids", "not measured (no grid larger than training)",
                        "not measured")]
    out = []
    for better, worse in ((MIXED, LEARNED), (AXIAL, LEARNED), (MIXED, AXIAL)):
        claim = f"at higher resolution ({at}×{at} tokens, trained at {train}×{train}), {better} beats {worse}"
        out.append(_claim(HEO, claim, t.diff((better, at), (worse, at)), f"{better} − {worse} at {at}"))
    for label in (MIXED, AXIAL):
        claim = (f"{label} holds its accuracy from {train}×{train} to {at}×{at} (non-inferiority: drops by less "
                 f"than {ACCURACY_MARGIN} accuracy)")
        d, base = t.diff((label, at), (label, train)), t.get(label, train)
        if d is None or base is None:
            out.append(Verdict(HEO, claim, f"not measured ({label} missing)", "not measured"))
            continue
        if base.accuracy - CHANCE_IMAGE <= 2 * base.se:  # nothing learned: nothing to hold
            out.append(Verdict(HEO, claim, f"not measured ({label} is at chance on the training grid: "
                                           f"{base.accuracy:.3f} ± {base.se:.3f})", "not measured"))
            continue
        measured = (f"{label} at {at} − at {train}: Δaccuracy {d.mean:+.3f} ± {d.se:.3f} "
                    f"(paired over {d.n} images, {d.seeds} seed(s))")
        out.append(_tested(HEO, claim, measured + f"; margin {ACCURACY_MARGIN}", d, expect_negative=False,
                           null=-ACCURACY_MARGIN))
    return out


def image_figure(t: AccuracyTable, train: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.8), layout="constrained")
    ax = fig.subplots()
    for i, label in enumerate(t.labels):
        pts = [(s, t.get(label, s)) for s in t.columns]
        pts = [(s, c) for s, c in pts if c is not None]
        if pts:
            ax.errorbar([s for s, _ in pts], [c.accuracy for _, c in pts], yerr=[1.96 * c.se for _, c in pts],
                        marker="o", ms=3, lw=1.3, capsize=2, label=label, color=f"C{i % 10}")
    ax.axvline(train, color="0.6", ls="--", lw=0.8)
    ax.axhline(CHANCE_IMAGE, color="0.6", ls=":", lw=0.8)
    ax.set_xticks(t.columns)
    ax.set_xlabel("test grid (tokens per side); dashed: training grid, dotted: chance")
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the data
    return fig


def image_section(page: Page, records: list[dict[str, Any]]) -> list[Verdict]:
    """The "Images: train small, test large (resolution)" section; its verdicts."""
    page.add("<h2 id=images>Images: train small, test large (resolution)</h2>")
    if not records:
        page.add("<p>Not run in this profile (<code>posenc extrapolate --part image</code>).</p>")
        return []
    t = AccuracyTable(records, lambda row: row["size"])
    t.columns.sort()
    train = next((r["train_size"] for r in records if "train_size" in r), min(t.columns, default=0))
    n = next((row["count"] for r in records for row in r.get("eval", [])), 0)
    page.add(f"<p>A small bidirectional transformer (the benchmark's blocks, mean pooling) classifies scikit-learn's "
             f"handwritten digits, one token per pixel, trained on the {train}×{train} grid; the same {n} held-out "
             "images are resampled (bilinear) to larger grids and classified again. The learned grid is resized "
             "(bicubic, <code>posenc.interop.resize_grid</code>) to each test grid; “2D sinusoidal” and the RoPEs "
             "get integer positions past the training range; “2D sinusoidal (rescaled)” is the same trained model "
             f"with positions rescaled into 0…{train - 1} (real-valued). Cells: accuracy ± standard error (binomial "
             f"over images{', plus the seed spread' if len({r['seed'] for r in records}) > 1 else ''}); "
             f"chance is {CHANCE_IMAGE:.1f}. {e(HEO)}: {e(HEO_SETTING)}.</p>")
    page.figure("image_accuracy", lambda: image_figure(t, train),
                "Digit accuracy against the test grid (the same images, resampled); dashed: the training grid.")
    rows = [[e(lab)] + [_cell(t.get(lab, s), t.cannot.get(lab)) for s in t.columns] for lab in t.labels]
    page.add(html_table(["variant"] + [f"{s}×{s}" + (" (train)" if s == train else "") for s in t.columns], rows))
    verdicts = image_verdicts(t, train)
    page.add("<p>Heo et al.'s claims, checked on the same images (paired, image by image):</p>"
             + html_table(["the paper found", "measured here", "verdict"],
                          [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    bad = [v for v in verdicts if v.status == "disagrees"]
    if bad:
        page.add("<p><b>Where this run disagrees with Heo et al.:</b> "
                 + "; ".join(e(v.claim) for v in bad) + ".</p>")
    return verdicts


# -- time ----------------------------------------------------------------------------------------

def _when(rate: float, seconds: float) -> str:
    return f"{rate:g} fps for {seconds:g} s"


def time_verdicts(t: AccuracyTable, train_rate: float, train_seconds: float) -> tuple[list[Verdict], list[str]]:
    """Per scheme with time positions, per test condition at another frame rate: time − index
    (paired, the same model on the same clips); and the answer in words."""
    out, answers = [], []
    conditions = list(dict.fromkeys((r, s) for r, s, _ in t.columns))
    other = [(r, s) for r, s in conditions if r != train_rate]
    for label in t.labels:
        if not any(t.get(label, (r, s, "time")) for r, s in conditions):
            continue  # no time positions (no position, or a table of integer rows)
        wins = []
        for r, s in other:
            claim = f"{label}: at {_when(r, s)} (trained at {_when(train_rate, train_seconds)}), positions in " \
                    "seconds beat frame indices"
            d = t.diff((label, (r, s, "time")), (label, (r, s, "index")))
            v = _claim(CONTINUOUS, claim, d, f"time − index at {_when(r, s)}")
            out.append(v)
            wins.append((r, s, v.status))
        if wins:
            yes = [_when(r, s) for r, s, st in wins if st == "agrees"]
            no = [_when(r, s) for r, s, st in wins if st == "disagrees"]
            flat = [_when(r, s) for r, s, st in wins if st == "no clear difference"]
            text = f"{label}: "
            text += (f"positions in seconds carry over where frame indices do not at {', '.join(yes)}"
                     if yes else "positions in seconds do not beat frame indices beyond 2 SE at any other frame rate")
            if no:
                text += f"; frame indices do better at {', '.join(no)}"
            if flat:
                text += f"; no clear difference at {', '.join(flat)}"
            longer = [(r, s) for r, s in conditions if r == train_rate and s > train_seconds]
            held = [f"{t.get(label, (r, s, 'index')).accuracy:.2f} at {_when(r, s)}" for r, s in longer
                    if t.get(label, (r, s, "index")) is not None]
            trained = t.get(label, (train_rate, train_seconds, "index"))
            if held and trained is not None:  # at the training rate the two are the same positions
                text += (f". Longer clips at the training rate (the same positions either way): accuracy "
                         f"{', '.join(held)}, against {trained.accuracy:.2f} as trained")
            answers.append(text + ".")
    return out, answers


def time_figure(t: AccuracyTable, conditions: list[tuple[float, float]]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.8, 3.8), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(conditions)))
    for i, label in enumerate(t.labels):
        for kind, style in (("index", "-"), ("time", "--")):
            pts = [(x, t.get(label, (r, s, kind))) for x, (r, s) in zip(xs, conditions)]
            pts = [(x, c) for x, c in pts if c is not None]
            if pts:
                ax.errorbar([x for x, _ in pts], [c.accuracy for _, c in pts], yerr=[1.96 * c.se for _, c in pts],
                            marker="o" if kind == "index" else "s", ms=3, lw=1.2, ls=style, capsize=2,
                            label=f"{label}, {kind}", color=f"C{i % 10}")
    ax.axhline(CHANCE_TIME, color="0.6", ls=":", lw=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r:g} fps\n{s:g} s" for r, s in conditions], fontsize=8)
    ax.set_xlabel("test frame rate and clip duration; dotted: chance")
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the data
    return fig


def time_section(page: Page, records: list[dict[str, Any]]) -> list[Verdict]:
    """The "Time" section; its verdicts."""
    page.add("<h2 id=time>Time: frame indices or seconds across frame rates</h2>")
    if not records:
        page.add("<p>Not run in this profile (<code>posenc extrapolate --part time</code>).</p>")
        return []
    t = AccuracyTable(records, lambda row: (row["rate"], row["seconds"], row["positions"]))
    first = next((r for r in records if "train_rate" in r), {})
    rate, dur = first.get("train_rate", 0.0), first.get("train_duration", 0.0)
    conditions = list(dict.fromkeys((r, s) for r, s, _ in t.columns))
    n = next((row["count"] for r in records for row in r.get("eval", [])), 0)
    page.add(f"<p>Synthetic audio-like clips (noise frames) carry two marked events; the label says which came "
             "first and whether they were more than a fixed number of seconds apart (four classes, chance "
             f"{CHANCE_TIME:.2f}). One model per scheme is trained at {_when(rate, dur)} and evaluated on {n} "
             "fixed clips per condition at other frame rates and longer durations, with positions given as "
             f"<b>frame indices</b> or as <b>time</b> (seconds × {rate:g}, the training rate: the same numbers "
             "in training, so one trained model is evaluated both ways). At twice the frame rate a one-second gap "
             "is twice as many frames, so only time positions keep its meaning. Schemes that take only integer "
             "positions (a learned table) or none have index rows only.</p>")
    page.figure("time_accuracy", lambda: time_figure(t, conditions),
                "Accuracy per test condition; solid: frame indices, dashed: positions in seconds.")
    rows = []
    for lab in t.labels:
        for kind in ("index", "time"):
            if kind == "time" and not any(t.get(lab, (r, s, "time")) for r, s in conditions):
                continue
            rows.append([e(f"{lab}, {kind}")] + [_cell(t.get(lab, (r, s, kind)), t.cannot.get(lab))
                                                 for r, s in conditions])
    page.add(html_table(["scheme, positions"] + [e(_when(r, s)) + (" (train)" if (r, s) == (rate, dur) else "")
                                                 for r, s in conditions], rows))
    verdicts, answers = time_verdicts(t, rate, dur)
    page.add("".join(f"<p><b>{e(a)}</b></p>" for a in answers) or
             "<p>No scheme here takes positions in seconds, so the question is not measured.</p>")
    if verdicts:
        page.add(html_table(["the expectation", "measured here", "verdict"],
                            [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    return verdicts


__all__ = ["paired", "AccuracyTable", "image_section", "time_section", "image_verdicts", "time_verdicts"]
