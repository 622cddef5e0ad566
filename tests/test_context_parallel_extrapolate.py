"""``posenc extrapolate --context-parallel ring`` under ``torchrun --nproc-per-node 2``: each rank
trains on its shard of every sequence and the run takes the steps one process takes (the same
losses and evaluation, within float tolerance); the flag without torchrun, and a scheme the method
does not run, are refused in one line (exit 2) before anything is created."""

from __future__ import annotations

import pytest

from posenc.cli import main
from test_extrapolate_distributed import one_and_two_processes

# ALiBi (a bias scored per ring tile) and FoX with its full gate (its state made global, the layer input read)
ARGS = ["extrapolate", "--profile", "smoke", "--threads", "1", "--jobs", "1", "--no-progress",
        "--scheme", "alibi", "--scheme", "fox:gate=full", "--part", "lm"]


@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
def test_sequence_shards_on_two_processes_train_as_one_process(tmp_path):
    a, b = one_and_two_processes(ARGS, tmp_path, "--context-parallel", "ring")
    assert set(a) == set(b) and len(a) == 2  # the same run keys (the method is not part of a key)
    for key, ra in a.items():
        rb = b[key]
        assert rb["env"]["context_parallel"] == "ring" and rb["env"]["world_size"] == 2
        assert "context_parallel" not in ra["env"]
        assert len(ra["train_loss"]) == len(rb["train_loss"]) > 0
        for x, y in zip(ra["train_loss"], rb["train_loss"]):
            assert abs(x - y) <= 1e-4 * max(1.0, abs(x)), (ra["label"], ra["train_loss"], rb["train_loss"])
        for ea, eb in zip(ra["eval"], rb["eval"], strict=True):
            assert abs(ea["nll"] - eb["nll"]) <= 1e-4, (ra["label"], ea, eb)


def _refused(args, capsys, tmp_path) -> str:
    out = tmp_path / "never.jsonl"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not out.exists(), err
    return err


def test_context_parallel_needs_torchrun(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    err = _refused([*ARGS, "--context-parallel", "ulysses"], capsys, tmp_path)
    assert "--context-parallel ulysses" in err and "torchrun --nproc-per-node 2" in err
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert "WORLD_SIZE=1" in _refused([*ARGS, "--context-parallel", "ring"], capsys, tmp_path)


def test_context_parallel_refuses_what_the_method_cannot_shard(monkeypatch, capsys, tmp_path):
    """Checked from the plan before any process group (a WORLD_SIZE alone is enough to reach the check)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    base = ARGS[:ARGS.index("--scheme")] + ["--part", "lm"]
    err = _refused([*base, "--scheme", "stick_breaking", "--context-parallel", "ring"], capsys, tmp_path)
    assert "--context-parallel ring cannot run lm 'stick_breaking'" in err and "--context-parallel ulysses" in err
    err = _refused([*base, "--scheme", "path", "--context-parallel", "ulysses"], capsys, tmp_path)
    assert "--context-parallel ulysses cannot run lm 'path'" in err and "without --context-parallel" in err
    err = _refused([*base, "--scheme", "alibi", "--arch", "llama", "--context-parallel", "ring"], capsys, tmp_path)
    assert "not --arch llama" in err and "posenc.interop.patch" in err
    monkeypatch.setenv("WORLD_SIZE", "4")  # the smoke model's 2 heads over 4 processes
    err = _refused([*base, "--scheme", "alibi", "--context-parallel", "ulysses"], capsys, tmp_path)
    assert "2 heads of the lm model over 4 processes" in err and "--context-parallel ring" in err
