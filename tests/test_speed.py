"""``posenc bench``: a smoke test at tiny sizes. It checks the command and the shape of what it
reports, never the timings (benchmarks measure speed; unit tests do not)."""

from __future__ import annotations

import json

import pytest

from posenc import speed
from posenc.cli import main

TINY = speed.Profile(shapes=((1, 2, 17, 8),), partial=True, repeats=1, min_sample_s=0.0,
                     lengths=(48,), schemes=("alibi",), materialize_max=0)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(speed.PROFILES, "quick", TINY)


def test_bench_prints_tables_and_writes_json(tiny, tmp_path, capsys):
    path = tmp_path / "out" / "bench.json"
    assert main(["bench", "--quick", "--threads", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Rotary" in out and "Attention" in out and "pe/copy" in out and "goal (L=32768" in out

    data = json.loads(path.read_text())
    assert data["profile"] == "quick" and data["meta"]["torch_threads"] == 1
    assert len(data["rotary"]) == len(speed.rotary_cases(TINY)) == 8  # 2 dtypes x 2 layouts x 2 rotary dims
    for row in data["rotary"]:
        assert set(row["seconds"]) == {"forward", "forward+backward"}
        for times in row["seconds"].values():
            assert {"copy", "posenc", "posenc_apply"} <= set(times)
            assert all(t > 0 for t in times.values())
        peer = "transformers" if row["case"]["layout"] == "half" else "rotary_embedding_torch"
        assert peer in row["seconds"]["forward"] or "not installed" in row["missing"][peer]

    methods = {(r["scheme"], r["method"]) for r in data["attention"]}
    assert methods == {("none", "sdpa_floor"), ("alibi", "posenc")}
    for r in data["attention"]:
        assert "error" not in r, r
        assert 0 < r["rss_after_import_gb"] <= r["rss_after_inputs_gb"] <= r["peak_rss_gb"]
        assert r["seconds"] > 0


@pytest.mark.parametrize("argv", [["--what", "rotary,flops"], ["--what", ","], ["--threads", "0"]])
def test_bench_bad_arguments_exit_2_with_one_line(argv, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posenc bench: error:") and "\n" not in err
