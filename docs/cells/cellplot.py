"""The helper of the site's Python cells ("Why positions"): numbers printed so a test can read them
back, figures drawn as SVG text with nothing but the standard library, and the runner the page
calls on Run.

It runs inside Pyodide, in the reader's browser (docs/assets/javascripts/cells.js writes it into
Pyodide's file system as ``cellplot.py``), and in CPython in the tests (tests/test_cells_browser.py),
which run each cell's source here too, to know its inputs.

- ``show(name, value)`` prints ``name = repr(value)``: a float's ``repr`` is its shortest exact
  form, so the numbers a cell prints are its float64 numbers, every digit.
- ``heatmap``, ``lines`` and ``bars`` draw one figure each and show it below the cell's output.
  A figure answers one question: no two lines share colour and dash (Okabe and Ito's colour-blind-safe
  palette, posenc.plot's), the legend sits beside the data, not on it.
- ``run(source, name)``: the cell's source, compiled as the file ``<cell NAME>`` and run in a fresh
  namespace; an error prints Python's traceback (without the runner's own frame) to stderr. The
  cell is the reader's own code, run in the reader's own browser: running it is the point.
"""

from __future__ import annotations

import html
import linecache
import math
import sys
import traceback

COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
DASHES = ("", "6 3", "2 2", "8 3 2 3")
MARKS = ("circle", "square", "triangle", "diamond")
FONT = 'font-family="sans-serif" font-size="12"'
_shown: list[str] = []


def show(name: str, value) -> None:
    """Prints ``name = value`` with every digit of every float (``repr``)."""
    print(f"{name} = {value!r}")


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{html.escape(title)}" {FONT}>'
           f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>'
           + "".join(body) + "</svg>")
    _shown.append(svg)
    return svg


def _text(x: float, y: float, s: str, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{html.escape(s)}</text>'


def _diverging(t: float) -> str:
    """Blue (-1) through white (0) to red (+1): ``t`` in [-1, 1]."""
    t = max(-1.0, min(1.0, t))
    far = (33, 102, 172) if t < 0 else (178, 24, 43)
    r, g, b = (round(255 + (f - 255) * abs(t)) for f in far)
    return f"#{r:02x}{g:02x}{b:02x}"


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    step = (hi - lo) / count if hi > lo else 1.0
    power = 10 ** math.floor(math.log10(step))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= step)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _label(v: float) -> str:
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.0e}"


def heatmap(rows, *, title: str, xlabel: str, ylabel: str, vmin: float = -1.0, vmax: float = 1.0) -> str:
    """``rows[y][x]`` as coloured cells, row 0 on top, with a colour bar from ``vmin`` to ``vmax``."""
    ny, nx = len(rows), len(rows[0])
    left, top, size = 56, 28, 360
    cw, ch = size / nx, size / ny
    body = []
    for y, row in enumerate(rows):
        for x, v in enumerate(row):
            t = 2 * (v - vmin) / (vmax - vmin) - 1
            body.append(f'<rect x="{left + x * cw:.2f}" y="{top + y * ch:.2f}" width="{cw + 0.3:.2f}" '
                        f'height="{ch + 0.3:.2f}" fill="{_diverging(t)}"/>')
    body.append(f'<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="none" stroke="#444"/>')
    for x in _ticks(0, nx - 1, 4):
        body.append(_text(left + (x + 0.5) * cw, top + size + 14, f"{x:g}"))
    for y in _ticks(0, ny - 1, 4):
        body.append(_text(left - 4, top + (y + 0.5) * ch + 4, f"{y:g}", "end"))
    body.append(_text(left + size / 2, top + size + 30, xlabel))
    body.append(_text(14, top + size / 2, ylabel, extra=f' transform="rotate(-90 14 {top + size / 2})"'))
    bar = left + size + 24
    for i in range(50):  # the colour bar, vmax on top
        body.append(f'<rect x="{bar}" y="{top + i * size / 50:.2f}" width="14" height="{size / 50 + 0.3:.2f}" '
                    f'fill="{_diverging(1 - 2 * (i + 0.5) / 50)}"/>')
    body.append(_text(bar + 18, top + 10, _label(vmax), "start"))
    body.append(_text(bar + 18, top + size, _label(vmin), "start"))
    return _svg(bar + 70, top + size + 40, body, title)


def _mark(kind: str, x: float, y: float, colour: str) -> str:
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
    if kind == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}"/>'
    if kind == "triangle":
        return f'<path d="M{x:.1f} {y - 4:.1f}L{x + 3.5:.1f} {y + 2.5:.1f}L{x - 3.5:.1f} {y + 2.5:.1f}Z" fill="{colour}"/>'
    return f'<path d="M{x:.1f} {y - 4:.1f}L{x + 4:.1f} {y:.1f}L{x:.1f} {y + 4:.1f}L{x - 4:.1f} {y:.1f}Z" fill="{colour}"/>'


def lines(series, *, title: str, xlabel: str, ylabel: str, logy: bool = False, guides=()) -> str:
    """``series``: ``[(label, xs, ys), ...]``, a ``None`` in ``ys`` leaves a gap; ``guides``:
    ``[(label, y), ...]`` drawn as thin grey horizontal lines. ``logy``: a log scale (y > 0)."""
    f = math.log10 if logy else float
    values = [f(y) for _, _, ys in series for y in ys if y is not None] + [f(y) for _, y in guides]
    xs_all = [x for _, xs, _ in series for x in xs]
    lo, hi = min(values), max(values)
    lo, hi = (lo - 0.5, hi + 0.5) if lo == hi else (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    x0, x1 = min(xs_all), max(xs_all)
    x1 = x1 if x1 > x0 else x0 + 1
    left, top, w, h = 64, 28, 380, 240
    px = lambda x: left + (x - x0) / (x1 - x0) * w  # noqa: E731
    py = lambda v: top + (hi - v) / (hi - lo) * h  # noqa: E731
    body = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>']
    for t in _ticks(lo, hi):
        body.append(f'<line x1="{left}" x2="{left + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eee"/>')
        body.append(_text(left - 4, py(t) + 4, _label(10 ** t) if logy else _label(t), "end"))
    for t in _ticks(x0, x1):
        body.append(_text(px(t), top + h + 14, _label(t)))
    body.append(_text(left + w / 2, top + h + 30, xlabel))
    body.append(_text(14, top + h / 2, ylabel, extra=f' transform="rotate(-90 14 {top + h / 2})"'))
    for label, y in guides:
        body.append(f'<line x1="{left}" x2="{left + w}" y1="{py(f(y)):.1f}" y2="{py(f(y)):.1f}" stroke="#888" '
                    f'stroke-dasharray="1 3"/>')
        body.append(_text(left + w - 4, py(f(y)) - 4, label, "end", ' fill="#555"'))
    legend = left + w + 14
    for i, (label, xs, ys) in enumerate(series):
        colour, dash, mark = COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)], MARKS[i % len(MARKS)]
        path, pen = [], "M"
        for x, y in zip(xs, ys):
            if y is None:
                pen = "M"
                continue
            path.append(f"{pen}{px(x):.1f} {py(f(y)):.1f}")
            pen = "L"
        style = f' stroke-dasharray="{dash}"' if dash else ""
        body.append(f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="2"{style}/>')
        step = max(1, len(xs) // 8)
        body += [_mark(mark, px(x), py(f(y)), colour) for x, y in list(zip(xs, ys))[::step] if y is not None]
        ly = top + 10 + 18 * i
        body.append(f'<line x1="{legend}" x2="{legend + 26}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"{style}/>')
        body.append(_mark(mark, legend + 13, ly, colour))
        body.append(_text(legend + 32, ly + 4, label, "start"))
    width = legend + 32 + 7 * max(len(label) for label, _, _ in series) + 8
    return _svg(int(width), top + h + 40, body, title)


def bars(categories, series, *, title: str, ylabel: str) -> str:
    """Grouped bars: ``series`` is ``[(label, [one value per category]), ...]`` (values >= 0)."""
    hi = max([v for _, vs in series for v in vs] + [1e-12]) * 1.1
    left, top, w, h = 64, 28, 380, 240
    group = w / len(categories)
    bar = group * 0.8 / len(series)
    body = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>']
    for t in _ticks(0, hi):
        y = top + h - t / hi * h
        body.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        body.append(_text(left - 4, y + 4, _label(t), "end"))
    for c, name in enumerate(categories):
        body.append(_text(left + (c + 0.5) * group, top + h + 16, name))
        for s, (_, values) in enumerate(series):
            v = values[c]
            x = left + c * group + group * 0.1 + s * bar
            body.append(f'<rect x="{x:.1f}" y="{top + h - v / hi * h:.1f}" width="{bar - 2:.1f}" '
                        f'height="{v / hi * h:.1f}" fill="{COLOURS[s % len(COLOURS)]}"/>')
            body.append(_text(x + bar / 2 - 1, top + h - v / hi * h - 4, f"{v:.3g}", extra=' font-size="11"'))
    body.append(_text(14, top + h / 2, ylabel, extra=f' transform="rotate(-90 14 {top + h / 2})"'))
    legend = left + w + 14
    for s, (label, _) in enumerate(series):
        ly = top + 10 + 18 * s
        body.append(f'<rect x="{legend}" y="{ly - 6}" width="12" height="12" fill="{COLOURS[s % len(COLOURS)]}"/>')
        body.append(_text(legend + 18, ly + 4, label, "start"))
    width = legend + 18 + 7 * max(len(label) for label, _ in series) + 8
    return _svg(int(width), top + h + 30, body, title)


def run(source: str, name: str) -> tuple[bool, list[str]]:
    """Runs ``source`` as the file ``<cell NAME>`` in a fresh namespace: ``(ok, the SVGs it showed)``.
    An error prints Python's traceback to stderr, the runner's own frame left out."""
    filename = f"<cell {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # lines in the traceback
    _shown.clear()
    ok = True
    try:
        exec(compile(source, filename, "exec"), {"__name__": "__main__"})  # the reader's code, in the reader's browser
    except BaseException as e:  # noqa: BLE001 - SystemExit too: the cell's own, shown as Python shows it
        ok = False
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    shown = list(_shown)
    _shown.clear()
    return ok, shown
