"""Errors that point the way (issue 29, item 4): each names what went wrong and what to do instead."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
import torch

import posenc
from posenc import registry
from posenc.cli import main
from posenc.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
BIG = str(2**70)  # 1180591620717411303424: past int64


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str) -> None:
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


# -- the [B, H, L, D] layout ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rope", "nope", "nope_temperature"])
def test_a_b_l_h_d_tensor_gets_the_layout_hint(name):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ())))
    b, length, h, d = 2, int(torch.randint(9, 40, (), generator=g)), int(torch.randint(2, 8, (), generator=g)), 8
    m = posenc.build({"scheme": name, "head_dim": d} if name == "rope" else name)
    x = torch.randn(b, length, h, d, generator=g)  # [B, L, H, D]: the projection's view, not transposed
    with pytest.raises(ValueError) as e:
        m(x, torch.arange(length))
    msg = str(e.value)
    assert f"positions has length {length} but the tensor has length {h}" in msg
    assert "[B, H, L, D]" in msg and "x.transpose(1, 2)" in msg
    assert m(x.transpose(1, 2), torch.arange(length)).shape == (b, h, length, d)  # the hint works


def test_no_layout_hint_when_the_other_dimension_does_not_fit():
    m = posenc.build({"scheme": "rope", "head_dim": 8})
    with pytest.raises(ValueError) as e:
        m(torch.randn(1, 4, 6, 8), torch.arange(5))
    assert "transpose" not in str(e.value)


def test_apply_rotary_cos_of_a_b_l_h_d_tensor_gets_the_hint():
    m = posenc.build({"scheme": "rope", "head_dim": 8})
    cos, sin = m.cos_sin(torch.arange(12))
    with pytest.raises(ValueError, match=r"x\.transpose\(1, 2\)"):
        posenc.apply_rotary(torch.randn(2, 12, 3, 8, dtype=cos.dtype), cos, sin)


# -- transformers' rope keys --------------------------------------------------------------------

def _build_error(scaling) -> str:
    with pytest.raises(ValueError) as e:
        posenc.build({"scheme": "rope", "head_dim": 16, "scaling": scaling})
    return str(e.value)


def test_a_transformers_scaling_dict_names_each_key_and_from_hf():
    msg = _build_error({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    assert "'rope_type' is posenc's 'type'" in msg
    assert "'original_max_position_embeddings' is posenc's 'original_max_positions'" in msg
    assert "posenc.from_hf" in msg and "got None" not in msg
    msg = _build_error({"type": "linear", "factor": 2.0, "rope_theta": 5e5, "partial_rotary_factor": 0.5})
    assert "'rope_theta' is posenc's 'base'" in msg and "rotary_dim = head_dim × partial_rotary_factor" in msg
    msg = _build_error({"type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "betafast": 3})
    assert "not keys of scaling 'yarn': 'betafast'" in msg


def test_a_scaling_without_a_type_says_so_and_lists_the_types():
    msg = _build_error({"factor": 4})
    assert "scaling has no 'type' key" in msg and "got None" not in msg
    assert all(repr(t) in msg for t in posenc.scaling.SCALINGS)
    assert "transformers' 'default' is no scaling" in _build_error({"type": "default"})


def test_transformers_keys_at_the_spec_level_get_their_posenc_names():
    with pytest.raises(ValueError, match="posenc calls it 'base'.*posenc.from_hf"):
        posenc.build({"scheme": "rope", "head_dim": 16, "rope_theta": 1e4})
    with pytest.raises(ValueError, match="posenc's is scaling=TYPE"):
        parse_spec("rope:rope_type=linear,factor=2")


@pytest.mark.parametrize("rope_type,extra", [
    ("yarn", {"factor": 4.0}), ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
    ("longrope", {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "factor": 2.0})])
def test_the_key_table_agrees_with_from_hf(rope_type, extra):
    """TRANSFORMERS_KEYS (the errors' names) and hf_rope_spec (the translation) give the same names."""
    from posenc.interop.hf import hf_rope_spec
    from posenc.scaling import TRANSFORMERS_KEYS

    original = int(torch.randint(64, 4096, ()))
    theta = float(torch.randint(1000, 10**6, ()))
    config = {"head_dim": 16, "max_position_embeddings": 4 * original, "partial_rotary_factor": 1.0,
              "rope_scaling": {"rope_type": rope_type, "rope_theta": theta,
                               "original_max_position_embeddings": original, **extra}}
    spec = hf_rope_spec(config)
    values = {"rope_type": rope_type, "original_max_position_embeddings": original, "rope_theta": theta,
              "partial_rotary_factor": 16}
    for key, (name, home) in TRANSFORMERS_KEYS.items():
        if key in values:
            assert (spec["scaling"] if home == "scaling" else spec)[name] == values[key], key


# -- did you mean --------------------------------------------------------------------------------

def test_did_you_mean_for_schemes_and_keys(capsys):
    with pytest.raises(ValueError, match=r"unknown scheme 'rpoe' \(did you mean 'rope'"):
        posenc.build("rpoe")
    with pytest.raises(ValueError, match=r"unknown key 'bsae' for scheme 'rope' \(did you mean 'base'\?\)"):
        posenc.build({"scheme": "rope", "head_dim": 8, "bsae": 3})
    with pytest.raises(ValueError, match=r"\(did you mean 'num_heads'\?\)"):
        parse_spec("alibi:num_head=4")
    with pytest.raises(ValueError, match=r"\(did you mean 'factor'\?\)"):
        posenc.build({"scheme": "rope", "head_dim": 8, "scaling": {"type": "linear", "factr": 2}})
    with pytest.raises(ValueError, match=r"got 'linaer' \(did you mean 'linear'\?\)"):
        posenc.build({"scheme": "rope", "head_dim": 8, "scaling": {"type": "linaer", "factor": 2}})
    code, _, err = run(["show", "sinusoidl"], capsys)
    one_line(code, err)
    assert "did you mean 'sinusoidal'" in err
    with pytest.raises(ValueError) as e:  # nothing close: no suggestion
        registry.get("zzzzzz")
    assert "did you mean" not in str(e.value)


# -- posenc list -----------------------------------------------------------------------------

@pytest.mark.parametrize("columns", [60, 100, 160])
def test_list_fits_the_terminal_width(columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(["list"], capsys)
    assert code == 0
    assert max(map(len, out.splitlines())) <= columns
    for name in registry.schemes():  # every scheme still starts a line with its kind
        assert any(line.split()[:2] == [name, registry.get(name).kind] for line in out.splitlines())
    assert "(any head count)." in " ".join(out.split())  # wrapped, not cut


# -- extras ------------------------------------------------------------------------------------

def test_extras_table_is_pyproject_toml():
    from posenc.cli import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, packages in EXTRAS.items():
        names = {req.split(">")[0].split("=")[0].split("<")[0].split(";")[0].strip() for req in extras[extra]}
        assert set(packages) == names, extra


MISSING_PLOT = [
    (["report", "--profile", "smoke", "--out", "rep"], "'extrapolate' extra"),
    (["report", "--profile", "smoke", "--out", "rep", "--no-run"], "'extrapolate' extra"),
    (["extrapolate", "--profile", "smoke", "--part", "lm"], "'extrapolate' extra"),
    (["show", "rope", "--plot", "x.png"], "pip install '.[plot]'"),
    (["compare", "rope", "alibi", "--plot", "x.png"], "pip install '.[plot]'"),
]


@pytest.mark.parametrize("argv,message", MISSING_PLOT, ids=[" ".join(a[:2]) + " " + a[-1] for a, _ in MISSING_PLOT])
def test_a_missing_extra_is_one_line_before_anything(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in `pip install .` without the extra
    code, out, err = run(argv, capsys)
    one_line(code, err)
    assert "needs matplotlib" in err and message in err, err
    assert out == "" and not os.listdir(tmp_path)  # before any output, any file


@pytest.mark.parametrize("argv,message", [(["--jobs", "0"], "--jobs must be >= 1"),
                                          (["--seeds", "-1"], "--seeds must be comma-separated")])
def test_argument_checks_run_without_the_extra(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for command in (["extrapolate", "--profile", "smoke"], ["report", "--profile", "smoke", "--out", "r"]):
        code, out, err = run([*command, *argv], capsys)
        one_line(code, err)
        assert message in err and not os.listdir(tmp_path), err


def test_report_without_matplotlib_in_a_fresh_process(tmp_path):
    """The whole path of `pip install .` (no extra): no ModuleNotFoundError traceback, exit 2, one line."""
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from posenc.cli import main\n"
            "sys.exit(main(['report', '--profile', 'smoke', '--out', 'rep']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "ModuleNotFoundError" not in p.stderr and "pip install '.[extrapolate]'" in p.stderr
    assert not os.listdir(tmp_path)


def test_a_late_missing_extra_module_is_still_one_line(capsys, monkeypatch):
    """Where no early check stands, main turns the ModuleNotFoundError of an extra's module into the line."""
    from posenc.commands import inspect as cmd

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(cmd, "cmd_list", lambda args: __import__("tqdm"))
    code, _, err = run(["list"], capsys)
    one_line(code, err)
    assert "needs tqdm" in err and "'extrapolate' extra" in err


# -- integers past int64 -----------------------------------------------------------------------

@pytest.mark.parametrize("argv,flag", [
    (["extrapolate", "--profile", "smoke", "--seeds", BIG], "--seeds"),
    (["extrapolate", "--profile", "smoke", "--seeds", f"0,{BIG}"], "--seeds"),
    (["extrapolate", "--profile", "smoke", "--jobs", BIG], "--jobs"),
    (["extrapolate", "--profile", "smoke", "--threads", BIG], "--threads"),
    (["report", "--profile", "smoke", "--out", "r", "--seeds", BIG], "--seeds"),
    (["bench", "--threads", BIG], "--threads"),
    (["demo", "order", "--seed", BIG], "--seed"),
    (["show", "rope", "--length", BIG], "--length"),
])
def test_integers_past_int64_name_the_flag(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    one_line(code, err)
    assert flag in err and "Overflow" not in err, err
    assert not os.listdir(tmp_path)


def test_the_largest_int64_seed_is_accepted():
    from posenc.commands.extrapolate import _seeds

    assert _seeds(f"0,{2**63 - 1}") == (0, 2**63 - 1)


# -- values the library refuses at construction -------------------------------------------------

@pytest.mark.parametrize("kind", ["dynamic", "yarn", "llama3"])
def test_original_max_positions_past_int64_is_refused_at_construction(kind):
    scaling = {"type": kind, "factor": 2.0, "original_max_positions": 2**70}
    with pytest.raises(ValueError, match=r"original_max_positions must be at most 2\^63 - 1.*1180591620717411303424"):
        posenc.build({"scheme": "rope", "head_dim": 16, "scaling": scaling})


def test_dynamic_at_the_int64_bound_runs():
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_positions": 2**63 - 1}
    m = posenc.build({"scheme": "rope", "head_dim": 16, "scaling": scaling})
    assert torch.isfinite(m(torch.randn(1, 2, 5, 16), torch.arange(5))).all()


def test_command_line_bound_of_original_max_positions_is_declared_on_the_scaling(capsys):
    code, _, err = run(["show", "rope:scaling=dynamic,factor=2,original_max_positions=" + BIG], capsys)
    one_line(code, err)
    assert "scaling.original_max_positions must be at most" in err


@pytest.mark.parametrize("spec", ["rope:scaling=linear,factor=1e308", "rope:scaling=ntk,factor=1e308"])
def test_show_of_a_huge_linear_factor_gives_no_warning(spec, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run(["show", spec, "--length", "32", "--dim", "16"], capsys)
    assert code == 0, err
    assert ".. inf over" in out  # frequencies below 2π/float64's largest: they never turn


def test_a_spec_string_with_transformers_keys_is_one_line_naming_them(capsys):
    code, _, err = run(["show", "rope:scaling=yarn,factor=4,original_max_position_embeddings=4096"], capsys)
    one_line(code, err)
    assert "'original_max_position_embeddings' is posenc's 'original_max_positions'" in err and "from_hf" in err
    code, _, err = run(["show", "rope:rope_theta=500000"], capsys)
    one_line(code, err)
    assert "posenc calls it 'base'" in err
