"""``posenc report`` on the smoke profile: a self-contained page that fetches nothing, whose
figures render in a real headless Chromium without console errors."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posenc.cli import main

FIGURES = ("sinusoidal_heatmap", "sinusoidal_fingerprints", "similarity", "score_vs_distance", "rope_decay",
           "alibi_bias", "t5_bias", "perplexity", "rope_scalings", "task_accuracy", "image_accuracy", "time_accuracy")


@pytest.fixture(scope="session")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--profile", "smoke", "--out", str(out), "--jobs", "1", "--no-progress"]) == 0
    return out / "index.html"


@pytest.mark.xdist_group("report")
def test_report_is_self_contained(report):
    text = report.read_text()
    assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert not re.search(r"""(src|href)=["'](?!data:|#|explorer/index\.html["'])""", text), "every resource must be embedded"
    assert 'href="explorer/index.html"' in text and (report.parent / "explorer" / "index.html").is_file()
    assert 'class="figure-error"' not in text and "unavailable" not in text
    for name in FIGURES:
        assert re.search(rf'<img src="data:image/png;base64,[A-Za-z0-9+/=]{{200,}}" alt="{name}">', text), name
        assert (report.parent / "figures" / f"{name}.png").stat().st_size > 1000
    for heading in ("Summary", "dog bites man", "Language modelling", "Recurrence instead of position",
                    "RoPE scalings", "Algorithmic tasks", "Images: train small, test large (resolution)",
                    "Time: frame indices or seconds", "Heo et al. 2024", "Hardware, versions"):
        assert heading in text, heading
    assert "cannot run" in text  # the learned table past its length
    assert "hybrid nope" in text and "Lieber et al. 2024 (Jamba)" in text and "Position at training length" in text
    assert "\ngru " in text and "\nssm " in text and "recurrent" in text  # the order demo's recurrent rows
    assert "Content-Security-Policy" in text


@pytest.mark.xdist_group("report")
def test_report_shows_the_method_contamination_and_nll_by_position(report):
    page = report.read_text()
    for needle in ('id="nll-by-position"', 'id="contamination"', "overlap_128 = ", 'id="method"', "Holm",
                   "indicative, one seed", "<th>parameters</th>"):
        assert needle in page, needle


def test_second_report_reuses_every_result(report, capsys):
    lines = (report.parent / "results.jsonl").read_bytes()
    assert main(["report", "--profile", "smoke", "--out", str(report.parent), "--jobs", "1", "--no-progress"]) == 0
    assert (report.parent / "results.jsonl").read_bytes() == lines
    assert "0 to run" in capsys.readouterr().err
    assert "0 run now" in report.read_text()


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI; the Makefile's `chromium` target installs Debian's package")
        pytest.skip("chromium is not installed (`make chromium` installs Debian's package); CI does not skip this")
    return exe


def _load(exe: str, page: Path, tmp: Path) -> tuple[dict[str, str], str]:
    """Opens ``page`` headless; returns the attributes the page's check script set, and the log."""
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={tmp}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    root = re.search(r"<html[^>]*>", proc.stdout)
    assert root, f"no DOM dumped: {proc.stderr[-2000:]}"
    attrs = dict(re.findall(r'(data-[\w-]+)="([^"]*)"', root.group(0)))
    console = "\n".join(line for line in proc.stderr.splitlines() if ":CONSOLE" in line)
    return attrs, console


@pytest.mark.browser
@pytest.mark.xdist_group("report")
def test_report_renders_in_chromium_without_errors(report, tmp_path):
    exe = _chromium()
    attrs, console = _load(exe, report, tmp_path / "profile")
    assert attrs.get("data-loaded") == "1", attrs
    assert attrs.get("data-errors") == "" and console == "", (attrs, console)
    assert attrs.get("data-broken-images") == ""
    assert int(attrs["data-images"]) >= len(FIGURES)


@pytest.mark.browser
@pytest.mark.xdist_group("report")
def test_the_browser_check_catches_errors(report, tmp_path):
    """The same check on a spoiled copy: a broken image, a remote image and a script error are all seen."""
    exe = _chromium()
    text = report.read_text()
    spoiled = text.replace("<body>", '<body><img src="data:image/png;base64,AAAA" alt="broken">'
                                     '<img src="https://example.invalid/x.png" alt="remote">'
                                     "<script>notDefined();</script>", 1)
    page = tmp_path / "spoiled.html"
    page.write_text(spoiled)
    attrs, console = _load(exe, page, tmp_path / "profile")
    assert "notDefined" in attrs["data-errors"] and "blocked https://example.invalid" in attrs["data-errors"]
    assert set(attrs["data-broken-images"].split("|")) == {"broken", "remote"}
    assert "notDefined" in console


def test_no_run_without_results_exits_2(tmp_path, capsys):
    code = main(["report", "--profile", "smoke", "--out", str(tmp_path), "--no-run", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "no results in" in err and err.count("\n") == 1


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["report", "--profile", "smoke", "--out", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_an_os_error_on_out_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["report", "--profile", "smoke", "--out", str(tmp_path / "file" / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Not a directory" in err and "Traceback" not in err, err


def test_scalings_are_compared_with_their_base_run_under_its_own_label():
    # `--scheme rope:base=500`: the LM run is labelled "rope (base=500)", not "rope"
    from posenc.extrapolate.parts.scalings import scaling_section
    from posenc.extrapolate.page import Page

    spec = {"scheme": "rope", "head_dim": 8, "base": 500.0}

    def rec(label, nll, **extra):
        rows = [{"mode": m, "length": t, "mult": t / 16, "nll": nll, "block_nll": [nll + 0.01 * i for i in range(4)]}
                for m in ("nonoverlap", "sliding") for t in (16, 64)]
        return {"label": label, "spec": spec, "train_length": 16, "eval": rows, **extra}

    lm = [rec("rope (base=500)", 3.0)]
    sc = [rec("rope + yarn (zero-shot)", 2.0, variant={"type": "yarn", "mode": "zero-shot", "factor": "T/L"})]
    page = Page()
    verdicts = scaling_section(page, lm, sc)
    assert [v.status for v in verdicts] == ["agrees"], verdicts
    assert "<td>rope (base=500)</td><td>20.39" in "".join(page.parts)


def test_the_method_names_the_rows_that_train_other_seeds_than_their_part():
    from posenc.extrapolate.profiles import PROFILES
    from posenc.extrapolate.report import _method

    text = _method(PROFILES["quick"])
    assert "3 seeds for <code>lm</code>" in text and "1 seed for the content rows of <code>lm</code>" in text
    only_tasks = dataclasses.replace(PROFILES["quick"], parts=("tasks",))
    assert "content rows" not in _method(only_tasks)  # rows of a part that does not run: not named
