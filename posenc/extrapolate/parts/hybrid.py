"""The hybrid rows: the recurrent baseline beside the transformer (attention and ssm blocks).

With ``--arch transformer`` (the default), the schemes named in ``profile.hybrid`` also run as
hybrids in the parts ``profile.hybrid_parts``, right after the transformer runs of each part
(``extend``): the same decoder with every other attention block replaced by an ``ssm`` block, as
Jamba interleaves Mamba and attention layers. Its rows are records of those parts (``part`` "lm"
or "tasks", ``arch`` "hybrid"); its section reads the language-modelling ones. Claim (Lieber et
al. 2024): with recurrent layers in the stack, attention needs no positional encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.stats import estimates as stats
from posenc.stats.findings import MARGIN, Verdict, tested
from posenc.extrapolate.model import check_arch
from posenc.stats.page_parts import Page, e, missing
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.parts import lm, tasks
from posenc.extrapolate.plan import Log, Run, arch_label
from posenc.extrapolate.profiles import Profile
from posenc.stats.estimates import LMTable

JAMBA = "Lieber et al. 2024 (Jamba)"
SOURCES = {JAMBA: ("Jamba ablations: language models interleaving Mamba and attention layers, trained with and "
                  "without RoPE in the attention layers")}
HYBRID_NOPE, HYBRID_ROPE = "hybrid nope", "hybrid rope"  # posenc.extrapolate.plan.arch_label
PEERS = ("rope", "alibi", "kerple")  # how the NoPE hybrid's extrapolation is classed: like RoPE or like ALiBi/KERPLE


@dataclass(frozen=True)
class Trend:
    """Perplexity at L and at the longest length, and the paired change of the NLL between them."""

    label: str
    ppl_at_l: float
    ppl_long: float
    delta: float  # NLL(long) − NLL(L), nats/token
    se: float

    @property
    def degrades(self) -> bool:
        """True: worse at the far positions by more than 2 SE; False: not worse by more than 2 SE."""
        return self.delta > 2 * self.se


def trend(table: LMTable, label: str) -> Trend | None:
    """The same bytes at the last position bucket (8L–16L at quick) against L/2–L, as the Press
    verdicts compare them (``_position_claim``): context held equal, only the positions differ."""
    buckets = table.buckets()
    if len(buckets) < 3:
        return None
    near, far = buckets[1], buckets[-1]
    if far.lo < table.train_length:
        return None
    d = table.position_diff((label, far), (label, near))
    a, b = table.position(label, near), table.position(label, far)
    if d is None or a is None or b is None:
        return None
    return Trend(label, a.ppl, b.ppl, d.mean, d.se)


def hybrid_verdicts(table: LMTable) -> list[Verdict]:
    """Jamba's claim that attention between recurrent layers needs no positional encoding, at the
    training length, as non-inferiority: the NoPE hybrid's NLL minus the RoPE hybrid's is below
    ``MARGIN`` (agrees), or significantly above it (disagrees); its p-value joins the Holm family."""
    L = table.train_length
    claim = ("with recurrent layers in the stack, attention needs no positional encoding: at L the NoPE hybrid is "
             "as good as the RoPE hybrid (non-inferiority, margin 2% perplexity)")
    d = table.diff((HYBRID_NOPE, L), (HYBRID_ROPE, L))
    if d is None:
        return [Verdict(JAMBA, claim, "not measured (no hybrid nope and hybrid rope runs)", "not measured")]
    a, b = table.estimate(HYBRID_NOPE, "nonoverlap", L), table.estimate(HYBRID_ROPE, "nonoverlap", L)
    measured = (f"{HYBRID_NOPE} @{L}: {a.ppl:.2f} vs {HYBRID_ROPE} @{L}: {b.ppl:.2f} "
                f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f} nats/token)")
    return [tested(JAMBA, claim, measured + f"; margin {MARGIN:.4f}", d, expect_negative=True, null=MARGIN)]


def hybrid_answers(table: LMTable) -> list[str]:
    """The two questions on the hybrid, answered in words from this run (empty when not measured):
    does the NoPE hybrid extrapolate like ALiBi/KERPLE or degrade like RoPE; does the recurrence
    make position in attention unnecessary at the training length."""
    out = []
    L = table.train_length
    mine = trend(table, HYBRID_NOPE)
    if mine is not None:
        peers = {p: t for p in PEERS if (t := trend(table, p)) is not None}
        same = [p for p, t in peers.items() if t.degrades == mine.degrades]
        other = [p for p in peers if p not in same]
        how = "degrades past L" if mine.degrades else "does not degrade past L"
        buckets = table.buckets()
        text = (f"Extrapolation: the NoPE hybrid {how} (the same bytes at positions {buckets[-1].name(L)}: perplexity "
                f"{mine.ppl_long:.2f} vs {mine.ppl_at_l:.2f} at {buckets[1].name(L)}, ΔNLL {mine.delta:+.4f} ± "
                f"{mine.se:.4f}; degrading means worse by more than 2 SE)")
        def named(labels: list[str]) -> str:
            return ", ".join(f"{p} ({peers[p].delta:+.4f})" for p in labels)

        if peers:
            text += (f", like {named(same) or 'none of ' + ', '.join(peers)} in this run"
                     + (f" and unlike {named(other)}" if other else ""))
        out.append(text + ".")
    d = table.diff((HYBRID_NOPE, L), (HYBRID_ROPE, L))
    if d is not None:
        if d.mean > 2 * d.se:
            verdict = "no: RoPE still helps the hybrid's attention at L by more than 2 SE"
        elif d.mean < -2 * d.se:
            verdict = "yes: the NoPE hybrid is better than the RoPE hybrid by more than 2 SE"
        else:
            verdict = "yes, within 2 SE: RoPE adds nothing measurable to the hybrid at L"
        v = hybrid_verdicts(table)[0]
        verdict += f" (Jamba's claim as a non-inferiority test with a 2% margin, before Holm: {v.status})"
        text = f"Position at training length: {verdict} (ΔNLL NoPE − RoPE hybrid {d.mean:+.4f} ± {d.se:.4f})"
        t = table.diff(("nope", L), ("rope", L))
        if t is not None:
            text += f"; in the transformer, NoPE − RoPE is {t.mean:+.4f} ± {t.se:.4f}"
        out.append(text + ".")
    return out


# -- section -----------------------------------------------------------------------------------

def hybrid_section(page: Page, lm_recs: list[dict[str, Any]]) -> tuple[list[Verdict], list[str]]:
    """The recurrent baseline: the hybrid's rows against the transformer's; its verdicts and answers."""
    page.add("<h3 id=hybrid>Recurrence instead of position: the hybrid (attention and ssm blocks)</h3>")
    hybrid = [r for r in lm_recs if r.get("arch", "transformer") == "hybrid"]  # older records: transformer
    if not hybrid:
        page.add("<p>No hybrid runs in this profile (<code>posenc extrapolate --arch hybrid</code>).</p>")
        return [], []
    table = stats.lm_table(lm_recs)
    page.add("<p>The <b>hybrid</b> rows replace every other attention block of the same decoder with an "
             "<code>ssm</code> block (a diagonal linear state-space layer, S4D/Mamba-style, then the same MLP), as "
             "Jamba interleaves Mamba and attention layers; the positional scheme acts in the remaining attention "
             f"blocks only. {e(_why_recurrent())}. Below, a scheme <i>degrades</i> when the NLL of the same bytes "
             "at the farthest positions exceeds their NLL at positions L/2–L by more than two standard errors "
             "(paired, block by block; context held equal, as in the claims of section 1).</p>")
    labels = [lab for lab in (HYBRID_NOPE, HYBRID_ROPE, "nope", *PEERS)
              if lab in table.labels()]
    labels += [lab for lab in dict.fromkeys(r["label"] for r in hybrid) if lab not in labels]
    L, long = table.train_length, max(table.lengths)
    rows = []
    for lab in labels:
        t = trend(table, lab)
        if t is None:
            rows.append([e(lab), "—", "—", "—", missing(table.cannot.get(lab, {}).get(long))])
            continue
        rows.append([e(lab), f"{t.ppl_at_l:.2f}", f"{t.ppl_long:.2f}", f"{t.delta:+.4f} ± {t.se:.4f}",
                     "degrades" if t.degrades else "does not degrade"])
    buckets = table.buckets()
    near, far = (buckets[1].name(L), buckets[-1].name(L)) if len(buckets) > 2 else ("L/2–L", "far")
    page.add(html_table(["scheme", f"ppl at positions {near}", f"ppl at positions {far}",
                         f"ΔNLL ({far} − {near}) ± SE", "past L"], rows))
    answers = hybrid_answers(table)
    page.add("".join(f"<p><b>{e(a)}</b></p>" for a in answers))
    return hybrid_verdicts(table), answers


def _why_recurrent() -> str:
    from posenc.demo import WHY_RECURRENT

    return "The ssm blocks take no position: " + WHY_RECURRENT


class Hybrid(Part):
    name = "hybrid"  # no record has it: the rows are the text (and tasks) part's, with arch "hybrid"

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if profile.arch == "transformer" and profile.hybrid:
            for part in (lm.PART, tasks.PART):  # the parts whose runs can have hybrid rows
                if part.name in profile.hybrid_parts and part.name in profile.parts:
                    check_arch("hybrid", part.model(profile))
        return []

    def extend(self, profile: Profile, runs: list[Run], *, custom: bool, corpus_sha: str) -> list[Run]:
        if profile.arch != "transformer":
            return []
        return [Run(r.part, r.seed, arch_label(r.label, "hybrid"), r.spec, r.settings, profile=profile.name,
                    arch="hybrid") for r in runs
                if r.part in profile.hybrid_parts and r.arch == "transformer" and not r.variant
                and r.label in profile.hybrid and r.seed in profile.seeds_for(self.name)]

    def records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if r["part"] == "lm"]

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts, answers = hybrid_section(page, records)
        return Section(verdicts, "".join(f"<p>{e(a)}</p>" for a in answers), SOURCES)


PART = Hybrid()
