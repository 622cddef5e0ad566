"""The verdict procedure (``posenc.stats.procedure``) tested like a kernel: on simulated
results whose truth is known (no training). Calibration with no true effect, power at the
detectable effect the procedure states, validity when the rows' seeds disagree, the issue's
three-seed numbers decided, and no verdict on fewer than three seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.stats import distributions as D
from posenc.stats import procedure as V
from posenc.stats.distributions import t_critical, t_two_sided_p

ROWS, SEEDS = 8, 3
FAMILIES = ["a"] * 5 + ["b"] * 3  # two papers of one part: 5 claims and 3
BOUND = 3.0  # binomial standard errors allowed beyond the nominal rate


def _part(rng, sigma: np.ndarray, noise: np.ndarray, effects: np.ndarray, seeds: int = SEEDS):
    """One simulated part: row ``c`` has ``seeds`` values ``effects[c] + N(0, sigma[c]²)`` and a
    held-out standard error ``noise[c]`` per seed (measured with 10% error, as Newey–West is)."""
    out = []
    for c in range(len(sigma)):
        values = effects[c] + rng.normal(0.0, sigma[c], seeds)
        within = noise[c] * np.exp(rng.normal(0.0, 0.1, seeds))
        out.append((V.Evidence(tuple(values), tuple(within)), FAMILIES[c], "part"))
    return out


def _sizes(rng) -> np.ndarray:
    return np.exp(rng.uniform(math.log(0.01), math.log(0.3), ROWS))  # rows 30× apart, as the issue's SEs


def _family_error_rate(rng, parts: int, spread: float, seeds: int = SEEDS) -> float:
    """Share of families (papers) with any claim decided when no claim has an effect; the rows'
    seed spread relative to their held-out noise differs up to ``spread``× between rows."""
    wrong = families = 0
    for _ in range(parts):
        noise = _sizes(rng)
        sigma = 3.0 * np.exp(rng.uniform(0.0, math.log(spread), ROWS)) * noise
        status = [d.status for d in V.decide(_part(rng, sigma, noise, np.zeros(ROWS), seeds))]
        for family in set(FAMILIES):
            families += 1
            wrong += any(s in ("agrees", "disagrees") for s, f in zip(status, FAMILIES) if f == family)
    return wrong / families


def _limit(rate: float, n: int) -> float:
    return rate + BOUND * math.sqrt(rate * (1 - rate) / n)


def test_each_distribution_is_defined_once_and_imported_from_its_module():
    """``posenc.stats.distributions`` defines them; no other module defines one, lists one in its
    ``__all__``, or imports one from anywhere but ``posenc.stats.distributions``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    names = set(D.__all__)
    for path in sorted((root / "posenc").rglob("*.py")) + sorted((root / "tests").glob("*.py")):
        if path.name == "distributions.py" and path.parent.name == "stats":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.col_offset == 0:
                assert node.name not in names, f"{path.name} defines {node.name}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posenc.stats."):
                bad = [a.name for a in node.names if a.name in names] if node.module != "posenc.stats.distributions" \
                    else []
                assert not bad, f"{path.name} imports {bad} from {node.module}"
        for module in (V, __import__("posenc.stats.estimates", fromlist=["_"])):
            assert not names & set(getattr(module, "__all__", ())), module.__name__


def test_distributions_match_the_closed_forms():
    for df in (1, 2, 3, 4, 7, 30):
        for t in (0.3, 1.5, 4.0, 12.0):
            assert 2 * D.t_sf(t, df) == pytest.approx(t_two_sided_p(t, df), rel=1e-9, abs=1e-14)
        assert D.t_quantile(0.975, df) == pytest.approx(t_critical(df), rel=1e-9)
    assert D.t_sf(1.0, 2.5) < D.t_sf(1.0, 2.0) and D.t_sf(-1.0, 5) == pytest.approx(1 - D.t_sf(1.0, 5))
    assert D.f_sf(4.0, 1, 9) == pytest.approx(2 * D.t_sf(2.0, 9), rel=1e-9)  # F(1, d) = t²
    assert V.detectable(1.0, math.inf, 1) == pytest.approx(1.959964 + 0.841621, abs=2e-3)  # z_.975 + z_.8
    assert V.detectable(1.0, 2, 1) > V.detectable(1.0, 16, 1) and V.detectable(1.0, 16, 7) > V.detectable(1.0, 16, 1)


def test_with_no_effect_it_decides_at_most_its_nominal_rate():
    rng = np.random.default_rng(0)
    parts = 1000  # 2000 families
    rate = _family_error_rate(rng, parts, spread=1.0)
    assert rate <= _limit(V.ALPHA, 2 * parts), rate


def test_it_stays_valid_when_the_rows_seeds_disagree():
    """Rows 30× apart in size whose seeds spread up to 2× more (relative to their held-out noise)
    in some rows than in others; and every claim with its own seed count (3, 4, 5)."""
    rng = np.random.default_rng(1)
    parts = 1000
    rate = _family_error_rate(rng, parts, spread=2.0)
    assert rate <= _limit(V.ALPHA, 2 * parts), rate
    rate5 = _family_error_rate(rng, 300, spread=2.0, seeds=5)
    assert rate5 <= _limit(V.ALPHA, 600), rate5


def test_at_the_detectable_effect_it_decides_at_least_80_percent():
    """The detectable effect the procedure states for a claim (from its data with no effect):
    with that true effect, the claim is decided in its direction at least 80% of the time."""
    rng = np.random.default_rng(2)
    trials, hits = 400, 0
    for _ in range(trials):
        noise = _sizes(rng)
        part = _part(rng, 3.0 * noise, noise, np.zeros(ROWS))
        first = V.decide(part)[0]
        ev = part[0][0]
        shifted = V.Evidence(tuple(np.asarray(ev.effects) + first.mde), ev.within)
        hits += V.decide([(shifted, "a", "part"), *part[1:]])[0].status == "agrees"
    assert hits / trials >= V.POWER - BOUND * math.sqrt(V.POWER * (1 - V.POWER) / trials), hits / trials


def test_the_seeds_to_detect_an_effect_detect_it_with_80_percent():
    """``seeds_to_detect``: at the seeds it names, the detectable effect is at most the target, one seed fewer
    it is above; and simulated claims of that true effect, on that many seeds with the measured spread, are
    decided in their direction at least 80% of the time (their own spread: the unpooled test)."""
    rng = np.random.default_rng(5)
    sd, target, tests = 0.3, 0.25, 2
    test = V.ClaimTest(0.0, sd / math.sqrt(3), 2.0, 0.5, 0.5, 3, False)
    n = V.seeds_to_detect(test, target, tests)
    assert n is not None and n > 3
    assert V.detectable(sd / math.sqrt(n), n - 1, tests) <= target < V.detectable(sd / math.sqrt(n - 1), n - 2, tests)
    assert V.seeds_to_detect(test, V.detectable(test.se, 2.0, tests), tests) == 3  # detectable now: the seeds it has
    assert V.seeds_to_detect(test, 0.0, tests) is None
    pooled = V.ClaimTest(0.0, sd / math.sqrt(3), 16.0, 0.5, 0.5, 3, True)  # 8 rows' spread: more df, fewer seeds
    assert V.seeds_to_detect(pooled, target, tests) < n
    trials, hits = 600, 0
    for _ in range(trials):
        d = target + sd * rng.standard_normal(n)
        ev = V.Evidence(tuple(d), tuple(np.full(n, sd / 3)))
        other = V.Evidence(tuple(sd * rng.standard_normal(n)), tuple(np.full(n, sd / 3)))
        hits += V.decide([(ev, "paper", "a"), (other, "paper", "b")])[0].status == "agrees"
    assert hits / trials >= V.POWER - BOUND * math.sqrt(V.POWER * (1 - V.POWER) / trials), hits / trials


def _seeds(mean: float, se: float, spread: float = 3.0) -> V.Evidence:
    """Three seeds with exactly ``mean`` and standard error ``se`` (sd = se·√3), held-out noise
    ``sd/spread``: the seeds spread ``spread``× the held-out noise."""
    sd = se * math.sqrt(3)
    return V.Evidence((mean - sd, mean, mean + sd), (sd / spread,) * 3)


PRESS = "Press et al. 2022"
ISSUE_LM = [  # the issue's three-seed numbers (mean ± SE of ΔNLL): effect/SE 7.5, 12.6, 15.9, 7.4, 10.3
    ("at 16L, ALiBi beats sinusoidal", -0.820, 0.109, -1),
    ("at 16L, ALiBi beats rotary", -0.819, 0.065, -1),
    ("rotary degrades past L", 1.114, 0.070, 1),
    ("sinusoidal degrades past L", 0.905, 0.123, 1),
    ("at 16L, ALiBi beats T5", -0.257, 0.025, -1),
    ("at 16L, rotary beats sinusoidal (about 1 SE)", -0.06, 0.058, -1),
]


def test_the_issues_three_seed_numbers_are_decided_and_one_se_stays_unclear():
    claims = [(V.Evidence(_seeds(m, se).effects, _seeds(m, se).within, sign=sign), PRESS, "lm")
              for _, m, se, sign in ISSUE_LM]  # the seeds spread 3× their held-out noise in every row
    alibi_holds = _seeds(-0.01, 0.004)  # ALiBi does not degrade: margin 0.0198 nats, 7.4 SE below it
    claims.append((V.Evidence(alibi_holds.effects, alibi_holds.within, null=math.log(1.02), sign=-1), PRESS, "lm"))
    out = V.decide(claims)
    assert [d.status for d in out] == ["agrees"] * 5 + [V.UNCLEAR, "agrees"], [(d.status, d.p_holm) for d in out]
    for d, (_, m, se, _) in zip(out, ISSUE_LM):
        assert d.test.pooled and d.test.effect == pytest.approx(m) and d.test.se == pytest.approx(se, rel=0.05)
        low, high = d.test.interval()
        assert low < m < high and d.mde < 5 * se  # 5 SE is beyond what it detects
    # one claim alone in its family and part (no pooling): Student's t on its 2 df decides 5 SE
    ntk = _seeds(-0.147, 0.147 / 5.0)
    alone = V.decide([(V.Evidence(ntk.effects, ntk.within, sign=-1), "bloc97 2023", "scaling")])[0]
    assert alone.status == "agrees" and not alone.test.pooled and alone.test.df == 2
    # seconds beat frame indices at 20 fps: Δaccuracy +0.557 ± 0.031, beside two rows of its part
    time_rows = [(_seeds(m, se), "time", "time") for m, se in ((0.557, 0.031), (0.40, 0.05), (0.01, 0.02))]
    assert [d.status for d in V.decide(time_rows)] == ["agrees", "agrees", V.UNCLEAR]


def test_fewer_than_three_seeds_are_never_decided():
    """A row on one seed has no spread between training runs: however small its held-out error
    (window-level p = 1e-96), it is not decided; nor are two seeds."""
    one = V.Evidence((-0.5,), (0.001,), sign=-1)
    two = V.Evidence((-0.5, -0.52), (0.001, 0.001), sign=-1)
    rows = [(one, "p", "lm"), (two, "p", "lm"), *[(_seeds(-0.3, 0.02), "q", "lm")] * 3]
    out = V.decide(rows)
    assert out[0].status == out[1].status == V.NEEDS_SEEDS and out[0].test is None and out[0].mde is None
    assert all(d.status != V.NEEDS_SEEDS for d in out[2:])
    assert V.decide([(None, "p", "lm")])[0].status == "not measured"


def test_a_row_out_of_line_with_its_part_is_tested_on_its_own_seeds():
    calm = [(_seeds(0.0, 0.01), "p", "lm") for _ in range(6)]
    wild = _seeds(0.3, 0.1, spread=30.0)  # seeds 30× its held-out noise, the others 3×: 100× the relative variance
    out = V.decide([(wild, "p", "lm"), *calm])
    assert not out[0].test.pooled and out[0].test.df == 2 and out[0].status == V.UNCLEAR
    assert all(d.test.pooled and d.test.df == 14 for d in out[1:])


def test_bad_evidence_is_refused():
    with pytest.raises(ValueError, match="sign"):
        V.Evidence((1.0,), (0.1,), sign=0)
    with pytest.raises(ValueError, match="one length"):
        V.Evidence((1.0, 2.0), (0.1,))


def test_the_papers_effect_is_read_in_the_claims_units():
    """docs/seeds_needed.py (numbers.md's "which claims needed more than three seeds"): two perplexities are a
    log ratio in nats, two error rates a difference in accuracy, a non-inferiority claim's distance from its
    margin; an MRR or a claim with no number states no effect in the claim's units."""
    import importlib.util
    from pathlib import Path

    from posenc.stats.findings import Verdict

    path = Path(__file__).resolve().parents[1] / "docs" / "seeds_needed.py"
    spec = importlib.util.spec_from_file_location("seeds_needed", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def effect(source, claim, unit, null=0.0):
        ev = V.Evidence((0.0, 0.1, 0.2), (0.1, 0.1, 0.1), null=null)
        found = script.paper_effect(Verdict(source, claim, "", "no clear difference", evidence=ev, unit=unit))
        return None if found is None else found[0]

    assert effect("Press et al. 2022", "at 16L, rotary beats sinusoidal (79.25 vs 406 at 30L)", "ΔNLL") == \
        pytest.approx(math.log(406 / 79.25))
    assert effect("Press et al. 2022", "ALiBi does not degrade past L: 19.73 at L → 18.31 at 30L", "ΔNLL",
                  null=math.log(1.02)) == pytest.approx(abs(math.log(18.31 / 19.73) - math.log(1.02)))
    assert effect("Golovneva et al. 2024", "counting: test error with 3 variables 1.2% vs 17.8%", "Δaccuracy") == \
        pytest.approx(0.166)
    assert effect("Ruoss et al. 2023 (randomized positions)", "rope with randomized positions generalises better",
                  "Δaccuracy") == pytest.approx(0.12)
    assert effect("Kazemnejad et al. 2023", "nope generalises better than t5 (MRR 0.69 vs 0.55)", "Δaccuracy") is None
    assert effect("Yang et al. 2025 (RoPE to NoPE)", "at 16L, RoPE layers with a NoPE layer beat RoPE", "ΔNLL") is None
