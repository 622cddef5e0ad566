"""The content tasks of the tasks part (counting, selective copy, flip-flop): formats and answers
checked against an independent reading of the tokens, determinism, lengths, the old tasks' token
ids, CoPE's counting verdict, and a tiny run of the part rendered into the report."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import torch

from posenc.stats import distributions, estimates as stats
from posenc.extrapolate import task_generators as T
from posenc.extrapolate.parts import tasks as task_part
from posenc.extrapolate.profiles import PROFILES, settings_hash, with_overrides


def _split(tokens: list[int], first: int) -> tuple[list[int], list[int]]:
    assert tokens[first - 1] == T.SEP and tokens[-1] == T.EOS
    return tokens[1:first - 1], tokens[first:-1]


def _examples(task: str, n: int, k: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(k):
        tokens, first = T.example(task, n, g)
        assert len(tokens) == T.seq_len(task, n) and tokens[0] == T.TASK_TOKEN[task]
        assert all(0 <= t < T.VOCAB_SIZE for t in tokens)
        yield _split(tokens, first)


def test_old_token_ids_and_vocabulary_are_unchanged():
    # the ids every result written before the content tasks used
    assert (T.SEP, T.EOS, T.PAD, T.PLUS, T.KEY, T.FILLERS) == (10, 11, 12, 13, 14, (15, 16, 17, 18, 19))
    assert T.TASKS[:5] == T.ALGORITHMIC == ("copy", "reverse", "sort", "add", "passkey")
    assert [T.TASK_TOKEN[t] for t in T.ALGORITHMIC] == [20, 21, 22, 23, 24]
    assert T.vocab_size(T.ALGORITHMIC) == 25 and T.vocab_size(["copy", "count3"]) == T.VOCAB_SIZE
    new = [T.TASK_TOKEN[t] for t in T.CONTENT] + [*T.VARIABLES, T.SET0, T.INC, T.PASS, T.SEMI, T.PRINT, T.BLANK,
                                                   T.WRITE, T.IGNORE, T.READ]
    assert min(new) == 25 and max(new) == T.VOCAB_SIZE - 1
    assert len(set(new)) == len(new) - 1  # flip_flop_sparse is flip_flop's test: the same task token
    assert T.trained(["copy", "flip_flop_sparse", "flip_flop"]) == ["copy", "flip_flop"]
    assert PROFILES["quick"].tasks.tasks == T.ALGORITHMIC  # the quick profile (make report) is untouched
    quick = dataclasses.replace(PROFILES["quick"])
    assert task_part.task_settings_hash(quick) == settings_hash({"tasks": quick.tasks})  # its keys too
    full = PROFILES["full"]
    assert full.tasks.tasks == T.ALGORITHMIC and full.content_tasks.tasks == T.CONTENT


@pytest.mark.parametrize("task", ["count1", "count3", "count5"])
@pytest.mark.parametrize("n", [1, 4, 12])
def test_count_answers_the_increments_since_the_variable_was_set(task, n):
    k = int(task[-1])
    names = T.VARIABLES[:k]
    for prompt, answer in _examples(task, n):
        body, (p, asked) = prompt[:-2], prompt[-2:]
        assert p == T.PRINT and len(body) == 4 * n  # 2n statements of two tokens
        value: dict[int, int] = {}
        for a, b in zip(body[::2], body[1::2]):
            if (a, b) == (T.PASS, T.SEMI):
                continue
            assert a in names and b in (T.SET0, T.INC), (a, b)
            if b == T.SET0:
                value[a] = 0
            else:
                assert a in value, "an increment of a variable never set"
                value[a] += 1
                assert value[a] <= T.COUNT_MAX
        assert asked in value and answer == [value[asked]]


@pytest.mark.parametrize("n", [1, 5, 16])
def test_selective_copy_copies_the_non_blank_tokens_in_order(n):
    for prompt, answer in _examples("selective_copy", n):
        assert len(prompt) == 3 * n and prompt.count(T.BLANK) == 2 * n
        assert answer == [t for t in prompt if t != T.BLANK] and all(0 <= d <= 9 for d in answer)


@pytest.mark.parametrize("task", ["flip_flop", "flip_flop_sparse"])
@pytest.mark.parametrize("n", [1, 6, 20])
def test_flip_flop_answers_the_last_written_bit(task, n):
    for prompt, answer in _examples(task, n):
        assert prompt[-1] == T.READ and len(prompt) == 2 * n + 1
        ops, bits = prompt[:-1:2], prompt[1:-1:2]
        assert ops[0] == T.WRITE and set(ops) <= {T.WRITE, T.IGNORE, T.READ} and set(bits) <= {0, 1}
        memory = None
        for op, bit in zip(ops, bits):
            if op == T.WRITE:
                memory = bit
            elif op == T.READ:
                assert bit == memory  # every read in the prompt says the last written bit
        assert answer == [memory]


def test_flip_flop_is_sparser_at_test():
    g = torch.Generator().manual_seed(0)
    share = {}
    for task in ("flip_flop", "flip_flop_sparse"):
        ops = [t for _ in range(200) for t in T.example(task, 40, g)[0][3:-5:2]]  # instructions after the first
        share[task] = ops.count(T.IGNORE) / len(ops)
    assert share["flip_flop"] == pytest.approx(0.8, abs=0.02)
    assert share["flip_flop_sparse"] == pytest.approx(0.98, abs=0.01)


@pytest.mark.parametrize("task", T.CONTENT)
def test_content_examples_are_deterministic_and_fixed_per_task_and_size(task):
    a = T.eval_batch(task, 7, count=8, seed=0)
    assert torch.equal(a.tokens, T.eval_batch(task, 7, count=8, seed=0).tokens)
    assert not torch.equal(a.tokens, T.eval_batch(task, 7, count=8, seed=1).tokens)
    assert a.tokens.shape == (8, T.seq_len(task, 7))
    b = T.train_batch(task, batch=16, max_size=5, g=torch.Generator().manual_seed(3))
    assert torch.equal(b.tokens, T.train_batch(task, batch=16, max_size=5, g=torch.Generator().manual_seed(3)).tokens)
    assert b.mask.sum(1).tolist() == [2] * 16 or task == "selective_copy"  # one answer token and EOS


def _count_record(label, hits, sizes=(2, 4)):
    rows = [{"task": t, "size": s, "length": T.seq_len(t, s), "correct": hits[label].count("1"),
             "count": len(hits[label]), "token_acc": 0.5, "hits": hits[label], "variables": T.COUNT_VARIABLES[t]}
            for t in T.COUNT_VARIABLES for s in sizes]
    return {"label": label, "seed": 0, "max_size": 2, "trained_positions": T.seq_len("count1", 2), "eval": rows}


def test_counting_verdict_orders_cope_relative_absolute_and_says_missing():
    hits = {"cope": "1" * 18 + "00", "shaw": "1" * 10 + "0" * 10, "t5": "1" * 20, "learned": "1" * 2 + "0" * 18,
            "sinusoidal": "0" * 20}
    table = stats.task_table([_count_record(lab, hits) for lab in ("shaw", "t5", "learned")])
    missing, second = task_part.counting_verdicts(table)
    assert missing.status == "not measured" and "missing" in missing.measured and "cope" in missing.measured
    assert missing.p is None
    # shaw plays the relative kind (t5 only stands in without it); 3 size-2 cells × 20 pairs, size 4 is left out
    assert f"McNemar's exact p {distributions.mcnemar_exact(24, 0):.2g}" in second.measured and second.direction == 1
    assert "shaw alone right 24" in second.measured and second.status == "needs seeds"  # one seed: not decided
    table = stats.task_table([_count_record(lab, hits) for lab in ("cope", "t5", "sinusoidal")])
    first, second = task_part.counting_verdicts(table)
    assert first.direction == -1 and f"McNemar's exact p {distributions.mcnemar_exact(0, 6):.2g}" in first.measured  # t5 won
    assert "sinusoidal" in second.measured
    assert task_part.counting_verdicts(stats.task_table([])) == []  # no counting: no claim


def test_kazemnejad_verdicts_leave_the_content_tasks_out():
    hits = {"nope": "1" * 20, "t5": "0" * 20}
    recs = [_count_record(lab, hits) for lab in hits]
    verdicts, mrr, tasks = task_part.task_verdicts(stats.task_table(recs))
    assert tasks == [] and mrr == {} and all(v.status == "not measured" for v in verdicts)


def test_a_tiny_run_of_the_content_tasks_renders_their_tables_and_the_counting_claim(tmp_path):
    from posenc.extrapolate.driver import iter_runs
    from posenc.extrapolate.report import render

    smoke = PROFILES["smoke"]
    profile = dataclasses.replace(smoke, parts=("tasks",), hybrid=(), content_tasks=None,  # one model learns all
                                  tasks=dataclasses.replace(smoke.tasks, tasks=T.TASKS, eval_examples=4))
    records = list(iter_runs(profile, results=tmp_path / "r.jsonl", schemes=["nope", "learned"],
                             threads=1, progress=False, log=lambda m: None))
    assert len(records) == 2
    rows = records[0]["eval"]
    assert {r["task"] for r in rows} == set(T.TASKS)
    assert {r["variables"] for r in rows if r["task"].startswith("count")} == {1, 3, 5}
    flips = {(r["task"], r["p_ignore"], r["p_ignore_trained"]) for r in rows if "p_ignore" in r}
    assert flips == {("flip_flop", 0.8, 0.8), ("flip_flop_sparse", 0.98, 0.8)}
    now = time.perf_counter()
    meta = {"start": now, "render_start": now, "bench_seconds": 0.0, "new": 2, "reused": 0, "generated": "fixed"}
    page = render(profile, records, meta)
    html = page.html("tiny")
    assert page.figures.keys() >= {"content_task_accuracy.png", "task_accuracy.png"} and not page.errors
    assert "test error by number of variables" in html and "5 variables" in html
    assert re.search(r"counting: contextual positions.*?missing: no runs of cope", html, flags=re.S)


def test_the_content_tasks_models_of_their_own_measure_copes_counting_claim(tmp_path):
    """``Profile.content_tasks``: the content tasks learned by models of their own, one per scheme of
    ``content_task_schemes`` (absolute, relative, contextual), beside the algorithmic tasks' models of
    the profile's schemes; the counting claim is measured (a cope run), each table lists the schemes
    that learned its tasks, and "beyond the trained positions" is each group's own."""
    from posenc.extrapolate.driver import iter_runs
    from posenc.extrapolate.report import render

    smoke = PROFILES["smoke"]
    profile = dataclasses.replace(smoke, parts=("tasks",), hybrid=(), task_schemes=("nope",),
                                  content_task_schemes=("learned", "shaw", "cope"),
                                  addition=None, randomized=())  # the structured positions' rows: test_extrapolate_structure
    records = list(iter_runs(profile, results=tmp_path / "r.jsonl", threads=1, progress=False, log=lambda m: None))
    assert [r["label"] for r in records] == ["nope", "learned", "shaw", "cope"]
    assert {row["task"] for row in records[0]["eval"]} == set(T.ALGORITHMIC)
    assert all({row["task"] for row in r["eval"]} == set(T.CONTENT) for r in records[1:])
    assert records[0]["trained_positions"] != records[1]["trained_positions"]
    table = stats.task_table(records)
    for r in records:  # each record's own longest training sequence decides its cells
        for row in r["eval"]:
            assert table.beyond(row["task"], row["size"]) == row["beyond_trained"]
    now = time.perf_counter()
    meta = {"start": now, "render_start": now, "bench_seconds": 0.0, "new": 4, "reused": 0, "generated": "fixed"}
    html = render(profile, records, meta).html("tiny")
    counting = re.search(r"<td>counting: contextual positions.*?</tr>", html, flags=re.S).group(0)  # the details
    assert "missing" not in counting and "cope alone right" in counting
    copy_table = re.search(r"<h3>copy</h3>(.*?)</table>", html, flags=re.S).group(1)
    count_table = re.search(r"<h3>count3</h3>(.*?)</table>", html, flags=re.S).group(1)
    assert "nope" in copy_table and "cope" not in copy_table
    assert "cope" in count_table and "nope" not in count_table
    assert "One model per scheme (learned, shaw, cope) trained on all of count1" in html
    # --scheme: the user's schemes learn both groups
    mine = [(r.label, r.variant) for r in task_part.PART.plan(profile, ["rope"], custom=True, corpus_sha="",
                                                              log=lambda m: None)]
    assert mine == [("rope", {}), ("rope", task_part.CONTENT_GROUP)]


def test_a_task_in_both_groups_is_refused():
    smoke = PROFILES["smoke"]
    both = dataclasses.replace(smoke, tasks=dataclasses.replace(smoke.tasks, tasks=("copy", "count3")))
    with pytest.raises(ValueError, match="count3 are in both profile.tasks and profile.content_tasks"):
        task_part.PART.plan(both, ["nope"], custom=False, corpus_sha="", log=lambda m: None)


def test_quick_leaves_the_tasks_out_and_on_request_trains_both_groups_on_three_seeds_with_their_keys():
    quiet = {"custom": False, "corpus_sha": "", "log": lambda m: None}
    assert "tasks" not in PROFILES["quick"].parts  # make report: three seeds of them do not fit its time
    assert task_part.PART.plan(PROFILES["quick"], list(PROFILES["quick"].schemes), **quiet) == []
    quick = with_overrides(PROFILES["quick"], parts=("tasks",))  # posenc report --part tasks
    runs = task_part.PART.plan(quick, list(quick.schemes), **quiet)
    assert [(r.seed, r.label, bool(r.variant)) for r in runs] == [
        (seed, lab, variant) for seed in (0, 1, 2)
        for lab, variant in [*((lab, False) for lab in quick.task_schemes), *((lab, True) for lab in ("learned", "shaw", "cope"))]]
    assert set(quick.task_schemes) == set(task_part.KAZEMNEJAD_MRR)
    before = dataclasses.replace(quick, content_tasks=None, task_schemes=None)  # the plan before the content tasks
    old = {(r.seed, r.label): r.key for r in task_part.PART.plan(before, list(quick.schemes), **quiet)}
    assert all(old[r.seed, r.label] == r.key for r in runs if not r.variant)  # their results are reused


def test_a_page_without_the_tasks_lists_their_claims_with_the_command_that_measures_them():
    from posenc.stats.page_parts import Page

    page = Page()
    verdicts = task_part.task_section(page, [])
    html = "".join(page.parts)
    assert task_part.TASKS_COMMAND in html and "--profile full --part tasks" in task_part.TASKS_COMMAND
    claims = [claim for _, _, claim in task_part.kazemnejad_claims() + task_part.counting_claims()]
    assert [v.claim for v in verdicts] == claims and len(claims) == 6
    assert all(v.status == "not measured" and task_part.TASKS_COMMAND in v.measured for v in verdicts)
