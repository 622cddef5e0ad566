"""``posenc list/show/compare/demo`` and SPEC parsing, tried as a new user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from posenc import registry
from posenc.cli import main
from posenc.spec import fill_sizes, parse_spec, parse_value


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """``posenc ARGV`` in-process: (exit code, stdout, stderr); argparse's own exits count too."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


# -- SPEC parsing -----------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("4", 4), ("-3", -3), ("0.5", 0.5), ("1e4", 1e4), ("true", True), ("False", False), ("none", None),
    ("[1.0, 2]", [1.0, 2]), ('"a,b"', "a,b"), ("half", "half"),
])
def test_parse_value(text, value):
    got = parse_value(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["__import__('os')", "1+1", "NaN", "[1,", "a b", "Infinity", "[Infinity]"])
def test_parse_value_is_strict(text):
    with pytest.raises(ValueError):
        parse_value(text)


def test_parse_spec_routes_scaling_keys():
    spec = parse_spec("rope:base=500000,scaling=yarn,factor=4,original_max_positions=4096")
    assert spec == {"scheme": "rope", "base": 500000,
                    "scaling": {"type": "yarn", "factor": 4, "original_max_positions": 4096}}
    spec = parse_spec("rope:short_factor=[1,1.5],scaling=longrope,long_factor=[2,3]")
    assert spec["scaling"] == {"type": "longrope", "short_factor": [1, 1.5], "long_factor": [2, 3]}
    assert parse_spec("rope:scaling=linear")["scaling"] == {"type": "linear"}
    assert parse_spec("  alibi ") == {"scheme": "alibi"}


@pytest.mark.parametrize("text,message", [
    ("rope:factor=4", "unknown key 'factor' for scheme 'rope' (a key of a scaling: give scaling=TYPE"),
    ("rope:base=1,base=2", "given twice"),
    ("rope:base", "expected key=value"),
    ("rope:", "no key=value"),
    ("rope:scaling=[1,2],factor=4", "scaling must be a scaling type"),
    ("nosuch", "known schemes: "),
    ("", "SPEC is empty"),
])
def test_parse_spec_errors(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_spec(text)


def test_json_spec_file_and_fill_sizes(tmp_path):
    path = tmp_path / "rope.json"
    path.write_text(json.dumps({"scheme": "rope", "head_dim": 32, "scaling": {"type": "linear", "factor": 2}}))
    assert parse_spec(str(path))["head_dim"] == 32
    assert fill_sizes(str(path), dim=64)["head_dim"] == 32  # the SPEC's sizes win
    assert fill_sizes("alibi", num_heads=3) == {"scheme": "alibi", "num_heads": 3}
    assert fill_sizes("learned", dim=8, length=10) == {"scheme": "learned", "d_model": 8, "max_positions": 10}
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="'scheme' key"):
        parse_spec(str(tmp_path / "bad.json"))


# -- commands ---------------------------------------------------------------------------------

def test_list_names_every_scheme_with_kind_and_defaults(capsys):
    code, out, _ = run(["list"], capsys)
    assert code == 0
    for name in registry.schemes():
        assert any(line.split()[:2] == [name, registry.get(name).kind] for line in out.splitlines())
    assert "base=10000.0" in out and "<required>" in out
    code, out, _ = run(["list", "--kind", "bias"], capsys)
    assert code == 0 and "alibi" in out and "sinusoidal" not in out


@pytest.mark.parametrize("name", registry.schemes())
def test_show_every_scheme_without_extra_keys(name, capsys):
    code, out, err = run(["show", name, "--length", "24", "--dim", "16"], capsys)
    assert code == 0, err
    assert "scheme" in out and name in out and registry.get(name).kind in out


def test_show_and_compare_write_figures(tmp_path, capsys):
    png, svg = tmp_path / "h.png", tmp_path / "c.svg"
    code, out, err = run(["show", "sinusoidal", "--length", "32", "--dim", "16", "--plot", str(png)], capsys)
    assert code == 0, err
    assert "all distinct" in out and png.stat().st_size > 2000
    code, out, err = run(["compare", "sinusoidal", "rope:base=500", "alibi", "--length", "32", "--dim", "16",
                          "--plot", str(svg)], capsys)
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[2:5]] == ["sinusoidal", "rope", "alibi"]
    assert svg.stat().st_size > 2000


def test_show_and_compare_draw_grid_encodings_as_2d_maps(tmp_path, capsys):
    code, out, err = run(["show", "rope_mixed", "--dim", "16", "--heads", "2", "--grid", "6x5", "--patch", "1,2"], capsys)
    assert code == 0, err
    assert "6 × 5 patches, signal with patch (1, 2)" in out and "itself, right, below, far corner" in out
    png = tmp_path / "g.png"
    code, out, err = run(["compare", "sinusoidal:axes=2", "rope:axes=2", "learned:grid=[4,4]", "alibi", "--dim", "16",
                          "--plot", str(png)], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == "4 × 4 patches, signal with patch (2, 2)"  # the learned grid's own size
    assert [line.split()[0] for line in out.splitlines()[3:7]] == ["sinusoidal", "rope", "learned", "alibi"]
    assert png.stat().st_size > 2000
    for argv, text in ((["show", "rope_mixed", "--patch", "20,1"], "patch must lie inside the grid 14×14"),
                       (["show", "rope", "--grid", "3"], "--grid must be two integers as AxB"),
                       (["show", "rope", "--grid", "0x4"], "--grid sizes must be integers from 1 to 128")):
        code, _, err = run(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and text in err, err


def test_demo_order(capsys):
    code, out, _ = run(["demo", "order"], capsys)
    assert code == 0
    assert "dog bites man" in out and all(name in out for name in registry.schemes())
    assert "\ngru " in out and "\nssm " in out and "no positional encoding, yet the outputs differ" in out


BAD = [
    (["show", "nosuch"], "unknown scheme 'nosuch'; known schemes: "),
    (["show", "rope:bas=3"], "allowed keys: head_dim, base"),
    (["show", "rope:base=abc"], "base must be a number"),
    (["show", "rope:base=-1"], "base must be > 0"),
    (["show", "sinusoidal", "--dim", "7"], "must be even"),
    (["show", "rope", "--length", "0"], "--length must be an integer from 2 to"),
    (["show", "rope", "--length", "ten"], "--length must be an integer"),
    (["show", "rope", "--plot", "out.jpg"], "--plot must name a .png, .svg, .pdf file"),
    (["show", "rope", "--plot", "no/such/dir/out.png"], "does not exist"),
    (["show", "nope", "--plot", "out.png"], "no positional signal to draw"),
    (["show", "rope:scaling=nosuch,factor=2"], "scaling type must be one of 'linear'"),
    (["show", "learned:max_positions=8", "--length", "16"], "cannot extrapolate"),
    (["show", "missing.json"], "does not exist"),
    (["show", "rope:head_dim=10000000"], "head_dim must be at most 4096"),  # an error, not an OOM kill
    (["compare", "rope", "learned:max_positions=1000000000"], "max_positions must be at most"),
    (["show", "/proc/self/mem"], "cannot read SPEC file '/proc/self/mem'"),  # an OSError, not a traceback
    (["compare"], "required: SPEC"),
    (["demo", "chaos"], "invalid choice: 'chaos' (choose from 'order')"),
    (["nosuchcommand"], "invalid choice"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, err
    assert not os.listdir(tmp_path)  # nothing written


def test_python_m_posenc_exit_codes(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    bad = subprocess.run([sys.executable, "-m", "posenc", "show", "rope:base=0"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "base must be > 0" in bad.stderr
    good = subprocess.run([sys.executable, "-m", "posenc", "demo", "order"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert good.returncode == 0 and "nope" in good.stdout and good.stderr == ""


def test_a_spec_file_that_is_not_utf8_exits_2(tmp_path, capsys):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{")
    code, _, err = run(["show", str(tmp_path / "bin.json")], capsys)
    assert code == 2 and err.count("\n") == 1 and "is not UTF-8 text" in err, err


# -- what the commands show (issue 29, item 2) -------------------------------------------------

def test_show_learned_says_the_table_is_untrained(tmp_path, capsys):
    png = tmp_path / "learned.png"
    code, out, err = run(["show", "learned", "--length", "32", "--dim", "16", "--plot", str(png)], capsys)
    assert code == 0, err
    weights = [line for line in out.splitlines() if line.startswith("weights")]
    assert weights and "untrained: a random N(0, 0.02²) table" in weights[0]
    from posenc import analysis, plot

    fig = plot.show("learned", length=32, dim=16)
    assert "learned (untrained)" in fig.axes[0].get_title()
    code, out, _ = run(["show", "sinusoidal", "--length", "32", "--dim", "16"], capsys)
    assert "untrained" not in out  # a fixed table is the scheme itself
    assert analysis.untrained(analysis.build("rope", dim=16)) is None


def test_compare_labels_untrained_rows_and_explains_coinciding_ones(capsys):
    code, out, err = run(["compare", "sinusoidal", "rope", "learned"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    rows = {line.split("  ")[0].strip(): line for line in lines[2:5]}
    assert set(rows) == {"sinusoidal", "rope", "learned (untrained)"}
    assert rows["sinusoidal"].split()[2:] == rows["rope"].split()[2:]  # the rows the note is about
    note = next(line for line in lines if line.startswith("sinusoidal and rope: the same row"))
    assert "cos(ω_i·r)" in note and "PE(p)·PE(p+r) = Σ_i cos(ω_i·r)" in note and "relative kernel" in note
    assert any(line.startswith("learned is untrained: a random N(0, 0.02²) table") for line in lines)
    code, out, _ = run(["compare", "sinusoidal", "rope:base=500"], capsys)  # other frequencies: no note
    assert "the same row" not in out


def test_compare_plot_legend_labels_the_untrained_table():
    from posenc import plot

    fig = plot.score_vs_distance(["sinusoidal", "learned"], length=32, dim=16)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "learned (untrained)" in labels and "sinusoidal" in labels
