"""The Python examples of the README and of every page of the documentation site run as written
(a manual that lies is a defect). The helpers' notes (docs/notes) are not published and not run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "notes" not in p.relative_to(ROOT / "docs").parts)
BLOCKS = [(page.relative_to(ROOT).as_posix(), i, code) for page in PAGES
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S))]


def test_readme_and_pages_have_examples():
    pages = {page for page, _, _ in BLOCKS}
    assert sum(page == "README.md" for page, _, _ in BLOCKS) == 5
    assert len(BLOCKS) >= 20 and len(pages) >= 6, sorted(pages)


@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}[{i}]" for p, i, _ in BLOCKS])
def test_example_runs(page, index, code):
    compiled = compile(code, f"{page}[python block {index}]", "exec")
    exec(compiled, {"__name__": f"example_{index}"})  # noqa: S102 - our own documentation, not user input
