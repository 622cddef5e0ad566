"""The language-modelling rows of positions that depend on content (issue 19): planned in the full
profile only (the quick profile's plan and keys are unchanged), their claims decided from a small
synthetic results file, and "not measured" with the command that measures them when their runs
are missing."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from posenc.stats import findings
from posenc.stats.page_parts import Page
from posenc.extrapolate.parts import plan
from posenc.extrapolate.parts import lm as T
from posenc.extrapolate.profiles import CONTENT_LM_ROWS, DEFAULT_SCHEMES, PROFILES, content_lm_rows, with_overrides

L, LENGTHS = 16, (16, 32, 64)
PATTERN = "layers: rope, nope_temperature"  # a 2-long pattern, as a 2-layer model runs it


def _record(label: str, short: float, long: float, *, spec: dict | None = None, seed: int = 0) -> dict:
    """NLL ``short`` at L and ``long`` at the longest length (non-overlapping windows); sliding
    windows: ``short`` at L/2–L, ``long`` at the farthest positions. 24 blocks with their own noise."""
    rng = np.random.default_rng([zlib.crc32(label.encode()), seed])  # the same noise in every process
    rows = []
    for length in LENGTHS:
        mean = short if length == L else long if length == LENGTHS[-1] else (short + long) / 2
        for mode in ("nonoverlap", "sliding"):
            blocks = mean + rng.normal(0.0, 0.01, 24)
            rows.append({"mode": mode, "length": length, "mult": length / L, "nll": float(blocks.mean()),
                         "block_nll": [float(b) for b in blocks]})
    return {"part": "lm", "label": label, "seed": seed, "arch": "transformer", "train_length": L, "eval": rows,
            "spec": spec or {"scheme": label}, "params": 1000, "train_loss": [3.0, 2.0]}


BASELINES = [_record("rope", 1.0, 2.0), _record("nope", 1.2, 0.5), _record("kerple", 1.0, 1.0)]
CONTENT = [_record("fox", 1.0, 1.0),  # beats RoPE at 16L (2.0), loses to NoPE (0.5)
           _record("dape", 1.0, 1.0),  # the same as KERPLE: no clear difference
           _record("stick_breaking", 1.0, 1.0),  # holds past L
           _record(PATTERN, 1.0, 1.2, spec={"scheme": "layers", "pattern": [{"scheme": "rope"},
                                                                            {"scheme": "nope_temperature"}]})]


def _section(records: list[dict]) -> tuple[str, list[findings.Verdict]]:
    page = Page()
    section = T.PART.section(page, records, PROFILES["smoke"])
    return page.html("t"), [v for v in section.verdicts if v.source in (T.LIN, T.ZHENG, T.TAN, T.YANG)]


def _seeds(records: list[dict], seeds=(0, 1, 2)) -> list[dict]:
    """``records`` trained on ``seeds``: each seed's blocks with their own noise."""
    return [{**_record(r["label"], r["eval"][0]["nll"], r["eval"][-1]["nll"], spec=r["spec"], seed=s), "label": r["label"]}
            for s in seeds for r in records]


def test_content_claims_decide_from_a_results_file():
    html, verdicts = _section(_seeds(BASELINES + CONTENT))
    assert [v.source for v in verdicts] == [T.LIN, T.LIN, T.ZHENG, T.TAN, T.YANG]
    assert [v.status for v in verdicts] == ["agrees", "disagrees", "no clear difference", "agrees", "agrees"], [
        (v.claim, v.measured) for v in verdicts]
    assert all(v.p is not None and v.seeds == 3 and v.mde is not None for v in verdicts)  # each joins its family
    assert PATTERN in verdicts[-1].claim and "fox @64" in verdicts[0].measured
    _, one = _section(BASELINES + CONTENT)  # one seed: none is decided, however small the windows' error
    assert [v.status for v in one] == ["needs seeds"] * 5 and all(v.p is None and v.seeds == 1 for v in one)
    assert 'id="content"' in html and "Positions that depend on content" in html and 'href="#tasks"' in html
    assert "Does not agree" in html and "at 4L, FoX beats NoPE" in html


def test_content_claims_are_missing_without_their_runs():
    html, verdicts = _section(BASELINES)
    assert len(verdicts) == 5 and {v.status for v in verdicts} == {"not measured"}
    assert all(v.p is None and v.measured.startswith("missing: no runs of") for v in verdicts)
    assert T.CONTENT_COMMAND in verdicts[0].measured and "no runs of fox (" in verdicts[0].measured
    # the pattern the smoke profile's 2-layer model would run, named (a 4-layer model's: rope x3)
    assert f"no runs of {PATTERN} (" in verdicts[-1].measured and "(Llama 4's pattern, " + PATTERN in verdicts[-1].claim
    assert T.rope_nope_label([], PROFILES["full"]) == T.PATTERN == "layers: rope x3, nope_temperature"
    assert 'id="content"' in html and T.CONTENT_COMMAND in html


def test_the_full_profile_plans_the_content_rows_on_three_seeds_and_quick_leaves_them_out():
    quiet = {"corpus_sha": "0", "log": lambda msg: None}
    full = with_overrides(PROFILES["full"], parts=("lm",), seeds=(0,))
    # the structured positions' rows (tests/test_extrapolate_structure.py), PoPE's and FoPE's (test_extrapolate_new_schemes.py)
    elsewhere = ("bipe", "bipe_bias", "pope", "fope")
    labels = [r.label for r in plan(full, list(DEFAULT_SCHEMES), **quiet)
              if r.arch == "transformer" and r.spec["scheme"] not in elsewhere]
    assert labels == [*DEFAULT_SCHEMES, "fox", "fox (gate=bias_only)", "cope", "dape", "stick_breaking", T.PATTERN]
    assert len(CONTENT_LM_ROWS) == 6
    mine = [r.label for r in plan(full, ["rope", "fox"], **quiet) if r.arch == "transformer"]
    assert mine == ["rope", "fox"]  # --scheme replaces the profile's rows, these too
    every = [(r.seed, r.label) for r in plan(PROFILES["full"], list(DEFAULT_SCHEMES), **quiet)
             if r.part == "lm" and r.arch == "transformer" and r.spec["scheme"] not in elsewhere]
    assert every == [(seed, lab) for seed in (0, 1, 2) for lab in labels]  # no row on fewer seeds than a verdict needs
    # make report's profile: three seeds of the content rows do not fit its time, so it has none, and its page
    # names the command that measures their claims
    quick = PROFILES["quick"]
    assert quick.lm_rows == () == PROFILES["smoke"].lm_rows
    assert "--profile full" in T.CONTENT_COMMAND
    assert content_lm_rows(2)[-1] == '["rope", "nope_temperature"]' and content_lm_rows(8) == CONTENT_LM_ROWS
    lm = [(r.seed, r.label) for r in plan(quick, list(quick.schemes), **quiet)
          if r.part == "lm" and r.arch == "transformer" and r.spec["scheme"] not in elsewhere]
    assert lm == [(seed, lab) for seed in (0, 1, 2) for lab in DEFAULT_SCHEMES]
    # --scheme still runs content schemes on the quick profile, on its three seeds
    mine = [(r.seed, r.label) for r in plan(quick, ["fox", "rope"], **quiet) if r.part == "lm" and r.arch == "transformer"]
    assert mine == [(seed, lab) for seed in (0, 1, 2) for lab in ("fox", "rope")]


def test_a_claim_on_rows_of_one_seed_against_three_quotes_the_perplexities_of_the_shared_seed():
    """make report trains the content rows on seed 0 and RoPE on seeds 0, 1, 2: the paired
    difference is seed 0's, and so are the perplexities it quotes (the three seeds' mean of RoPE
    beside a one-seed ΔNLL could read the other way)."""
    rope = [_record("rope", 1.0, 2.0 + 0.5 * seed, seed=seed) for seed in (0, 1, 2)]
    _, verdicts = _section(rope + [_record("nope", 1.2, 0.5), _record("kerple", 1.0, 1.0), CONTENT[0]])
    fox_rope = verdicts[0]
    assert f"rope @64: {np.exp(2.0):.2f}" in fox_rope.measured and ", seed 0)" in fox_rope.measured
    assert fox_rope.seeds == 1 and fox_rope.status == "needs seeds"  # one shared seed: not decided
    _, verdicts = _section(BASELINES + CONTENT)  # the same seeds on both sides: nothing added
    assert ", seed 0)" not in verdicts[0].measured
