"""The Python examples of the README and of every page of the documentation site run as written
(a manual that lies is a defect), and every value their comments show is the value they print.
The helpers' notes (docs/notes) are not published and not run.

A block runs statement by statement in one namespace, as a reader would type it into Python. A
top-level expression whose trailing comment shows a value (``step.shape  # torch.Size([1, 8,
1, 64])``, ``print(x)  # 3``) is checked against what Python shows for it: the ``repr`` of its
value, or what it printed. The rules (``shown_value``, ``matches``):

- a comment shows a value when it opens like one: a bracket, a quote, a number, ``True``,
  ``False``, ``None``, ``tensor(``, ``array(`` or ``torch.``; any other comment is prose;
- the value ends at the first ``: ``, ``; ``, `` = ``, `` — `` outside brackets and quotes (what
  follows explains it: ``# 0.1443... = 1/√48``); a comment alone on the line right below,
  starting in the same column, continues it;
- ``...`` stands for any text, spaces do not count, and a tuple may drop its parentheses
  (``# 'rotary', True``).

An assignment to one name whose comment opens with a tuple of integers (``out = ...  # (2, 8,
100, 64)``) is a shape comment: the value's ``shape`` must be that tuple.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "notes" not in p.relative_to(ROOT / "docs").parts)
BLOCKS = [(page.relative_to(ROOT).as_posix(), i, code) for page in PAGES
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S))]
VALUE_START = re.compile(r"""[\[({'"\d]|-\d|(True|False|None)\b|tensor\(|array\(|torch\.""")
VALUE_END = (": ", "; ", " = ", " — ")
SHAPE = re.compile(r"#\s*\((\d+(?:, \d+)*),?\)")


def shown_value(comment: str) -> str | None:
    """The value a trailing comment shows (without its explanation), or None for prose."""
    text = comment.lstrip("#").strip()
    if not VALUE_START.match(text):
        return None
    depth, quote, i = 0, "", 0
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and any(text.startswith(end, i) for end in VALUE_END):
            return text[:i].strip()
        i += 1
    return text


def matches(shown: str, printed: str) -> bool:
    """Whether the comment's value ``shown`` is ``printed`` (``...`` for any text, spaces ignored)."""
    squeeze = functools.partial(re.sub, r"\s+", "")
    pattern = ".*?".join(re.escape(part) for part in squeeze(shown).split("..."))
    printed = squeeze(printed)
    candidates = [printed] + ([printed[1:-1]] if printed.startswith("(") and printed.endswith(")") else [])
    return any(re.fullmatch(pattern, p, flags=re.S) for p in candidates)


def _comments(code: str) -> dict[int, str]:
    """``{line: trailing comment}``, with the comments alone on the lines below it in its column."""
    comments: dict[int, str] = {}
    last = None
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type != tokenize.COMMENT:
            continue
        alone = not tok.line[:tok.start[1]].strip()
        if alone and last is not None and tok.start == (last[0] + 1, last[2]):
            comments[last[1]] += " " + tok.string.lstrip("#").strip()
            last = (tok.start[0], last[1], last[2])
        elif not alone:
            comments[tok.start[0]] = tok.string
            last = (tok.start[0], tok.start[0], tok.start[1])  # (line, line of the statement, column)
        else:
            last = None
    return comments


@functools.cache
def run_example(page: str, index: int) -> tuple[tuple[int, str, str], ...]:
    """Runs block ``index`` of ``page``; returns ``(line, comment's value, what Python showed)`` for
    every top-level expression whose comment shows a value."""
    code = next(c for p, i, c in BLOCKS if p == page and i == index)
    name = f"{page}[python block {index}]"
    comments = _comments(code)
    namespace = {"__name__": f"example_{index}"}
    checks = []
    import torch

    threads = torch.get_num_threads()  # an example may set it (a tiny training loop); the others keep theirs
    try:
        _run(code, name, comments, namespace, checks)
    finally:
        torch.set_num_threads(threads)
    return tuple(checks)


def _shape_target(stmt: ast.stmt, comment: str) -> tuple[str, str] | None:
    """``(name, shape)`` for ``name = ...  # (2, 8, 100, 64)``, else None."""
    shape = SHAPE.match(comment)
    if shape and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, f"({shape.group(1)}{',' if ',' not in shape.group(1) else ''})"
    return None


def _run(code: str, name: str, comments: dict[int, str], namespace: dict, checks: list) -> None:
    for stmt in ast.parse(code, name).body:
        target = _shape_target(stmt, comments.get(stmt.end_lineno, ""))
        value = shown_value(comments.get(stmt.end_lineno, "")) if isinstance(stmt, ast.Expr) else None
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if value is None:
                exec(compile(ast.Module([stmt], []), name, "exec"), namespace)  # noqa: S102 - our own docs
            else:
                result = eval(compile(ast.Expression(stmt.value), name, "eval"), namespace)  # noqa: S307
        if value is not None:
            checks.append((stmt.lineno, value, out.getvalue().strip() if result is None else repr(result)))
        if target is not None:
            shape = getattr(namespace[target[0]], "shape", None)
            checks.append((stmt.lineno, target[1], repr(tuple(shape)) if shape is not None else "no shape"))
        elif out.getvalue():
            print(out.getvalue(), end="")


def test_readme_and_pages_have_examples():
    pages = {page for page, _, _ in BLOCKS}
    assert sum(page == "README.md" for page, _, _ in BLOCKS) == 6
    assert len(BLOCKS) >= 20 and len(pages) >= 6, sorted(pages)


@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}[{i}]" for p, i, _ in BLOCKS])
def test_example_runs(page, index, code):
    run_example(page, index)


@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}[{i}]" for p, i, _ in BLOCKS])
def test_example_comments_show_what_it_prints(page, index, code):
    wrong = [f"line {line}: the comment shows {value!r}, Python shows {printed!r}"
             for line, value, printed in run_example(page, index) if not matches(value, printed)]
    assert not wrong, f"{page}, python block {index}:\n" + "\n".join(wrong)


def test_the_comments_checked_include_the_readme_and_every_page_with_values():
    checked: dict[str, int] = {}
    for page, index, _ in BLOCKS:
        checked[page] = checked.get(page, 0) + len(run_example(page, index))
    assert checked["README.md"] >= 5 and sum(checked.values()) >= 30, checked


@pytest.mark.parametrize("comment, printed, ok", [
    ("# torch.Size([1, 8, 1, 64])", "torch.Size([1, 8, 1, 64])", True),
    ("# torch.Size([1, 8, 1, 65])", "torch.Size([1, 8, 1, 64])", False),
    ("# ('rotary', True)", "('rotary', True)", True),
    ("# 'rotary', True", "('rotary', True)", True),
    ("# 0.1443... = 1/√48, used for q·k", "0.14433756729740643", True),
    ("# 0.1442... = 1/√48", "0.14433756729740643", False),
    ("# ['alibi', 'fire', ...]", "['alibi', 'cope', 'dape', 'fire']", False),
    ("# ['alibi', 'cope', ...]", "['alibi', 'cope', 'dape', 'fire']", True),
    ("# [3, 3, 3]: the image's first patch", "[3, 3, 3]", True),
    ("# {'a': 1, ...}; more", "{'a': 1, 'b': 2}", True),
])
def test_the_comment_rules(comment, printed, ok):
    assert matches(shown_value(comment), printed) is ok


def test_shape_comments_are_read_from_assignments_to_one_name():
    stmt = lambda code: ast.parse(code).body[0]
    assert _shape_target(stmt("out = f(x)"), "# (2, 8, 100, 64): the output") == ("out", "(2, 8, 100, 64)")
    assert _shape_target(stmt("t = f(x)"), "# (50,)") == ("t", "(50,)")
    assert _shape_target(stmt("q, k = f(x)"), "# (2, 8)") is None  # which one?
    assert _shape_target(stmt("q = f(x)"), "# (B, H, L, D)") is None  # symbols, not a shape


def test_prose_comments_are_not_values():
    assert [shown_value(c) for c in ("# the answer", "# bias: added to the scores", "# returns buffer")] == [None] * 3
