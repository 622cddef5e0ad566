"""The README's Python examples run as written (a README that lies is a defect)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
    code = compile(BLOCKS[index], f"README.md[python block {index}]", "exec")
    exec(code, {"__name__": f"readme_{index}"})  # noqa: S102 - our own README, not user input
