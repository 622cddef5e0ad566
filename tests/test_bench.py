"""``posenc bench``: a smoke test at tiny sizes. It checks the command and the shape of what it
reports, never the timings (benchmarks measure speed; unit tests do not)."""

from __future__ import annotations

import json
import time

import pytest

from posenc.bench.attention import attention_specs, goal_line, training_goal_lines
from posenc.bench.profiles import PROFILES, Profile
from posenc.bench.rotary import ROTARY_GOALS, rotary_cases
from posenc.cli import main

TINY = Profile(shapes=((1, 2, 17, 8),), decode=((2, 2, 1, 8, 40),), partial=True, repeats=1,
               min_sample_s=0.0, lengths=(48,), schemes=("alibi",), materialize_max=0, train_schemes=("fire",),
               content_schemes=("stick_breaking",), content_lengths=(48,))


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(PROFILES, "quick", TINY)


@pytest.mark.xdist_group("compile")  # its flex child finds the ISA probes and headers the compile group built
def test_bench_prints_tables_and_writes_json(tiny, tmp_path, capsys):
    path = tmp_path / "out" / "bench.json"
    assert main(["bench", "--quick", "--threads", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Rotary" in out and "Attention" in out and "out/cp_" in out and "goal (L=32768" in out
    assert "copy_ = out.copy_(x) into a warm preallocated tensor" in out and "clone = x.clone()" in out

    data = json.loads(path.read_text())
    assert data["profile"] == "quick" and data["meta"]["torch_threads"] == 1
    assert data["meta"]["device"] == "cpu" and "device_name" not in data["meta"]
    assert time.strptime(data["meta"]["date"], "%Y-%m-%dT%H:%M:%S%z")
    assert "cp_GB/s" in out and "Liger" not in out  # the CUDA peers' columns only where they ran
    # (prefill + decoding step) x 2 dtypes x 2 layouts x 2 rotary dims
    assert len(data["rotary"]) == len(rotary_cases(TINY)) == 16
    assert sum(row["case"]["offset"] == 40 for row in data["rotary"]) == 8
    for row in data["rotary"]:
        assert set(row["seconds"]) == {"forward", "forward+backward"}
        assert {"copy_", "clone", "posenc", "posenc_apply", "posenc_out"} <= set(row["seconds"]["forward"])
        assert {"copy_", "clone", "posenc", "posenc_apply"} <= set(row["seconds"]["forward+backward"])
        for times in row["seconds"].values():
            assert all(t > 0 for t in times.values())
        assert max(row["max_abs_diff_vs_posenc"].values()) < 0.1  # every candidate rotates the same way
        peer = "transformers" if row["case"]["layout"] == "half" else "rotary_embedding_torch"
        assert peer in row["seconds"]["forward"] or "not installed" in row["missing"][peer]
        assert row["missing"]["liger_kernel"] == row["missing"]["flash_attn"] == "n/a (CUDA only)"
        assert row["device"] == "cpu"
        for name in ("copy_", "posenc_out"):  # x read and out written, per second
            seconds = row["seconds"]["forward"][name]
            assert row["bandwidth_gb_s"][name] == pytest.approx(2 * row["bytes"] / seconds / 1e9)

    goals = data["rotary_goals"]
    assert set(goals) == set(ROTARY_GOALS)
    for name, goal in goals.items():
        assert goal["measured"] == ("transformers" not in ROTARY_GOALS[name][0]
                                    or "transformers" in data["rotary"][0]["seconds"]["forward"])
    assert out.count("goal: ") == len(ROTARY_GOALS)

    methods = {(r["pass"], r["scheme"], r["method"]) for r in data["attention"]}
    assert methods == {("forward", "none", "sdpa_floor"), ("forward", "alibi", "posenc"),
                       ("forward", "alibi", "flex"), ("forward+backward", "none", "sdpa_floor"),
                       ("forward+backward", "fire", "posenc"), ("forward+backward", "stick_breaking", "posenc")}
    chosen = {(r["pass"], r["scheme"], r["method"]): r.get("backend") for r in data["attention"] if r["scheme"] != "none"}
    assert chosen == {("forward", "alibi", "posenc"): "materialize", ("forward", "alibi", "flex"): None,  # 8 x 48^2
                      ("forward+backward", "fire", "posenc"): "materialize",  # scores: small
                      ("forward+backward", "stick_breaking", "posenc"): "materialize"}
    assert "posenc (materialize)" in out
    assert "goal (fwd+bwd L=8192, peak under 2.0 GB): not measured" in out
    for r in data["attention"]:
        assert "error" not in r, r
        assert 0 < r["rss_after_import_gb"] <= r["rss_after_inputs_gb"] <= r["peak_rss_gb"]
        assert r["seconds"] > 0


def test_bench_lengths_and_schemes_replace_the_profiles(tiny, capsys):
    specs = attention_specs(TINY, lengths=(40, 50000), schemes=("kerple",))
    cases = {(s["pass"], s["length"], s["scheme"], s["method"]) for s in specs}
    assert ("forward+backward", 40, "kerple", "posenc") in cases and ("forward", 50000, "kerple", "flex") in cases
    assert not any(s["pass"] == "forward+backward" and s["length"] == 50000 for s in specs)  # over TRAIN_LIMIT
    assert all(s["memory_cap_gb"] == TINY.memory_cap_gb for s in specs)


def test_goal_lines_judge_the_numbers():
    rows = [{"pass": "forward+backward", "method": "sdpa_floor", "scheme": "none", "length": 8192, "seconds": 5.0,
             "peak_rss_gb": 0.3},
            {"pass": "forward+backward", "method": "posenc", "scheme": "alibi", "length": 8192, "seconds": 21.0,
             "peak_rss_gb": 0.5},
            {"pass": "forward+backward", "method": "posenc", "scheme": "fire", "length": 8192, "seconds": 90.0,
             "peak_rss_gb": 2.5}]
    lines = "\n".join(training_goal_lines(rows))
    assert "goal (fwd+bwd L=8192, peak under 2.0 GB): NOT met: alibi 0.50, fire 2.50" in lines
    assert "goal (fwd+bwd L=8192, ALiBi under 22.0 s): met: alibi 21.00" in lines
    assert "goal (fwd L=32768, under 2.0x causal SDPA): not measured" in lines
    long = [{"pass": "forward", "method": "posenc", "scheme": "alibi", "length": 32768, "peak_rss_gb": 0.7},
            {"pass": "forward+backward", "method": "posenc", "scheme": "alibi", "length": 32768, "peak_rss_gb": 1.6}]
    assert goal_line(long).endswith("met: alibi 0.70 GB")  # the forward goal reads forward rows only


@pytest.mark.parametrize("argv", [["--what", "rotary,flops"], ["--what", ","], ["--threads", "0"],
                                  ["--lengths", "8192,x"], ["--lengths", "8"], ["--schemes", "alibi,rope"]])
def test_bench_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posenc bench: error:") and "\n" not in err
