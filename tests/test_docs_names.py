"""Every dotted name the documentation shows (``posenc.interop.resize_grid``, ``posenc.scaling.SCALINGS``)
resolves after a bare ``import posenc`` in a fresh interpreter, as a reader would type it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"(?<![\w./-])posenc(?:\.[A-Za-z_]\w*)+")
FILES = ("md", "html", "py", "png", "json", "jsonl", "txt")  # posenc.md is a page, not a name


def documentation() -> list[Path]:
    """The README and the site's pages (the helpers' notes in docs/notes are not published)."""
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if "notes" not in p.relative_to(ROOT / "docs").parts)
    return [ROOT / "README.md", *pages]


def documented_names() -> dict[str, str]:
    """``{dotted name: the first page that shows it}``, from code spans, code blocks and directives."""
    names: dict[str, str] = {}
    for page in documentation():
        for name in NAME.findall(page.read_text(encoding="utf-8")):
            if name.rsplit(".", 1)[-1] in FILES:
                continue
            names.setdefault(name.rstrip("."), str(page.relative_to(ROOT)))
    return names


def test_the_documentation_shows_dotted_names():
    names = documented_names()
    assert "posenc.interop.resize_grid" in names and len(names) >= 10, sorted(names)


def test_every_documented_dotted_name_resolves_after_import_posenc():
    """Each name in its own fresh ``posenc``: the modules of posenc are dropped before each one (torch
    and the other libraries stay loaded, so this takes seconds, not one interpreter per name)."""
    names = sorted(documented_names())
    code = textwrap.dedent(f"""
        import importlib, json, sys
        failed = {{}}
        for name in {names!r}:
            for m in [m for m in sys.modules if m == "posenc" or m.startswith("posenc.")]:
                del sys.modules[m]
            obj = importlib.import_module("posenc")
            try:
                for part in name.split(".")[1:]:
                    obj = getattr(obj, part)
            except AttributeError as e:
                failed[name] = str(e)
        print(json.dumps(failed))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    where = documented_names()
    assert not failed, "\n".join(f"{n} (in {where[n]}): {e}" for n, e in failed.items())


NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
COUNTED = re.compile(rf"\b({'|'.join(NUMBERS)}|\d+) (kinds|places)\b", re.I)


def test_every_page_states_the_registry_s_number_of_kinds():
    """"The six kinds" wherever the documentation counts them, as many as ``posenc.KINDS`` has
    (the README and kinds.md once said "one of three places" above a six-row table)."""
    import posenc

    stated = {}
    for page in documentation():
        for number, word in COUNTED.findall(page.read_text(encoding="utf-8")):
            stated.setdefault(str(page.relative_to(ROOT)), []).append(f"{number} {word}")
    wrong = {page: said for page, said in stated.items()
             if any(NUMBERS.get(s.split()[0].lower(), s.split()[0]) != len(posenc.KINDS) for s in said)}
    assert {"README.md", "docs/index.md", "docs/guide/kinds.md"} <= set(stated), stated
    assert not wrong, f"posenc.KINDS has {len(posenc.KINDS)}: {wrong}"


def _kind_rows(page: Path) -> dict[str, set[str]]:
    """``{kind: the schemes its row names}`` from the kinds table (``| `kind` | where | call | schemes |``)."""
    rows = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`\w+`", cells[0]) and "pe(" in cells[2]:
            rows[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[3]))
    return rows


@pytest.mark.parametrize("page", ["README.md", "docs/guide/kinds.md"])
def test_the_kinds_table_has_a_row_per_kind_naming_each_scheme_of_it(page):
    import posenc

    rows = _kind_rows(ROOT / page)
    assert list(rows) and set(rows) == set(posenc.KINDS), sorted(rows)
    for kind, named in rows.items():
        assert named == set(posenc.schemes(kind)), f"{page}, row {kind!r}: {sorted(named)} != {posenc.schemes(kind)}"
