"""``posenc extend`` as a newcomer meets it (issue 56), on the tiny Llama of tests/test_extend.py: a
``--to`` that does not extend the context refused, what a run cannot decide said with the command that
would, an interrupted run leaving its page and the line that resumes it, progress within a forward and
log lines above the bar, and a page whose tables say what they hold."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from test_extend import CONTEXT, cli, records, tiny  # noqa: E402,F401  (the module-scoped tiny model)

ROOT = Path(__file__).resolve().parents[1]
SHORT = CONTEXT + 32  # a --to just past the context: no claim about extension (they need 2×) reachable


def run(tiny: Path, out: Path, **kw):  # noqa: F811
    from posenc.extend import extend

    args = dict(to=SHORT, methods=["none", "dynamic"], text=tiny.parent / "text.txt", out=out, bucket=48,
                trials=0, log=lambda s: None, progress=False)
    args.update(kw)
    return extend(tiny, **args)


@pytest.mark.parametrize("to", [CONTEXT, CONTEXT // 2])
def test_a_to_that_does_not_extend_the_context_is_refused(tiny, tmp_path, capsys, to):  # noqa: F811
    out = tmp_path / "o"
    code, err = cli(capsys, str(tiny), "--to", str(to), "--text", str(tiny.parent / "text.txt"), "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"context of {CONTEXT} tokens" in err and f"--to {CONTEXT + 1} or more" in err, err
    assert not out.exists()
    from posenc.extend import extend

    with pytest.raises(ValueError, match=f"--to {to} does not extend the model's context of {CONTEXT}"):
        extend(tiny, to=to, out=out, log=lambda s: None)


def test_methods_that_leave_no_arm_or_one_model_are_refused(tiny, tmp_path, capsys, monkeypatch):  # noqa: F811
    code, err = cli(capsys, str(tiny), "--to", str(SHORT), "--method", "longrope", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "none of them runs on this model" in err, err
    from posenc.extend import methods

    monkeypatch.setattr(methods, "method_spec", lambda config, m, factor: {"same": 1})  # every arm one model
    with pytest.raises(ValueError, match="every one of them is the same model"):
        run(tiny, tmp_path / "p")
    assert not (tmp_path / "p").exists()


@pytest.fixture(scope="module")
def short(tiny, tmp_path_factory):  # noqa: F811
    """A run at --to CONTEXT + 32 with none and dynamic (asked for: longrope too, which this model cannot run),
    no passkey; its log lines."""
    out = tmp_path_factory.mktemp("short")
    lines: list[str] = []
    run(tiny, out, methods=["none", "dynamic", "longrope"], log=lines.append)
    return out, lines


def test_a_run_says_what_it_cannot_decide_and_the_command_that_would(short):
    out, lines = short
    assert any(line.startswith("skipped longrope: the model's config has no LongRoPE factors") for line in lines)
    # before the run and after it: the claims at 2× need --to 256, with the command and its forwards
    need = [line for line in lines if "--to 256, --method linear, --method ntk, --method yarn, --trials 1 would" in line]
    assert len(need) == 2 and need[0].startswith("cannot decide 5 claims (plain RoPE degrades past its context;"), lines
    assert re.search(r"would: posenc extend \S+ --to 256 --method none --method dynamic --method longrope --method "
                     r"linear --method ntk --method yarn --text \S+ --out \S+ --bucket 48  \[30 forwards of 256 "
                     r"tokens, 3 forwards of 128 tokens \(time one here: python -m posenc.extend.cost --length 256\)\]",
                     need[0]), need[0]
    assert need[1].endswith("here (scaled as L² from this run's forwards)]")  # after the run: from its own forwards
    # the same --to, one method more: only its forwards (3 passages), the same --out resumes the rest
    assert any(line.startswith("cannot decide 1 claim (linear interpolation raises perplexity within the original "
                               "context); --method linear would:") and "[3 forwards of 160 tokens" in line
               for line in lines)
    assert lines[1].startswith("this run measures 1 of 7 claims: dynamic scaling leaves perplexity")
    summary = json.loads((out / "summary.json").read_text())
    statuses = {claim: status for _, claim, status in summary["verdicts"]}
    # a claim whose arms ran is measured; one whose methods were not asked for says so, never "not measured yet"
    assert statuses["dynamic scaling leaves perplexity within the original context unchanged"] not in (
        "not measured", "not asked")
    assert statuses["linear interpolation raises perplexity within the original context"] == "not asked"
    html = (out / "index.html").read_text()
    assert "not measured yet" not in html
    assert "not asked for: linear (add --method linear)" in html
    assert "Passkey: not asked for (--trials 0)" in html
    assert "What this run can and cannot decide" in html and "<code>posenc extend" in html


def test_the_page_says_what_its_tables_hold(short, tiny):  # noqa: F811
    out, _ = short
    html = (out / "index.html").read_text()
    assert f"<h1>posenc extend: {tiny.name} to {SHORT} tokens</h1>" in html
    # buckets of 48 over positions 1 … 159: the last one, from 144, holds 16 tokens
    assert "<th>144 (16 tokens)</th>" in html and "<th>96</th>" in html
    assert "the first 128 tokens of their 160-token forwards" in html  # none at 128, cut from its forward
    assert "dynamic: their own 128-token forwards" in html
    assert "<th>method</th><th>measurement</th><th>tokens</th><th>seconds</th>" in html
    assert "perplexity, passage 2" in html and "3 passages of 160 tokens" in html


def test_plain_tick_labels():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posenc.extend.page import _curves

    fig = _curves({"none": [36.0, 40.0, 52.0]}, ["0", "48", "96"], SHORT, CONTEXT, 48)
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels(minor=True) + ax.yaxis.get_ticklabels()]
    plt.close(fig)
    assert "40" in labels and not any("10^" in t or "times" in t or "×" in t for t in labels), labels


def test_a_folder_reused_with_other_methods_shows_every_record_it_counts(short, tiny, tmp_path):  # noqa: F811
    import shutil

    out = tmp_path / "reused"
    shutil.copytree(short[0], out)
    run(tiny, out, methods=["none"])  # the same set-up: dynamic's records from the first run are counted
    html = (out / "index.html").read_text()
    assert re.search(r"(\d+) measurements \(none, dynamic\)", html)
    assert "Also shown: dynamic, measured in this folder by an earlier run" in html
    assert "<td>dynamic</td><td>perplexity, passage 0</td>" in html


@pytest.mark.parametrize("how, code", [("sigterm", 128 + signal.SIGTERM), ("ctrl-c", 128 + signal.SIGINT)])
def test_an_interrupted_run_writes_its_page_and_the_line_that_resumes(tiny, tmp_path, capsys, monkeypatch, how,  # noqa: F811
                                                                     code):
    from posenc.extend import measure

    real, calls = measure.token_nll, []

    def token_nll(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # the second forward: stopped in it, one record kept
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(measure, "token_nll", token_nll)
    before = signal.getsignal(signal.SIGTERM)  # not always the default: ray.init (an earlier test) installs its own
    out = tmp_path / "o"
    args = [str(tiny), "--to", str(SHORT), "--method", "none", "--method", "dynamic", "--trials", "0", "--passages",
            "1", "--text", str(tiny.parent / "text.txt"), "--out", str(out), "--quiet"]
    got, err = cli(capsys, *args)
    assert got == code and len(err.strip().splitlines()) == 1, err
    assert f"1 measurement kept in {out / 'results.jsonl'}" in err and f"the page of them in {out / 'index.html'}" in err
    assert len(records(out)) == 1 and "1 measurement (none; not measured yet: dynamic)" in (out / "index.html").read_text()
    assert signal.getsignal(signal.SIGTERM) is before  # the run's own handler removed, what was there restored
    resume = err.split("to resume: ", 1)[1].strip()
    words = shlex.split(resume)
    def pairs(ws):  # the flags with their values, in any order
        return sorted(zip(ws[1::2], ws[2::2]))

    assert words[:3] == ["posenc", "extend", str(tiny)] and pairs(words[2:]) == pairs(args[:-1]), words  # the same
    if how == "ctrl-c":
        return
    calls.clear()
    monkeypatch.setattr(measure, "token_nll", lambda *a, **k: calls.append(1) or real(*a, **k))
    got, err = cli(capsys, *words[2:], "--quiet")
    assert got == 0, err
    assert len(calls) == 3 - 1 and len(records(out)) == 3  # none at 160, dynamic at 128 and 160


def test_progress_moves_within_a_forward_and_log_lines_go_above_the_bar(tiny, tmp_path, capsys):  # noqa: F811
    import sys

    import torch

    from posenc.extend import measure, sources

    model, _ = sources.load(tiny)
    steps: list[float] = []
    measure.token_nll(model, torch.arange(100) % 256, chunk=40, step=steps.append)
    assert len(steps) == 2 + 3  # two layers' passes, three chunks of the loss
    assert abs(sum(steps) - 100) < 1e-9 and max(steps) < 100 / 2
    capsys.readouterr()
    out = tmp_path / "o"
    run(tiny, out, methods=["none"], passages=1, progress=True,
        log=lambda line: print(line, file=sys.stderr))  # the bar's stream: as when both share a terminal
    err = capsys.readouterr().err
    found = re.search(r"(.) *none L=160    passage 0", err, re.S)
    assert found and found.group(1) in "\r\n", repr(err[max(0, found.start() - 80):found.end()])  # not after the bar
    html = (out / "index.html").read_text()  # and singulars where there is one
    assert "1 measurement (none)" in html and "1 passage of 160 tokens" in html
    assert "1 passages" not in html and "1 measurements" not in html
    assert "measured on 1 passage: a verdict needs 3 (--passages 3)" in html


def test_the_guide_runs_from_a_fresh_clone_and_the_index_lists_every_extra():
    """The guide's shell commands name ``.venv/bin/posenc`` (what a fresh clone has after ``make``), and
    docs/index.md's install list names every extra of pyproject.toml."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    guide = (ROOT / "docs" / "guide" / "extend.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", guide, re.S)
    commands = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert commands and not [c for c in commands if re.match(r"\s*(posenc|python) ", c)], commands
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    index = (ROOT / "docs" / "index.md").read_text()
    assert [x for x in extras if f"pip install '.[{x}]'" not in index] == []
