"""The verdict procedure: how a paper's claim is decided on this run's seeds, and what it could detect.

A claim is an effect in its own units (ΔNLL in nats/token, Δaccuracy), measured on every seed
``s = 1..S`` as ``d_s`` (the same held-out windows or examples for both sides of the comparison),
with the standard error ``w_s`` of that seed's value from the held-out data alone (Newey–West
over windows, or over examples). The claim says ``d − null`` has a sign (``null`` is 0, or the
margin of a non-inferiority claim).

**The unit of replication is the seed.** The variance of a claim's mean over seeds is
``s²/S``, ``s²`` the variance of the seeds' values ``d_s`` (which holds the held-out data's noise
``w_s²`` and the spread between training runs). Window- or example-level variance alone leaves the
spread between training runs out, so a claim measured on fewer than ``MIN_SEEDS`` seeds is not
decided ("needs seeds"), whatever its p-value on the windows would be.

**Seed spread pooled within a part (one dispersion factor).** Three seeds give a claim's own
``s²`` two degrees of freedom: Student's t then needs 4.3 SE for p < 0.05 and 9.9 for 0.01, so
no paper with several claims could have one decided. The claims of one part (``pool``) are
measured on the same seeds of similar models, with the same training recipe; the model is that
the training runs spread each claim's value in proportion to its held-out noise,
``σ_c² = φ · w̄_c²`` (``w̄_c² = mean_s w_s²``; the multiplicative-dispersion model of
quasi-likelihood, McCullagh & Nelder 1989 §4.5, and of meta-analysis, Thompson & Sharp 1999).
Rows of very different size (a ΔNLL of SE 0.02 beside one of SE 0.12) then share one unit-free
factor ``φ̂ = Σ_c d_c (s_c²/w̄_c²) / Σ_c d_c`` (``d_c = S_c − 1``), and a claim's
``t = (d̄ − null)/√(φ̂ w̄_c²/S)`` is Student's t with ``Σ_c d_c`` degrees of freedom, exactly
under the model (``w̄_c`` rests on hundreds of windows or examples: taken as known).

**When a row's seeds disagree with the others'.** A row whose own spread is out of line with the
rest of its part, ``(s_c²/w̄_c²)/φ̂_{−c}`` beyond the upper ``GUARD`` = 10% of
``F(d_c, Σd − d_c)`` (``φ̂_{−c}`` pooled without it), is tested on its own seeds alone
(``d_c`` degrees of freedom): pooling would understate its error. Measured on simulated parts
of 8 rows on 3 seeds (``tests/test_verdicts.py``, 2000 papers each): papers with a null claim
decided 4.4% with equal relative spreads, 5.9% with spreads up to 2× apart (within the test's
binomial bound of 5%), 6.2% at 3×, 7.7% at 10× — more seeds, not another pool, is the cure
there. A part with fewer than ``POOL_ROWS`` rows is not pooled. Why not empirical Bayes (Smyth
2004's moderated t): estimating the spread of the variances as well, from 3–8 rows of 2 degrees
of freedom each, was measured anti-conservative (5.9–11% at 5%).

**Two tails, one test.** The paper fixes the direction; the page reports both outcomes, so each
tail is tested at ``α/2`` (a two-sided test read directionally): ``agrees`` from the claim's tail,
``disagrees`` from the other, ``no clear difference`` otherwise. A one-sided test that also said
"disagrees" from the other tail would decide 2α of null claims.

**Multiplicity: one family per paper** (the verdict's ``source``), Holm's step-down at
``ALPHA`` = 0.05 over its tested claims: a paper's claims are one hypothesis about that paper;
a reader judges the papers one by one, and the page's claims of different papers do not
answer one question. (The whole page as one family, ~34 claims, needed about 26 SE at three
seeds.)

**Detectable effect.** For every claim, the smallest ``|effect − null|`` its test detects with
``POWER`` = 80% at the first (Bonferroni) step of its family's Holm, ``α/(2m)`` in one tail
(a lower bound on Holm's power): ``mde = δ · SE`` where ``δ`` solves
``P(T'_{df,δ} > t_{1−α/(2m), df}) = 0.8`` for the noncentral t ``T'`` (``detectable``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from posenc.stats.distributions import f_sf, holm, noncentral_t_sf, normal_quantile, t_quantile, t_sf

ALPHA = 0.05  # family-wise error rate of each paper's verdicts (Holm, both tails together)
POWER = 0.8  # the power the detectable effect is stated at
MIN_SEEDS = 3  # seeds a verdict needs: fewer leave the spread between training runs unmeasured
POOL_ROWS = 3  # rows with a seed spread a part needs before they are pooled
GUARD = 0.1  # a row whose own spread is beyond this upper tail of F is tested on its own seeds
NEEDS_SEEDS = "needs seeds"
UNCLEAR = "no clear difference"


# -- the detectable effect (its distributions: posenc.stats.distributions) ----------------------

def detectable(se: float, df: float, tests: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest ``|effect − null|`` detected with ``power`` by a one-tail test at ``α/(2·tests)``
    (the first step of a family of ``tests`` claims' Holm, both tails), in the effect's units."""
    q = 1 - alpha / (2 * tests)
    c = t_quantile(q, df) if not math.isinf(df) else normal_quantile(q)
    lo, hi = 0.0, c + 10.0
    for _ in range(45):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if noncentral_t_sf(c, df, mid) < power else (lo, mid)
    return hi * se


MAX_SEEDS = 1000  # seeds_to_detect looks no further


def seeds_to_detect(test: "ClaimTest", target: float, tests: int, *, alpha: float = ALPHA,
                    power: float = POWER) -> int | None:
    """The fewest seeds ``S`` at which ``test``'s claim would detect ``|effect − null| = target`` with ``power``
    (``detectable``) in a family of ``tests`` claims, its seed spread as measured: the standard error
    ``se·√(S₀/S)`` (``S₀`` = ``test.seeds``), on ``S − 1`` degrees of freedom, or, on its part's pooled spread,
    ``df·(S − 1)/(S₀ − 1)`` (every row of the part with ``S`` seeds). ``test.seeds`` when it already does;
    None past ``MAX_SEEDS`` or for a target of 0."""
    if not target > 0:
        return None
    rows = test.df / (test.seeds - 1) if test.pooled else 1.0
    for s in range(test.seeds, MAX_SEEDS + 1):
        if detectable(test.se * math.sqrt(test.seeds / s), rows * (s - 1), tests, alpha=alpha, power=power) <= target:
            return s
    return None


# -- the procedure -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evidence:
    """One claim measured seed by seed, in the claim's units.

    ``effects[s]``: the effect on seed ``s`` (paired: both sides on the same held-out data);
    ``within[s]``: its standard error from the held-out data alone (windows or examples);
    ``null``: 0, or the non-inferiority margin; ``sign``: the claim expects ``effect − null``
    of this sign (+1 above, −1 below)."""

    effects: tuple[float, ...]
    within: tuple[float, ...]
    null: float = 0.0
    sign: int = 1

    def __post_init__(self) -> None:
        if len(self.effects) != len(self.within) or not self.effects:
            raise ValueError(f"effects and within must be non-empty and of one length, got {len(self.effects)} "
                             f"and {len(self.within)}")
        if self.sign not in (1, -1):
            raise ValueError(f"sign must be +1 or -1, got {self.sign}")

    @property
    def seeds(self) -> int:
        return len(self.effects)

    @property
    def mean(self) -> float:
        return float(np.mean(self.effects))

    @property
    def variance(self) -> float:
        """``s²``, the variance of the seeds' values (0 with one seed)."""
        return float(np.var(self.effects, ddof=1)) if self.seeds > 1 else 0.0

    @property
    def relative(self) -> float:
        """``r = s²/w̄²``: the seeds' spread relative to the held-out noise (0 without noise)."""
        return self.variance / self.noise if self.noise > 0 else 0.0

    @property
    def noise(self) -> float:
        """``w̄²``, the held-out data's variance of one seed's value (the pool's unit)."""
        return float(np.mean(np.square(self.within)))


@dataclass(frozen=True)
class Pool:
    """The seed spread of one pool's rows: ``Σ d_c r_c`` and ``Σ d_c``, ``r_c = s_c²/w̄_c²``
    (empty: nothing to pool, every claim on its own seeds)."""

    weighted: float = 0.0  # Σ d_c r_c
    df: float = 0.0  # Σ d_c

    def without(self, ev: Evidence) -> tuple[float, float]:
        """``(φ̂_{−c}, Σd − d_c)``: the factor and its degrees of freedom without ``ev``'s row."""
        d = ev.seeds - 1
        rest = self.df - d
        return ((self.weighted - d * ev.relative) / rest if rest > 0 else math.nan), rest


NO_POOL = Pool()


def pool_of(rows: Sequence[Evidence]) -> Pool:
    """The pooled seed spread of ``rows`` with at least two seeds and a positive held-out noise;
    ``NO_POOL`` with fewer than ``POOL_ROWS`` of them."""
    use = [r for r in rows if r.seeds >= 2 and r.noise > 0]
    if len(use) < POOL_ROWS:
        return NO_POOL
    return Pool(float(sum((r.seeds - 1) * r.relative for r in use)), float(sum(r.seeds - 1 for r in use)))


@dataclass(frozen=True)
class ClaimTest:
    """A claim's test: its effect, the seed-level standard error, the interval, the two tails' p
    (``p_agree`` in the claim's direction), the p of both tails (``p``), and ``mde``."""

    effect: float
    se: float
    df: float
    p_agree: float
    p_disagree: float
    seeds: int
    pooled: bool  # on its part's pooled spread (False: on its own seeds)

    @property
    def p(self) -> float:
        return min(1.0, 2 * min(self.p_agree, self.p_disagree))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The effect's ``level`` interval (the claim's own, before the family's correction)."""
        half = t_quantile(0.5 + level / 2, self.df) * self.se
        return self.effect - half, self.effect + half


def seed_test(ev: Evidence, pool: Pool = NO_POOL) -> ClaimTest | None:
    """The seed-level t of one claim, on its part's pooled spread unless its own is out of line
    (``GUARD``); None below ``MIN_SEEDS`` seeds."""
    if ev.seeds < MIN_SEEDS:
        return None
    d = ev.seeds - 1
    rest_factor, rest_df = pool.without(ev) if pool.df > 0 else (math.nan, 0.0)
    pooled = (rest_df > 0 and ev.noise > 0 and rest_factor > 0
              and f_sf(ev.relative / rest_factor, d, rest_df) >= GUARD)
    if pooled:
        var, df = pool.weighted / pool.df * ev.noise, pool.df
    else:
        var, df = ev.variance, float(d)
    se = math.sqrt(var / ev.seeds)
    if se == 0:
        up = 0.0 if ev.mean > ev.null else (0.5 if ev.mean == ev.null else 1.0)
        down = 0.0 if ev.mean < ev.null else (0.5 if ev.mean == ev.null else 1.0)
    else:
        t = (ev.mean - ev.null) / se
        up, down = t_sf(t, df), t_sf(-t, df)
    agree, disagree = (up, down) if ev.sign > 0 else (down, up)
    return ClaimTest(ev.mean, se, df, agree, disagree, ev.seeds, pooled)


@dataclass(frozen=True)
class Decision:
    status: str  # agrees / disagrees / no clear difference / needs seeds
    test: ClaimTest | None
    p_holm: float | None  # Holm-adjusted p (both tails) within the family
    tests: int  # tested claims in the family
    alpha: float = ALPHA

    @property
    def mde(self) -> float | None:
        """The detectable ``|effect − null|`` at ``POWER`` after the family's correction (None: no test)."""
        t = self.test
        return None if t is None else detectable(t.se, t.df, self.tests, alpha=self.alpha)


def decide(claims: Sequence[tuple[Evidence | None, str, str]], alpha: float = ALPHA) -> list[Decision]:
    """Decisions for ``claims`` = ``(evidence, family, pool)``: seed spread pooled per ``pool`` (a part),
    Holm per ``family`` (a paper); ``None`` evidence: not tested (a ``Decision`` with no test)."""
    rows: dict[str, list[Evidence]] = defaultdict(list)
    for ev, _, pool in claims:
        if ev is not None:
            rows[pool].append(ev)
    pools = {pool: pool_of(found) for pool, found in rows.items()}
    tests = [seed_test(ev, pools[pool]) if ev is not None else None for ev, _, pool in claims]
    families: dict[str, list[int]] = defaultdict(list)
    for i, (t, (_, family, _)) in enumerate(zip(tests, claims)):
        if t is not None:
            families[family].append(i)
    out: list[Decision] = [Decision(NEEDS_SEEDS if ev is not None else "not measured", None, None, 0)
                           for ev, _, _ in claims]
    for members in families.values():
        adjusted = holm([tests[i].p for i in members])
        for i, q in zip(members, adjusted):
            t = tests[i]
            status = UNCLEAR if q >= alpha else ("agrees" if t.p_agree < t.p_disagree else "disagrees")
            out[i] = Decision(status, t, q, len(members), alpha)
    return out


__all__ = ["ALPHA", "POWER", "MIN_SEEDS", "NEEDS_SEEDS", "UNCLEAR", "Evidence", "ClaimTest", "Decision",
           "Pool", "pool_of", "seed_test", "decide", "detectable", "seeds_to_detect"]
