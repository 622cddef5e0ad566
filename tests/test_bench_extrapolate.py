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

from posenc.bench.profiles import PROFILES
from posenc.bench.results import load
from posenc.cli import main

SMOKE = PROFILES["smoke"]
ARGS = ["--profile", "smoke", "--threads", "1", "--no-progress"]
SERIAL = [*ARGS, "--jobs", "1"]
REPO = Path(__file__).resolve().parents[1]


def _expected_runs() -> int:
    per_seed = len(SMOKE.schemes) * 2 + len(SMOKE.scaling.types) * 2 + 1  # lm + tasks, zero-shot + fine-tune + control
    return per_seed * len(SMOKE.seeds)


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory):
    path = tmp_path_factory.mktemp("smoke") / "results.jsonl"
    assert main(["extrapolate", *SERIAL, "--out", str(path)]) == 0
    return path


@pytest.mark.xdist_group("extrapolate")
def test_smoke_writes_every_result_once(smoke_results):
    lines = smoke_results.read_bytes().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == _expected_runs() == len({r["key"] for r in records})
    parts = [r["part"] for r in records]
    assert parts.count("lm") == parts.count("tasks") == len(SMOKE.schemes)
    lengths = SMOKE.lm.lengths()
    for r in records:
        if r["part"] == "tasks":
            assert {row["task"] for row in r["eval"]} == set(SMOKE.tasks.tasks)
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
