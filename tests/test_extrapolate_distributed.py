"""Training under ``torchrun --nproc-per-node 2`` (DDP on gloo, CPU) takes the same steps as one
process with the same global batch: the same losses, the same evaluation, within float tolerance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.stats.results import load

REPO = Path(__file__).resolve().parents[1]
ARGS = ["extrapolate", "--profile", "smoke", "--threads", "1", "--jobs", "1", "--no-progress",
        "--scheme", "rope", "--scheme", "t5",  # lm, RoPE scalings (fine-tunes) and the masked task loss
        "--part", "lm", "--part", "scaling", "--part", "tasks"]  # the parts DDP spreads (image/time run whole)


def one_and_two_processes(args: list[str], tmp_path: Path, *two_only: str) -> tuple[dict, dict]:
    """``posenc ARGS`` in this process, then under ``torchrun --nproc-per-node 2`` (with ``two_only``
    added): each run's records by key."""
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert main([*args, "--out", str(one)]) == 0
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "posenc", *args, "--out", str(two), *two_only],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load(one), load(two)


@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
def test_two_processes_match_one(tmp_path):
    a, b = one_and_two_processes(ARGS, tmp_path)
    assert set(a) == set(b) and len(a) == 14  # same run keys (the world size is not part of a key)
    # 14 = 9 + hybrid rope + the content tasks' models of rope and t5 + HiRoPE and Dual Chunk Attention
    # zero-shot on the rope model
    for key, ra in a.items():
        rb = b[key]
        assert rb["env"]["world_size"] == 2 and ra["env"]["world_size"] == 1
        if "train_loss" in ra:
            assert len(ra["train_loss"]) == len(rb["train_loss"]) > 0
            for x, y in zip(ra["train_loss"], rb["train_loss"]):
                assert abs(x - y) <= 1e-4 * max(1.0, abs(x)), (ra["label"], ra["train_loss"], rb["train_loss"])
        for ea, eb in zip(ra["eval"], rb["eval"]):
            assert ea.keys() == eb.keys()
            if "nll" in ea:
                assert abs(ea["nll"] - eb["nll"]) <= 1e-4, (ra["label"], ea, eb)
            if "correct" in ea:
                assert abs(ea["token_acc"] - eb["token_acc"]) <= 0.02 and abs(ea["correct"] - eb["correct"]) <= 1
