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
def report(tmp_path_factory, smoke_results) -> Path:
    """The smoke report, from a copy of the smoke profile's results (conftest's ``smoke_results``,
    which tests/test_extrapolate_driver.py checks run by run) less its last run: the report trains
    that one itself (its benchmark path stays tested) instead of training every model a second time."""
    out = tmp_path_factory.mktemp("report")
    runs = smoke_results.read_bytes().splitlines(keepends=True)
    (out / "results.jsonl").write_bytes(b"".join(runs[:-1]))
    assert main(["report", "--profile", "smoke", "--out", str(out), "--jobs", "1", "--no-progress"]) == 0
    return out / "index.html"


@pytest.mark.xdist_group("extrapolate")
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


@pytest.mark.xdist_group("extrapolate")
def test_report_shows_the_method_contamination_and_nll_by_position(report):
    page = report.read_text()
    for needle in ('id="nll-by-position"', 'id="contamination"', "overlap_128 = ", 'id="method"', "Holm",
                   "needs seeds", "<th>parameters</th>", "One family per paper", "Detectable effect"):
        assert needle in page, needle
    assert "(indicative" not in page
    # the kept records' note (posenc.extrapolate.kept; the smoke page's claims name its own lengths, which no
    # kept set of another profile has: tests/test_extrapolate_kept.py fills a quick page)
    assert 'id="recorded"' in page and "Refused kept records" not in page


@pytest.mark.xdist_group("extrapolate")  # the session fixture `report` is built once per worker: the same worker
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
@pytest.mark.xdist_group("extrapolate")
def test_report_renders_in_chromium_without_errors(report, tmp_path):
    exe = _chromium()
    attrs, console = _load(exe, report, tmp_path / "profile")
    assert attrs.get("data-loaded") == "1", attrs
    assert attrs.get("data-errors") == "" and console == "", (attrs, console)
    assert attrs.get("data-broken-images") == ""
    assert int(attrs["data-images"]) >= len(FIGURES)


@pytest.mark.browser
@pytest.mark.xdist_group("extrapolate")
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
    from posenc.extrapolate.parts.scaling import scaling_section
    from posenc.stats.page_parts import Page

    spec = {"scheme": "rope", "head_dim": 8, "base": 500.0}

    def rec(label, nll, seed=0, **extra):
        blocks = [nll + 0.01 * i + 0.003 * seed * (-1) ** i for i in range(4)]  # each seed its own blocks
        rows = [{"mode": m, "length": t, "mult": t / 16, "nll": nll, "block_nll": blocks}
                for m in ("nonoverlap", "sliding") for t in (16, 64)]
        return {"label": label, "spec": spec, "train_length": 16, "eval": rows, "seed": seed, **extra}

    lm = [rec("rope (base=500)", 3.0, s) for s in (0, 1, 2)]
    sc = [rec("rope + yarn (zero-shot)", 2.0 + 0.01 * s, s, variant={"type": "yarn", "mode": "zero-shot",
                                                                      "factor": "T/L"}) for s in (0, 1, 2)]
    page = Page()
    verdicts = scaling_section(page, lm, sc)
    assert [v.status for v in verdicts] == ["agrees"], verdicts
    assert "<td>rope (base=500)</td><td>20.39" in "".join(page.parts)


def test_the_method_names_the_rows_that_train_other_seeds_than_their_part():
    from posenc.extrapolate.profiles import PROFILES
    from posenc.extrapolate.report import _method

    assert "3 seeds (training runs" in _method(PROFILES["quick"])  # one number of seeds for every part it runs
    mixed = dataclasses.replace(PROFILES["quick"], seeds=(0,), part_seeds=(("lm", (0, 1, 2)), ("lm_rows", (0,))))
    text = _method(mixed)
    assert "3 seeds for <code>lm</code>" in text and "1 seed for the content rows of <code>lm</code>" in text
    only_tasks = dataclasses.replace(mixed, parts=("tasks",))
    assert "content rows" not in _method(only_tasks)  # rows of a part that does not run: not named


@pytest.mark.xdist_group("extrapolate")
def test_report_opens_with_the_verdicts_at_a_glance_and_a_table_of_contents(report):
    page = report.read_text()
    body = page[page.index("<body>"):]
    assert body.index('id="smoke-banner"') < body.index("<h1>") and "numbers mean nothing" in body  # at the top
    header = re.search(r'<p class=muted>Generated .*?</p>', body).group(0)  # the command and the flags in effect
    assert re.search(r'<code id="command">posenc report --profile smoke --jobs 1 --no-progress --out \S+</code>', header)
    for flag in ("--scheme nope", "--scheme t5", "--corpus (none given", "--part lm", "--seeds 0", "--threads",
                 "--device", "--arch transformer"):
        assert flag in header, (flag, header)
    toc = re.search(r'<nav id="toc">(.*?)</nav>', body, flags=re.S).group(1)
    headings = re.findall(r'<h2[^>]*\bid="?([\w-]+)"?[^>]*>(\d+)\. ', body)
    assert [int(n) for _, n in headings] == list(range(1, len(headings) + 1)) and len(headings) >= 8
    assert re.findall(r'href="#([\w-]+)"', toc) == [anchor for anchor, _ in headings]
    glance = re.search(r'<table id="verdicts".*?<tbody>(.*?)</tbody></table>', body, flags=re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", glance, flags=re.S)
    details = body[body.index('id="verdict-details"'):]
    assert len(rows) == len(re.findall(r"<tr><td>[^<]*</td><td>", details.split("</table>")[0])) > 20
    for row in rows:
        assert re.findall(r'<td class="(\w+)">', row) == ["source", "claim", "effect", "mde", "verdict"], row
    assert body.index('id="verdicts"') < body.index('id="forest"') < body.index('id="verdict-details"')
    assert '<details id="settings"><summary>Settings: profile' in body
    assert "(indicative" not in body


def test_the_glance_table_and_forest_on_the_issues_three_seed_numbers():
    """Today's three-seed numbers of issue 27 (mean ± SE): each row at 5+ SE decided, one at
    ~1 SE unclear; the table's cells and the forest's points say so."""
    from posenc.stats import findings
    from posenc.extrapolate.glance import forest_svg, verdict_table

    def seeds(mean, se, sign):
        sd = se * 3**0.5
        return findings.Evidence((mean - sd, mean, mean + sd), (sd / 3,) * 3, sign=sign)

    rows = [("at 16L, ALiBi beats sinusoidal", -0.820, 0.109, -1), ("at 16L, ALiBi beats rotary", -0.819, 0.065, -1),
            ("rotary degrades past L", 1.114, 0.070, 1), ("sinusoidal degrades past L", 0.905, 0.123, 1),
            ("at 16L, ALiBi beats T5", -0.257, 0.025, -1), ("at 16L, rotary beats sinusoidal", -0.06, 0.058, -1)]
    verdicts = [dataclasses.replace(findings.seed_verdict("Press et al. 2022", claim, "m", seeds(m, se, sign),
                                                          unit="ΔNLL"), pool="lm") for claim, m, se, sign in rows]
    verdicts.append(findings.Verdict("Press et al. 2022", "a learned table cannot run past its length", "m", "agrees"))
    out = findings.adjust(verdicts)
    assert [v.status for v in out] == ["agrees"] * 5 + ["no clear difference", "agrees"]
    html = verdict_table(out)
    cells = re.findall(r'<td class="(effect|mde|verdict)">(.*?)</td>', html)
    assert cells[0][1].startswith("-0.820 ΔNLL") and "[" in cells[0][1] and re.match(r"0\.\d{3} ", cells[1][1])
    assert all(v.mde < 5 * se for v, (_, _, se, _) in zip(out, rows))  # 5 SE is beyond what the test detects
    assert "no test" in html and html.count("<tr>") == len(out) + 1  # the header row, one per claim
    svg = forest_svg(out)
    assert svg.startswith('<svg id="forest"') and svg.count("<circle") == 6 and "http" not in svg


def test_the_demonstrations_are_drawn_once_per_process(monkeypatch):
    """A second report adds the section the first one drew (it depends on posenc alone); a section
    that drew with an error is shown and drawn again by the next report."""
    from posenc.extrapolate import demos
    from posenc.stats.page_parts import Page

    drawn = []

    def draw(page, error=None):
        drawn.append(len(drawn))
        page.add(f"<p>drawing {len(drawn)}</p>")
        page.figures[f"figure{len(drawn)}.png"] = b"png"
        if error:
            page.errors.append(error)

    monkeypatch.setattr(demos, "_DRAWN", [])
    monkeypatch.setattr(demos, "_draw", draw)
    first, second = Page(), Page()
    demos.demonstrations(first)
    demos.demonstrations(second)
    assert len(drawn) == 1 and second.parts == first.parts == ["<p>drawing 1</p>"]
    assert second.figures == first.figures == {"figure1.png": b"png"} and not second.errors

    monkeypatch.setattr(demos, "_DRAWN", [])
    monkeypatch.setattr(demos, "_draw", lambda page: draw(page, "rope_decay: RuntimeError: no display"))
    failed, again = Page(), Page()
    demos.demonstrations(failed)
    demos.demonstrations(again)
    assert len(drawn) == 3 and failed.errors == again.errors == ["rope_decay: RuntimeError: no display"]
    assert again.parts == ["<p>drawing 3</p>"]
