"""Figures of positional encodings (matplotlib, the ``posenc[plot]`` extra).

Every function returns a ``matplotlib.figure.Figure`` built without pyplot (no global state, no
GUI backend; ``save`` writes PNG, SVG or PDF through Agg). Axes and colorbars are labelled;
colours are colour-blind safe: Okabe–Ito for lines (with distinct line styles too), ``RdBu_r``
for signed values, ``viridis`` for one-signed ones. matplotlib is imported on first use, so
``import posenc`` never needs it.

    from posenc import plot
    plot.save(plot.heatmap("sinusoidal", length=128, dim=64), "heatmap.png")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from posenc import analysis

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
LINESTYLES = ("-", "--", "-.", ":")
FORMATS = (".png", ".svg", ".pdf")
MARK = "#4D4D4D"  # grey for marks (context lines, minima), apart from the data colours
KIND_ORDER = ("additive", "rotary", "bias", "relative", "none")


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("figures need matplotlib (posenc's 'plot' extra): pip install '.[plot]' from a clone of "
                          "posenc, or pip install matplotlib") from None
    return Figure(figsize=(width, height), layout="constrained")


def _title(label: str, what: str) -> str:
    """``label: what`` on one line when short, on two when the label is long (scaling parameters)."""
    return f"{label}: {what}" if len(label) + len(what) <= 48 else f"{label}\n{what}"


def _style(i: int) -> dict[str, Any]:
    return {"color": OKABE_ITO[i % len(OKABE_ITO)], "linestyle": LINESTYLES[(i // len(OKABE_ITO) + i) % len(LINESTYLES)]}


def save(fig: Figure, path: str | os.PathLike, *, dpi: int = 150) -> str:
    """Writes ``fig`` to ``path`` (``.png``, ``.svg`` or ``.pdf``); the folder must exist."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"figure file must end in {', '.join(FORMATS)}; got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"cannot write {path!r}: folder {folder!r} does not exist")
    fig.savefig(path, dpi=dpi, metadata={"Software": None} if ext == ".png" else None)
    return path


# -- drawing on one Axes ----------------------------------------------------------------------

TABLE_VALUE = {"additive": "PE(position, i)", "rotary": "[cos(position·θ) | sin(position·θ)]"}
"""What a heatmap's values are, by kind (``analysis.table``'s kinds)."""
TERM_NOTE = {"relative": " (q = k = 1)"}
"""What the bias maps of a kind are drawn with (a query-dependent term: with ``q = k = 1``)."""


def draw_heatmap(ax: Axes, spec: Any, *, length: int = 128, dim: int = 64):
    tab = analysis.table(spec, length=length, dim=dim)  # (L, d)
    m = analysis.build(spec, dim=dim, length=length)
    vmax = float(np.abs(tab).max()) or 1.0
    im = ax.imshow(tab, aspect="auto", cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
    what = TABLE_VALUE.get(m.kind, "")
    ax.set(title=_title(analysis.shown_label(m), what), xlabel="dimension i", ylabel="position")
    ax.figure.colorbar(im, ax=ax, label="value")
    return im


def draw_similarity(ax: Axes, spec: Any, *, length: int = 128, dim: int = 64):
    sim = analysis.cosine_similarity_matrix(analysis.table(spec, length=length, dim=dim))  # (L, L)
    im = ax.imshow(sim, cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
    ax.set(title=_title(analysis.shown_label(analysis.build(spec, dim=dim, length=length)), "cosine similarity"),
           xlabel="position q", ylabel="position p")
    ax.figure.colorbar(im, ax=ax, label="cos(vector(p), vector(q))")
    return im


def draw_curves(ax: Axes, curves: Sequence[analysis.Curve], styles: Sequence[dict[str, Any]]) -> None:
    for c, st in zip(curves, styles):
        ax.plot(c.distance, c.score, label=c.label, linewidth=1.6, **st)
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set(xlabel="relative distance r (positions)", ylabel=curves[0].quantity if curves else "")
    ax.set_title(f"{curves[0].kind}" if curves else "")
    ax.legend(fontsize="small", frameon=False)
    ax.grid(alpha=0.3)


def draw_spectrum(ax: Axes, spec: Any, *, dim: int = 128, context: int | None = None) -> None:
    sp = analysis.spectrum(spec, dim=dim)
    i = np.arange(sp.before.size)
    ax.semilogy(i, sp.wavelengths_before, label="before scaling" if sp.scaling else "wavelength",
                linewidth=1.8, **_style(0))
    if sp.scaling:
        ax.semilogy(i, sp.wavelengths_after, label=f"after {sp.scaling.get('type')}", linewidth=1.8, **_style(1))
    context = context or sp.context
    if context:
        ax.axhline(context, color=MARK, linestyle=":", linewidth=1.2, label=f"context {context}")
    if sp.extended:
        ax.axhline(sp.extended, color=MARK, linestyle="-.", linewidth=1.2, label=f"extended {sp.extended}")
    ax.set(title=_title(sp.label, "wavelength 2π/θ_i"), xlabel="frequency pair i",
           ylabel="wavelength (positions, log scale)")
    ax.legend(fontsize="small", frameon=False)
    ax.grid(alpha=0.3, which="both")


def draw_bias_maps(fig: Figure, spec: Any, *, length: int = 64, num_heads: int = analysis.DEFAULT_HEADS,
                   dim: int = 64) -> None:
    maps = analysis.bias_maps(spec, length=length, num_heads=num_heads, dim=dim)  # (H, L, L)
    h = maps.shape[0]
    cols = min(4, h)
    rows = -(-h // cols)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)).ravel()
    lo, hi = float(maps.min()), float(maps.max())
    signed = lo < 0 < hi
    vmax = max(abs(lo), abs(hi)) or 1.0
    kw = {"cmap": "RdBu_r", "vmin": -vmax, "vmax": vmax} if signed else {"cmap": "viridis", "vmin": lo, "vmax": hi}
    im = None
    for head, ax in enumerate(axes):
        if head >= h:
            ax.set_visible(False)
            continue
        im = ax.imshow(maps[head], interpolation="nearest", **kw)
        ax.set_title(f"head {head}", fontsize="small")
        if head % cols == 0:
            ax.set_ylabel("query position i")
        if head >= h - cols:
            ax.set_xlabel("key position j")
    m = analysis.build(spec, dim=dim, num_heads=num_heads, length=length)
    extra = TERM_NOTE.get(m.kind, "")
    fig.suptitle(_title(analysis.shown_label(m), f"score term per head{extra}"))
    fig.colorbar(im, ax=list(axes[:h]), label="added to the attention score", shrink=0.9)


# -- the figures ------------------------------------------------------------------------------

def heatmap(spec: Any, *, length: int = 128, dim: int = 64) -> Figure:
    """The table, positions × dimensions: fast stripes in the low dimensions, slow bands in the high.

    Each row is one position's multi-frequency fingerprint, like the bits of a binary counter.
    Additive: ``PE(pos)``; rotary: ``[cos(pos·θ) | sin(pos·θ)]``.
    """
    fig = _figure(7.0, 4.6)
    draw_heatmap(fig.add_subplot(), spec, length=length, dim=dim)
    return fig


def similarity(spec: Any, *, length: int = 128, dim: int = 64) -> Figure:
    """The cosine similarity matrix of the positions' vectors: high near the diagonal, falling with distance."""
    fig = _figure(5.6, 4.6)
    draw_similarity(fig.add_subplot(), spec, length=length, dim=dim)
    return fig


def score_vs_distance(specs: Sequence[Any], *, length: int = 256, dim: int = 64) -> Figure:
    """Each scheme's positional signal against relative distance, one panel per kind.

    Additive: cosine similarity of PE vectors; rotary: ``q·k / D`` with ``q = k = 1``; bias and
    relative: the term, mean over heads; none: 0. A scheme keeps its colour across panels.
    """
    if isinstance(specs, (str, dict)) or not isinstance(specs, Sequence) or not specs:
        raise ValueError("score_vs_distance takes a non-empty list of specs, e.g. ['sinusoidal', 'rope']")
    curves = [analysis.score_vs_distance(s, length=length, dim=dim) for s in specs]
    panels: dict[str, list[int]] = {}  # kind -> the curves drawn in its panel
    for i, c in enumerate(curves):
        panels.setdefault(c.kind, []).append(i)
    kinds = [k for k in KIND_ORDER if k in panels] + sorted(set(panels) - set(KIND_ORDER))
    fig = _figure(4.6 * len(kinds), 3.8)
    axes = np.atleast_1d(fig.subplots(1, len(kinds), squeeze=False)).ravel()
    for ax, kind in zip(axes, kinds):
        draw_curves(ax, [curves[i] for i in panels[kind]], [_style(i) for i in panels[kind]])
    fig.suptitle("Positional signal vs relative distance")
    return fig


def rope_decay(*, dim: int = 128, base: float = 10000.0, max_distance: int = 256) -> Figure:
    """RoFormer's long-term decay bound (Su et al. 2021, Fig. 2): ``(1/(d/2)) Σ_j |S_j|`` vs distance."""
    bound = analysis.rope_decay_bound(dim=dim, base=base, max_distance=max_distance)
    fig = _figure(6.0, 3.8)
    ax = fig.add_subplot()
    ax.plot(np.arange(bound.size), bound, linewidth=1.6, **_style(0))
    ax.set(title=f"RoPE long-term decay (RoFormer Fig. 2): d={dim}, base={base:g}",
           xlabel="relative distance r", ylabel="relative upper bound (1/(d/2)) Σ_j |S_j|")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return fig


def fingerprints(spec: Any, *, length: int = 128, dim: int = 64) -> Figure:
    """Distance from each position's vector to its nearest other position: all > 0 means all distinct."""
    tab = analysis.table(spec, length=length, dim=dim)
    nn = analysis.nearest_neighbour_distances(tab)
    d, p, q = analysis.min_fingerprint_distance(tab)
    fig = _figure(6.0, 3.8)
    ax = fig.add_subplot()
    ax.plot(np.arange(nn.size), nn, linewidth=1.6, **_style(0))
    ax.axhline(d, color=MARK, linestyle=":", linewidth=1.2, label=f"minimum {d:.3g} (positions {p} and {q})")
    ax.set_ylim(0, 1.15 * float(nn.max()))
    verdict = "all positions distinct" if d > 1e-9 else "some positions coincide"
    ax.set(title=_title(analysis.shown_label(analysis.build(spec, dim=dim, length=length)), f"fingerprints: {verdict}"),
           xlabel="position", ylabel="distance to the nearest other position")
    ax.legend(fontsize="small", frameon=False)
    ax.grid(alpha=0.3)
    return fig


def spectrum(spec: Any, *, dim: int = 128, context: int | None = None) -> Figure:
    """Wavelength ``2π/θ_i`` per frequency pair before and after the spec's scaling (log scale).

    The trained context (``original_max_positions``, or ``context``) and the extended one are
    marked: pairs whose wavelength exceeds the context never complete a turn in training.
    """
    fig = _figure(6.0, 4.0)
    draw_spectrum(fig.add_subplot(), spec, dim=dim, context=context)
    return fig


def bias_maps(spec: Any, *, length: int = 64, num_heads: int = analysis.DEFAULT_HEADS) -> Figure:
    """The bias each head adds to the scores, queries × keys (ALiBi's wedges, T5's bucket bands)."""
    h = analysis.build(spec, num_heads=num_heads, length=length)
    heads = int(getattr(h, "num_heads", None) or h.spec.get("num_heads") or 1)
    cols = min(4, heads)
    fig = _figure(2.6 * cols + 1.2, 2.5 * -(-heads // cols) + 0.6)
    draw_bias_maps(fig, spec, length=length, num_heads=num_heads)
    return fig


def grid_maps(specs: Sequence[Any], *, grid: Sequence[int] | None = None, patch: Sequence[int] | None = None,
              dim: int = 64) -> Figure:
    """One panel per scheme: each patch's positional signal with one patch of an ``H × W`` grid
    (``analysis.grid_map``), as ViT papers draw their position embeddings' similarities."""
    if isinstance(specs, (str, dict)) or not isinstance(specs, Sequence) or not specs:
        raise ValueError("grid_maps takes a non-empty list of specs, e.g. ['sinusoidal:axes=2', 'rope_mixed']")
    maps = [analysis.grid_map(s, grid=grid, patch=patch, dim=dim) for s in specs]
    cols = min(4, len(maps))
    rows = -(-len(maps) // cols)
    fig = _figure(3.4 * cols + 0.6, 3.2 * rows + 0.4)
    panels = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, gm in zip(panels, maps):
        signed = bool((gm.values < 0).any())
        top = float(np.abs(gm.values).max()) or 1.0
        image = ax.imshow(gm.values, cmap="RdBu_r" if signed else "viridis", vmin=-top if signed else None,
                          vmax=top if signed else None, interpolation="nearest")
        ax.plot([gm.patch[1]], [gm.patch[0]], marker="s", markersize=6, markerfacecolor="none", color=MARK)
        ax.set(title=_title(gm.label, f"with patch {gm.patch}"), xlabel="column", ylabel="row")
        fig.colorbar(image, ax=ax, shrink=0.8, label=gm.quantity if len(maps) == 1 else None)
    for ax in panels[len(maps):]:
        ax.set_axis_off()
    if len(maps) > 1:
        fig.suptitle("; ".join(sorted({f"{gm.kind}: {gm.quantity}" for gm in maps})), fontsize="small")
    return fig


def check_showable(kind: str, name: str) -> None:
    """Raises ``NotApplicable`` for a kind ``show`` has no figure for in ``SHOW`` (``none``, ``content``)."""
    if SHOW.get(kind) is None:
        raise analysis.NotApplicable(f"{name!r} ({kind}) has no positional signal to draw; "
                                     f"figures exist for {', '.join(SHOWABLE)} schemes")


def show(spec: Any, *, length: int = 128, dim: int = 64, grid: Sequence[int] | None = None,
         patch: Sequence[int] | None = None) -> Figure:
    """The figure ``posenc show`` draws: by kind, the heatmap (additive), the ``q·k`` curve and the
    spectrum (rotary), the bias maps (bias, relative); for a grid encoding (several axes), or when
    ``grid`` is given, the 2D map of each patch's signal with ``patch`` (``grid_maps``)."""
    m = analysis.build(spec, dim=dim, length=length)
    if getattr(m, "axes", 1) > 1 or grid is not None:
        check_showable(m.kind, m.name)
        return grid_maps([spec], grid=grid, patch=patch, dim=dim)
    check_showable(m.kind, m.name)
    return SHOW[m.kind](m, length=length, dim=dim)


def _show_rotary(m, *, length: int, dim: int) -> Figure:
    fig = _figure(11.0, 4.0)
    left, right = fig.subplots(1, 2)
    draw_curves(left, [analysis.score_vs_distance(m, length=length, dim=dim)], [_style(0)])
    left.set_title(_title(analysis.shown_label(m), "q·k vs relative distance"))
    draw_spectrum(right, m, dim=dim, context=analysis.spectrum(m).context or length)
    return fig


def _show_term(m, *, length: int, dim: int) -> Figure:
    return bias_maps(m, length=min(length, 64))


SHOW = {"additive": heatmap, "rotary": _show_rotary, "bias": _show_term, "relative": _show_term}
"""The figure ``show`` draws for each kind: the heatmap, the ``q·k`` curve and the spectrum, the bias maps."""
SHOWABLE = tuple(SHOW)
"""The kinds ``show`` draws (those of ``SHOW``)."""


__all__ = ["heatmap", "similarity", "score_vs_distance", "rope_decay", "fingerprints", "spectrum", "bias_maps",
           "grid_maps", "show", "save", "check_showable", "OKABE_ITO"]
