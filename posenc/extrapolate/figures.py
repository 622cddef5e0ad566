"""The benchmark's own figures: perplexity and accuracy by length, RoPE scalings, training loss.

Built on ``matplotlib.figure.Figure`` (no pyplot, no GUI backend); each function returns a Figure.
Error bars are 95% intervals from ``posenc.extrapolate.stats``. A scheme's colour is the same in every
figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from matplotlib.figure import Figure

from posenc.extrapolate.stats import LMTable, TaskTable

MODES = {"nonoverlap": "non-overlapping windows", "sliding": "sliding windows (stride T/2)"}
_ORDER = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire", "shaw", "transformer_xl")


def colour(label: str, labels: list[str]) -> Any:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    if label in _ORDER:
        return cmap(_ORDER.index(label) % 10)
    extra = [lab for lab in labels if lab not in _ORDER]
    return cmap((len(_ORDER) + extra.index(label)) % 10) if label in extra else "black"


def _length_axis(ax, lengths: list[int], train_length: int) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([f"{t}\n{t / train_length:g}×" for t in lengths], fontsize=7)
    ax.minorticks_off()
    ax.axvline(train_length, color="0.6", ls="--", lw=0.8)
    ax.grid(alpha=0.3)


def _ppl_lines(ax, table: LMTable, labels: list[str], mode: str, colour_of: Callable[[str], Any]) -> None:
    for label in labels:
        xs, ys, lo, hi = [], [], [], []
        for t in table.lengths:
            est = table.estimate(label, mode, t)
            if est is None:
                continue
            a, b = est.ppl_interval()
            xs.append(t)
            ys.append(est.ppl)
            lo.append(est.ppl - a)
            hi.append(b - est.ppl)
        if not xs:
            continue
        blocked = table.cannot.get(label, {})
        name = f"{label} (cannot run past {max(xs)})" if blocked else label
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, lw=1.4, capsize=2, label=name, color=colour_of(label))


def _log_y(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)


def perplexity(table: LMTable, labels: list[str] | None = None, *, title: str = "") -> Figure:
    """Perplexity (log scale) by evaluation length, one panel per evaluation mode."""
    labels = labels or table.labels()
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, mode in zip(axes, MODES):
        _ppl_lines(ax, table, labels, mode, lambda lab: colour(lab, labels))
        _length_axis(ax, table.lengths, table.train_length)
        _log_y(ax)
        ax.set_title(MODES[mode], fontsize=10)
        ax.set_xlabel("evaluation length (tokens, × training length)")
    axes[0].set_ylabel("perplexity per byte (95% interval)")
    axes[1].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def scaling(lm: LMTable, sc: LMTable, labels: dict[tuple[str, str], str], *, base: str = "rope") -> Figure:
    """The trained RoPE model with each scaling: zero-shot (left) and after a fine-tune (right)."""
    merged = LMTable({**lm.blocks, **sc.blocks}, {**lm.cannot, **sc.cannot}, sorted(set(lm.lengths) | set(sc.lengths)),
                     lm.train_length)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, mode in zip(axes, ("zero-shot", "fine-tune")):
        names = [base, *[lab for (t, m), lab in labels.items() if m == mode]]
        _ppl_lines(ax, merged, names, "nonoverlap", lambda lab, names=names: f"C{names.index(lab)}")
        _length_axis(ax, merged.lengths, merged.train_length)
        _log_y(ax)
        ax.set_title(f"RoPE scalings, {mode}", fontsize=10)
        ax.set_xlabel("evaluation length (tokens, × training length)")
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("perplexity per byte (non-overlapping)")
    return fig


def by_position(table: LMTable, labels: list[str] | None = None) -> Figure:
    """Perplexity of the same held-out bytes by their position within the window (``LMTable.buckets``)."""
    labels = labels or table.labels()
    buckets = table.buckets()
    L = table.train_length
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(buckets)))
    for label in labels:
        pts = [(x, table.position(label, b)) for x, b in zip(xs, buckets)]
        pts = [(x, est) for x, est in pts if est is not None]
        if not pts:
            continue
        ys = [est.ppl for _, est in pts]
        lo = [est.ppl - est.ppl_interval()[0] for _, est in pts]
        hi = [est.ppl_interval()[1] - est.ppl for _, est in pts]
        ax.errorbar([x for x, _ in pts], ys, yerr=[lo, hi], marker="o", ms=3, lw=1.3, capsize=2, label=label,
                    color=colour(label, labels))
    ax.set_xticks(xs)
    ax.set_xticklabels([b.name(L) for b in buckets], fontsize=8)
    ax.axvline(1.5, color="0.6", ls="--", lw=0.8)
    _log_y(ax)
    ax.set_xlabel("positions within the window (same bytes in every column)")
    ax.set_ylabel("perplexity per byte (95% interval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def accuracy(table: TaskTable, labels: list[str] | None = None) -> Figure:
    """Exact-match accuracy by size, one panel per task; the dashed line is the largest trained size."""
    labels = labels or table.labels()
    n = len(table.tasks)
    fig = Figure(figsize=(2.6 * n + 1.2, 3.4), layout="constrained")
    axes = fig.subplots(1, n, sharey=True, squeeze=False)[0]
    for ax, task in zip(axes, table.tasks):
        for label in labels:
            pts = [(s, table.estimate(label, task, s)) for s in table.sizes]
            pts = [(s, e) for s, e in pts if e is not None]
            if not pts:
                continue
            ax.errorbar([s for s, _ in pts], [e.mean for _, e in pts], yerr=[1.96 * e.se for _, e in pts],
                        marker="o", ms=3, lw=1.3, capsize=2, label=label, color=colour(label, labels))
        ax.axvline(table.max_size, color="0.6", ls="--", lw=0.8)
        ax.set_xticks(table.sizes)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("size n")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match")
    axes[-1].legend(fontsize=7, loc="upper right")
    return fig


def losses(records: list[dict[str, Any]], *, steps: int, title: str) -> Figure:
    """Training loss curves: each stored point is the mean of an equal bin of the ``steps`` steps."""
    fig = Figure(figsize=(6, 3.4), layout="constrained")
    ax = fig.subplots()
    labels = [r["label"] for r in records]
    for rec in records:
        curve = rec.get("train_loss") or []
        if curve:
            xs = [(i + 0.5) * steps / len(curve) for i in range(len(curve))]  # bin centres
            ax.plot(xs, curve, lw=1, label=f"{rec['label']} (seed {rec['seed']})", color=colour(rec["label"], labels))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    return fig
