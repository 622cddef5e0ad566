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
import torch

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


def test_errors_page_states_the_bounds_generated_from_the_registry():
    page = (ROOT / "docs" / "guide" / "errors.md").read_text(encoding="utf-8")
    assert registry.limits_markdown() in page, \
        "regenerate the table: python -c 'import posenc.registry as r; print(r.limits_markdown())'"


def run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
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


# -- every public function and method -------------------------------------------------------------

def test_sweep_extreme_values_over_every_public_function():
    """0, -1, 10^9, 2^63, 1e308, NaN, inf and wrong types for every numeric argument, and valid,
    non-contiguous, expanded, wrong-dtype and wrong-shape tensors for every tensor argument of
    grid_positions, mrope_positions, packing, shard_positions, resize_grid, apply_rotary,
    attention, context_parallel_attention (one gloo rank) and the SSM layer, in one process capped
    at 6 GB: each call returns or raises ValueError/TypeError naming its parameter, before it
    allocates (nothing escapes as MemoryError, OverflowError, RuntimeError...)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "_sweep.py"), str(6 << 30), "calls"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = [json.loads(line) for line in proc.stdout.splitlines()]
    failures = [c for c in cases if c["outcome"].startswith("FAIL")]
    assert not failures, failures[:10]
    outcome = {c["case"]: c["outcome"] for c in cases}
    assert len(outcome) > 400
    for case in ("packing([2147483648, 2147483648])", "grid_positions(offset=9223372036854775808)", "mrope_positions(offset=9223372036854775808)",
                 "packing([9223372036854775808])", "packing([1000000000])", "shard_positions(length=1000000000)",
                 "resize_grid(new_grid=[1000000000, 2])", "apply_rotary(cos=length-7)", "apply_rotary(out=expanded)",
                 "DiagonalSSM()(state=list)", "DiagonalSSM()(x=int64)", "attention(q with D=0)",
                 "DiagonalSSM(d_model=1000000000)", "DiagonalSSM(dt_max=1e+308)", "diagonal_scan(dt=list)",
                 "diagonal_scan(dt=negative)", "diagonal_scan(dt=nan)", "diagonal_scan(v=list)",
                 "segment_positions(separators=[9223372036854775808])", "segment_positions(tokens=float)",
                 "segment_positions(document_ids=short)", "randomized_positions(batch=1000000000)",
                 "randomized_positions(max_positions=1000000000)", "randomized_positions(length=1000000000)",
                 "digit_positions(offset=9223372036854775808)", "coupled_positions(plus=1e+308)",
                 "digit_positions(tokens=float)", "coupled_positions(tokens=extra-dim)"):
        assert outcome[case] == "error", (case, outcome[case])
    for case in ("apply_rotary(x=noncontiguous)", "apply_rotary(x=expanded)", "apply_rotary(out=strided)",
                 "apply_rotary(cos=expanded)", "DiagonalSSM()(x=expanded)", "DiagonalSSM()(state=expanded)",
                 "attention(q=expanded)", "context_parallel_attention(q=noncontiguous)",
                 "attention(document_ids=expanded)", "grid_positions(offset=1000000000)",
                 "DiagonalSSM()(x=length-0, return_state=True)", "diagonal_scan(dt=inf)", "diagonal_scan(dt=zero)",
                 "segment_positions(tokens=list)", "segment_positions(document_ids=expanded)",
                 "randomized_positions(length=0)"):
        assert outcome[case] == "ok", (case, outcome[case])


def test_int64_limit_is_refused_before_it_wraps():
    assert posenc.grid_positions((2, 3), offset=2**63 - 3)[-1].tolist() == [2**63 - 2, 2**63 - 1]  # the last int64
    with pytest.raises(ValueError, match=r"offset=9223372036854775806 with shape \[2, 3\] reaches position "
                                         r"9223372036854775808.*<= 2\*\*63 - 1"):
        posenc.grid_positions((2, 3), offset=2**63 - 2)
    with pytest.raises(ValueError, match=r"offset must be <= 9223372036854775807, got 9223372036854775808"):
        posenc.grid_positions((2, 3), offset=2**63)
    with pytest.raises(ValueError, match=r"offset must be <= 9007199254740992"):
        posenc.mrope_positions([{"text": 3}], offset=2**63 - 2)
    with pytest.raises(ValueError, match=r"positions reach 9007199254740994 at segments\[0\]"):
        posenc.mrope_positions([{"text": 3}], offset=2**53)
    with pytest.raises(ValueError, match=r"positions reach .* at segments\[1\]"):
        posenc.mrope_positions([{"text": 1}, {"image": [3, 2]}], offset=2**53 - 1)
    assert posenc.mrope_positions([{"text": 3}], offset=2**53 - 2)[-1].tolist() == [2**53] * 3


def test_public_functions_refuse_what_this_process_cannot_hold_before_allocating(monkeypatch):
    """Each size is checked against the memory rule posenc.build uses (limits.check_memory)."""
    from posenc.interop import resize_grid
    from posenc.ssm import DiagonalSSM

    monkeypatch.setattr(limits, "available_bytes", lambda: 1 << 20)  # 1 MB
    for call, match in [
        (lambda: posenc.packing([10**6]), r"doc_lengths=<1 documents, 1000000 tokens> needs 30.5 MB"),
        (lambda: posenc.packing(cu_seqlens=[0, 10**6]), r"cu_seqlens=.* needs"),
        (lambda: posenc.grid_positions((1000, 1000)), r"shape=\[1000, 1000\] needs 45.8 MB"),
        (lambda: posenc.mrope_positions([{"video": [10, 100, 100]}]), r"segments=<100000 tokens> needs"),
        (lambda: posenc.shard_positions(10**6, 2, 0), r"length=1000000 needs 3.81 MB"),
        (lambda: resize_grid(torch.zeros(4, 8), [2, 2], [300, 300]), r"new_grid=\[300, 300\] needs"),
        (lambda: DiagonalSSM(1000), r"d_model=1000 needs"),
        (lambda: posenc.randomized_positions(10, 10**6), r"max_positions=1000000 needs 15.3 MB"),
        (lambda: posenc.randomized_positions(10, 1000, batch=1000), r"max_positions=1000 with batch=1000 needs"),
        (lambda: posenc.segment_positions(torch.zeros(10**5, dtype=torch.long), [[1], [2]]),
         r"tokens=<shape \[100000\]> needs 6.1 MB"),
        (lambda: posenc.digit_positions(torch.zeros(10**5, dtype=torch.long), [1]), r"tokens=<shape \[100000\]> needs"),
        (lambda: posenc.coupled_positions(torch.zeros(10**5, dtype=torch.long), [1], plus=2, equals=3),
         r"tokens=<shape \[100000\]> needs"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    posenc.packing([100])  # small ones still run


# -- the command line: special files, nesting, duplicated keys, checks before creating ----------------

def _run_briefly(argv, capsys, seconds=60):
    """``main(argv)`` that fails the test instead of blocking (a FIFO opened for reading waits for a writer)."""
    import signal

    def hang(signum, frame):
        raise TimeoutError(f"posenc {' '.join(argv)} blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        return run(argv, capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("argv,message", [
    (["show", "fifo.json"], "SPEC file 'fifo.json' is not a regular file"),
    (["compare", "rope", "fifo.json"], "SPEC file 'fifo.json' is not a regular file"),
    (["show", "dev.json"], "SPEC file 'dev.json' is not a regular file"),
    (["show", "rope", "--plot", "fifo.png"], "--plot 'fifo.png' is not a regular file"),
    (["bench", "--what", "rotary", "--json", "fifo.json"], "--json 'fifo.json' is not a regular file"),
    (["extrapolate", "--profile", "smoke", "--out", "fifo.json"], "--out 'fifo.json' is not a regular file"),
    (["extrapolate", "--profile", "smoke", "--corpus", "fifo.json"], "--corpus 'fifo.json' is not a file"),
])
def test_special_files_are_refused_without_blocking(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo.json")
    os.mkfifo("fifo.png")
    os.symlink("/dev/zero", "dev.json")
    code, _, err = _run_briefly(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_nesting_is_bounded_in_every_spec_form(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    deep = "[" * 5000 + "]" * 5000
    (tmp_path / "deep.json").write_text('{"scheme": "rope", "scaling": %s}' % deep)
    for spec in ["deep.json", '{"scheme": "rope", "scaling": %s}' % deep, f"rope:scaling={deep}",
                 "rope:scaling=linear,factor=" + deep]:
        code, _, err = run(["show", spec], capsys)
        assert code == 2 and err.count("\n") == 1 and "more than 32 levels deep" in err, err
    from posenc.spec import MAX_NESTING, parse_spec
    ok = "[" * (MAX_NESTING - 2) + "1.0" + "]" * (MAX_NESTING - 2)  # inside {"scaling": {...}}: exactly 32
    parse_spec('{"scheme": "rope", "scaling": {"type": "longrope", "short_factor": %s}}' % ok)


@pytest.mark.parametrize("spec,key", [
    ('{"scheme": "rope", "base": 10, "base": 20}', "base"),
    ('{"scheme": "rope", "scheme": "alibi"}', "scheme"),
    ('{"scheme": "rope", "scaling": {"type": "linear", "factor": 2, "factor": 4}}', "factor"),
    ('rope:scaling={"type": "linear", "factor": 2, "factor": 4}', "factor"),
    ("rope:base=10,base=20", "base"),
    ("dup.json", "base"),
])
def test_duplicated_keys_are_refused_in_every_spec_form(spec, key, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dup.json").write_text('{"scheme": "rope", "base": 10,\n "base": 20}')
    code, _, err = run(["show", spec], capsys)
    assert code == 2 and err.count("\n") == 1 and f"key {key!r} is given twice" in err, err


@pytest.mark.parametrize("argv,message", [
    (["extrapolate", "--profile", "smoke", "--out", "new/results.jsonl", "--threads", "0"], "--threads must be >= 1"),
    (["extrapolate", "--profile", "smoke", "--out", "new/results.jsonl", "--scheme", "rope:base=-1"],
     "--scheme 'rope:base=-1': base must be"),
    (["extrapolate", "--profile", "smoke", "--out", "new/results.jsonl", "--corpus", "missing.txt"],
     "--corpus 'missing.txt' does not exist"),
    (["report", "--profile", "smoke", "--out", "new", "--jobs", "0"], "--jobs must be >= 1"),
    (["report", "--profile", "smoke", "--out", "new", "--scheme", "fire:hidden=100000000"],
     "--scheme 'fire:hidden=100000000': hidden must be at most 4096"),
])
def test_every_argument_is_checked_before_out_is_created(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("argv,flag", [
    (["show", "rope:head_dim=7"], "SPEC 'rope:head_dim=7'"),
    (["show", "fire:hidden=100000000"], "SPEC 'fire:hidden=100000000'"),
    (["compare", "rope", "alibi:num_heads=0"], "SPEC 'alibi:num_heads=0'"),
    (["show", "rope", "--length", "0"], "--length"),
    (["extrapolate", "--profile", "smoke", "--scheme", "nope:x=1"], "--scheme 'nope:x=1'"),
])
def test_every_error_names_its_argument(argv, flag, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and flag in err, err
