"""The papers' claims, checked against what this run measured (never assumed): the verdict, the
family's correction and the claim shapes every part uses (each part states its own claims:
``posenc.extrapolate.parts``).

Each claim is a direction ("A is lower/higher than B") or a bound ("A is at most B + margin")
from a paper. Each verdict has a test and a two-sided p-value (``posenc.extrapolate.stats``): paired
t-tests on block NLLs for perplexity (Student's t over seeds, the normal with one seed), McNemar's
exact test on the same examples for the tasks. The family is every verdict of the report that has
a p-value (language modelling, RoPE scalings, tasks, the hybrid, images and time together); ``adjust`` applies Holm's
correction over it at ``ALPHA`` = 0.05. A verdict ``agrees`` when its Holm-adjusted p is below
0.05 and the measured difference has the paper's direction, ``disagrees`` when it is below 0.05
and has the opposite one, ``no clear difference`` otherwise, ``not measured`` when a scheme is
missing. Behind fewer than ``MIN_SEEDS`` seeds a verdict is marked "indicative": the spread
between training runs is then not in its error.

"Does not degrade" claims are non-inferiority tests with a stated margin: the NLL of the same
held-out bytes at positions 8L–16L of a 16L window against positions L/2–L of an L window (the
trained positions with the most context); it ``agrees`` when the increase is significantly below
``MARGIN`` nats (perplexity within 2%). Whole-window perplexities at different lengths differ in
context as well as in positions, so they are compared across schemes at one length only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from posenc.extrapolate.stats import ALPHA, Estimate, LMTable, combine, holm

MARGIN = math.log(1.02)  # non-inferiority margin of "does not degrade": perplexity at most 2% higher
MIN_SEEDS = 3  # fewer seeds behind a verdict: "indicative"


@dataclass(frozen=True)
class Verdict:
    source: str
    claim: str  # what the paper found, in words
    measured: str  # what this run measured, in words
    status: str  # agrees / disagrees / no clear difference / not measured
    p: float | None = None  # two-sided p-value of the test (None: no test, e.g. "cannot run")
    direction: int = 0  # +1: the estimate lies on the paper's side; −1: on the other
    seeds: int = 0  # seeds behind the verdict
    p_holm: float | None = None  # after Holm's correction over the report's family (``adjust``)

    @property
    def indicative(self) -> bool:
        return self.p is not None and self.seeds < MIN_SEEDS


def _decide(p: float, direction: int, alpha: float = ALPHA) -> str:
    if p >= alpha or direction == 0:
        return "no clear difference"
    return "agrees" if direction > 0 else "disagrees"


def adjust(verdicts: list[Verdict], alpha: float = ALPHA) -> list[Verdict]:
    """Holm's correction over every verdict with a p-value; statuses re-decided on the adjusted p."""
    tested = [i for i, v in enumerate(verdicts) if v.p is not None]
    adjusted = holm([verdicts[i].p for i in tested])
    out = list(verdicts)
    for i, q in zip(tested, adjusted):
        out[i] = dataclasses.replace(verdicts[i], p_holm=q, status=_decide(q, verdicts[i].direction, alpha))
    return out


def tested(source: str, claim: str, measured: str, d: Estimate, *, expect_negative: bool,
            null: float = 0.0) -> Verdict:
    p = d.p_value(null)
    direction = 1 if (d.mean < null) == expect_negative else -1
    if d.mean == null:
        direction = 0
    return Verdict(source, claim, measured, _decide(p, direction), p, direction, d.seeds)


def ppl_claim(table: LMTable, source: str, claim: str, lower: tuple[str, int], higher: tuple[str, int],
               mode: str = "nonoverlap") -> Verdict:
    """The paper found perplexity(lower) < perplexity(higher)."""
    d = table.diff(lower, higher, mode)
    if d is None:
        return Verdict(source, claim, "not measured (a scheme or length is missing)", "not measured")
    ra, rb = table.seeds(lower[0], mode, lower[1]), table.seeds(higher[0], mode, higher[1])
    both = sorted(set(ra) & set(rb))  # the seeds the paired difference has: its perplexities are theirs
    a, b = combine({s: ra[s] for s in both}), combine({s: rb[s] for s in both})
    where = "" if len(both) == len(ra) == len(rb) else f", seed{'s' * (len(both) > 1)} {', '.join(map(str, both))}"
    measured = (f"{lower[0]} @{lower[1]}: {a.ppl:.2f} vs {higher[0]} @{higher[1]}: {b.ppl:.2f} "
                f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f} nats/token{where})")
    return tested(source, claim, measured, d, expect_negative=True)


def position_claim(table: LMTable, source: str, claim: str, label: str, *, degrades: bool) -> Verdict:
    """NLL at positions 8L–16L (the last bucket) against L/2–L on the same bytes: ``degrades`` is
    a directional claim (higher past L); otherwise non-inferiority within ``MARGIN``."""
    buckets = table.buckets()
    near, far = buckets[1], buckets[-1]
    d = table.position_diff((label, far), (label, near)) if far.lo >= table.train_length else None
    if d is None:
        return Verdict(source, claim, "not measured (a scheme or length is missing)", "not measured")
    L = table.train_length
    a, b = table.position(label, far), table.position(label, near)
    what = (f"{label}, same bytes at positions {far.name(L)}: {a.ppl:.2f} vs {near.name(L)}: {b.ppl:.2f} "
            f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f}")
    if degrades:
        return tested(source, claim, what + ")", d, expect_negative=False)
    return tested(source, claim, what + f"; margin {MARGIN:.4f})", d, expect_negative=True, null=MARGIN)
