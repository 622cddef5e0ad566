"""``posenc extrapolate`` on the smoke profile: every planned result is written once, a second start
runs nothing, a run killed with SIGKILL resumes without losing or duplicating a result, and bad
arguments exit 2 with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from posenc.cli import main
from posenc.extrapolate.profiles import PROFILES
from posenc.stats.results import load

SMOKE = PROFILES["smoke"]
ARGS = ["--profile", "smoke", "--threads", "1", "--no-progress"]
SERIAL = [*ARGS, "--jobs", "1"]
REPO = Path(__file__).resolve().parents[1]


def _image_runs() -> int:
    """Per seed: every variant without augmentation, and those ``augmented_variants`` names with it."""
    s = SMOKE.image
    return sum(a == "none" or s.augmented_variants is None or v in s.augmented_variants
               for a in s.augments for v in s.variants)


def _expected_runs() -> int:
    per_seed = len(SMOKE.schemes) * 2 + len(SMOKE.scaling.types) * 2 + 1  # lm + tasks, zero-shot + fine-tune + control
    per_seed += len(SMOKE.content_task_schemes)  # the content tasks' own models
    per_seed += len(SMOKE.hybrid)  # the hybrid's lm rows beside the transformer's
    per_seed += _image_runs() + len(SMOKE.time.schemes)  # --part image, --part time
    per_seed += _structure_runs()
    per_seed += int(SMOKE.dual_chunk)  # issue 38's Dual Chunk Attention, zero-shot beside the scalings
    return per_seed * len(SMOKE.seeds)


def _structure_runs() -> int:
    """The structured positions' rows of a seed, transformer only: BiPE's lm rows, HiRoPE zero-shot, the addition
    models, the randomized positions."""
    return len(SMOKE.bipe_rows) + 1 + len(SMOKE.addition.schemes) + len(SMOKE.randomized)


@pytest.mark.xdist_group("extrapolate")
def test_smoke_writes_every_result_once(smoke_results):
    lines = smoke_results.read_bytes().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == _expected_runs() == len({r["key"] for r in records})
    parts = [r["part"] for r in records]
    assert parts.count("lm") == len(SMOKE.schemes) + len(SMOKE.hybrid) + len(SMOKE.bipe_rows)
    assert parts.count("tasks") == (len(SMOKE.schemes) + len(SMOKE.content_task_schemes) + len(SMOKE.addition.schemes)
                                    + len(SMOKE.randomized))
    content = [r["label"] for r in records if r["part"] == "tasks" and r["eval"][0]["task"] in SMOKE.content_tasks.tasks]
    assert content == list(SMOKE.content_task_schemes)
    hybrid = [r["label"] for r in records if r["arch"] == "hybrid"]
    assert hybrid == [f"hybrid {s}" for s in SMOKE.hybrid] and all(r["arch"] == "transformer" for r in records
                                                                   if r["label"] not in hybrid)
    lengths = SMOKE.lm.lengths()
    assert parts.count("image") == _image_runs() and parts.count("time") == len(SMOKE.time.schemes)
    for r in records:
        if r["part"] == "tasks":  # the schemes' models, and the content tasks' own
            learned = {row["task"] for row in r["eval"]}
            assert learned in (set(SMOKE.tasks.tasks), set(SMOKE.content_tasks.tasks),
                               set(SMOKE.addition.tasks.tasks)), r["label"]  # the structured positions' addition models
            continue
        if r["part"] in ("image", "time"):  # checked in tests/test_extrapolate_vision.py
            assert r["eval"] and all(0 <= row["accuracy"] <= 1 for row in r["eval"])
            continue
        rows = {(row["mode"], row["length"]): row for row in r["eval"]}
        assert set(rows) == {(m, t) for m in ("nonoverlap", "sliding") for t in lengths}
        for (_, t), row in rows.items():
            if r["scheme"] == "learned" and t > SMOKE.lm.train_length:
                assert "max_positions" in row["cannot_run"]  # recorded, not crashed
            else:
                blocks = row["block_nll"]
                assert len(blocks) >= 1 and abs(sum(blocks) / len(blocks) - row["nll"]) < 1e-5


@pytest.mark.xdist_group("extrapolate")
def test_a_second_start_runs_nothing(smoke_results, capsys):
    before = smoke_results.read_bytes()
    assert main(["extrapolate", *SERIAL, "--out", str(smoke_results)]) == 0
    assert smoke_results.read_bytes() == before
    assert f"{_expected_runs()} already in" in capsys.readouterr().err


@pytest.mark.xdist_group("extrapolate")
def test_killed_run_resumes_without_loss_or_duplicates(tmp_path, smoke_results):
    path = tmp_path / "killed.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # two worker processes: the kill must take them down too, and the results must not depend on it
    proc = subprocess.Popen([sys.executable, "-m", "posenc", "extrapolate", *ARGS, "--jobs", "2", "--out", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    try:
        while not (path.exists() and path.read_bytes().count(b"\n") >= 1):
            if proc.poll() is not None:
                pytest.fail(f"extrapolate exited ({proc.returncode}) before writing a result: "
                            f"{proc.stderr.read().decode()[-500:]}")
            if time.monotonic() > deadline:
                pytest.fail("no result line within 120 s")
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    survived = path.read_bytes()
    done = set(load(path))
    assert 1 <= len(done) < _expected_runs(), "the kill should land mid-benchmark"
    with open(path, "ab") as f:  # as if the kill had landed in the middle of a write
        f.write(b'{"key": "half-written", "part": "lm", "eval": [{"mo')

    assert main(["extrapolate", *SERIAL, "--out", str(path)]) == 0
    after = path.read_bytes()
    complete = survived[: survived.rfind(b"\n") + 1]
    assert after.startswith(complete), "finished results must be kept byte for byte"
    keys = [json.loads(x)["key"] for x in after.splitlines()]
    assert len(keys) == len(set(keys)) == _expected_runs()
    assert set(keys) == set(load(smoke_results)) and done <= set(keys)
    # the resumed results equal an uninterrupted run's (deterministic training on CPU)
    fresh = load(smoke_results)
    for key, rec in load(path).items():
        assert [row.get("nll") for row in rec["eval"]] == [row.get("nll") for row in fresh[key]["eval"]]
        assert [row.get("bits") for row in rec["eval"]] == [row.get("bits") for row in fresh[key]["eval"]]
    assert {"image", "time"} <= {rec["part"] for rec in load(path).values()}  # the new parts resumed too


@pytest.mark.xdist_group("extrapolate")
def test_arch_hybrid_runs_every_part_and_resumes_by_arch(tmp_path, smoke_results, capsys):
    """--arch hybrid: every run is a hybrid (``"arch"`` in each record); its lm rows are the very
    runs the transformer plan puts beside its own (same keys); a second start runs nothing; the
    transformer runs in the same file are told apart by arch; records written before there was
    an ``arch`` field keep their keys, so they resume as transformer runs."""
    path = tmp_path / "hybrid.jsonl"
    assert main(["extrapolate", *SERIAL, "--arch", "hybrid", "--out", str(path)]) == 0
    records = list(load(path).values())
    # the same plan, every run a hybrid (the structured positions' rows and Dual Chunk Attention's are the transformer's)
    assert len(records) == _expected_runs() - len(SMOKE.hybrid) - _structure_runs() - int(SMOKE.dual_chunk)
    # image and time have their own bidirectional model, the same for every --arch (the same runs, keys)
    own = [r for r in records if r["part"] in ("image", "time")]
    assert own and {r["arch"] for r in own} == {"transformer"} and {r["key"] for r in own} <= set(load(smoke_results))
    records = [r for r in records if r not in own]
    assert {r["arch"] for r in records} == {"hybrid"} and all(r["label"].startswith("hybrid ") for r in records)
    assert {r["part"] for r in records} == {"lm", "scaling", "tasks"}
    beside = {k for k, r in load(smoke_results).items() if r["arch"] == "hybrid"}
    assert beside and beside <= set(load(path)) and len(beside) == len(SMOKE.hybrid)
    capsys.readouterr()
    assert main(["extrapolate", *SERIAL, "--arch", "hybrid", "--out", str(path)]) == 0
    assert f"{len(records) + len(own)} already in" in capsys.readouterr().err
    assert main(["extrapolate", *SERIAL, "--part", "lm", "--scheme", "nope", "--out", str(path)]) == 0
    assert "2 runs, 1 already in" in capsys.readouterr().err  # transformer nope is new, hybrid nope is not
    assert [r["arch"] for r in load(path).values() if r["part"] == "lm"].count("transformer") == 1
    # an older file: the transformer records without "arch" resume as they are
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "arch"}) + "\n"
                           for r in load(smoke_results).values() if r["arch"] == "transformer"))
    assert main(["extrapolate", *SERIAL, "--out", str(old)]) == 0
    assert f"{_expected_runs()} runs, {_expected_runs() - len(SMOKE.hybrid)} already in" in capsys.readouterr().err


@pytest.mark.xdist_group("extrapolate")
def test_own_schemes_and_corpus(tmp_path):
    corpus = tmp_path / "text.txt"
    words = "the quick brown fox jumps over lazy dog and cat runs far".split()
    rng = np.random.default_rng(0)  # varied text: a sentence repeated has no clean split (all near copies)
    corpus.write_text(" ".join(words[i] for i in rng.integers(0, len(words), 2000)))
    path = tmp_path / "own.jsonl"
    assert main(["extrapolate", *SERIAL, "--out", str(path), "--part", "lm", "--corpus", str(corpus),
                 "--scheme", "rope:base=500", "--scheme", '{"scheme": "kerple", "variant": "power"}']) == 0
    records = list(load(path).values())
    assert [r["label"] for r in records] == ["rope (base=500)", "kerple (variant=power)"]
    assert records[0]["spec"]["base"] == 500.0 and records[0]["corpus"]["source"] == str(corpus)


@pytest.mark.parametrize("argv, message", [
    (["--scheme", "nosuchscheme"], "unknown scheme 'nosuchscheme'"),
    (["--corpus", "/nonexistent/corpus.txt"], "/nonexistent/corpus.txt"),
    (["--seeds", "0,x"], "--seeds"),
    (["--threads", "0"], "--threads"),
    (["--jobs", "0"], "--jobs"),
    (["--scheme", "rope:head_dim=6"], "head_dim"),
    (["--scheme", "learned:max_positions=3"], "shorter than the training sequences"),  # not a crash mid-run
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, message):
    code = main(["extrapolate", *SERIAL, "--out", str(tmp_path / "r.jsonl"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["extrapolate", "report"])
def test_unknown_profile_exits_2(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--profile", "huge"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'huge'" in err and err.count("\n") == 1


def test_unknown_arch_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["extrapolate", "--arch", "mamba"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --arch: invalid choice: 'mamba'" in err and "hybrid" in err
    assert err.count("\n") == 1, err


def test_the_benchmark_keeps_its_heap_and_the_content_kinds_trim_is_off(monkeypatch):
    """``keep_heap`` (the workers, and a serial run): the process keeps freed memory for the next
    evaluation block (``mallopt``), and the content kind's trim after each block is off."""
    import posenc.rowwise as rowwise
    from posenc.extrapolate import driver

    monkeypatch.setattr(rowwise, "ROW_TRIM", True)
    driver.keep_heap()
    assert rowwise.ROW_TRIM is (not sys.platform.startswith("linux"))
