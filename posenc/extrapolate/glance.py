"""The verdicts at a glance: the summary's first table (``id="verdicts"``) and its forest plot
(``id="forest"``, an inline SVG).

The table has one ``<tr>`` per claim in its ``<tbody>``; the cells carry the classes ``source``,
``claim``, ``effect`` (the seed-level estimate with its 95% interval, in the claim's units),
``mde`` (the detectable effect at 80% power after the paper's correction) and ``verdict`` —
contracts a reader's script may rely on. The forest plot puts every tested claim on one axis,
its effect in standard errors toward the paper's side, ``(effect − null)/SE · sign`` (0 is no
difference, or the margin of a non-inferiority claim), with its 95% interval and, shaded, the
band inside which its paper's correction leaves it undecided.
"""

from __future__ import annotations

from posenc.stats.findings import Verdict
from posenc.stats.page_parts import e, status
from posenc.stats.distributions import t_quantile
from posenc.stats.procedure import ALPHA, NEEDS_SEEDS


def _num(x: float) -> str:
    return f"{x:+.3f}" if abs(x) >= 0.01 else f"{x:+.4f}"


def effect_cell(v: Verdict) -> str:
    """The effect with its 95% interval (tested), one seed's value (needs seeds), or a dash."""
    ev = v.evidence
    if ev is None:
        return "—"
    margin = f" <span class=muted>(margin {ev.null:+.4f})</span>" if ev.null else ""
    if v.test is None:
        return f"{_num(ev.mean)} {e(v.unit)} <span class=muted>({ev.seeds} seed{'s' * (ev.seeds > 1)})</span>" + margin
    lo, hi = v.test.interval()
    return f"{_num(v.test.effect)} {e(v.unit)} <span class=muted>[{_num(lo)}, {_num(hi)}]</span>" + margin


def mde_cell(v: Verdict) -> str:
    """The smallest ``|effect − null|`` its test detects with 80% power after the correction."""
    if v.mde is not None:
        where = "from the margin" if v.evidence is not None and v.evidence.null else "from 0"
        return f"{v.mde:.3f} <span class=muted>{where}</span>"
    if v.status == NEEDS_SEEDS:
        return "<span class=muted>needs seeds</span>"
    return "<span class=muted>no test</span>"


def recorded_mark(v: Verdict) -> str:
    """A kept verdict's mark (``posenc.extrapolate.kept``): *recorded*, with where and how, and *stale*
    where its set-up hash is not today's; empty for a verdict measured now."""
    r = v.recorded
    if r is None:
        return ""
    stale = (' <span class="stale" title="a record\'s set-up hash differs from today\'s code">stale</span>'
             if r.stale else "")
    return (f' <span class="recorded">recorded</span>{stale} <span class=muted>(kept records {e(r.name)}: commit '
            f"{e(r.commit[:12])}, {e(r.date)}, {e(r.machine)}; measured again by <code>{e(r.command)}</code>)</span>")


def verdict_cell(v: Verdict) -> str:
    extra = f" <span class=muted>(p {v.p_holm:.2g} after Holm)</span>" if v.p_holm is not None else ""
    return status(v.status) + extra + recorded_mark(v)


def verdict_table(verdicts: list[Verdict]) -> str:
    """The at-a-glance table: one row per claim."""
    head = ("<thead><tr><th>source</th><th>claim</th><th>effect [95% interval]</th>"
            "<th>detectable (80% power)</th><th>verdict</th></tr></thead>")
    rows = "".join(f'<tr><td class="source">{e(v.source)}</td><td class="claim">{e(v.claim)}</td>'
                   f'<td class="effect">{effect_cell(v)}</td><td class="mde">{mde_cell(v)}</td>'
                   f'<td class="verdict">{verdict_cell(v)}</td></tr>' for v in verdicts)
    return f'<table id="verdicts" class="glance">{head}<tbody>{rows}</tbody></table>'


COLOURS = {"agrees": "#17692b", "disagrees": "#b3261e"}
LIMIT = 20.0  # standard errors shown; beyond, an arrow at the edge


def forest_svg(verdicts: list[Verdict], alpha: float = ALPHA) -> str:
    """Every tested claim's effect in standard errors toward the paper's side, with its 95% interval
    and its undecided band (the first Holm step's critical value of its paper, both tails)."""
    rows = [v for v in verdicts if v.test is not None and v.test.se > 0]
    if not rows:
        return '<p id="forest" class=muted>No claim has the seeds for a test: no forest plot.</p>'
    left, width, row_h, top = 360, 420, 20, 26
    height = top + row_h * len(rows) + 30

    def x(z: float) -> float:
        return left + (max(-LIMIT, min(LIMIT, z)) + LIMIT) / (2 * LIMIT) * width

    out = [f'<svg id="forest" width="{left + width + 20}" height="{height}" '
           f'viewBox="0 0 {left + width + 20} {height}" font-family="system-ui, sans-serif" font-size="11" '
           'role="img" aria-label="forest plot of the verdicts">']
    for z in range(-int(LIMIT), int(LIMIT) + 1, 5):
        out.append(f'<line x1="{x(z):.1f}" x2="{x(z):.1f}" y1="{top - 6}" y2="{height - 24}" stroke="#eee"/>'
                   f'<text x="{x(z):.1f}" y="{height - 10}" text-anchor="middle" fill="#555">{z}</text>')
    out.append(f'<text x="{left + width / 2}" y="14" text-anchor="middle" fill="#333">(effect − null) / SE, '
               "toward the paper's side →</text>")
    for i, v in enumerate(rows):
        t, ev = v.test, v.evidence
        y = top + row_h * i + row_h / 2
        z = (t.effect - ev.null) / t.se * ev.sign
        half = t_quantile(0.975, t.df)
        crit = t_quantile(1 - alpha / (2 * max(v.tests, 1)), t.df)
        colour = COLOURS.get(v.status, "#8a6d00")
        label = v.claim if len(v.claim) <= 58 else v.claim[:56] + "…"
        out.append(f'<rect x="{x(-crit):.1f}" y="{y - 7}" width="{x(crit) - x(-crit):.1f}" height="14" fill="#f1f1f1"/>'
                   f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" fill="#222"><title>{e(v.source)}: '
                   f'{e(v.claim)}</title>{e(label)}</text>'
                   f'<line x1="{x(z - half):.1f}" x2="{x(z + half):.1f}" y1="{y}" y2="{y}" stroke="{colour}" '
                   'stroke-width="1.5"/>'
                   f'<circle cx="{x(z):.1f}" cy="{y}" r="3.5" fill="{colour}"><title>{e(v.status)}: '
                   f'{z:+.1f} SE</title></circle>')
        if abs(z) > LIMIT:
            out.append(f'<text x="{x(z) + (6 if z > 0 else -6):.1f}" y="{y + 4}" text-anchor="middle" '
                       f'fill="{colour}">{"▶" if z > 0 else "◀"}</text>')
    out.append(f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="{top - 6}" y2="{height - 24}" stroke="#333"/>')
    out.append("</svg>")
    return "".join(out)


__all__ = ["verdict_table", "forest_svg", "effect_cell", "mde_cell", "verdict_cell"]
