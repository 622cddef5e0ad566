"""The papers' claims, checked against what this run measured (never assumed): the verdict, the
family's correction and the claim shapes every part uses (each part states its own claims:
``posenc.extrapolate.parts``).

Each claim is a direction ("A is lower/higher than B") or a bound ("A is at most B + margin")
from a paper. Its test is the seed-level one of ``posenc.stats.procedure``: every seed's
paired effect (block NLLs on the same bytes, or the same examples), the seeds' spread pooled
over the claims of one part (``Verdict.pool``), both tails at α/2, Holm's correction within each
paper (``Verdict.source``) at ``ALPHA`` = 0.05 (``adjust``). A verdict ``agrees`` when the
adjusted p is below 0.05 and the effect has the paper's direction, ``disagrees`` when it has the
opposite one, ``no clear difference`` otherwise, ``needs seeds`` behind fewer than ``MIN_SEEDS``
seeds (the spread between training runs is then not measured: window- or example-level
variance never decides a verdict), ``not measured`` when a scheme is missing. Every tested
verdict carries its detectable effect (``mde``: 80% power after the correction, in its units).

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
from typing import Any

from posenc.stats import procedure as V
from posenc.stats.distributions import mcnemar_exact
from posenc.stats.estimates import Estimate, LMTable, TaskTable, combine
from posenc.stats.procedure import ALPHA, MIN_SEEDS, NEEDS_SEEDS, ClaimTest, Evidence

MARGIN = math.log(1.02)  # non-inferiority margin of "does not degrade": perplexity at most 2% higher
FULL_COMMAND = "posenc report --profile full"  # measures every row on three seeds


@dataclass(frozen=True)
class Verdict:
    source: str
    claim: str  # what the paper found, in words
    measured: str  # what this run measured, in words
    status: str  # agrees / disagrees / no clear difference / needs seeds / not measured
    p: float | None = None  # p of the test, both tails (None: no test, e.g. "cannot run")
    direction: int = 0  # +1: the estimate lies on the paper's side; −1: on the other
    seeds: int = 0  # seeds behind the verdict
    p_holm: float | None = None  # after Holm's correction within its paper (``adjust``)
    evidence: Evidence | None = None  # the claim seed by seed (what its test rests on)
    unit: str = ""  # the effect's unit: "ΔNLL" (nats/token) or "Δaccuracy"
    pool: str = ""  # the claims that share a seed spread: the part's name unless the part sets its own
    test: ClaimTest | None = None  # the seed-level test (``posenc.stats.procedure``)
    mde: float | None = None  # detectable |effect − null| at 80% power after the paper's correction
    tests: int = 0  # tested claims in its paper's family
    recorded: Any = None  # a kept run's verdict, not measured now: its ``kept.Recorded`` (commit, date, machine, command)

    @property
    def indicative(self) -> bool:
        """Behind fewer than ``MIN_SEEDS`` seeds (its status is then "needs seeds")."""
        return self.evidence is not None and self.seeds < MIN_SEEDS


def _decided(verdict: Verdict, decision: V.Decision) -> Verdict:
    t = decision.test
    if t is None:
        return dataclasses.replace(verdict, status=decision.status, p=None, p_holm=None, test=None, mde=None, tests=0)
    return dataclasses.replace(verdict, status=decision.status, p=t.p, p_holm=decision.p_holm, test=t,
                               mde=decision.mde, tests=decision.tests)


def adjust(verdicts: list[Verdict], alpha: float = ALPHA) -> list[Verdict]:
    """Every verdict with evidence decided by ``verdicts.decide``: seed spreads pooled per
    ``pool``, Holm per ``source``; the others (no test) left as they are."""
    tested_ = [i for i, v in enumerate(verdicts) if v.evidence is not None]
    decisions = V.decide([(verdicts[i].evidence, verdicts[i].source, verdicts[i].pool) for i in tested_], alpha)
    out = list(verdicts)
    for i, decision in zip(tested_, decisions):
        out[i] = _decided(verdicts[i], decision)
    return out


def seed_verdict(source: str, claim: str, measured: str, evidence: Evidence, *, unit: str) -> Verdict:
    """A verdict resting on ``evidence``, decided alone (its own seeds, a family of one) until
    ``adjust`` decides it with its part and its paper."""
    direction = evidence.sign * ((evidence.mean > evidence.null) - (evidence.mean < evidence.null))
    v = Verdict(source, claim, measured, NEEDS_SEEDS, None, direction, evidence.seeds, evidence=evidence, unit=unit)
    return _decided(v, V.decide([(evidence, source, "")])[0])


def tested(source: str, claim: str, measured: str, d, *, expect_negative: bool, null: float = 0.0) -> Verdict:
    """The paper expects ``d − null`` below 0 (``expect_negative``) or above; ``d`` an ``Estimate``
    of ΔNLL or an ``accuracy.Diff``, with each seed's value (``per_seed``) and held-out error."""
    if not d.per_seed:
        raise ValueError(f"{claim!r}: the estimate has no per-seed values to test")
    unit = "ΔNLL" if isinstance(d, Estimate) else "Δaccuracy"
    if not all(math.isfinite(x) for x in (*d.per_seed, *d.within)):  # a diverged run: nothing to test
        return Verdict(source, claim, measured + "; not measured: a seed's value is not finite", "not measured")
    evidence = Evidence(d.per_seed, d.within, null=null, sign=-1 if expect_negative else 1)
    if d.seeds < MIN_SEEDS:
        measured += (f"; needs seeds: {d.seeds} seed{'s' * (d.seeds > 1)}, a verdict needs {MIN_SEEDS} "
                     f"({FULL_COMMAND} measures it on three)")
    return seed_verdict(source, claim, measured, evidence, unit=unit)


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


def mcnemar_verdict(table: TaskTable, source: str, claim: str, better: str, worse: str,
             cells: list[tuple[str, int]], where: str, extra: str = "") -> Verdict | None:
    """``better`` is right on more of the same examples than ``worse`` over ``cells``: McNemar's
    counts and exact p (pooled over the cells and the seeds) describe it; the verdict is the
    seed-level test on each seed's paired difference (``verdicts``); None when there is nothing to compare."""
    counts = table.discordant(better, worse, cells) if cells else None
    seeds = table.paired_seeds(better, worse, cells) if cells else None
    if counts is None or counts[2] == 0 or seeds is None:
        return None
    b, c, n = counts
    measured = (f"exact match on {n} paired examples {where}: {better} alone right {b}, {worse} alone right {c} "
                f"(difference {(b - c) / n:+.3f}; McNemar's exact p {mcnemar_exact(b, c):.2g}){extra}")
    if len(seeds[0]) < MIN_SEEDS:
        measured += (f"; needs seeds: {len(seeds[0])} seed{'s' * (len(seeds[0]) > 1)}, a verdict needs {MIN_SEEDS} "
                     f"({FULL_COMMAND} measures it on three)")
    return seed_verdict(source, claim, measured, Evidence(*seeds, sign=1), unit="Δaccuracy")
