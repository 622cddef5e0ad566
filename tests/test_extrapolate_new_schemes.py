"""Issue 38's benchmark rows: Dual Chunk Attention zero-shot on the trained RoPE models beside the
scalings (smoke, quick and full profiles), PoPE and FoPE in the full profile's language-modelling
rows, and their claims ("not measured" without runs, decided from a table of known results)."""

from __future__ import annotations

import dataclasses

import numpy as np

from posenc.stats import estimates as stats
from posenc.extrapolate.parts import plan
from posenc.extrapolate.parts import lm as T
from posenc.extrapolate.parts import scaling as S
from posenc.extrapolate.profiles import LENGTH_LM_ROWS, PROFILES, with_overrides
from posenc.stats.estimates import LMTable

QUIET = {"corpus_sha": "0", "log": lambda msg: None}


def test_dual_chunk_runs_zero_shot_on_the_trained_rope_in_every_profile():
    for name in ("smoke", "quick", "full"):
        profile = PROFILES[name]
        runs = [r for r in plan(profile, list(profile.schemes), **QUIET) if r.variant.get("type") == S.DUAL_CHUNK]
        assert [r.seed for r in runs] == list(profile.seeds_for("scaling")), name
        assert all(r.part == "scaling" and r.label == "rope + dual_chunk (zero-shot)" for r in runs)
        spec = S.dual_chunk_spec(runs[0].spec, profile)
        L = profile.lm.train_length
        assert (spec["chunk_size"], spec["local_size"], spec["original_max_position_embeddings"]) == (L, L // 8, L)
        assert spec["head_dim"] == runs[0].spec["head_dim"] and spec["base"] == runs[0].spec["base"]
    # another architecture, or no DCA in the profile: no row (the other rows keep their keys)
    off = with_overrides(PROFILES["smoke"], parts=("lm", "scaling"))
    keys = {r.key for r in plan(off, ["rope"], **QUIET) if r.variant.get("type") != S.DUAL_CHUNK}
    without = dataclasses.replace(off, dual_chunk=False)
    assert {r.key for r in plan(without, ["rope"], **QUIET)} == keys


def test_pope_and_fope_are_full_profile_rows_with_fope_at_the_training_length():
    full = with_overrides(PROFILES["full"], parts=("lm",))
    rows = [r for r in plan(full, list(full.schemes), **QUIET) if r.spec["scheme"] in LENGTH_LM_ROWS]
    assert sorted({r.label for r in rows}) == ["fope", "pope"] and len(rows) == 2 * len(full.seeds_for("lm"))
    fope = next(r for r in rows if r.label == "fope")
    assert fope.spec["max_positions"] == full.lm.train_length
    assert not [r for r in plan(PROFILES["quick"], list(PROFILES["quick"].schemes), **QUIET)
                if r.spec.get("scheme") in LENGTH_LM_ROWS]


def _table(nll: dict[str, float], lengths=(32, 512)) -> LMTable:
    """Three seeds of each label with per-block NLLs around ``nll[label]`` at the longest length."""
    rng = np.random.default_rng(0)
    records = []
    for label, value in nll.items():
        for seed in range(3):
            evals = []
            for length in lengths:
                centre = value if length == max(lengths) else 2.0
                blocks = (centre + 0.01 * rng.standard_normal(16)).tolist()
                evals += [{"length": length, "mode": mode, "mult": length // lengths[0], "nll": float(np.mean(blocks)),
                           "block_nll": blocks} for mode in ("nonoverlap", "sliding")]
            records.append({"label": label, "seed": seed, "train_length": lengths[0], "eval": evals, "part": "lm"})
    return stats.lm_table(records)


def test_length_claims_are_not_measured_without_runs_and_decided_with_them():
    missing = T.length_verdicts(_table({"rope": 3.0}))
    assert [v.status for v in missing] == ["not measured"] * 2 and "pope" in missing[0].measured
    decided = T.length_verdicts(_table({"rope": 3.0, "pope": 2.5, "fope": 3.5}))
    assert [v.status for v in decided] == ["agrees", "disagrees"]
    assert decided[0].source == T.POPE and decided[1].source == T.FOPE
