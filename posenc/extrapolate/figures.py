"""The benchmark's own figures: perplexity and accuracy by length, RoPE scalings, training loss.

Built on ``matplotlib.figure.Figure`` (no pyplot, no GUI backend); each function returns a Figure.
Intervals are 95% from ``posenc.stats.estimates``, drawn as translucent bands (``fill_between``)
in the line's colour, never as error bars (sixteen sets of caps at the same x stack on each other).

**The style rule** (``styles``): every line of a figure gets a ``Style`` (colour, marker, line
style), and no two rows of one figure share colour and marker, however many there are:

- a known scheme has one look in every figure (``LOOKS``): the ten fixed-position baselines
  (``nope`` … ``transformer_xl``) a tab10 colour each, circles, **solid** lines; the rows whose
  positions depend on content (FoX and its bias-only gate, CoPE, DAPE, stick-breaking, the
  RoPE/NoPE layer pattern ``layers: …``, ``nope_temperature``; ``parts.lm.CONTENT_PLAYERS``) colours
  of their own (Dark2, none a tab10 colour), a marker each, **dash-dotted** lines;
- a hybrid row (``"hybrid rope"``, ``parts.hybrid``) has its scheme's colour, squares, **dashed**
  lines; a variant of a known scheme (``"rope (base=500)"``, the image part's ``"axial RoPE"``)
  its scheme's colour and the next free marker (RoPE-Mixed, which the image claims set against axial
  RoPE, has a colour of its own);
- any other row (a user's scheme, a RoPE scaling) takes the first colour no row of the figure has
  yet (tab10, Dark2, then tab20's light halves), then the first free (colour, marker) pair;
- where one row has several lines (the time part's frame indices and seconds, the image part's
  zoom and canvas, the zero-shot and fine-tuned scalings), ``variant`` keeps the colour and moves
  the marker and the line style (solid, dashed, dotted), as each caption says.

Legends sit outside the data: to the right of the last panel (``fig.legend(loc="outside right
upper")`` under the constrained layout), rows ordered baselines, content rows, hybrids, others.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from posenc.stats.estimates import LMTable, TaskTable

MODES = {"nonoverlap": "non-overlapping windows", "sliding": "sliding windows (stride T/2)"}
_ORDER = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire", "shaw", "transformer_xl")

TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
DARK2 = ("#1b9e77", "#e7298a", "#7570b3", "#a6761d", "#e6ab02", "#000000", "#666666", "#66a61e")
TAB20_LIGHT = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d",
               "#9edae5")
PALETTE = TAB10 + DARK2 + TAB20_LIGHT  # 28 colours: the order in which other rows take one
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
LINESTYLES = ("-", "--", ":", "-.")  # a row's variants: solid, dashed, dotted, dash-dotted
BASELINE, CONTENT, HYBRID, OTHER = "baseline", "content", "hybrid", "other"
GROUP_LINESTYLE = {BASELINE: "-", CONTENT: "-.", HYBRID: "--", OTHER: "-"}
LINE_STYLES = "solid: fixed positions, dash-dotted: positions from content, dashed: hybrids (in their scheme's colour)"
"""The captions' words for ``GROUP_LINESTYLE``."""
HYBRID_PREFIX = "hybrid "  # posenc.extrapolate.plan.arch_label
PATTERN_PREFIX = "layers:"  # posenc.extrapolate.model.pattern_label: "layers: rope x3, nope_temperature"


@dataclass(frozen=True)
class Style:
    """How one line is drawn; ``kw()`` gives ``Axes.plot``'s keywords."""

    colour: str
    marker: str
    linestyle: str
    group: str = OTHER

    def kw(self) -> dict[str, Any]:
        return {"color": self.colour, "marker": self.marker, "linestyle": self.linestyle}


_CONTENT = {"fox": (DARK2[0], "D"), "fox (gate=bias_only)": (DARK2[4], "v"), "cope": (DARK2[1], "^"),
            "dape": (DARK2[2], "P"), "stick_breaking": (DARK2[3], "X"), "nope_temperature": (DARK2[6], "h")}
LOOKS: dict[str, Style] = {
    **{lab: Style(TAB10[i], "o", "-", BASELINE) for i, lab in enumerate(_ORDER)},
    **{lab: Style(c, m, GROUP_LINESTYLE[CONTENT], CONTENT) for lab, (c, m) in _CONTENT.items()},
    "RoPE-Mixed": Style("#6a3d9a", "D", "-", BASELINE),  # a dark purple of its own, far from the learned table's
    # green and axial RoPE's red: the image claims set it against both
}
"""The fixed look of the benchmark's known schemes (the same in every figure)."""
PATTERN_LOOK = Style(DARK2[5], "*", GROUP_LINESTYLE[CONTENT], CONTENT)  # the RoPE/NoPE layer pattern, any label
ALIASES = {"none": "nope", "learned grid (resized)": "learned", "2D sinusoidal": "sinusoidal",
           "2D sinusoidal (rescaled)": "sinusoidal", "axial RoPE": "rope"}
"""Rows of other parts that are a known scheme (the image part's variants): its colour."""


def look(label: str) -> Style | None:
    """The preferred look of ``label``, or None for a row the benchmark does not know."""
    if label in LOOKS:
        return LOOKS[label]
    if label.startswith(PATTERN_PREFIX):
        return PATTERN_LOOK
    if label.startswith(HYBRID_PREFIX):
        inner = look(label[len(HYBRID_PREFIX):])
        return None if inner is None else replace(inner, marker="s", linestyle=GROUP_LINESTYLE[HYBRID], group=HYBRID)
    if label in ALIASES:
        return replace(LOOKS[ALIASES[label]], marker=_alias_marker(label))
    base = label.split(" (")[0]
    if base != label and base in LOOKS:  # "rope (base=500)": a variant of a known scheme
        return replace(LOOKS[base], marker=MARKERS[1])
    return None


def _alias_marker(label: str) -> str:
    """Rows that share a scheme's colour ("2D sinusoidal" and "2D sinusoidal (rescaled)") differ by marker."""
    same = [a for a in ALIASES if ALIASES[a] == ALIASES[label]]
    return MARKERS[same.index(label) % len(MARKERS)]


def variant(style: Style, i: int) -> Style:
    """The ``i``-th line of one row (0: the row's own look): its colour, the next marker and line style."""
    if i == 0:
        return style
    return replace(style, marker=MARKERS[(MARKERS.index(style.marker) + i) % len(MARKERS)],
                   linestyle=LINESTYLES[i % len(LINESTYLES)])


def styles(keys: Iterable[Hashable], look_of=None) -> dict[Any, Style]:
    """A ``Style`` for every key (a row's label, or ``(label, variant)`` with ``look_of``), unique in
    (colour, marker) among the keys: the preferred look (``look``) when it is free, else its colour
    with the first free marker; a key with no look takes the first colour no key has, with circles."""
    look_of = look_of or look
    keys = list(dict.fromkeys(keys))
    wanted = {k: look_of(k) for k in keys}
    taken: set[tuple[str, str]] = set()
    out: dict[Any, Style] = {}
    for k in keys:  # known looks first, so a known row keeps its look whatever else is drawn
        st = wanted[k]
        if st is not None and (st.colour, st.marker) not in taken:
            out[k] = st
            taken.add((st.colour, st.marker))
    for k in keys:
        if k in out:
            continue
        st = wanted[k]
        if st is not None:  # its colour, the next free marker
            free = [m for m in MARKERS if (st.colour, m) not in taken]
            st = replace(st, marker=free[0]) if free else None
        if st is None:
            used = {c for c, _ in taken}
            fresh = next((c for c in PALETTE if c not in used), None)
            if fresh is not None:
                st = Style(fresh, "o", GROUP_LINESTYLE[OTHER], OTHER)
            else:  # every colour has a row: the first free pair
                c, m = next((c, m) for m in MARKERS for c in PALETTE if (c, m) not in taken)
                st = Style(c, m, GROUP_LINESTYLE[OTHER], OTHER)
        out[k] = st
        taken.add((st.colour, st.marker))
    return {k: out[k] for k in keys}


def colour(label: str, labels: list[str]) -> Any:
    """The colour of ``label`` among ``labels`` (``styles``)."""
    return styles([*labels, label])[label].colour


def band(ax, xs, lo, hi, style: Style) -> None:
    """An interval as a translucent band in the line's colour."""
    ax.fill_between(xs, lo, hi, color=style.colour, alpha=0.08, lw=0)  # faint: many rows overlap


def line(ax, xs, ys, style: Style, label: str, *, lo=None, hi=None, **kw: Any) -> None:
    """One row: its band (when ``lo``/``hi`` are given), then the line with its markers."""
    if lo is not None and hi is not None:
        band(ax, xs, lo, hi, style)
    ax.plot(xs, ys, ms=kw.pop("ms", 4), lw=kw.pop("lw", 1.4), label=label, **style.kw(), **kw)


_GROUP_ORDER = {BASELINE: 0, CONTENT: 1, HYBRID: 2, OTHER: 3}


def legend(fig, axes, *, order: dict[str, Style] | None = None, fontsize: float = 7, title: str | None = None):
    """One legend for the figure, to the right of its panels (outside every axes' data area): each
    label once, ordered baselines, content rows, hybrids, others when ``order`` gives the styles."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labs = list(seen)
    if order:
        group = {lab: _GROUP_ORDER[st.group] for lab, st in order.items()}
        labs.sort(key=lambda lab: group.get(_row(lab), 3))
    if labs:
        fig.legend([seen[lab] for lab in labs], labs, loc="outside right upper", fontsize=fontsize, title=title,
                   title_fontsize=fontsize, frameon=False)


def _row(name: str) -> str:
    """A legend name's row label (``"learned (cannot run past 64)"`` -> ``"learned"``)."""
    return name.split(" (cannot run past")[0]


def _length_axis(ax, lengths: list[int], train_length: int) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([f"{t}\n{t / train_length:g}×" for t in lengths], fontsize=7)
    ax.minorticks_off()
    ax.axvline(train_length, color="0.6", ls="--", lw=0.8)
    ax.grid(alpha=0.3)


def _ppl_lines(ax, table: LMTable, labels: list[str], mode: str, style_of: dict[str, Style]) -> None:
    for label in labels:
        xs, ys, lo, hi = [], [], [], []
        for t in table.lengths:
            est = table.estimate(label, mode, t)
            if est is None:
                continue
            a, b = est.ppl_interval()
            xs.append(t)
            ys.append(est.ppl)
            lo.append(a)
            hi.append(b)
        if not xs:
            continue
        blocked = table.cannot.get(label, {})
        name = f"{label} (cannot run past {max(xs)})" if blocked else label
        line(ax, xs, ys, style_of[label], name, lo=lo, hi=hi)


def _log_y(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)


def perplexity(table: LMTable, labels: list[str] | None = None, *, title: str = "") -> Figure:
    """Perplexity (log scale) by evaluation length, one panel per evaluation mode; bands: 95% intervals."""
    labels = labels or table.labels()
    st = styles(labels)
    fig = Figure(figsize=(12.5, 4.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, mode in zip(axes, MODES):
        _ppl_lines(ax, table, labels, mode, st)
        _length_axis(ax, table.lengths, table.train_length)
        _log_y(ax)
        ax.set_title(MODES[mode], fontsize=10)
        ax.set_xlabel("evaluation length (tokens, × training length)")
    axes[0].set_ylabel("perplexity per byte (95% interval)")
    legend(fig, axes, order=st)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def scaling(lm: LMTable, sc: LMTable, labels: dict[tuple[str, str], str], *, base: str = "rope") -> Figure:
    """The trained RoPE model with each scaling: zero-shot (left) and after a fine-tune (right). A
    scaling keeps one colour in both panels; fine-tuned rows have the next marker, dashed."""
    merged = LMTable({**lm.blocks, **sc.blocks}, {**lm.cannot, **sc.cannot}, sorted(set(lm.lengths) | set(sc.lengths)),
                     lm.train_length)
    kinds = list(dict.fromkeys(t for t, _ in labels))
    rows = {lab: (t, m) for (t, m), lab in labels.items()}
    base_look = look(base) or Style(TAB10[3], "o", "-", BASELINE)
    others = [c for c in PALETTE if c != base_look.colour]

    def look_of(lab: str) -> Style:
        if lab not in rows:
            return base_look
        t, m = rows[lab]
        return variant(Style(others[kinds.index(t) % len(others)], "o", "-", OTHER), int(m == "fine-tune"))

    st = styles([base, *labels.values()], look_of)
    fig = Figure(figsize=(12.5, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, mode in zip(axes, ("zero-shot", "fine-tune")):
        names = [base, *[lab for (t, m), lab in labels.items() if m == mode]]
        _ppl_lines(ax, merged, names, "nonoverlap", st)
        _length_axis(ax, merged.lengths, merged.train_length)
        _log_y(ax)
        ax.set_title(f"RoPE scalings, {mode}", fontsize=10)
        ax.set_xlabel("evaluation length (tokens, × training length)")
    axes[0].set_ylabel("perplexity per byte (non-overlapping, 95% interval)")
    legend(fig, axes)
    return fig


def by_position(table: LMTable, labels: list[str] | None = None) -> Figure:
    """Perplexity of the same held-out bytes by their position within the window (``LMTable.buckets``)."""
    labels = labels or table.labels()
    st = styles(labels)
    buckets = table.buckets()
    L = table.train_length
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(buckets)))
    for label in labels:
        pts = [(x, table.position(label, b)) for x, b in zip(xs, buckets)]
        pts = [(x, est) for x, est in pts if est is not None]
        if not pts:
            continue
        line(ax, [x for x, _ in pts], [est.ppl for _, est in pts], st[label], label,
             lo=[est.ppl_interval()[0] for _, est in pts], hi=[est.ppl_interval()[1] for _, est in pts])
    ax.set_xticks(xs)
    ax.set_xticklabels([b.name(L) for b in buckets], fontsize=8)
    ax.axvline(1.5, color="0.6", ls="--", lw=0.8)
    _log_y(ax)
    ax.set_xlabel("positions within the window (same bytes in every column)")
    ax.set_ylabel("perplexity per byte (95% interval)")
    ax.grid(alpha=0.3)
    legend(fig, [ax], order=st)
    return fig


def accuracy(table: TaskTable, labels: list[str] | None = None) -> Figure:
    """Exact-match accuracy by size, one panel per task; the dashed line is the largest trained size."""
    labels = labels or table.labels()
    st = styles(labels)
    n = len(table.tasks)
    fig = Figure(figsize=(2.6 * n + 2.6, 3.6), layout="constrained")
    axes = fig.subplots(1, n, sharey=True, squeeze=False)[0]
    for ax, task in zip(axes, table.tasks):
        for label in labels:
            pts = [(s, table.estimate(label, task, s)) for s in table.sizes]
            pts = [(s, e) for s, e in pts if e is not None]
            if not pts:
                continue
            line(ax, [s for s, _ in pts], [e.mean for _, e in pts], st[label], label, ms=3.5, lw=1.3,
                 lo=[max(e.mean - 1.96 * e.se, 0.0) for _, e in pts],
                 hi=[min(e.mean + 1.96 * e.se, 1.0) for _, e in pts])
        ax.axvline(table.max_size, color="0.6", ls="--", lw=0.8)
        ax.set_xticks(table.sizes)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("size n")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (95% interval)")
    legend(fig, axes, order=st)
    return fig


def losses(records: list[dict[str, Any]], *, steps: int, title: str) -> Figure:
    """Training loss curves, one line per scheme: the mean over its seeds, the band their range. Each
    stored point is the mean of an equal bin of the ``steps`` steps."""
    curves: dict[str, list[list[float]]] = {}
    for rec in records:
        if rec.get("train_loss"):
            curves.setdefault(rec["label"], []).append(list(rec["train_loss"]))
    st = styles(curves)
    fig = Figure(figsize=(8.4, 3.8), layout="constrained")
    ax = fig.subplots()
    for label, runs in curves.items():
        n = min(len(c) for c in runs)  # seeds of one profile store the same bins
        arr = np.asarray([c[:n] for c in runs], dtype=np.float64)  # (seeds, bins)
        xs = [(i + 0.5) * steps / n for i in range(n)]  # bin centres
        line(ax, xs, arr.mean(axis=0), st[label], label, lw=1.1, ms=3.5, markevery=max(1, n // 8),
             lo=arr.min(axis=0) if len(runs) > 1 else None, hi=arr.max(axis=0) if len(runs) > 1 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    seeds = max((len(r) for r in curves.values()), default=1)
    legend(fig, [ax], order=st, title=f"mean of {seeds} seeds;\nband: their range" if seeds > 1 else None)
    return fig


__all__ = ["MODES", "LINE_STYLES", "Style", "LOOKS", "look", "variant", "styles", "colour", "band", "line", "legend",
           "perplexity", "scaling", "by_position", "accuracy", "losses"]
