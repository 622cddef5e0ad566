"""The structured positions' rows of the benchmark (``posenc.extrapolate.parts.structure``): the positions its
models make from their tokens, BiPE's intra part on the embeddings, the plan of each profile (the
other rows keep their keys; the quick profile adds HiRoPE and BiPE only), the rows run on a cut of
the smoke profile with a verdict row for every claim in ``#hierarchical``, and the claims a
profile leaves out named with the command that measures them."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import torch

import posenc
from posenc.extrapolate import structured_positions as structured
from posenc.extrapolate import task_generators as T
from posenc.extrapolate.model import GPTConfig, TinyGPT
from posenc.stats.page_parts import Page
from posenc.extrapolate.parts import plan
from posenc.extrapolate.parts import structure as S
from posenc.extrapolate.profiles import BIPE_ROWS, PROFILES, ScalingSettings
from posenc.extrapolate.report import render

QUIET = {"corpus_sha": "0", "log": lambda msg: None}
CLAIMS = 4 + 5 + 6 + 3  # BiPE; HiRoPE at 4L and 16L and against three scalings; Abacus and coupling; Ruoss (full)


def _add_example(seed: int, n: int) -> tuple[list[int], list[int], list[int]]:
    g = torch.Generator().manual_seed(seed)
    tokens, _ = T.example("add", n, g)  # [TASK] a (LSD first) + b SEP c EOS
    a, b = tokens[1:1 + n], tokens[2 + n:2 + 2 * n]
    return tokens, a, b


@pytest.mark.parametrize("n", [1, 3, 7])
def test_coupled_positions_of_the_add_task_are_posenc_coupled_positions_of_the_papers_format(n):
    """The benchmark writes every number least significant digit first; the paper writes the
    operands most significant first: the same digit gets the same position in both."""
    tokens, a, b = _add_example(n, n)
    ours = structured.coupled(4, 0, markers=(T.PLUS, T.SEP))(torch.tensor([tokens]), False)[0]  # evaluation
    c = tokens[3 + 2 * n:4 + 3 * n]
    paper = [T.TASK_TOKEN["add"], *a[::-1], T.PLUS, *b[::-1], T.SEP, *c, T.EOS]
    theirs = posenc.coupled_positions(paper, list(range(10)), plus=T.PLUS, equals=T.SEP)
    mapped = [theirs[0], *theirs[1:1 + n].flip(0), theirs[1 + n], *theirs[2 + n:2 + 2 * n].flip(0),
              *theirs[2 + 2 * n:]]
    assert ours.tolist() == [int(x) for x in mapped]
    train = structured.coupled(4, 0, markers=(T.PLUS, T.SEP))(torch.tensor([tokens] * 64), True)  # (64, L)
    starts = train[:, 1 + n]  # the "+": the start s of each example
    assert 1 <= int(starts.min()) and int(starts.max()) <= 4 and starts.unique().numel() > 1  # drawn per example
    assert torch.equal(train - (starts - 1)[:, None] * (ours > 0), ours.expand_as(train))


def test_abacus_randomized_and_line_positions():
    tokens, a, _ = _add_example(1, 5)
    idx = torch.tensor([tokens] * 3)
    fn = structured.abacus(9, 0)
    assert torch.equal(fn(idx, False), posenc.digit_positions(idx, list(range(10))))
    drawn = fn(idx, True) - fn(idx, False)
    assert drawn.unique().numel() <= 2 and int(drawn.max()) <= 9  # one offset a batch, digits only
    assert bool((drawn[fn(idx, False) == 0] == 0).all())
    rand = structured.randomized(64, 0)
    train = rand(idx, True)
    assert train.shape == idx.shape and bool((train.diff(dim=-1) > 0).all()) and int(train.max()) < 64
    assert torch.equal(rand(idx, False), torch.arange(idx.shape[1]))
    code = torch.tensor([list(b"x = 1\ny = 2\n\nz")])
    seg = structured.segments()(code, True)
    assert torch.equal(seg, posenc.segment_positions(code, [[b"\n"]])[0])
    assert seg[0, :, 0].tolist() == [0] * 6 + [1] * 6 + [2] + [3]
    lt = structured.lines_and_tokens()(code, False)
    assert torch.equal(lt[..., 0], seg[..., 0]) and lt[0, :, 1].tolist() == list(range(code.shape[1]))


@pytest.mark.parametrize("scheme", ["bipe", "bipe_bias"])
def test_the_model_adds_bipe_intra_segment_part_to_the_embeddings(scheme):
    cfg = GPTConfig(vocab_size=256, n_layer=1, n_head=2, n_embd=16, mlp_ratio=2)
    torch.manual_seed(0)
    model = TinyGPT(cfg, {"scheme": scheme, "d_model": 16, **({"head_dim": 8} if scheme == "bipe" else
                                                              {"num_heads": 2}), "max_positions": 32}).eval()
    model.positions_fn = structured.segments()
    assert not model.stackable  # positions from the tokens: seed by seed
    x = torch.tensor([list(b"ab\ncd\nef")])
    intra = list(model.pes[0].intra.parameters())
    assert intra  # the learned table over the offsets
    with torch.no_grad():
        for p in intra:
            p.zero_()
        zero = model(x)
        for p in intra:
            p.normal_()
        moved = model(x)
    assert not torch.allclose(zero, moved)  # the intra table reaches the output: it is on the embeddings


def test_the_plans_add_the_rows_and_the_other_rows_keep_their_keys():
    quick, full, smoke = PROFILES["quick"], PROFILES["full"], PROFILES["smoke"]
    runs = plan(quick, list(quick.schemes), **QUIET)
    # make report's profile: HiRoPE only (evaluation); BiPE's rows, addition and randomized are the full profile's
    assert not [r for r in runs if r.part == "lm" and r.spec["scheme"] in ("bipe", "bipe_bias")]
    assert quick.bipe_rows == () and quick.addition is None and quick.randomized == ()
    assert full.bipe_rows == BIPE_ROWS
    with_bipe = plan(dataclasses.replace(quick, bipe_rows=BIPE_ROWS), list(quick.schemes), **QUIET)
    bipe = [(r.seed, r.label) for r in with_bipe if r.part == "lm" and r.spec["scheme"] in ("bipe", "bipe_bias")]
    assert sorted(bipe) == [(s, lab) for s in (0, 1, 2) for lab in ("bipe", "bipe_bias (bias_scale=96)")]
    hirope = [r for r in runs if r.part == "scaling" and r.variant.get("type") == "hirope"]
    assert sorted(r.seed for r in hirope) == [0, 1, 2] and all(r.spec["scheme"] == "rope" for r in hirope)
    assert not [r for r in runs if r.part == "tasks" and ("positions" in r.variant or "tasks" in r.variant
                                                        and r.variant["tasks"] == "addition")]
    before = dataclasses.replace(quick, bipe_rows=(), hirope=None)  # the quick profile before the structured positions' rows
    old = {r.key for r in plan(before, list(quick.schemes), **QUIET)}
    assert old <= {r.key for r in runs} and len(runs) - len(old) == 3  # HiRoPE on three seeds
    assert len(with_bipe) - len(runs) == 6  # the BiPE rows: one tuple
    for profile in (full, smoke):
        mine = plan(profile, list(profile.schemes), **QUIET)
        base = dataclasses.replace(profile, bipe_rows=(), hirope=None, addition=None, randomized=())
        assert {r.key for r in plan(base, list(profile.schemes), **QUIET)} <= {r.key for r in mine}
        addition = [r for r in mine if r.variant.get("tasks") == "addition"]
        assert {r.label for r in addition} == set(profile.addition.schemes)
        assert max(profile.addition.tasks.test_sizes) >= 3 * profile.addition.tasks.max_size
        assert {r.label for r in mine if r.variant.get("positions") == "randomized"} == {
            f"{s} + randomized" for s in profile.randomized}
    assert [r.label for r in plan(smoke, ["rope"], **QUIET) if r.variant.get("tasks") == "addition"] == []  # --scheme


def _verdict_rows(html: str) -> list[tuple[str, str]]:
    i = html.index('id="hierarchical"')
    section = html[i:html.index("<h2", i)]
    table = section[section.index("numbers beside ours"):]
    return re.findall(r"<tr><td>(.*?) <span class=muted>.*?<span class=\"(?:agrees|disagrees|unclear)\">([^<]*)</span>",
                      table)


def test_the_smoke_rows_run_and_every_claim_has_a_verdict_row(tmp_path):
    from posenc.extrapolate.driver import iter_runs

    smoke = PROFILES["smoke"]
    cut = dataclasses.replace(smoke, schemes=("nope", "rope", "alibi"), parts=("lm", "scaling", "tasks"), hybrid=(),
                              scaling=ScalingSettings(types=("linear", "ntk", "yarn"), finetune_steps=1),
                              content_tasks=None, content_task_schemes=())
    records = list(iter_runs(cut, results=tmp_path / "results.jsonl", threads=1, progress=False, log=lambda m: None))
    mine = {(r["part"], r["label"]) for r in records}
    assert {("lm", "bipe"), ("lm", "bipe_bias (bias_scale=96)"), ("scaling", "rope + hirope (zero-shot)"),
            ("tasks", "abacus"), ("tasks", "coupling"), ("tasks", "rope + randomized")} <= mine
    hirope = next(r for r in records if r["label"] == "rope + hirope (zero-shot)")
    assert hirope["hirope"]["window"] == smoke.lm.train_length and "train_loss" not in hirope  # evaluation only
    rope = next(r for r in records if r["part"] == "lm" and r["label"] == "rope")
    assert hirope["eval"][0]["nll"] == rope["eval"][0]["nll"]  # inside the window: the trained RoPE exactly
    now = time.perf_counter()
    meta = {"start": now, "render_start": now, "bench_seconds": 0.0, "new": 0, "reused": 0, "generated": "now"}
    html = render(cut, records, meta).html("t")
    rows = _verdict_rows(html)
    assert len(rows) == CLAIMS - 1 - 2  # smoke's longest length is 4L (HiRoPE against RoPE once); one randomized scheme
    statuses = dict(rows)
    assert all(s in ("needs seeds", "not measured") for s in statuses.values()), rows
    assert sum(s == "needs seeds" for s in statuses.values()) >= 4 + 4 + 6  # BiPE, HiRoPE, addition: measured
    assert 'href="#hierarchical"' in html  # in the table of contents
    assert "addition past the trained digits: coupling positions beat alibi" in html


def test_the_quick_page_names_the_full_profile_for_the_rows_it_leaves_out():
    page = Page()
    section = S.PART.section(page, [], PROFILES["quick"])
    html = page.html("t")
    assert 'id="hierarchical"' in html and len(section.verdicts) == CLAIMS
    left = [v for v in section.verdicts if v.source in (S.MCLEISH, S.CHO, S.RUOSS)]
    assert len(left) == 9 and all(v.status == "not measured" and S.TASKS_COMMAND in v.measured for v in left)
    assert S.TASKS_COMMAND == "posenc report --profile full --part tasks"
    assert {v.pool for v in section.verdicts} == {S.TEXT_POOL, S.TASKS_POOL}
    assert "99% exact match on 100-digit addition" in html and "+12.0%" in html


def _lm_record(label: str, short: float, long: float, seed: int, *, spec: dict, part: str = "lm",
               variant: dict | None = None) -> dict:
    """NLL ``short`` at L = 16 and ``long`` at 4L (both modes), 24 blocks with their own noise."""
    import zlib

    import numpy as np

    rng = np.random.default_rng([zlib.crc32(label.encode()), seed])
    rows = []
    for length in (16, 32, 64):
        mean = short if length == 16 else long if length == 64 else (short + long) / 2
        for mode in ("nonoverlap", "sliding"):
            blocks = mean + rng.normal(0.0, 0.01, 24)
            rows.append({"mode": mode, "length": length, "mult": length / 16, "nll": float(blocks.mean()),
                         "block_nll": [float(b) for b in blocks]})
    out = {"part": part, "label": label, "seed": seed, "arch": "transformer", "train_length": 16, "eval": rows,
           "spec": spec, "params": 1000, "train_loss": [3.0, 2.0]}
    return {**out, "variant": variant} if variant else out


def test_the_text_claims_are_decided_on_three_seeds():
    rope = {"scheme": "rope", "head_dim": 8}
    rows = [("rope", 1.0, 2.0, rope, "lm", None), ("alibi", 1.0, 1.0, {"scheme": "alibi"}, "lm", None),
            ("bipe", 1.0, 1.0, {"scheme": "bipe"}, "lm", None),  # beats rope, as alibi
            ("bipe_bias (bias_scale=96)", 1.0, 2.5, {"scheme": "bipe_bias"}, "lm", None),  # loses to both
            ("rope + hirope (zero-shot)", 1.0, 1.5, rope, "scaling", {"type": "hirope", "mode": "zero-shot"}),
            ("rope + ntk (zero-shot)", 1.0, 1.5, rope, "scaling", {"type": "ntk", "mode": "zero-shot"})]
    records = [_lm_record(lab, a, b, seed, spec=spec, part=part, variant=variant)
               for seed in (0, 1, 2) for lab, a, b, spec, part, variant in rows]
    page = Page()
    from posenc.stats import findings

    verdicts = findings.adjust(S.PART.section(page, records, PROFILES["quick"]).verdicts)
    got = {v.claim: v.status for v in verdicts if v.source in (S.HE, S.ZHANG)}
    assert got == {
        "at 4L, BiPE-RoPE (segments: lines) beats rope": "agrees",
        "at 4L, BiPE-RoPE (segments: lines) beats alibi": "no clear difference",
        "at 4L, BiPE-ALiBi (segments: lines) beats rope": "disagrees",
        "at 4L, BiPE-ALiBi (segments: lines) beats alibi": "disagrees",
        "at 4L, HiRoPE (zero-shot on the trained RoPE, lines as the higher level) beats plain RoPE": "agrees",
        "at 4L, HiRoPE beats zero-shot linear": "not measured",
        "at 4L, HiRoPE beats zero-shot ntk": "no clear difference",
        "at 4L, HiRoPE beats zero-shot yarn": "not measured",
    }, got
    assert all(v.seeds == 3 and v.p_holm is not None for v in verdicts if v.status != "not measured"
               and v.source in (S.HE, S.ZHANG))
    html = page.html("t")
    assert "rope + hirope (zero-shot)" in html and "bipe_bias (bias_scale=96)" in html  # their perplexity rows


def _task_record(label: str, p_in: float, p_out: float, seed: int, variant: dict, *, task: str = "add") -> dict:
    """``task`` at size 2 (trained) and 6 (past every training sequence): 60 examples each, right
    with probability ``p_in`` and ``p_out``."""
    import zlib

    import numpy as np

    rng = np.random.default_rng([zlib.crc32(label.encode()), seed])
    rows = []
    for size, p, beyond in ((2, p_in, False), (6, p_out, True)):
        hits = "".join("1" if x else "0" for x in rng.random(60) < p)
        rows.append({"task": task, "size": size, "mult": size / 2, "length": T.seq_len(task, size),
                     "beyond_trained": beyond, "correct": hits.count("1"), "count": 60, "token_acc": p,
                     "hits": hits})
    return {"part": "tasks", "label": label, "seed": seed, "arch": "transformer", "spec": {"scheme": "learned"},
            "eval": rows, "max_size": 2, "trained_positions": T.seq_len(task, 2), "train_loss": [1.0],
            **({"variant": variant} if variant else {})}


def test_the_task_claims_are_decided_on_three_seeds():
    add = {"tasks": "addition"}
    rows = [("abacus", 1.0, 0.9, {**add, "positions": "abacus"}),  # beats rope and nope, ties with alibi
            ("coupling", 1.0, 0.3, {**add, "positions": "coupling"}),  # ties with rope and nope, loses to alibi
            ("rope", 1.0, 0.3, add), ("nope", 1.0, 0.3, add), ("alibi", 1.0, 0.9, add)]
    records = [_task_record(lab, a, b, seed, variant) for seed in (0, 1, 2) for lab, a, b, variant in rows]
    records += [_task_record(lab, 1.0, p, seed, variant, task="copy") for seed in (0, 1, 2)
                for lab, p, variant in (("rope", 0.2, None),
                                        ("rope + randomized", 0.8, {"positions": "randomized", "max_positions": 64}))]
    page = Page()
    from posenc.stats import findings

    verdicts = findings.adjust(S.PART.section(page, records, PROFILES["full"]).verdicts)
    got = {v.claim: v.status for v in verdicts if v.source in (S.MCLEISH, S.CHO, S.RUOSS)}
    past = "addition past the trained digits"
    assert got == {f"{past}: abacus positions beat rope": "agrees", f"{past}: abacus positions beat nope": "agrees",
                   f"{past}: abacus positions beat alibi": "no clear difference",
                   f"{past}: coupling positions beat rope": "no clear difference",
                   f"{past}: coupling positions beat nope": "no clear difference",
                   f"{past}: coupling positions beat alibi": "disagrees",
                   "rope with randomized positions generalises better than rope without them": "agrees",
                   "sinusoidal with randomized positions generalises better than sinusoidal without them":
                       "not measured",
                   "alibi with randomized positions generalises better than alibi without them": "not measured"}, got
    assert 'id="hierarchical"' in page.html("t")
