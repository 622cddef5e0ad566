"""Every input bounded: sizes declared with their limits in the registry, the command line's
bounds on sizes and on the work a command does, the library's refusal of tables no process here
could hold, and a sweep of extreme values over every scheme's numeric keys."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import posenc
from posenc import limits, registry
from posenc.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _strip(hint):
    """``Annotated[X, ...]``, ``X | None`` -> the plain types inside."""
    if typing.get_origin(hint) is typing.Annotated:
        return _strip(typing.get_args(hint)[0])
    args = typing.get_args(hint)
    return {t for a in args for t in _strip(a)} if args else {hint}


def test_every_integer_size_declares_its_limit():
    """A parameter typed ``int`` (or a list of ints) is a size: it carries a ``Limit`` where it is declared."""
    missing = []
    for name in registry.schemes():
        s = registry.get(name)
        hints = typing.get_type_hints(s.cls.__init__, include_extras=True)
        for key in s.params:
            if int in _strip(hints.get(key, object)) and key not in s.limits:
                missing.append(f"{name}.{key}")
    assert not missing, f"integer parameters without a posenc.limits bound: {missing}"


def test_limits_are_read_from_annotations():
    assert registry.get("fire").limits["hidden"].max == 4096
    assert registry.get("t5").limits["num_buckets"].max == 1024
    assert "base" not in registry.get("rope").limits  # a frequency, not a size


def test_readme_states_the_bounds_generated_from_the_registry():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert limits.markdown() in readme, "regenerate the README's table: python -c 'import posenc.limits as l; print(l.markdown())'"


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,message", [
    (["show", "fire:hidden=100000000"], "hidden must be at most 4096"),
    (["show", "shaw:max_distance=1000000000"], "max_distance must be at most 1024"),
    (["compare", "transformer_xl", "--heads", "16", "--dim", "256", "--length", "16384"], "a relative term"),
    (["show", "t5:num_buckets=100000"], "num_buckets must be at most 1024"),
    (["show", "sinusoidal", "--length", "16384", "--dim", "4096"], "--length 16384 × width 4096"),
    (["compare", "rope", "sinusoidal", "--length", "16384", "--dim", "1024"], "fingerprint comparison"),
    (["show", "sinusoidal", "--length", "4096", "--dim", "2048"], "linear-map fit"),
    (["show", "transformer_xl", "--heads", "256", "--dim", "4096"], "head_dim=4096 needs 4 TB"),
])
def test_command_line_refuses_sizes_and_work_over_the_bounds(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and message in err, err


def test_library_refuses_a_table_this_process_cannot_hold(monkeypatch):
    monkeypatch.setattr(limits, "available_bytes", lambda: 1 << 20)  # 1 MB
    with pytest.raises(ValueError, match=r"max_positions=1000 needs 3.81 MB for its table of 1000 × d_model=1000"):
        posenc.build({"scheme": "learned", "d_model": 1000, "max_positions": 1000})
    with pytest.raises(ValueError, match=r"hidden=100000 needs .* MB for its MLP"):
        posenc.build({"scheme": "fire", "num_heads": 8, "hidden": 100_000})
    posenc.build({"scheme": "learned", "d_model": 100, "max_positions": 100})  # 40 KB: built


def test_library_does_not_cap_what_fits():
    m = posenc.build({"scheme": "fire", "num_heads": 2, "hidden": 5000})  # over the CLI's 4096, fine here
    assert m.hidden == 5000


def test_sweep_extreme_values_over_every_numeric_key():
    """0, -1, 10^9, 1e308, NaN, inf for every numeric key of every scheme (and of every RoPE
    scaling), through posenc.build and posenc show/compare, in one process capped at 6 GB: a module
    or ValueError/TypeError; exit 0 or 2 with one line; nothing over 30 s."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "_sweep.py"), str(6 << 30)], capture_output=True,
                          text=True, timeout=480, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = [json.loads(line) for line in proc.stdout.splitlines()]
    failures = [c for c in cases if c["outcome"].startswith("FAIL")]
    assert not failures, failures[:10]
    outcome = {c["case"]: c["outcome"] for c in cases}
    names = {c["case"].split()[1].split(":")[0] for c in cases}
    assert set(registry.schemes()) - {"nope", "stick_breaking"} <= names  # every scheme with a numeric key was swept
    assert outcome["show fire:hidden=1000000000"] == "exit 2"
    assert outcome["build fire:hidden=1000000000"] == "error"
    assert outcome["show rope:base=nan"] == "exit 2"
    assert outcome["show sinusoidal:base=1000000000"] == "exit 0"
    assert any(k.startswith("show rope:scaling=yarn") for k in outcome)


# -- files ----------------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.txt").write_bytes(b"abc\0def")
    (tmp_path / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    return tmp_path


@pytest.mark.parametrize("argv,message", [
    (["extrapolate", "--profile", "smoke", "--corpus", "empty.txt"], "--corpus 'empty.txt' is empty"),
    (["extrapolate", "--profile", "smoke", "--corpus", "binary.txt"], "is binary (it has NUL bytes)"),
    (["extrapolate", "--profile", "smoke", "--corpus", "latin1.txt"], "is not UTF-8 text (invalid byte at offset 3)"),
    (["extrapolate", "--profile", "smoke", "--corpus", "folder"], "is not a file"),
    (["extrapolate", "--profile", "smoke", "--corpus", "missing.txt"], "does not exist"),
    (["extrapolate", "--profile", "smoke", "--scheme", "fire:hidden=100000000"], "hidden must be at most 4096"),
    (["data", "--profile", "smoke", "--corpus", "binary.txt"], "is binary (it has NUL bytes)"),
    (["extrapolate", "--profile", "smoke", "--out", "folder"], "--out 'folder' is a directory"),
    (["extrapolate", "--profile", "smoke", "--out", "afile/results.jsonl"], "--out 'afile' is not a folder"),
    (["report", "--profile", "smoke", "--out", "afile"], "--out 'afile' is not a folder"),
])
def test_bad_files_are_one_line_in_our_words(argv, message, files, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert "errno" not in err.lower() and "buffer" not in err


def test_unreadable_corpus(files, capsys):
    """A file that exists and cannot be read (even by root): /proc/self/mem raises EIO on read."""
    code, _, err = run(["extrapolate", "--profile", "smoke", "--corpus", "/proc/self/mem"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--corpus '/proc/self/mem' cannot be read" in err, err
