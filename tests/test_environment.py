"""``posenc.environment.capture``: what the numbers depend on, checked against the sources it reads,
and the one capture behind the speed benchmark's meta, the extrapolation records' env and the
report's environment section."""

from __future__ import annotations

import os
import platform
from importlib.metadata import version
from pathlib import Path

import torch

import posenc
from posenc import environment

KEYS = {"posenc", "python", "platform", "machine", "processor", "cpus", "torch_threads", "load_avg",
        *environment.DISTRIBUTIONS}


def test_capture_reports_what_the_numbers_depend_on():
    env = environment.capture()
    assert set(env) == KEYS
    assert env["torch"] == version("torch") and env["numpy"] == version("numpy")
    assert env["posenc"] == posenc.__version__ and env["python"] == platform.python_version()
    assert env["platform"] == platform.platform() and env["machine"] == platform.machine()
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["cpus"] == (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    assert len(env["load_avg"]) == 3 and all(x >= 0 for x in env["load_avg"])
    assert env["processor"]


def test_a_missing_distribution_is_none():
    assert environment.versions(("no-such-distribution-posenc",)) == {"no-such-distribution-posenc": None}


def test_capture_on_a_device_records_it(monkeypatch):
    """The CPU adds its name; CUDA its name, memory, CUDA and the GPU kernels' versions (torch's
    answers monkeypatched: this machine may have no GPU)."""
    cpu = environment.capture("cpu")
    assert cpu["device"] == "cpu" and set(cpu) == set(environment.capture()) | {"device"}

    class Props:
        major, minor, total_memory = 9, 0, 141 * 2**30

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Fake GPU {i}")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    installed = {"triton": "3.1.0", "liger-kernel": "0.8.5"}

    def fake_version(dist):
        if dist in installed:
            return installed[dist]
        raise environment.PackageNotFoundError(dist)

    monkeypatch.setattr(environment, "version", fake_version)
    for device, index in (("cuda", 1), ("cuda:0", 0), (torch.device("cuda", 3), 3)):
        env = environment.capture(device)
        assert {"device": f"cuda:{index}", "device_name": f"Fake GPU {index}", "device_capability": "9.0",
                "device_memory_gb": 141.0, "cuda": "12.4", "triton": "3.1.0", "liger-kernel": "0.8.5",
                "flash-attn": None}.items() <= env.items()
    del installed["triton"]
    installed["pytorch-triton"] = "3.2.0+git"  # PyTorch's nightlies
    assert environment.capture("cuda")["triton"] == "3.2.0+git"


def test_bench_meta_and_extrapolation_env_come_from_the_capture(monkeypatch):
    from posenc.bench import run
    from posenc.extrapolate.distributed import Dist
    from posenc.extrapolate.profiles import PROFILES
    from posenc.extrapolate.runs import Context, _environment

    ctx = Context(PROFILES["smoke"], Dist(), Path("unused"), None, "", "", 3, lambda msg: None, False, 2)
    meta, env, here = run(what=(), profile_name="quick").meta, _environment(ctx), environment.capture()
    assert KEYS <= set(meta) and KEYS <= set(env)  # the same keys, and the values that do not move:
    for key in ("posenc", "python", "platform", "processor", "cpus", "torch", "numpy", "transformers"):
        assert meta[key] == env[key] == here[key], key
    assert {"device": "cpu", "world_size": 1, "threads": 3, "jobs": 2}.items() <= env.items()  # what the runs add

    stamp = {"load_avg": [0.0, 0.0, 0.0], "stamp": "captured"}
    monkeypatch.setattr(environment, "capture", lambda device=None: dict(stamp))
    assert run(what=(), profile_name="quick").meta["stamp"] == _environment(ctx)["stamp"] == "captured"


def test_the_report_shows_the_capture(monkeypatch):
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.profiles import PROFILES
    from posenc.extrapolate.report import _environment_section

    here = {**environment.capture(), "processor": "Test CPU 9000", "cpus": 77, "scikit-learn": None}
    monkeypatch.setattr(environment, "capture", lambda: here)
    page = Page()
    meta = {"new": 0, "reused": 0, "wall_seconds": 1.0, "bench_seconds": 0.5, "render_seconds": 0.5,
            "generated": "now"}
    _environment_section(page, PROFILES["smoke"], [], meta)
    html = "".join(page.parts)
    assert "Test CPU 9000" in html and "<td>77</td>" in html and here["torch"] in html
