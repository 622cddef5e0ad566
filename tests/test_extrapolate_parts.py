"""The benchmark's parts are parts: no module of the benchmark sets another module's attributes
(a setting is a parameter of the module that owns it, e.g. ``posenc.rowwise.trim_rows``), and
the page, not a part, numbers the sections."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = ROOT / "posenc" / "extrapolate"


def module_attribute_writes(source: str) -> list[tuple[int, str]]:
    """``(line, "module.attr")`` for each assignment in ``source`` to an attribute of an imported module."""
    tree = ast.parse(source)
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update({(a.asname or a.name.split(".")[0]): a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:  # `from posenc import rowwise`: a module when posenc/rowwise(.py) exists
                where = ROOT.joinpath(*node.module.split("."), a.name)
                if where.with_suffix(".py").is_file() or (where / "__init__.py").is_file():
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
    writes = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in modules:
                writes.append((node.lineno, f"{modules[t.value.id]}.{t.attr}"))
    return writes


def test_the_check_finds_a_write_to_another_module():
    assert module_attribute_writes("from posenc import rowwise\nrowwise.ROW_TRIM = False\nx = 1\n") == [
        (2, "posenc.rowwise.ROW_TRIM")]


def test_no_part_of_the_benchmark_sets_another_modules_attributes():
    found = [f"{path.relative_to(BENCHMARK.parent.parent).as_posix()}:{line}: {what}"
             for path in sorted(BENCHMARK.rglob("*.py"))
             for line, what in module_attribute_writes(path.read_text(encoding="utf-8"))]
    assert not found, "set through a parameter of the module that owns it: " + ", ".join(found)


def test_section_numbers_come_from_the_page():
    """The page numbers its sections (``page.number_sections``); no section numbers itself."""
    import re

    numbered = [f"{path.name}: {m.group(0)}" for path in sorted(BENCHMARK.rglob("*.py"))
                for m in re.finditer(r"<h2[^>]*>\s*\d+\.", path.read_text(encoding="utf-8"))]
    assert not numbered, numbered


def test_each_parts_module_class_and_name_agree():
    """Module name = class name = part name (``parts.lm.LM`` is the part ``"lm"``), one name per
    part, one module per name: the former module names ``parts.text`` and ``parts.scalings`` are
    gone. ``PART_NAMES`` is the one list of the names a user picks: ``PARTS`` holds exactly those,
    in that order, besides the two that add rows to others (hybrid, structure), and the profiles'
    default parts are derived from it."""
    import importlib

    from posenc.extrapolate import PART_NAMES
    from posenc.extrapolate.parts import PARTS
    from posenc.extrapolate.profiles import DEFAULT_PARTS, PROFILES

    for part in PARTS:
        module = type(part).__module__.rsplit(".", 1)[1]
        assert module == part.name == type(part).__name__.lower(), (module, type(part).__name__, part.name)
    names = [p.name for p in PARTS]
    assert len(set(names)) == len(names) and set(PART_NAMES) <= set(names)
    assert [n for n in names if n in PART_NAMES] == list(PART_NAMES)
    assert set(names) - set(PART_NAMES) == {"hybrid", "structure"}
    assert DEFAULT_PARTS == tuple(n for n in PART_NAMES if n != "pretrained")
    assert set(PROFILES["full"].parts) == set(PART_NAMES)
    for former in ("text", "scalings"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"posenc.extrapolate.parts.{former}")


def test_the_structured_rows_join_their_parts_through_extend_as_the_hybrid_rows_do():
    """A part's ``plan`` has only its own rows; ``structure.PART.extend`` adds the structured
    positions' rows beside the lm, scaling and tasks runs of each seed (records of those parts), as
    ``hybrid.PART.extend`` adds the hybrid rows; the whole plan runs each of them once."""
    from posenc.extrapolate.parts import PARTS, hybrid, lm, plan, scaling, structure, tasks
    from posenc.extrapolate.profiles import PROFILES

    smoke = PROFILES["smoke"]
    quiet = {"custom": False, "corpus_sha": "", "log": lambda m: None}
    structured = {"lm": "bipe", "scaling": "hirope", "tasks": "randomized"}  # a word in each one's labels
    for part in (lm.PART, scaling.PART, tasks.PART):
        own = part.plan(smoke, list(smoke.schemes), **quiet)
        assert own and not any(structured[part.name] in r.label for r in own), part.name
        seed = [r for r in own if r.seed == own[0].seed]
        added = structure.PART.extend(smoke, seed, custom=False, corpus_sha="")
        assert added and all(r.part == part.name and r.seed == own[0].seed for r in added), part.name
        assert any(structured[part.name] in r.label for r in added), [r.label for r in added]
        assert structure.PART.extend(smoke, seed, custom=True, corpus_sha="") == (added if part is scaling.PART else [])
    assert hybrid.PART in PARTS and structure.PART in PARTS
    runs = plan(smoke, list(smoke.schemes), corpus_sha="", log=lambda m: None)
    labels = [r.label for r in runs]
    assert len({r.key for r in runs}) == len(runs)
    assert {"bipe", "bipe_bias (bias_scale=96)", "rope + hirope (zero-shot)", "abacus", "rope + randomized"} <= set(labels)
