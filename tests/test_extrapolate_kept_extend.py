"""Kept ``posenc extend`` records (``posenc.extrapolate.kept_extend``, docs/keep_extend.py), on a run of the
tiny Llama of tests/test_extend.py: kept, the page's pretrained section shows its verdicts marked
recorded; an altered record is refused (sha256), a changed set-up hash marks it stale; an unfinished
folder, or a command that did not make it, is not kept."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from test_extend import CONTEXT, tiny  # noqa: E402,F401  (the module-scoped tiny model)

ROOT = Path(__file__).resolve().parents[1]
STARTED = "2026-12-07T23:19:30Z"


def _keeper():
    spec = importlib.util.spec_from_file_location("keep_extend", ROOT / "docs" / "keep_extend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory) -> Path:  # noqa: F811
    """A finished tiny run: the methods of the claims, three passages, three passkey prompts at 2×."""
    from posenc.extend import extend

    out = tmp_path_factory.mktemp("extend") / "run"
    extend(tiny, to=2 * CONTEXT, methods=["none", "linear", "ntk", "dynamic", "yarn"], text=tiny.parent / "text.txt",
           out=out, bucket=32, depths=(0.1, 0.5, 0.9), log=lambda s: None, progress=False)
    return out


@pytest.fixture()
def records_dir(finished, tiny, tmp_path) -> Path:  # noqa: F811
    """A records folder holding the tiny run kept as ``extend-tiny`` (its command checked against its settings)."""
    _keeper().keep("extend-tiny", finished, started=STARTED, wall=12.5, cpu=20.0, commit="0123456789ab",
                   command=f"posenc extend {tiny} --to {2 * CONTEXT} --method none --method linear "
                           "--method ntk --method dynamic --method yarn --text /x/text.txt --bucket 32 --out elsewhere",
                   dest=tmp_path)
    return tmp_path


def _section(kept):
    from posenc.extrapolate.parts.pretrained import PART
    from posenc.extrapolate.profiles import get_profile
    from posenc.stats.page_parts import Page

    page = Page(draw=False)
    return PART.section(page, [], get_profile("quick"), kept=kept), "".join(page.parts)


def test_a_kept_extend_run_is_shown_recorded_with_its_provenance(records_dir, finished, tiny):  # noqa: F811
    from posenc.extrapolate import kept_extend
    from posenc.extrapolate.glance import recorded_mark
    from posenc.extend.verdicts import from_folder

    folder = records_dir / "extend-tiny"
    assert (folder / "results.jsonl").read_bytes() == (finished / "results.jsonl").read_bytes()  # exactly as written
    provenance = json.loads((folder / "provenance.json").read_text())
    assert set(kept_extend.FIELDS) <= set(provenance) and provenance["date"] == STARTED
    assert provenance["wall_seconds"] == 12.5 and provenance["cpu_seconds"] == 20.0
    assert provenance["machine"]["processor"] and provenance["documents"] == ["text"]
    assert provenance["command"].startswith("posenc extend ") and "--out extend-tiny" in provenance["command"]
    kept_text = (folder / "settings.json").read_text() + provenance["command"]
    assert str(finished) not in kept_text and str(tiny.parent) not in kept_text  # no machine's folders
    sets, refused = kept_extend.load_sets(records_dir)
    assert [k.name for k in sets] == ["extend-tiny"] and not refused and not sets[0].stale
    section, html = _section((sets, refused))
    fresh = from_folder(finished)
    assert [(v.source, v.claim, v.status) for v in section.verdicts] == [(v.source, v.claim, v.status) for v in fresh]
    assert any(v.status not in ("not measured", "not asked") for v in section.verdicts)
    for v in section.verdicts:  # never shown as fresh
        r = v.recorded
        assert r is not None and not r.stale and r.commit == "0123456789ab" and r.date == STARTED
        assert r.command == provenance["command"] and 'class="recorded"' in recorded_mark(v)
    assert 'id="pretrained-recorded"' in html and "extend-tiny" in html and "stale" not in html
    # no kept set: the six claims not measured, as before
    none, html = _section(None)
    assert {v.status for v in none.verdicts} == {"not measured"} and all(v.recorded is None for v in none.verdicts)
    assert len(none.verdicts) == 6 and "pretrained-recorded" not in html


def _rewrite(folder: Path, change) -> None:
    lines = (folder / "results.jsonl").read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    change(record)
    (folder / "results.jsonl").write_bytes(b"".join([json.dumps(record).encode() + b"\n", *lines[1:]]))


def test_an_altered_kept_extend_record_is_refused(records_dir):
    from posenc.extrapolate import kept_extend
    from posenc.extrapolate.kept import Refused

    folder = records_dir / "extend-tiny"

    def better(record):
        if "nll" in record:
            record["nll"] = [x - 0.5 for x in record["nll"]]
        else:
            record["correct"] = not record["correct"]

    _rewrite(folder, better)
    with pytest.raises(Refused, match="results.jsonl changed since it was kept"):
        kept_extend.load_set(folder)
    sets, refused = kept_extend.load_sets(records_dir)
    assert not sets and len(refused) == 1
    section, html = _section((sets, refused))  # nothing trusted: not measured
    assert {v.status for v in section.verdicts} == {"not measured"} and "pretrained-recorded" not in html
    from posenc.extrapolate.report import _recorded_note

    assert "Refused kept records" in _recorded_note([], ([], []), (sets, refused))


def test_altered_settings_are_refused(records_dir):
    from posenc.extrapolate import kept_extend
    from posenc.extrapolate.kept import Refused

    path = records_dir / "extend-tiny" / "settings.json"
    settings = json.loads(path.read_text())
    settings["grid"]["passages"] = 2
    path.write_text(json.dumps(settings))
    with pytest.raises(Refused, match="settings.json changed since it was kept"):
        kept_extend.load_set(path.parent)


def test_a_changed_set_up_hash_marks_the_kept_set_stale(records_dir):
    """A record whose set-up hash (its key's prefix) is not the one today's code computes for the kept model,
    text and grid (as a run of older code would have written it), its sha256 updated: the set is stale, and
    every verdict the section shows from it is marked so."""
    from posenc.extrapolate import kept_extend
    from posenc.extrapolate.glance import recorded_mark

    folder = records_dir / "extend-tiny"

    def older(record):
        record["key"] = "0" * 12 + record["key"][12:]

    _rewrite(folder, older)
    provenance = json.loads((folder / "provenance.json").read_text())
    provenance["records_sha256"] = kept_extend.sha256(folder / "results.jsonl")
    (folder / "provenance.json").write_text(json.dumps(provenance))
    [k] = kept_extend.load_sets(records_dir)[0]
    assert len(k.stale) == 1 and k.stale[0].startswith("0" * 12) and k.recorded().stale
    section, html = _section(([k], []))
    assert section.verdicts and all(v.recorded.stale for v in section.verdicts)
    assert all('class="stale"' in recorded_mark(v) for v in section.verdicts) and 'class="stale"' in html


def test_a_grid_whose_hash_today_differs_is_stale(records_dir):
    """The set-up hash recomputed by today's code from the kept documents: kept with other document names
    (as if the text had changed), every record is stale."""
    from posenc.extrapolate import kept_extend

    folder = records_dir / "extend-tiny"
    provenance = json.loads((folder / "provenance.json").read_text())
    provenance["documents"] = ["another_text"]
    (folder / "provenance.json").write_text(json.dumps(provenance))
    k = kept_extend.load_set(folder)
    assert len(k.stale) == len(k.records)


def test_an_unfinished_run_or_another_command_is_not_kept(finished, tmp_path):
    keeper = _keeper()
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "settings.json").write_bytes((finished / "settings.json").read_bytes())
    lines = (finished / "results.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "results.jsonl").write_bytes(b"".join(lines[:-1]))
    with pytest.raises(ValueError, match="not finished: 1 of"):
        keeper.keep("x", folder, started=STARTED, wall=None, cpu=None, commit="c", dest=tmp_path / "kept")
    with pytest.raises(ValueError, match="does not match the folder's settings.json .*to: 512"):
        keeper.keep("x", finished, started=STARTED, wall=None, cpu=None, commit="c", dest=tmp_path / "kept",
                    command=f"posenc extend m --to {4 * CONTEXT}")
    assert not (tmp_path / "kept").exists()
    with pytest.raises(SystemExit, match="2"):
        keeper.main(["x", "--folder", str(finished), "--started", "yesterday"])


def test_the_time_log_of_gnu_time_is_read(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("...\n\tUser time (seconds): 5000.25\n\tSystem time (seconds): 12.75\n"
                   "\tElapsed (wall clock) time (h:mm:ss or m:ss): 2:05:07.50\n")
    assert _keeper().time_log(log) == (2 * 3600 + 5 * 60 + 7.5, 5013.0)
    log.write_text("no report\n")
    with pytest.raises(ValueError, match="no GNU time -v report"):
        _keeper().time_log(log)


def test_the_report_page_shows_the_kept_extend_verdicts(records_dir):
    """``report.render`` hands the kept extend sets to the pretrained section, and the summary counts them."""
    from posenc.extrapolate import kept_extend, report
    from posenc.extrapolate.profiles import get_profile
    import time

    meta = {"start": time.perf_counter(), "render_start": time.perf_counter(), "bench_seconds": 0.0, "new": 0,
            "reused": 0, "generated": "now", "command": "posenc report", "kept": [], "kept_sets": ([], []),
            "kept_extend": kept_extend.load_sets(records_dir)}
    html = report.render(get_profile("smoke"), [], meta).html("t")
    assert 'id="pretrained-recorded"' in html and "extend-tiny" in html
    shown = re.search(r'id="recorded">(\d+) claim', html)
    assert shown and int(shown.group(1)) >= 6


def test_the_docs_page_is_rendered_from_the_kept_sets(records_dir):
    """docs/_hooks/kept_page.py (the docs site's "The benchmark page, recorded"), on the kept decide set and the
    kept tiny extend run, without figures (the site's build draws them: tests/test_docs_site.py): the banner
    names each set's commit, date, machine and command; the pretrained section is the kept extend run's."""
    import shutil

    from posenc.extrapolate import kept

    for suffix in (".json", ".jsonl"):
        shutil.copyfile(kept.RECORDS_DIR / f"decide{suffix}", records_dir / f"decide{suffix}")
    spec = importlib.util.spec_from_file_location("kept_page", ROOT / "docs" / "_hooks" / "kept_page.py")
    kept_page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kept_page)
    body = kept_page.markdown(records_dir, draw=False)
    decide = kept.load_set(records_dir / "decide.json")
    banner = body[body.index('id="recorded-banner"'):body.index("</div>")]
    assert "<b>decide</b>" in banner and "<b>extend-tiny</b>" in banner and decide.provenance["command"] in banner
    assert decide.provenance["commit"][:12] in banner and "0123456789ab" in banner and STARTED in banner
    assert 'id="pretrained-recorded"' in body and 'href="explorer/index.html"' not in body


def test_the_kept_extend_runs_of_the_repository_load_fresh():
    """Every kept ``posenc extend`` run in posenc/extrapolate/records (once one is kept: docs/keep_extend.py)
    loads, unaltered, fresh for today's code, with its provenance, and fills every pretrained claim it asks."""
    from posenc.extrapolate import kept_extend

    sets, refused = kept_extend.load_sets()
    assert not refused, refused
    for k in sets:
        assert not k.stale, f"{k.name}: {len(k.stale)} records whose set-up hash today's code would not write"
        assert k.provenance["command"].startswith("posenc extend ") and k.provenance["machine"]["processor"]
        assert all(v.status != "not measured" and v.recorded is not None for v in k.verdicts()), k.name


def test_kept_table_prints_a_kept_extend_runs_verdicts(records_dir, monkeypatch, capsys):
    """docs/kept_table.py NAME on a kept extend run: its provenance line and its verdicts, as posenc extend's
    page decides them (for docs/numbers.md)."""
    from posenc.extrapolate import kept, kept_extend

    monkeypatch.setattr(kept, "RECORDS_DIR", records_dir)
    spec = importlib.util.spec_from_file_location("kept_table", ROOT / "docs" / "kept_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert table.main(["extend-tiny"]) == 0
    out = capsys.readouterr().out
    k = kept_extend.load_set(records_dir / "extend-tiny")
    assert out.startswith(f"extend-tiny: {len(k.records)} measurements; `{k.provenance['command']}`; commit 0123456")
    assert "wall 12 s, CPU 20 s" in out  # 12.5 s, kept as given
    assert "| Press et al. 2022; Chen et al. 2023 | plain RoPE degrades past its context |" in out


def test_the_keeper_runs_posenc_extend_itself_and_keeps_it(tiny, tmp_path, capsys):  # noqa: F811
    """docs/keep_extend.py NAME -- ARGS: runs ``posenc extend ARGS`` (a child process), times it, keeps it."""
    from posenc.extrapolate import kept_extend

    args = [str(tiny), "--to", str(2 * CONTEXT), "--method", "none", "--method", "yarn", "--text",
            str(tiny.parent / "text.txt"), "--bucket", "32", "--trials", "0", "--quiet"]
    code = _keeper().main(["extend-run", "--records", str(tmp_path / "kept"), "--work", str(tmp_path / "w"), "--",
                           *args])
    assert code == 0, capsys.readouterr().err
    k = kept_extend.load_set(tmp_path / "kept" / "extend-run")
    assert not k.stale and k.provenance["wall_seconds"] > 0 and k.provenance["cpu_seconds"] > 0
    assert (tmp_path / "kept" / "extend-run" / "results.jsonl").read_bytes() == (tmp_path / "w" / "results.jsonl").read_bytes()
    assert k.provenance["command"].startswith("posenc extend ") and "--out extend-run" in k.provenance["command"]
    assert str(tmp_path) not in k.provenance["command"] and str(tiny.parent) not in k.provenance["command"]
