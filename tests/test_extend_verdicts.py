"""``posenc extend``'s verdicts (``posenc.extend.verdicts``) tested like a kernel, on simulated grids
whose truth is known: with no method different from another, every paper's family of claims is
decided at most at its nominal rate, with the passage as the unit and the grid's passage count (3).

The null grid: every method's per-token NLL on a passage is the passage's own difficulty (shared by
every method: the pairing) plus token noise correlated over 8 tokens, plus a per-(method, passage)
offset ``N(0, tau²)`` (a method that helps one work and hurts another, which only the spread
between passages measures); ``dynamic`` is shifted by the margin, the boundary of its
non-inferiority claim's null. Passkey: every method answers each prompt right with probability 1/2.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from posenc.extend import verdicts as EV
from posenc.stats import procedure as V
from posenc.stats.findings import MARGIN

METHODS = ["none", "linear", "ntk", "dynamic", "yarn", "llama3"]
CONTEXT, PASSAGES, GRIDS = 1024, 3, 300  # 300 grids: 2.5 s; the rates of 3000 are in docs/guide/extend.md
BOUND = 3.0  # binomial standard errors allowed beyond the nominal rate (as tests/test_verdicts.py)


def null_grid(rng, *, tau: float, prompts: int = 3):
    """``(nll, correct)`` look-ups of one simulated grid with no effect (see the module's docstring)."""
    length = 2 * CONTEXT
    nll_of = {}
    for p in range(PASSAGES):
        difficulty = rng.normal(3.0, 1.0, length - 1)
        for m in METHODS:
            noise = np.convolve(rng.normal(0.0, 2.0, length + 6), np.ones(8) / math.sqrt(8), "valid")
            nll_of[(m, p)] = difficulty + noise + rng.normal(0.0, tau) + (MARGIN if m == "dynamic" else 0.0)
    keys = {(m, length): {(d, 0): bool(rng.random() < 0.5) for d in range(prompts)} for m in METHODS}

    def nll(method: str, n: int, passage: int):
        x = nll_of.get((method, passage))
        return None if x is None else x[:n - 1]

    return nll, (lambda method, n: keys.get((method, n), {}))


def family_rates(rng, grids: int, **kw) -> dict[str, float]:
    """Share of grids in which a paper's family (its source: Holm runs over it) had any claim decided."""
    decided: dict[str, int] = defaultdict(int)
    for _ in range(grids):
        nll, correct = null_grid(rng, **kw)
        verdicts = EV.claims(nll, correct, context=CONTEXT, lengths=[CONTEXT, 2 * CONTEXT], passages=PASSAGES,
                             methods=METHODS)
        families: dict[str, bool] = defaultdict(bool)
        for v in verdicts:
            families[v.source] |= v.status in ("agrees", "disagrees")
        for family, hit in families.items():
            decided[family] += hit
    return {family: hits / grids for family, hits in decided.items()}


@pytest.fixture
def no_detectable(monkeypatch):
    """The detectable effect (a noncentral-t root per claim: 0.3 s a grid) is not what is tested here."""
    monkeypatch.setattr(V, "detectable", lambda *args, **kwargs: 0.0)


def test_with_no_effect_each_paper_is_decided_at_most_at_its_nominal_rate(no_detectable):
    rates = family_rates(np.random.default_rng(35), GRIDS, tau=0.3)
    bound = V.ALPHA + BOUND * math.sqrt(V.ALPHA * (1 - V.ALPHA) / GRIDS)
    assert len(rates) == 5, rates  # four papers on perplexity, one on passkey
    assert all(rate <= bound for rate in rates.values()), (rates, bound)


def test_each_perplexity_claim_is_tested_on_its_own_passages(no_detectable):
    """Pooled over the claims (the report's dispersion model), passages of different works decided up to
    9.9% of null families at τ = 0.3 over 3000 grids (docs/guide/extend.md): no two claims share a pool."""
    nll, correct = null_grid(np.random.default_rng(0), tau=0.3)
    verdicts = EV.claims(nll, correct, context=CONTEXT, lengths=[CONTEXT, 2 * CONTEXT], passages=PASSAGES,
                         methods=METHODS)
    ppl = [v for v in verdicts if v.unit == "ΔNLL"]
    assert len(ppl) == 6 and len({v.pool for v in ppl}) == 6
    assert all(v.test is not None and not v.test.pooled and v.test.df == PASSAGES - 1 for v in ppl)


def test_passkey_on_three_prompts_is_never_decided():
    """McNemar's exact p on three paired prompts is at least 2/8: no verdict, whatever the answers."""
    length = 2 * CONTEXT
    keys = {(m, length): {(d, 0): m != "none" for d in range(3)} for m in METHODS}  # every scaling right
    verdicts = EV.passkey_verdicts(lambda m, n: keys.get((m, n), {}), METHODS, [length], CONTEXT)
    assert len(verdicts) == 5 and {v.status for v in verdicts} == {V.UNCLEAR}
    assert all(v.p == 0.25 and v.seeds == 3 for v in verdicts)
    keys = {(m, length): {(d, t): m != "none" for d in range(3) for t in range(3)} for m in METHODS}
    verdicts = EV.passkey_verdicts(lambda m, n: keys.get((m, n), {}), METHODS, [length], CONTEXT)
    assert {v.status for v in verdicts} == {"agrees"}  # nine prompts: 2/2⁹ × 5 claims < 0.05
