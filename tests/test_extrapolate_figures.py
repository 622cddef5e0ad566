"""The benchmark's figures can be read: built from small synthetic tables (no training) with many
rows (the eight default schemes, the content rows, two hybrids), every figure has

- no two lines of different rows with the same (colour, marker), in the axes and in the legend;
- its legend outside every axes' data area (window extents on the Agg canvas);
- intervals as translucent bands (``fill_between``), never stacked error bars;

and a scheme keeps its look from figure to figure (``posenc.extrapolate.figures.styles``)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from matplotlib.container import ErrorbarContainer

from posenc.extrapolate import figures as F
from posenc.extrapolate.accuracy import AccuracyTable
from posenc.extrapolate.parts.hybrid import HYBRID_NOPE, HYBRID_ROPE
from posenc.extrapolate.parts.image.claims import image_figure
from posenc.extrapolate.parts.lm import CONTENT_PLAYERS, PATTERN
from posenc.extrapolate.parts.time import time_figure
from posenc.extrapolate.profiles import DEFAULT_SCHEMES
from posenc.stats.estimates import Cell, LMTable, TaskTable

LABELS = [*DEFAULT_SCHEMES, *CONTENT_PLAYERS, PATTERN, HYBRID_NOPE, HYBRID_ROPE]  # 16 rows
L = 32
LENGTHS = [32, 64, 128, 256]
SEEDS = (0, 1, 2)


def _lm_table(labels=LABELS) -> LMTable:
    rng = np.random.default_rng(0)
    blocks, cannot = {}, {}
    for i, lab in enumerate(labels):
        ok = LENGTHS[:1] if lab == "learned" else LENGTHS
        blocks[lab] = {mode: {t: {s: 1.0 + 0.05 * i + 0.1 * np.log2(t / L) + 0.02 * rng.standard_normal(6)
                                  for s in SEEDS} for t in ok} for mode in F.MODES}
        if lab == "learned":
            cannot[lab] = {t: "positions past the table" for t in LENGTHS[1:]}
    return LMTable(blocks, cannot, LENGTHS, L)


def _task_table(labels=LABELS) -> TaskTable:
    tasks, sizes = ["copy", "reverse", "count3"], [4, 8, 16]
    runs = {lab: {t: {n: {s: Cell(20 - n + i % 4, 20) for s in SEEDS} for n in sizes} for t in tasks}
            for i, lab in enumerate(labels)}
    token = {lab: {t: {n: [0.5] * len(SEEDS) for n in sizes} for t in tasks} for lab in labels}
    return TaskTable(runs, token, {}, sizes, tasks, 8)


def _bits(rng, p: float, n: int = 40) -> str:
    return "".join("1" if x < p else "0" for x in rng.random(n))


def _records(column_rows, labels) -> list[dict]:
    rng = np.random.default_rng(1)
    return [{"label": lab, "seed": s, "eval": [{**row, "accuracy": float(b.count("1")) / len(b), "count": len(b),
                                                "bits": b} for row in column_rows for b in [_bits(rng, 0.7)]]}
            for lab in labels for s in SEEDS]


def _time():
    conditions = [(5.0, 4.0), (10.0, 4.0), (20.0, 4.0), (10.0, 8.0)]
    rows = [{"rate": r, "seconds": s, "positions": k} for r, s in conditions for k in ("index", "time")]
    labels = ["nope", "sinusoidal", "rope", "alibi", "learned", "fire", "kerple", "t5"]
    t = AccuracyTable(_records(rows, labels), lambda row: (row["rate"], row["seconds"], row["positions"]))
    return time_figure(t, conditions)


def _image():
    variants = ["none", "learned grid (resized)", "2D sinusoidal", "axial RoPE", "RoPE-Mixed", "rope", "alibi",
                "t5", "kerple", "fire"]
    rows = [{"condition": c, "positions": m, "size": n} for c in ("zoom", "canvas") for n in (8, 12, 16)
            if c == "zoom" or n != 8 for m in ("integer", "rescaled")]
    t = AccuracyTable(_records(rows, variants), lambda row: (row["condition"], row["positions"], row["size"]))
    return image_figure(t, 8)


def _losses():
    recs = [{"label": lab, "seed": s, "train_loss": list(3.0 - 0.01 * np.arange(40) + 0.01 * i + 0.005 * s)}
            for i, lab in enumerate(LABELS) for s in SEEDS]
    return F.losses(recs, steps=400, title="training loss")


def _scaling():
    lm = _lm_table(["rope"])
    kinds = ("linear", "ntk", "yarn", "dynamic")
    labels = {(k, "zero-shot"): f"rope + {k} (zero-shot)" for k in kinds}
    labels |= {(k, "fine-tune"): f"rope + {k} x4 (fine-tuned at 4L)" for k in ("none", *kinds)}
    sc = _lm_table(list(labels.values()))
    return F.scaling(lm, sc, labels, base="rope")


FIGURES = {
    "perplexity": lambda: F.perplexity(_lm_table()),
    "by_position": lambda: F.by_position(_lm_table()),
    "accuracy": lambda: F.accuracy(_task_table()),
    "losses": _losses,
    "scaling": _scaling,
    "time_figure": _time,
    "image_figure": _image,
}


def _lines(fig):
    """The data lines of every axes (matplotlib names unlabelled artists ``_child…``)."""
    return [line for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def _look(artist) -> tuple[str, str]:
    return to_hex(artist.get_color()), str(artist.get_marker())


def _legends(fig):
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


@pytest.mark.parametrize("name", FIGURES)
def test_no_two_rows_of_a_figure_share_colour_and_marker(name):
    fig = FIGURES[name]()
    lines = _lines(fig)
    assert len({line.get_label() for line in lines}) >= 8, name
    rows: dict[tuple[str, str], set[str]] = {}
    for line in lines:
        assert line.get_marker() not in (None, "None", "", " "), (name, line.get_label())  # a marker tells it apart
        rows.setdefault(_look(line), set()).add(line.get_label())
    shared = {look: labs for look, labs in rows.items() if len(labs) > 1}
    assert not shared, f"{name}: rows sharing (colour, marker): {shared}"
    for legend in _legends(fig):
        handles = [h for h in legend.legend_handles if h is not None]
        looks = [_look(h) for h in handles]
        assert len(set(looks)) == len(looks), f"{name}: legend entries sharing (colour, marker)"


@pytest.mark.parametrize("name", FIGURES)
def test_the_legend_sits_outside_the_data(name):
    fig = FIGURES[name]()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = _legends(fig)
    assert legends, name
    for legend in legends:
        lb = legend.get_window_extent(renderer)
        for ax in fig.axes:
            ab = ax.get_window_extent(renderer)  # the axes' data area
            w = min(lb.x1, ab.x1) - max(lb.x0, ab.x0)
            h = min(lb.y1, ab.y1) - max(lb.y0, ab.y0)
            assert w <= 1 or h <= 1, f"{name}: the legend covers {w:.0f}×{h:.0f} px of an axes"
        fb = fig.bbox
        assert lb.x0 >= -1 and lb.y0 >= -1 and lb.x1 <= fb.x1 + 1 and lb.y1 <= fb.y1 + 1, f"{name}: legend cut off"


@pytest.mark.parametrize("name", [n for n in FIGURES if n != "losses"])
def test_intervals_are_bands_not_error_bars(name):
    fig = FIGURES[name]()
    for ax in fig.axes:
        assert not any(isinstance(c, ErrorbarContainer) for c in ax.containers), name
    bands = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) >= len(_lines(fig)), name  # one band per line
    assert all(0 < b.get_alpha() < 0.5 for b in bands), name  # translucent


def test_the_seeds_of_a_scheme_are_one_line_with_their_range_as_a_band():
    fig = _losses()
    assert sorted(line.get_label() for line in _lines(fig)) == sorted(LABELS)
    assert len([c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]) == len(LABELS)


def test_a_scheme_keeps_its_look_across_figures():
    def looks(fig):
        return {line.get_label(): (*_look(line), line.get_linestyle()) for line in _lines(fig)}

    a = looks(F.perplexity(_lm_table()))
    b = looks(F.by_position(_lm_table()))
    c = looks(F.accuracy(_task_table()))
    for lab in LABELS:
        name = f"{lab} (cannot run past {L})" if lab == "learned" else lab
        assert a[name] == b[lab] == c[lab], lab
    # content rows dash-dotted, hybrids dashed in the scheme's colour, the baselines solid
    assert {c[lab][2] for lab in DEFAULT_SCHEMES} == {"-"}
    assert {c[lab][2] for lab in (*CONTENT_PLAYERS, PATTERN)} == {"-."}
    assert c[HYBRID_ROPE][2] == c[HYBRID_NOPE][2] == "--"
    assert c[HYBRID_ROPE][0] == c["rope"][0] and c[HYBRID_ROPE][1] != c["rope"][1]
    # the image part's variants take their scheme's colour
    img = looks(_image())
    assert img["axial RoPE, integer"][0] == c["rope"][0] and img["none, integer"][0] == c["nope"][0]


def test_styles_are_unique_for_many_rows_and_fixed_for_known_ones():
    many = [*LABELS, *(f"my scheme {i}" for i in range(40))]
    st = F.styles(many)
    assert len({(s.colour, s.marker) for s in st.values()}) == len(many)
    alone = F.styles(["cope", "rope"])
    assert alone["rope"] == st["rope"] and alone["cope"] == st["cope"]  # the same whatever else is drawn
    assert F.styles(["rope (base=500)", "rope"])["rope (base=500)"].colour == st["rope"].colour
