"""The page's "Your schemes" section (``#plugins``): each ``--plugin`` scheme against every baseline.

A scheme whose language-modelling runs carry a ``plugin`` (``posenc.plugins``: it came from the
user's module) is compared with every scheme of the page that did not (the baselines) at each
evaluated length: ΔNLL = NLL(yours) − NLL(baseline) on the same held-out bytes, paired seed by
seed, decided by the claims' own procedure (``posenc.stats.procedure`` through
``findings.tested`` and ``findings.adjust``): the seed-level test, the seeds' spread pooled over
that scheme's comparisons, both tails at α/2, Holm over that scheme's comparisons (one family per
scheme, as one family per paper), "needs seeds" below ``MIN_SEEDS`` seeds, and the detectable
effect. "lower" means your scheme's perplexity is lower there (better), "higher" the baseline's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posenc.stats import findings, estimates as stats
from posenc.stats.page_parts import Page, e, missing
from posenc.stats.page_parts import table as html_table

SOURCE = "your scheme {label}"  # each plugin scheme's comparisons are one family (Holm) and one pool
WORDS = {"agrees": "lower (yours better)", "disagrees": "higher (baseline better)"}


def plugin_labels(records: list[dict[str, Any]]) -> list[str]:
    """Labels of the language-modelling runs whose scheme came from a plugin, in page order."""
    return list(dict.fromkeys(r["label"] for r in records if r.get("part") == "lm" and r.get("plugin")))


def comparisons(table: stats.LMTable, label: str, baselines: list[str]) -> list[tuple[str, int, findings.Verdict]]:
    """``(baseline, length, verdict)`` for ``label`` against each baseline at each length, decided
    together (pool and Holm family: ``label``'s comparisons)."""
    source = SOURCE.format(label=label)
    cells, verdicts = [], []
    for base in baselines:
        for t in table.lengths:
            d = table.diff((label, t), (base, t))
            claim = f"{label} vs {base} at {t}"
            if d is None:
                why = table.cannot.get(label, {}).get(t) or table.cannot.get(base, {}).get(t)
                v = findings.Verdict(source, claim, why or "not measured", "not measured")
            else:
                v = findings.tested(source, claim, f"ΔNLL {d.mean:+.4f}", d, expect_negative=True)
            cells.append((base, t))
            verdicts.append(dataclasses.replace(v, pool=source))
    decided = findings.adjust(verdicts)
    return [(base, t, v) for (base, t), v in zip(cells, decided)]


def _effect(v: findings.Verdict) -> str:
    if v.test is None:
        if v.evidence is None:
            return missing(v.measured if v.status == "not measured" and v.measured != "not measured" else None)
        return f"{v.evidence.mean:+.4f} <span class=muted>(seeds: {v.evidence.seeds})</span>"
    lo, hi = v.test.interval()
    return f"{v.test.effect:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def _verdict(v: findings.Verdict) -> str:
    cls = {"agrees": "agrees", "disagrees": "disagrees"}.get(v.status, "unclear")
    return f'<span class="{cls}">{e(WORDS.get(v.status, v.status))}</span>'


def section(page: Page, records: list[dict[str, Any]]) -> None:
    """Adds ``#plugins`` when a plugin scheme has language-modelling runs (nothing otherwise)."""
    lm = [r for r in records if r.get("part") == "lm"]
    mine = plugin_labels(lm)
    if not mine:
        return
    table = stats.lm_table(lm)
    page.add('<h2 id="plugins">Your schemes: each against every baseline at each length</h2>'
             "<p>ΔNLL = NLL(your scheme) − NLL(baseline) in nats per byte on the same held-out bytes (whole "
             "non-overlapping windows), paired seed by seed, with its 95% interval; decided by the claims' "
             "procedure (see the method): the seed-level test, the seeds' spread pooled over one scheme's "
             "comparisons, Holm over them, the detectable effect at 80% power. <i>lower</i>: your scheme's "
             "perplexity is lower there; <i>needs seeds</i>: fewer than "
             f"{findings.MIN_SEEDS} seeds (<code>--seeds 0,1,2</code>).</p>")
    for label in mine:
        first = next(r for r in lm if r["label"] == label and r.get("plugin"))
        origin, arch = first["plugin"], first.get("arch", "transformer")
        # the baselines: every scheme of no plugin on the same architecture (a hybrid row is another model)
        baselines = list(dict.fromkeys(r["label"] for r in lm if not r.get("plugin")
                                       and r.get("arch", "transformer") == arch))
        where = "; ".join(f"{e(name)} from <code>{e(p['source'])}</code> (sha256 {e(p['sha256'][:12])}…)"
                          for name, p in origin.items())
        rows = [[e(base), str(t), _effect(v), f"{v.mde:.4f}" if v.mde is not None else "—",
                 f"{v.p_holm:.2g}" if v.p_holm is not None else "—", _verdict(v)]
                for base, t, v in comparisons(table, label, baselines)]
        page.add(f"<h3>{e(label)}</h3><p class=muted>{where}</p>"
                 + (html_table(["baseline", "length", "ΔNLL [95%]", "detectable", "p (Holm)", "verdict"], rows)
                    if rows else "<p>No baseline ran beside it.</p>"))


__all__ = ["section", "comparisons", "plugin_labels"]
