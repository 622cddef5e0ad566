"""Pyodide for the site's Python cells is pinned (docs/_hooks/pyodide_core.py): the files ``make pyodide``
installed have the committed SHA-256, and a file that differs, or is missing, fails the docs build
(the hook's ``cells.site_files``) with a message naming it and the command that installs it."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hooks():
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    try:
        yield importlib.import_module("pyodide_core"), importlib.import_module("cells")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_hooks"))


@pytest.fixture(scope="module")
def installed(hooks):
    core, _ = hooks
    if core.problems():
        if os.environ.get("CI"):
            pytest.fail(f"Pyodide is not installed in CI: `make test` runs `make pyodide` first: {core.problems()}")
        pytest.skip(f"needs `make pyodide` (Pyodide {core.VERSION} from npm); CI does not skip")
    return core.folder()


def test_the_installed_files_are_the_pinned_ones(hooks, installed):
    core, cells = hooks
    assert core.VERSION == "314.0.8" and core.check() == installed
    assert sorted(core.FILES) == ["pyodide-lock.json", "pyodide.asm.mjs", "pyodide.asm.wasm", "pyodide.js",
                                  "python_stdlib.zip"]
    shipped = cells.site_files()
    assert sorted(shipped) == sorted(f"assets/pyodide/{name}" for name in core.FILES)
    assert all(path.parent == installed for path in shipped.values())


def test_a_changed_or_missing_file_fails_the_build(hooks, installed, tmp_path, monkeypatch):
    core, cells = hooks
    for name in core.FILES:
        shutil.copyfile(installed / name, tmp_path / name)
    monkeypatch.setenv("POSENC_PYODIDE_DIR", str(tmp_path))
    assert core.problems() == [] and cells.site_files()  # an exact copy passes
    data = bytearray((tmp_path / "pyodide.asm.wasm").read_bytes())
    data[len(data) // 2] ^= 1  # one bit
    (tmp_path / "pyodide.asm.wasm").write_bytes(bytes(data))
    (tmp_path / "python_stdlib.zip").unlink()
    with pytest.raises(RuntimeError) as error:
        cells.site_files()
    message = str(error.value)
    assert "pyodide.asm.wasm has SHA-256" in message and core.FILES["pyodide.asm.wasm"] in message, message
    assert "python_stdlib.zip is missing" in message and "make pyodide" in message, message
