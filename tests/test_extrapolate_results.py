"""The results file survives crashes: a half-written last line is cut off before anything is
appended, an unreadable line is skipped, a key is written once, and two writers are kept apart."""

from __future__ import annotations

import json

import pytest

from posenc.stats.results import ResultStore, load


def _rec(key: str, **kw) -> dict:
    return {"key": key, "value": kw.get("value", 1.5)}


def test_append_and_reload(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultStore(path) as store:
        store.append(_rec("a"))
        store.append(_rec("b", value=2.0))
        store.append(_rec("a", value=99.0))  # a known key is not written again
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["key"] in "ab" for x in lines)
    assert load(path) == {"a": _rec("a"), "b": _rec("b", value=2.0)}


def test_a_half_written_last_line_is_cut_off_before_appending(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultStore(path) as store:
        store.append(_rec("a"))
    with open(path, "ab") as f:
        f.write(b'{"key": "b", "val')  # the process died mid-write
    assert set(load(path)) == {"a"}
    with ResultStore(path) as store:
        assert store.repaired_bytes == len(b'{"key": "b", "val')
        assert "b" not in store
        store.append(_rec("b"))
    assert path.read_bytes().count(b"\n") == 2
    assert set(load(path)) == {"a", "b"}


def test_a_file_with_only_a_partial_line_is_emptied(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"key": "x"')
    with ResultStore(path) as store:
        assert store.records == {}
    assert path.read_bytes() == b""


def test_an_unreadable_line_in_the_middle_is_skipped_not_fatal(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"key": "a"}\nnot json\n{"no_key": 1}\n{"key": "b"}\n')
    with ResultStore(path) as store:
        assert set(store.records) == {"a", "b"} and store.skipped_lines == 2
    assert "skipping unreadable line 2" in capsys.readouterr().err


def test_a_second_writer_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultStore(path):
        with pytest.raises(ValueError, match="another posenc process"):
            ResultStore(path).open()
    with ResultStore(path) as store:  # the lock is released on close
        store.append(_rec("a"))


def test_a_folder_is_not_a_results_file(tmp_path):
    with pytest.raises(ValueError, match="not a file"):
        ResultStore(tmp_path).open()


def test_a_file_is_not_a_results_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        ResultStore(tmp_path / "file" / "r.jsonl").open()
