"""The pages' shared parts (``posenc report``'s page and ``posenc extend``'s): ``Page``, one
self-contained HTML document, figures embedded as base64 PNG; ``table``, ``status`` (a verdict's
badge), ``e`` (escaping), and the exact-match tables of the report's task parts.

A Content-Security-Policy forbids the page every fetch (images must be ``data:`` URIs), and a
small script records on ``<html>`` what a headless browser test reads back with ``--dump-dom``:
script errors, ``console.error`` calls, blocked fetches and images that did not decode.
"""

from __future__ import annotations

import base64
import re
import html
import io
from collections.abc import Callable
from typing import Any

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1180px; margin: 24px auto; padding: 0 16px; color: #222 }
h1 { font-size: 24px } h3 { font-size: 15px; margin-top: 22px }
h2 { font-size: 19px; border-bottom: 1px solid #ddd; padding-bottom: 3px; margin-top: 34px }
table { border-collapse: collapse; margin: 8px 0; font-size: 12.5px }
td, th { border: 1px solid #ddd; padding: 3px 7px; text-align: right } th { background: #f4f4f4 }
td:first-child, th:first-child, table.text td, table.text th { text-align: left }
figure { margin: 10px 0 } figcaption { font-size: 12.5px; color: #555 }
img { max-width: 100%; height: auto; border: 1px solid #eee }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; font-size: 12px }
.agrees { color: #17692b; font-weight: 600 } .disagrees { color: #b3261e; font-weight: 600 }
.unclear { color: #8a6d00; font-weight: 600 } .muted { color: #777 } .figure-error { color: #b3261e }
.note { background: #fff8e1; border-left: 4px solid #e0b000; padding: 6px 10px }
.side { display: inline-block; vertical-align: top; margin-right: 18px }
table.glance td.source, table.glance td.claim, table.glance td.verdict, table.glance th { text-align: left }
table.glance td.effect, table.glance td.mde, table.glance td.verdict { white-space: nowrap }
nav#toc { background: #f7f7f7; padding: 6px 14px; display: inline-block } nav#toc ol { margin: 4px 0 }
"""

# Records on <html> what a headless browser test reads back with --dump-dom: script errors,
# console.error calls, blocked fetches (the CSP below) and images that did not decode.
CHECK_JS = """
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(String(e.message || ('failed to load ' + ((e.target && e.target.alt) || e.type))));
}, true);
(function () {
  var original = console.error;
  console.error = function () {
    window.__errors.push(Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})();
document.addEventListener('securitypolicyviolation', function (e) { window.__errors.push('blocked ' + e.blockedURI); });
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                .map(function (i) { return i.alt; });
  var root = document.documentElement;
  root.setAttribute('data-images', String(imgs.length));
  root.setAttribute('data-broken-images', bad.join('|'));
  root.setAttribute('data-errors', window.__errors.join('|'));
  root.setAttribute('data-loaded', '1');
});
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

e = html.escape


class Page:
    """HTML pieces and the figures (PNG bytes by file name) that go with them. ``draw=False`` draws no
    figure (a page rendered for its verdicts alone: a kept set's, ``posenc.extrapolate.kept.verdicts``)."""

    def __init__(self, *, draw: bool = True) -> None:
        self.draw = draw
        self.parts: list[str] = []
        self.figures: dict[str, bytes] = {}
        self.errors: list[str] = []

    def add(self, text: str) -> None:
        self.parts.append(text)

    def figure(self, name: str, make: Callable[[], Any], caption: str) -> None:
        """Renders ``make()`` (a matplotlib Figure) as an embedded PNG; an error is shown, not raised."""
        if not self.draw:
            return
        try:
            fig = make()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)
            data = buf.getvalue()
        except Exception as exc:  # a figure of the analysis helper must not sink the whole report
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.errors.append(f"{name}: {msg}")
            self.add(f'<p class="figure-error">figure {e(name)} could not be drawn: {e(msg)}</p>')
            return
        self.figures[f"{name}.png"] = data
        src = "data:image/png;base64," + base64.b64encode(data).decode()
        self.add(f'<figure><img src="{src}" alt="{e(name)}"><figcaption>{caption}</figcaption></figure>')

    def html(self, title: str) -> str:
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
                f"<title>{e(title)}</title><style>{CSS}</style><script>{CHECK_JS}</script></head><body>\n"
                + "\n".join(self.parts) + "\n</body></html>\n")


def table(head: list[str], rows: list[list[str]], *, text: bool = False) -> str:
    """An HTML table of already-escaped cells; ``text`` left-aligns every column."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table{' class=text' if text else ''}><tr>{th}</tr>{body}</table>"


def status(verdict: str) -> str:
    """A verdict, coloured: agrees (green), disagrees (red), anything else (amber)."""
    cls = {"agrees": "agrees", "disagrees": "disagrees"}.get(verdict, "unclear")
    return f'<span class="{cls}">{e(verdict)}</span>'



def missing(reason: str | None) -> str:
    """The cell of a result that is not there: a scheme that cannot run there, or not measured."""
    return "—" if reason is None else f'<span class=muted title="{e(reason)}">cannot run</span>'


def exact_match_tables(page: Page, results: Any, labels: list[str], tasks: list[str]) -> None:
    """One table per task of a ``stats.TaskTable``: each label's exact match (token accuracy, in grey)
    by size, in bold with † beyond the trained positions."""
    for task in tasks:
        rows = []
        for label in labels:
            cells = [e(label)]
            for s in results.sizes:
                est = results.estimate(label, task, s)
                if est is not None:
                    text = f"{est.mean:.2f} <span class=muted>({results.token_acc(label, task, s):.2f})</span>"
                    cells.append(f"<b>{text}</b>†" if results.beyond(task, s) else text)
                else:
                    cells.append(missing(results.cannot.get(label, {}).get(task, {}).get(s)))
            rows.append(cells)
        page.add(f'<div class="side"><h3>{e(task)}</h3>'
                 + table(["scheme"] + [f"n={s}" for s in results.sizes], rows) + "</div>")


def pooled_error_cell(table: Any, label: str, cells: list[tuple[str, int]]) -> str:
    """``stats.pooled_error`` as a cell: a percentage, or ``missing``."""
    from posenc.stats.estimates import pooled_error

    err = pooled_error(table, label, cells)
    return missing(None) if err is None else f"{100 * err:.1f}%"


_H2 = re.compile(r"<h2(?P<attrs>[^>]*)>(?P<text>.*?)</h2>", re.S)
_ID = re.compile(r"""\bid=["']?([\w-]+)""")


def number_sections(parts: list[str]) -> tuple[list[str], str]:
    """Numbers every ``<h2>`` of ``parts`` in order (1, 2, …: the sections do not number themselves),
    gives each an id (its own if it has one, else ``section-N``), and returns the
    parts and the table of contents (``<nav id="toc">``) that links to them."""
    entries: list[tuple[str, str]] = []

    def one(m: re.Match) -> str:
        attrs, text = m.group("attrs"), m.group("text")
        found = _ID.search(attrs)
        anchor = found.group(1) if found else f"section-{len(entries) + 1}"
        if not found:
            attrs += f' id="{anchor}"'
        entries.append((anchor, text))
        return f"<h2{attrs}>{len(entries)}. {text}</h2>"

    numbered = [_H2.sub(one, part) for part in parts]
    items = "".join(f'<li><a href="#{a}">{re.sub(r"<[^>]+>", "", t)}</a></li>' for a, t in entries)
    return numbered, f'<nav id="toc"><b>Contents</b><ol>{items}</ol></nav>'
