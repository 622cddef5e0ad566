"""The report's answers on the hybrid (attention + ssm blocks), from synthetic per-block NLLs
whose differences are known: degrade or not by the two-standard-error rule on the same bytes at
far positions against L/2–L, position needed or
not at the training length, and older records without ``arch`` read as transformer runs."""

from __future__ import annotations

import re

import numpy as np

from posenc.stats import estimates as stats
from posenc.extrapolate.parts import hybrid
from posenc.stats.page_parts import Page
from posenc.extrapolate.parts.hybrid import hybrid_section as _hybrid_section

L, LONG, BLOCKS = 32, 128, 40


def _record(label: str, at_l: float, at_long: float, *, arch: str | None = "hybrid", seed: int = 0) -> dict:
    noise = np.random.default_rng(seed).normal(0, 0.01, size=BLOCKS)  # shared by both lengths: paired
    # both modes at both lengths: the position buckets (L/2–L from sliding windows of L, LONG/2–LONG
    # from sliding windows of LONG) score the same blocks, as the benchmark's evaluation does
    rows = [{"mode": mode, "length": t, "mult": t / L, "block_nll": list(v + noise), "nll": float(v)}
            for t, v in ((L, at_l), (LONG, at_long)) for mode in ("nonoverlap", "sliding")]
    rec = {"label": label, "part": "lm", "train_length": L, "eval": rows}
    if arch is not None:
        rec["arch"] = arch
    return rec


def _table(*records) -> stats.LMTable:
    return stats.lm_table(records)


def test_a_nope_hybrid_that_holds_is_classed_with_alibi_not_rope():
    table = _table(_record("hybrid nope", 1.0, 0.98), _record("hybrid rope", 1.0, 1.2, seed=1),
                   _record("rope", 1.0, 1.5, arch=None, seed=2), _record("alibi", 1.0, 0.97, arch=None, seed=3))
    extrapolation, position = hybrid.hybrid_answers(table)
    assert "the NoPE hybrid does not degrade past L" in extrapolation
    assert re.search(r"like alibi \(-0\.0[0-9]+\) in this run and unlike rope \(\+0\.5[0-9]+\)", extrapolation)


def test_a_nope_hybrid_that_degrades_is_classed_with_rope():
    table = _table(_record("hybrid nope", 1.0, 1.3), _record("hybrid rope", 1.0, 1.2, seed=1),
                   _record("rope", 1.0, 1.5, arch=None, seed=2), _record("kerple", 1.0, 1.0, arch=None, seed=3))
    extrapolation = hybrid.hybrid_answers(table)[0]
    assert "the NoPE hybrid degrades past L" in extrapolation
    assert re.search(r"like rope \(\+0\.5[0-9]+\) in this run and unlike kerple \(\+0\.0[0-9]+\)", extrapolation)


def _seeds(label: str, at_l: float, at_long: float, first: int) -> list[dict]:
    """The run on seeds 0, 1, 2, each with its own blocks' noise (``first + seed``)."""
    return [{**_record(label, at_l, at_long, seed=first + s), "seed": s} for s in (0, 1, 2)]


def test_position_at_training_length_by_the_two_standard_error_rule():
    same = _table(_record("hybrid nope", 1.0, 1.0), _record("hybrid rope", 1.0005, 1.0, seed=1))
    assert hybrid.hybrid_verdicts(same)[0].status == "needs seeds"  # one seed: not decided
    assert "yes, within 2 SE" in hybrid.hybrid_answers(same)[1]
    same3 = _table(*_seeds("hybrid nope", 1.0, 1.0, 0), *_seeds("hybrid rope", 1.0005, 1.0, 10))
    assert hybrid.hybrid_verdicts(same3)[0].status == "agrees"
    worse = _table(_record("hybrid nope", 1.1, 1.1), _record("hybrid rope", 1.0, 1.0, seed=1))
    worse3 = _table(*_seeds("hybrid nope", 1.1, 1.1, 0), *_seeds("hybrid rope", 1.0, 1.0, 10))
    assert hybrid.hybrid_verdicts(worse3)[0].status == "disagrees"
    assert "no: RoPE still helps" in hybrid.hybrid_answers(worse)[1]
    assert hybrid.hybrid_verdicts(_table(_record("rope", 1.0, 1.0)))[0].status == "not measured"


def test_records_without_arch_are_transformer_runs():
    page = Page()
    verdicts, answers = _hybrid_section(page, [_record("hybrid nope", 1.0, 1.0, arch=None)])
    assert verdicts == [] and answers == [] and "No hybrid runs" in "".join(page.parts)
    page = Page()
    verdicts, answers = _hybrid_section(page, [_record("hybrid nope", 1.0, 1.0), _record("hybrid rope", 1.0, 1.0)])
    assert len(verdicts) == 1 and len(answers) == 2 and "does not degrade" in "".join(page.parts)
