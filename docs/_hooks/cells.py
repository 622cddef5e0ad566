"""The Python cells of "Why positions": editable code the reader runs in the browser, on Pyodide.

A marker ``<!-- generated: cell NAME -->`` in a page becomes the cell ``docs/cells/NAME.py``: a
``textarea`` holding its source (``id="cell-NAME-code"``), a Run button and a Reset button, its
printed output (``id="cell-NAME-output"``) and its figures (``id="cell-NAME-figure"``). A page with
cells also gets ``assets/javascripts/cells.js`` and a JSON block ``id="pycell-config"``: where
Pyodide is (``assets/pyodide/``, copied into the site from the pinned, checksum-checked install,
``pyodide_core.py``), and the source of the cells' helper ``docs/cells/cellplot.py``.

Nothing is fetched when the page opens: Pyodide (13 MB unpacked) loads on the first Run, from the
site itself. A browser that refuses to load WebAssembly from ``file://`` (Chromium does) gets one
line in the cell saying how to serve the site locally (``SERVE``).
"""

from __future__ import annotations

import html
import json
import posixpath
import re
from pathlib import Path

import pyodide_core

CELLS_DIR = Path(__file__).resolve().parents[1] / "cells"
MARKER = re.compile(r"<!-- generated: cell (\w+) -->")
ASSETS = "assets/pyodide"
SCRIPT = "assets/javascripts/cells.js"
SERVE = "python -m http.server -b 127.0.0.1 -d site"
"""The command that serves the built site (``make docs`` builds it into site/) on this machine only."""


def cell_names() -> list[str]:
    """The cells there are: ``docs/cells/*.py`` but the helper."""
    return sorted(p.stem for p in CELLS_DIR.glob("*.py") if p.stem != "cellplot")


def cell_html(name: str) -> str:
    path = CELLS_DIR / f"{name}.py"
    if not path.is_file():
        raise KeyError(f"no cell {name!r}; the cells are {', '.join(cell_names())} (docs/cells/NAME.py)")
    source = path.read_text(encoding="utf-8")
    rows = source.count("\n") + 1  # and a line for a horizontal scrollbar
    return (f'<div class="pycell" id="cell-{name}" data-cell="{name}">'
            f'<textarea class="pycell-code" id="cell-{name}-code" rows="{rows}" spellcheck="false" wrap="off" '
            f'autocomplete="off" aria-label="Python cell {name}">{html.escape(source)}</textarea>'
            f'<template class="pycell-original">{html.escape(source)}</template>'
            f'<div class="pycell-bar"><button type="button" class="pycell-run md-button md-button--primary">Run</button>'
            f'<button type="button" class="pycell-reset md-button">Reset</button>'
            f'<span class="pycell-status" id="cell-{name}-status">Python runs in your browser (Pyodide '
            f'{pyodide_core.VERSION}, loaded from this site on the first Run)</span></div>'
            f'<pre class="pycell-output" id="cell-{name}-output" aria-live="polite"></pre>'
            f'<div class="pycell-figure" id="cell-{name}-figure"></div></div>')


def page_html(html_text: str, page_url: str) -> str:
    """The page's cell markers expanded, and the script and its settings added once when it has cells."""
    if not MARKER.search(html_text):
        return html_text
    html_text = MARKER.sub(lambda m: cell_html(m.group(1)), html_text)
    up = posixpath.relpath(".", posixpath.dirname(page_url) or ".")
    root = "" if up == "." else up + "/"
    config = {"pyodide": f"{root}{ASSETS}/", "version": pyodide_core.VERSION, "serve": SERVE, "page": page_url,
              "helper": (CELLS_DIR / "cellplot.py").read_text(encoding="utf-8")}
    blob = json.dumps(config).replace("</", "<\\/")  # no "</script>" inside the block
    return (html_text + f'<script type="application/json" id="pycell-config">{blob}</script>'
            f'<script src="{root}{SCRIPT}"></script>')


def site_files() -> dict[str, Path]:
    """``{path in the site: checked file}``: Pyodide's files, after their checksums are checked."""
    where = pyodide_core.check()
    return {f"{ASSETS}/{name}": where / name for name in pyodide_core.FILES}
