"""The benchmark's complete page rendered from the kept records, for the docs site (``generate.py`` calls
it when the site is built; run alone, it writes the page, self-contained, to a file):

    python docs/_hooks/kept_page.py site-page.html [--no-figures]

The page is ``posenc report``'s (``posenc.extrapolate.report.render``) for the records of the kept decide
set (posenc/extrapolate/records/decide.jsonl, ``posenc.extrapolate.kept``), exactly as its run wrote
them, with the claims it does not decide filled from the other kept sets (marked *recorded*) and the
pretrained section from the newest kept ``posenc extend`` run when one is kept
(``posenc.extrapolate.kept_extend``). A banner above its title says that every number on it is
*recorded*: the commit, date, machine and command of each set, and *stale* where a record's set-up
hash differs from today's code; the hardware table names the machine the decide set ran on.

``markdown()`` puts that page into the docs site (``<!-- generated: kept -->`` on docs/recorded.md, in the
nav as "Benchmark page (recorded)"): its HTML as one raw block, styled by the site's
assets/stylesheets/extra.css (``.kept-report``).
"""

from __future__ import annotations

import argparse
import html
import re
import time
from pathlib import Path

DECIDE = "decide"  # the kept set the page is rendered from


def _sets(records_dir: Path | None = None):
    from posenc.extrapolate import kept, kept_extend

    folder = kept.RECORDS_DIR if records_dir is None else Path(records_dir)
    sets, refused = kept.load_sets(folder)
    extend_sets, extend_refused = kept_extend.load_sets(folder)
    return sets, refused, extend_sets, extend_refused


def _banner_items(sets, extend_sets) -> list[tuple[str, str]]:
    """``(name, text)`` per set shown: its commit, date, machine and command (and stale)."""
    items = []
    for k in sets + extend_sets:
        r = k.recorded()
        stale = (f"; stale: {len(k.stale)} of its {len(k.records)} records have a set-up hash today's code would not "
                 "write" if r.stale else "")
        items.append((k.name, f"commit {r.commit[:12]}, {r.date}, {r.machine}, {len(k.records)} records; "
                              f"measured again by {r.command}{stale}"))
    return items


def render(records_dir: Path | None = None, *, draw: bool = True):
    """The complete page (``posenc.stats.page_parts.Page``) from the kept records of ``records_dir``."""
    from posenc.extrapolate.report import render as render_page

    sets, refused, extend_sets, extend_refused = _sets(records_dir)
    decide = next((k for k in sets if k.name == DECIDE), None)
    if decide is None:
        raise ValueError(f"no kept set {DECIDE!r} to render the page from (refused: {'; '.join(refused) or 'none'})")
    others = [k for k in sets if k is not decide]
    e = html.escape
    items = "".join(f"<li><b>{e(name)}</b>: {e(text)}</li>" for name, text in _banner_items([decide], extend_sets))
    stale = decide.stale or any(k.stale for k in extend_sets)
    banner = (f'<div id="recorded-banner" class="note"><p><span class="recorded">recorded</span>'
              + (' <span class="stale">stale</span>' if stale else "")
              + ": every number on this page is a kept record (posenc/extrapolate/records), measured by the run "
              "named here, not when the page was rendered. The claims the decide run does not decide are filled "
              "from the other kept sets, each marked recorded.</p>"
              f"<ul>{items}</ul></div>")
    now = time.perf_counter()
    meta = {"start": now, "render_start": now, "bench_seconds": 0.0, "new": 0, "reused": len(decide.records),
            "generated": f"from the kept records {decide.name} (run {decide.provenance['date']})",
            "command": decide.provenance["command"], "kept": [], "kept_sets": (others, refused),
            "kept_extend": (extend_sets, extend_refused), "banner": banner, "machine": decide.provenance["machine"]}
    return render_page(decide.profile(), decide.records, meta, draw=draw)


def markdown(records_dir: Path | None = None, *, draw: bool = True) -> str:
    """The docs page's body: the complete page's HTML (its title a second-level heading, its link to the
    explorer the explorer's guide page) in one raw block."""
    body = "\n".join(render(records_dir, draw=draw).parts)
    body = re.sub(r"<h1>(.*?)</h1>", r'<h2 id="report-title">\1</h2>', body, count=1, flags=re.S)
    body = body.replace('href="explorer/index.html"', 'href="guide/explorer.html"').replace(
        "<code>posenc explore</code>, written next to this page)", "<code>posenc explore</code>: its guide)")
    body = re.sub(r"(<\w+\s(?:[^>]*\s)?)id=([\w-]+)", r'\1id="\2"', body)  # the site's checks read quoted ids
    return f'<div class="kept-report" markdown="0">\n{body}\n</div>\n'


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the HTML file to write")
    p.add_argument("--no-figures", action="store_true", help="the verdicts and tables alone (faster)")
    a = p.parse_args(argv)
    page = render(draw=not a.no_figures)
    a.out.write_text(page.html(f"posenc report (recorded: {DECIDE})"), encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
