"""The benchmark's statistics against closed forms: Student's t, Holm's correction, McNemar's
exact test, Newey–West errors, seeds paired by id, and the verdicts built on them."""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest

from posenc.stats import distributions, findings, estimates as stats, procedure as verdicts
from posenc.extrapolate.parts import tasks as task_part
from posenc.extrapolate.parts import lm as text


@pytest.mark.parametrize("df, crit", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (5, 2.5706),
                                      (10, 2.2281), (30, 2.0423), (math.inf, 1.9600)])
def test_t_critical_values_match_the_table(df, crit):
    assert distributions.t_critical(df) == pytest.approx(crit, abs=5e-5)


def test_t_p_values_match_closed_forms():
    assert distributions.t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: 1 − 2·atan(1)/π
    assert distributions.t_two_sided_p(2.0, 2) == pytest.approx(1 - 2 / math.sqrt(6))  # df 2: 1 − t/√(t²+2)
    assert distributions.t_two_sided_p(2.0, 3) == pytest.approx(0.139326, abs=1e-6)
    assert distributions.t_two_sided_p(1.959964, math.inf) == pytest.approx(0.05, abs=1e-6)
    assert distributions.t_two_sided_p(0.0, 4) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="df"):
        distributions.t_two_sided_p(1.0, 2.5)


def test_holm_on_known_p_values():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4·0.005, 3·0.01, 2·0.03, max(0.06, 1·0.04): step-down, monotone
    assert distributions.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert distributions.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert distributions.holm([0.02]) == [0.02] and distributions.holm([]) == []


def test_mcnemar_exact_on_known_tables():
    assert distributions.mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 2**10)  # 0.0215
    assert distributions.mcnemar_exact(9, 1) == distributions.mcnemar_exact(1, 9)
    assert distributions.mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert distributions.mcnemar_exact(4, 4) == 1.0 and distributions.mcnemar_exact(0, 0) == 1.0


def test_newey_west_widens_the_error_of_correlated_blocks():
    rng = np.random.default_rng(0)
    iid = rng.normal(size=400)
    assert stats.hac_se(iid) == pytest.approx(iid.std(ddof=1) / 20, rel=0.15)
    ar = np.zeros(400)  # AR(1), ρ = 0.7: the long-run sd is √((1+ρ)/(1−ρ)) ≈ 2.4 times the iid one
    for i in range(1, 400):
        ar[i] = 0.7 * ar[i - 1] + rng.normal()
    ratio = stats.hac_se(ar) / (ar.std(ddof=1) / 20)
    assert 1.6 < ratio < 2.6, ratio


def _lm_record(label, seed, blocks, length=8):
    return {"label": label, "seed": seed, "train_length": length,
            "eval": [{"mode": "nonoverlap", "length": length, "nll": float(np.mean(blocks)), "block_nll": blocks}]}


def test_seeds_are_paired_by_id_not_by_record_order():
    a = [_lm_record("a", s, [1.0 + s, 1.0 + s, 1.1 + s]) for s in (0, 1, 2)]
    b = [_lm_record("b", s, [0.9 + s, 0.9 + s, 1.0 + s]) for s in (2, 0, 1)]  # another order
    d = stats.lm_table(a + b).diff(("a", 8), ("b", 8))
    assert d.mean == pytest.approx(0.1) and d.se == pytest.approx(0.0, abs=1e-12) and d.seeds == 3
    est = stats.lm_table(a).estimate("a", "nonoverlap", 8)
    assert est.df == 2 and est.seed_sd == pytest.approx(1.0)
    lo, hi = est.interval()
    assert hi - est.mean == pytest.approx(distributions.t_critical(2) * est.se)


def _task_record(label, hits_by_size, seed=0):
    rows = [{"task": "copy", "size": s, "length": 2 * s + 3, "correct": h.count("1"), "count": len(h),
             "token_acc": 0.5, "hits": h} for s, h in hits_by_size.items()]
    return {"label": label, "seed": seed, "max_size": 2, "trained_positions": 9, "eval": rows}


def test_task_verdicts_use_cells_beyond_trained_positions_and_test_the_seeds():
    right = "1" * 20
    # size 3: length 9, within the trained positions (not used); size 4: length 11, beyond
    recs = []
    for seed, wins in ((0, 12), (1, 11), (2, 13)):  # nope right on 10, 9, 11 more of the 20 examples than t5
        recs.append(_task_record("nope", {2: right, 3: "0" * 20, 4: "1" * wins + "0" * (20 - wins)}, seed))
        recs.append(_task_record("t5", {2: right, 3: right, 4: "1" * 2 + "0" * 18}, seed))
    table = stats.task_table(recs)
    assert not table.beyond("copy", 3) and table.beyond("copy", 4)
    assert table.discordant("nope", "t5", [("copy", 4)]) == (30, 0, 60)
    verdicts_, _, tasks = task_part.task_verdicts(table)
    first = verdicts_[0]
    assert tasks == ["copy"] and first.evidence.effects == pytest.approx((0.5, 0.45, 0.55))  # size 3 left out
    assert first.status == "agrees" and first.direction == 1 and first.test.df == 2 and first.mde is not None
    assert f"McNemar's exact p {distributions.mcnemar_exact(30, 0):.2g}" in first.measured  # McNemar describes
    one = task_part.task_verdicts(stats.task_table(recs[:2]))[0][0]  # the same on one seed: not decided
    assert one.status == "needs seeds" and one.p is None and "needs seeds: 1 seed" in one.measured
    assert table.estimate("nope", "copy", 3).se > 0  # no zero error at 0%


def _evidence(mean: float, se: float, sign: int = 1) -> findings.Evidence:
    sd = se * 3**0.5
    return findings.Evidence((mean - sd, mean, mean + sd), (sd / 3,) * 3, sign=sign)


def test_adjust_decides_each_paper_as_one_family_and_leaves_one_seed_undecided():
    a = [findings.seed_verdict("A", f"c{i}", "m", _evidence(m, 0.1), unit="ΔNLL") for i, m in enumerate((0.9, 0.5, 0.05))]
    b = findings.seed_verdict("B", "c", "m", _evidence(0.5, 0.1), unit="ΔNLL")
    one = findings.seed_verdict("A", "one seed", "m", findings.Evidence((-0.5,), (0.0001,)), unit="ΔNLL")
    untested = findings.Verdict("A", "learned cannot run", "m", "agrees")
    out = findings.adjust([dataclasses.replace(v, pool="lm") for v in (*a, b, one, untested)])
    assert [v.tests for v in out] == [3, 3, 3, 1, 0, 0]  # the family is the paper, the untested left out
    assert [v.p_holm for v in out[:3]] == pytest.approx(distributions.holm([v.p for v in out[:3]]))
    assert out[3].p_holm == pytest.approx(out[3].p) and all(v.test.pooled and v.test.df == 8 for v in out[:4])
    assert [v.status for v in out] == ["agrees", "agrees", "no clear difference", "agrees", "needs seeds", "agrees"]
    assert out[4].indicative and out[4].p is None and not out[0].indicative
    assert out[3].mde < out[0].mde  # three claims in a paper need a larger effect than one alone


def test_non_inferiority_needs_the_increase_below_the_margin():
    L = 8
    rng = np.random.default_rng(0)
    base = np.array([1.0, 1.2, 0.9, 1.1, 1.0, 1.3])
    for shift, expect in ((0.0, "agrees"), (0.2, "disagrees")):
        recs = []
        for seed in (0, 1, 2):
            far = base + shift + rng.normal(0, 0.002) + rng.normal(0, 0.001, base.size)  # a seed's shift, blocks' noise
            rows = [{"mode": m, "length": t, "block_nll": list(far if t == 4 * L else base)}
                    for m in ("nonoverlap", "sliding") for t in (L, 2 * L, 4 * L)]
            recs.append({"label": "alibi", "seed": seed, "train_length": L, "eval": rows})
        v = text.lm_verdicts(stats.lm_table(recs))[0]
        assert v.status == expect, (shift, v)
        assert text.lm_verdicts(stats.lm_table(recs[:1]))[0].status == "needs seeds"  # one seed: not decided



def test_a_seed_with_a_value_that_is_not_finite_leaves_the_claim_not_measured():
    diverged = stats.Estimate(math.nan, 1.0, 3, 0.0, (1.0, math.nan, 2.0), (0.1, 0.1, 0.1))
    v = findings.tested("s", "c", "m", diverged, expect_negative=True)
    assert v.status == "not measured" and v.evidence is None and "not finite" in v.measured
    with pytest.raises(ValueError, match="per-seed"):
        findings.tested("s", "c", "m", stats.Estimate(1.0, 0.1, 1), expect_negative=True)
