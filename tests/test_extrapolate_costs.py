"""The plan's cost before it runs (``posenc.extrapolate.costs``): every row of the smoke and quick
profiles measured in costs.json with its provenance; an estimate found row by row (measured, scaled
within ``MAX_SCALE``, its part's median, or none); ``--dry-run`` prints only the estimate."""

from __future__ import annotations

import dataclasses

import pytest

from posenc.cli import main
from posenc.extrapolate import costs
from posenc.extrapolate.parts import plan
from posenc.extrapolate.plan import available_schemes
from posenc.extrapolate.profiles import get_profile, with_overrides


def _runs(profile):
    return plan(profile, list(available_schemes(profile.schemes, lambda msg: None)), corpus_sha="", log=lambda m: None)


@pytest.mark.parametrize("name", ["smoke", "quick"])
def test_every_row_of_the_smoke_and_quick_profiles_is_measured(name):
    measurements = costs.load()
    assert all({"commit", "date", "machine", "command", "rows"} <= set(m) for m in measurements)
    profile = get_profile(name)
    est = costs.estimate(profile, _runs(profile))
    assert est.how["measured"] == est.runs > 0 and est.cpu_seconds > 0


def test_rows_are_scaled_by_work_within_the_limit_and_fall_back_to_their_part():
    quick, full = get_profile("quick"), get_profile("full")
    rope = next(r for r in _runs(with_overrides(full, seeds=(0,), parts=("lm",))) if r.label == "rope")
    table = {"quick": {costs.run_row(rope): 10.0}}
    seconds, how = costs.run_cost(rope, full, table)
    ratio = costs.work(full, rope) / costs.work(quick, rope)
    assert how == "scaled" and seconds == pytest.approx(10.0 * ratio) and 1 < ratio <= costs.MAX_SCALE
    other = next(r for r in _runs(with_overrides(full, seeds=(0,), parts=("lm",))) if r.label == "alibi")
    assert costs.run_cost(other, full, table) == (pytest.approx(10.0 * ratio), "part")
    # the smoke profile's few steps are not scaled up thousands of times: no estimate rather than a wrong one
    assert costs.work(full, rope) / costs.work(get_profile("smoke"), rope) > costs.MAX_SCALE
    assert costs.run_cost(rope, full, {"smoke": {costs.run_row(rope): 1.0}}) == (0.0, "none")
    est = costs.estimate(full, [rope, other], {"quick": {costs.run_row(rope): 10.0}})
    assert est.line(2).startswith("estimate: about ") and "with 2 workers" in est.line(2)
    assert costs.estimate(full, [rope], {}).line(1).startswith("estimate: at least 0 CPU-hours")


@pytest.mark.parametrize("command", ["extrapolate", "report"])
def test_dry_run_prints_only_the_estimate(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command, "--profile", "quick", "--dry-run", "--jobs", "2"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("estimate: about ") and "with 2 workers about" in out and out.count("\n") == 1
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def test_the_decide_profile_runs_every_row_a_claim_of_the_page_reads():
    """The smoke kept set decides (or asks seeds for) every claim of the page but the pretrained model's;
    kept to the rows the decide profile also runs, it must still reach every one of them: a claim that
    turns "not measured" names a row the decide profile lacks."""
    from posenc.extrapolate import kept
    from posenc.extrapolate.costs import run_row
    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.plan import available_schemes
    from posenc.extrapolate.profiles import get_profile

    def rows(profile, sha=""):
        names = list(available_schemes(profile.schemes, lambda msg: None))
        return {r.key: run_row(r) for r in plan(profile, names, corpus_sha=sha, log=lambda msg: None)}

    smoke = next(k for k in kept.load_sets()[0] if k.provenance["profile"] == "smoke")
    sha = next(r["corpus"]["sha256"] for r in smoke.records if r.get("corpus"))
    smoke_rows, decide_rows = rows(smoke.profile(), sha), set(rows(get_profile("decide")).values())
    assert set(smoke_rows) >= {r["key"] for r in smoke.records}
    reached = {(v.source, v.claim) for v in kept.verdicts(smoke) if v.status != "not measured"}
    assert len(reached) >= 38  # the smoke set reaches 38 of the 55; the kept decide set itself: test_extrapolate_kept.py
    only_decide = dataclasses.replace(smoke, records=[r for r in smoke.records
                                                      if smoke_rows.get(r["key"]) in decide_rows])
    still = {(v.source, v.claim) for v in kept.verdicts(only_decide) if v.status != "not measured"}
    missing = [f"{src}: {claim}" for src, claim in sorted(reached - still)]
    assert not missing, missing
