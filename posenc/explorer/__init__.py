"""``posenc explore``: one self-contained, offline HTML page where the encodings move with sliders.

The page (``index.html``, no fetches, a Content-Security-Policy that forbids them, well under
1 MB) holds its own float64 JavaScript port of the deterministic schemes' references
(``posenc.reference``, the RoPE scalings of ``posenc.scaling``), a strict port of the SPEC
parser (``posenc.spec``) and a table ``id="key-numbers"`` that prints, row for row, what
``posenc show SPEC --length L --dim D --heads H`` prints (``posenc.analysis.key_numbers``; for a
grid scheme, ``axes >= 2``, what ``posenc show SPEC --grid HxW --patch R,C`` prints, with its map).

The script is ``js/*.js``, one job per file, joined in ``JS_FILES`` order into one function scope:

    python.js        values as Python sees them (int vs float, dict order); repr and .Nf/.Ne/.Ng, exact
    crmath.js        correctly rounded pow and log (glibc's are; V8's Math.pow is not)
    spec.js          the SPEC parser (posenc/spec.py), fill_sizes, normalize_spec
    checks.js        argument checks with posenc/_validate.py's messages
    torch_random.js  torch's CPU generator after manual_seed: rand, randn (learned tables)
    scaling.js       the RoPE scalings (posenc/scaling.py)
    schemes.js       SCHEMES: one function per scheme, spec -> model (a new scheme goes here)
    numbers.js       the key numbers (posenc.analysis.key_numbers)
    draw.js          palettes, heatmaps, line charts, colour bars
    figures.js       one function per figure, drawing A and, in overlay mode (id="spec-b"), B
    order.js         "dog bites man" with the reader's sentences
    cope.js          CoPE's contextual positions of the reader's sentence (CoPE.sentence_positions)
    segments.js      positions from structure of the reader's text, on its UTF-8 bytes (posenc.segment_positions)
    ui.js            controls, URL fragment state, error messages

What the page may not drift from is written into it from Python at build time (``schema()``):
the schemes' parameters and defaults, the scaling types' parameters, the size bounds of the
command line. The formulas are ported by hand, once, in ``js/``; the browser tests
(``tests/test_explorer_browser.py``) hold them to ``posenc show`` for randomly drawn parameters.

Learned tables (KERPLE's rates, T5's bucket weights) are drawn as ``posenc show`` draws them:
``torch.manual_seed(0)`` then the module's initialiser; the page reproduces torch's CPU
Mersenne Twister and its uniform and normal transforms (see ``js/torch_random.js``).
"""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

PAGE_SCHEMES = ("nope", "sinusoidal", "rope", "dinov3", "alibi", "kerple", "t5", "cope", "dual_chunk")
"""The schemes the page draws: every deterministic one (learned ones drawn from seed 0), CoPE,
whose contextual positions of a typed sentence (``CoPE.sentence_positions``) need no weights,
Dual Chunk Attention, a relative scheme whose term ``posenc show`` reads with q = k = 1 (its map
shows the remapped positions: RoPE inside a chunk, the successive and inter-chunk positions past it),
and DINOv3's rotary on the grid map, at its patch coordinates in [−1, 1] (augmentations off, as
``posenc show`` has them)."""

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
MAX_BYTES = 1_000_000

SEGMENT_TEXT = "Two paragraphs. Each has two sentences.\n\nThis is the second. It ends here."
SEGMENT_CODE = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\nprint(area(2))\n"
SEGMENT_PRESETS = {
    "paragraphs": ("paragraphs (\\n\\n) and sentences (. or \\n)", ["paragraph", "sentence"], [["\n\n"], [".", "\n"]],
                   SEGMENT_TEXT),
    "sentences": ("sentences (. or \\n): BiPE's one level", ["sentence"], None, None),  # from posenc.encodings.bipe
    "code": ("code: blocks (a blank line, \\n\\n) and lines (\\n)", ["block", "line"], [["\n\n"], ["\n"]], SEGMENT_CODE),
}
"""The separator choices of the panel "positions from structure" (``id="segments-preset"``): a label,
the name of each level (outermost first), the separators as text whose UTF-8 bytes
``posenc.segment_positions`` reads, and an example text (``docs/guide/structure.md``: paragraphs and
sentences; code's blank-line blocks and lines; BiPE's full stop and newline and its sentence,
``posenc.encodings.bipe.DEFAULT_SEPARATORS`` and ``SENTENCE``). The page opens on the first."""
SEGMENT_MAX_BYTES = 2000
"""The most UTF-8 bytes of a typed text the panel lays out (one column each)."""


def _typed(value: Any) -> Any:
    """A Python value as JSON that keeps what JavaScript loses: int vs float, dict order."""
    from posenc.registry import REQUIRED

    if value is REQUIRED:
        return {"$required": True}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return {"$int": str(value)}
    if isinstance(value, float):
        return {"$float": value}
    if isinstance(value, (list, tuple)):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {"$dict": [[k, _typed(v)] for k, v in value.items()]}
    raise TypeError(f"cannot write {value!r} into the explorer's schema")


def schema() -> dict[str, Any]:
    """What the page reads from Python: schemes, parameters and defaults, scalings, bounds."""
    import inspect

    from posenc import demo, registry, scaling
    from posenc.analysis import FINGERPRINT_RTOL, GRID_QUANTITY
    from posenc.encodings import cope
    from posenc.limits import MAX_CELLS, MAX_DIM, MAX_FIT_WORK, MAX_GRID, MAX_HEADS, MAX_LENGTH, MAX_PAIR_WORK
    from posenc.spec import SIZE_PARAMS

    schemes = {}
    for name in PAGE_SCHEMES:
        s = registry.get(name)
        schemes[name] = {"kind": s.kind, "params": [[k, _typed(v)] for k, v in s.params.items()],
                         "summary": s.summary.replace("``", "")}
    scalings = {}
    for name, fn in scaling.SCALINGS.items():
        params = inspect.signature(fn).parameters
        scalings[name] = [[k, _typed(registry.REQUIRED if p.default is inspect.Parameter.empty else p.default)]
                          for k, p in params.items() if k not in ("inv_freq", "head_dim", "base")]
    size_bounds: dict[str, float] = {}  # the command line's bounds (posenc.limits) on the page's schemes' sizes
    size_what: dict[str, str] = {}  # what each counts, as Limit.check names it
    for name in PAGE_SCHEMES:
        for key, lim in registry.get(name).limits.items():
            if lim.max < size_bounds.get(key, float("inf")):
                size_bounds[key], size_what[key] = lim.max, lim.what
    return {
        "schemes": schemes,
        "all_schemes": registry.schemes(),
        "scalings": scalings,
        "size_params": list(SIZE_PARAMS),
        "size_bounds": size_bounds,
        "size_what": size_what,
        "work_bounds": {"cells": MAX_CELLS, "pairs": MAX_PAIR_WORK, "fit": MAX_FIT_WORK},
        "bounds": {"length": [2, MAX_LENGTH], "dim": [2, MAX_DIM], "heads": [1, MAX_HEADS]},
        "defaults": {"spec": "sinusoidal", "length": 128, "dim": 64, "heads": 8},
        "fingerprint_rtol": FINGERPRINT_RTOL,
        "grid": {"default": [14, 14], "max": MAX_GRID, "quantity": GRID_QUANTITY},  # `posenc show --grid/--patch`
        "demo": {"d_model": demo.D_MODEL, "num_heads": demo.NUM_HEADS},  # the sizes of `posenc demo order`
        "cope": {"sentence": cope.SENTENCE, "max_text": cope.MAX_TEXT, "conventions": list(cope.CONVENTIONS),
                 "npos_max": registry.get("cope").params["npos_max"]},  # `posenc show cope`'s sentence
        "segments": {"text": SEGMENT_TEXT, "max_bytes": SEGMENT_MAX_BYTES, "presets": segment_presets()},
    }


def segment_presets() -> dict[str, dict[str, Any]]:
    """``SEGMENT_PRESETS`` as the page reads them: ``{name: {label, levels, separators, example}}``."""
    from posenc.encodings import bipe

    out = {}
    for name, (label, levels, seps, example) in SEGMENT_PRESETS.items():
        seps = seps or [[sep.decode() for sep in level] for level in bipe.DEFAULT_SEPARATORS]
        assert len(levels) == len(seps), name
        out[name] = {"label": label, "levels": levels, "separators": seps, "example": example or bipe.SENTENCE}
    return out


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


JS_FILES = ("python.js", "crmath.js", "spec.js", "checks.js", "torch_random.js", "scaling.js", "schemes.js",
            "numbers.js", "draw.js", "figures.js", "order.js", "cope.js", "segments.js", "ui.js")


def script() -> str:
    """The page's JavaScript: ``js/*.js`` in ``JS_FILES`` order, in one function scope.

    ``SCHEMA`` is read from the page, or from ``globalThis.POSENC_SCHEMA`` where there is no
    page (Node); ``globalThis.posencExplorer`` exposes the parser, the key numbers and the
    formatting to the browser tests and to a console.
    """
    parts = [f"// ---- {name}\n{_asset('js/' + name)}" for name in JS_FILES]
    return ("'use strict';\n(function () {\n"
            "var SCHEMA = globalThis.POSENC_SCHEMA || JSON.parse(document.getElementById('schema').textContent);\n"
            + "\n".join(parts) + "})();\n")


def page() -> str:
    """The whole page as one string."""
    data = json.dumps(schema(), separators=(",", ":")).replace("</", "<\\/")
    body = _asset("body.html")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            "<title>posenc explorer</title>"
            f"<style>{_asset('explorer.css')}</style></head><body>\n{body}\n"
            f'<script type="application/json" id="schema">{data}</script>\n'
            f"<script>{script()}</script>\n</body></html>\n")


def write(out: str | os.PathLike = "explorer") -> Path:
    """Writes ``out/index.html`` (creating ``out``) and returns its path."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    text = page().encode("utf-8")
    if len(text) > MAX_BYTES:  # pragma: no cover - a test keeps the page small
        raise AssertionError(f"the explorer page is {len(text)} bytes, over {MAX_BYTES}")
    path = out / "index.html"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
    return path


__all__ = ["PAGE_SCHEMES", "CSP", "JS_FILES", "SEGMENT_PRESETS", "SEGMENT_TEXT", "SEGMENT_MAX_BYTES", "schema",
           "SEGMENT_CODE", "segment_presets", "script", "page", "write"]
