"""Kind dispatch counted over every module outside the encodings, the registry and the attention core.

How to apply each kind is declared once, on the kind's base class (``posenc/encodings/_base.py``'s
kind protocol: ``embed``, ``attends``, ``attention_keywords``, ``check_runs_at``,
``fit_to_training``, ``model_sizes``, and context parallelism's ``counts_positions_from_tokens`` and
``selects_heads``), and what the analysis reads is one table from kind to function
(``posenc.analysis.KIND_ANALYSIS``; ``posenc show``'s figures: ``posenc.plot.SHOW``). The consumers (the analysis, the figures, the demo,
the commands, the benchmarks) call those: none of them compares a ``.kind`` or asks
``isinstance(x, <a kind's base class>)``. Reading ``.kind`` to show it, or to look it up in a
table, is not dispatch and stays allowed. Every module is counted, context parallelism, the
kernels (``blockwise``, ``rowwise``) and the adapters included, and a comparison through a local
``kind`` variable is dispatch as much as one on ``.kind``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posenc"

CORE = ("encodings/", "registry.py", "attn.py", "masking.py", "scores.py", "reference/")
"""Where kinds are defined and applied: the schemes, the registry and the attention core (and the
NumPy references, which are the specification)."""

# The sites outside the core today, a ceiling that only goes down (issue 53's aim: at most 10): none (was 31).
# Context parallelism asks the kind protocol (counts_positions_from_tokens, selects_heads); the chunked and blockwise
# kernels and the transformers attention function ask it too (scores_from_positions, rotates,
# counts_positions_from_tokens). A local variable that is not a scheme's kind is named for what it is (the bench's
# device_type, the RoPE scalings' scaling_type and rope_type, the time part's unit, the tasks part's structure; the GGUF
# reader's value and token types, the adapters' attention forms), and the figures ``show`` draws are a table from kind
# to function (posenc.plot.SHOW).
CEILING = 0
PARALLEL_CEILING = 0


def _is_kind(node: ast.AST) -> bool:
    """``<expr>.kind`` (except NumPy's ``<array>.dtype.kind``), or a local variable named ``kind``."""
    if isinstance(node, ast.Name):
        return node.id == "kind"
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
                          "looked_up = TABLE[m.kind]\n"
                          "kind = pe.kind\n"
                          "if kind == 'bias':\n    y = 2\n")
    assert found == [1, 3, 4, 9]


def _sites() -> list[str]:
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(CORE):
            continue
        sites += [f"posenc/{rel}:{line}" for line in kind_dispatch(path.read_text(encoding="utf-8"))]
    return sites


def test_kind_dispatch_outside_the_core_stays_under_its_ceiling():
    sites = _sites()
    assert len(sites) <= CEILING, (f"{len(sites)} kind dispatch sites outside the encodings, the registry and the "
                                   f"attention core (ceiling {CEILING}: call the kind protocol on the scheme's base "
                                   "class, posenc.attn.scheme_step, or posenc.analysis.KIND_ANALYSIS): "
                                   + ", ".join(sites))
    parallel = [s for s in sites if s.startswith("posenc/parallel/")]
    assert len(parallel) <= PARALLEL_CEILING, parallel


def test_context_parallelism_uses_the_public_tile_api():
    """No private name of ``posenc.blockwise`` and no stand-in autograd context in context parallelism."""
    paths = sorted((PACKAGE / "parallel").rglob("*.py")) + sorted(PACKAGE.glob("parallel.py"))
    assert paths
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "posenc.blockwise":
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from posenc.blockwise"
        assert "SimpleNamespace" not in path.read_text(encoding="utf-8"), path.name


def test_one_logit_cap():
    """``torch.tanh(`` outside the references and the schemes: the cap and its slope in posenc.scores."""
    found = [f"{p.relative_to(PACKAGE).as_posix()}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             if not p.relative_to(PACKAGE).as_posix().startswith(("reference/", "encodings/"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "torch.tanh(" in line]
    assert len(found) <= 3 and all(f.startswith("scores.py:") for f in found), found


def test_the_kind_protocol_context_parallelism_asks():
    """What context parallelism asks a scheme, declared on its kind's base class: the content kind
    counts its positions from the tokens; the bias kind, and FoX's per-head state, select heads."""
    from posenc import registry

    for name in registry.schemes():
        scheme = registry.get(name)
        assert scheme.cls.counts_positions_from_tokens == (scheme.kind == "content"), name
        assert scheme.cls.selects_heads == (scheme.kind == "bias" or name == "fox"), name
        assert scheme.cls.scores_from_positions == (scheme.kind == "bias"), name
        assert scheme.cls.rotates == (scheme.kind == "rotary"), name
