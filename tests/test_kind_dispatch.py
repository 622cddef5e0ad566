"""No kind dispatch outside the encodings, the registry and the attention core.

How to apply each kind is declared once, on the kind's base class (``posenc/encodings/_base.py``'s
kind protocol: ``embed``, ``attends``, ``attention_keywords``, ``check_runs_at``,
``fit_to_training``, ``model_sizes``), and what the analysis reads is one table from kind to
function (``posenc.analysis.KIND_ANALYSIS``). The consumers (the analysis, the figures, the demo,
the commands, the benchmarks) call those: none of them compares a ``.kind`` or asks
``isinstance(x, <a kind's base class>)``. Reading ``.kind`` to show it, or to look it up in a
table, is not dispatch and stays allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posenc"

CORE = ("encodings/", "registry.py", "attn.py", "blockwise.py", "rowwise.py", "masking.py", "scores.py",
        "interop/")
"""Where kinds are defined and applied: the schemes, the registry, the attention core and the
adapters that put posenc into other libraries' attention."""


def _is_kind(node: ast.AST) -> bool:
    """``<expr>.kind``, except NumPy's ``<array>.dtype.kind``."""
    return (isinstance(node, ast.Attribute) and node.attr == "kind"
            and not (isinstance(node.value, ast.Attribute) and node.value.attr == "dtype"))


def _is_kind_base(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.endswith("Encoding")


def kind_dispatch(source: str) -> list[int]:
    """The lines of ``source`` that branch on a scheme's kind: a comparison with a ``.kind`` operand,
    or ``isinstance`` against a kind's base class (``*Encoding``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_kind(x) for x in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and len(node.args) == 2):
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(_is_kind_base(c) for c in classes):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_kind_dispatch():
    found = kind_dispatch("if pe.kind == 'additive':\n    x = 1\n"
                          "y = m.kind in ('bias', 'relative')\n"
                          "z = isinstance(pe, posenc.encodings.BiasEncoding)\n"
                          "ok = a.dtype.kind == 'f'\n"
                          "shown = ('kind', m.kind)\n"
                          "looked_up = TABLE[m.kind]\n")
    assert found == [1, 3, 4]


def test_no_kind_dispatch_outside_the_core():
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(CORE):
            continue
        sites += [f"posenc/{rel}:{line}" for line in kind_dispatch(path.read_text(encoding="utf-8"))]
    assert not sites, ("kind dispatch outside the encodings, the registry and the attention core (call the kind "
                       "protocol on the scheme's base class, or posenc.analysis.KIND_ANALYSIS): " + ", ".join(sites))
