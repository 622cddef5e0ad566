"""Imports go one way, down the layers, and never in circles.

``LAYERS`` is the house, bottom floor first. A module may import (at the top of its file, inside a
function, or under ``TYPE_CHECKING``) only modules of its own floor or below, and the import graph
has no cycle. Checked twice: statically over every ``import`` in ``posenc/`` (function-level ones
included, which an import at run time would miss), and in a fresh interpreter that imports every
module in layer order and sees which modules each import pulls in.

A lower floor that needs something from above (scheme names for an error message, a table of every
scheme's bounds) takes it as an argument, or the registry provides it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "posenc"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch-free foundations: argument checks, the float64 reference, bounds, scalings, environment",
     ("posenc.__version__", "posenc._validate", "posenc.reference", "posenc.limits", "posenc.scaling",
      "posenc.environment")),
    ("torch: the positions model, attention masks, the rotation and its Triton kernel, tables that need no registry",
     ("posenc.positions", "posenc.digits", "posenc.masking", "posenc.scores", "posenc.dropout", "posenc._rotary_checks", "posenc.rotary_triton", "posenc.rotary", "posenc.ssm",
      "posenc.interop.grid", "posenc.interop.layout")),
    ("the kinds' base classes, documents, blockwise and chunked attention", ("posenc.encodings._base", "posenc.documents",
                                                                 "posenc.blockwise", "posenc.chunked")),
    ("the registry, the content kind's row-block attention, the schemes it finds in posenc/encodings/ "
     "(each registers itself), checkpoints' interop",
     ("posenc.registry", "posenc.rowwise", "posenc.encodings", "posenc.interop")),
    ("attention", ("posenc.attn", "posenc.parallel")),
    ("the public names of `import posenc` (build, attention, ...)", ("posenc",)),
    ("tools on the library: SPEC strings, plugins (the user's schemes), the transformers patch, analysis, figures, "
     "the demo, the explorer",
     ("posenc.spec", "posenc.plugins", "posenc.interop.patching", "posenc.analysis", "posenc.plot", "posenc.demo", "posenc.explorer")),
    ("the statistics both benchmarks share: distributions, verdicts, the pages' parts, the results store",
     ("posenc.stats",)),
    ("the benchmarks, a pretrained model extended", ("posenc.bench", "posenc.extrapolate", "posenc.extend")),
    ("the command line", ("posenc.cli", "posenc.commands", "posenc.__main__")),
)


def layer_of(module: str) -> int:
    """The floor of ``module``: the layer of its longest matching prefix."""
    best, floor = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, floor = len(p), i
    assert floor is not None, f"{module} is on no floor: add it to LAYERS in {Path(__file__).name}"
    return floor


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _lazy_names() -> dict[str, str]:
    """``posenc/__init__.py``'s ``_LAZY``: public name -> the module that defines it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("posenc/__init__.py has no _LAZY table")


def imports(known: dict[str, Path]) -> list[tuple[str, str, int]]:
    """Every ``(importer, imported, line)`` between posenc's modules, wherever the import statement is."""
    edges = []
    for mod, path in known.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bare = False
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "posenc":
                        bare = True
                    targets.append(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".")[: len(mod.split(".")) - (0 if is_pkg else 1) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                for alias in node.names:
                    sub = f"{prefix}.{alias.name}"
                    if sub in known:
                        targets.append(sub)
                    elif prefix == "posenc" and alias.name == "__version__":
                        targets.append("posenc.__version__")
                    else:
                        targets.append(prefix)
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                targets.append(node.args[0].value)
            for t in targets:
                if t.split(".")[0] == "posenc":
                    edges.append((mod, t, node.lineno))
        if bare:  # `import posenc` then `posenc.sub.f()`: the lazy submodule counts as imported here
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "posenc"
                        and f"posenc.{node.attr}" in known):
                    edges.append((mod, f"posenc.{node.attr}", node.lineno))
    edges += [("posenc", target, 0) for target in _lazy_names().values()]
    return [(a, b, line) for a, b, line in edges if a != b]


def test_every_module_is_on_a_floor():
    for mod in modules():
        layer_of(mod)


def test_no_import_runs_up_a_floor():
    known = modules()
    up = [f"{a} (floor {layer_of(a)}) imports {b} (floor {layer_of(b)}) at line {line}"
          for a, b, line in imports(known) if layer_of(b) > layer_of(a)]
    assert not up, "imports that run up the layers:\n" + "\n".join(up)


def test_no_import_circles():
    graph: dict[str, set[str]] = {}
    for a, b, _ in imports(modules()):
        graph.setdefault(a, set()).add(b)
    cycles = _cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_the_two_benchmarks_import_nothing_of_each_other():
    """``posenc.extend`` and ``posenc.extrapolate`` share their statistics through ``posenc.stats``,
    never through each other (imports inside functions included), except ``extrapolate``'s
    ``pretrained`` part, which reads what ``posenc extend`` wrote."""
    known = modules()
    crossing = [f"{a} imports {b} at line {line}" for a, b, line in imports(known)
                if a.startswith("posenc.extend") and b.startswith("posenc.extrapolate")]
    assert not crossing, "extend imports extrapolate:\n" + "\n".join(crossing)
    shared = [f"{a} imports {b} at line {line}" for a, b, line in imports(known)
              if a.startswith("posenc.stats") and b.startswith(("posenc.extend", "posenc.extrapolate"))]
    assert not shared, "posenc.stats imports a benchmark:\n" + "\n".join(shared)


def test_no_two_modules_of_the_benchmarks_share_a_name_or_define_one_statistic_twice():
    """Across ``posenc.extend``, ``posenc.extrapolate`` and ``posenc.stats`` a module's last name says
    which one it is (no ``tasks.py`` beside ``parts/tasks.py``), and ``paired`` and ``Cell`` each have
    one definition."""
    benchmark = [m for m in modules() if m.startswith(("posenc.extend", "posenc.extrapolate", "posenc.stats"))]
    last = [m.rsplit(".", 1)[1] for m in benchmark]
    shared = sorted({n for n in last if last.count(n) > 1})
    assert not shared, "module names used twice: " + ", ".join(
        f"{n} ({', '.join(m for m in benchmark if m.rsplit('.', 1)[1] == n)})" for n in shared)
    for name in ("paired", "Cell"):
        where = [m for m in benchmark for node in ast.parse(modules()[m].read_text(encoding="utf-8")).body
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name]
        assert len(where) == 1, f"{name} is defined in {where}"


def test_the_static_checks_catch_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a function-level import of the registry from positions is caught."""
    known = modules()
    fake = tmp_path / "positions.py"
    fake.write_text("def f():\n    from posenc import registry\n    return registry\n", encoding="utf-8")
    known["posenc.positions"] = fake
    up = [(a, b) for a, b, _ in imports(known) if layer_of(b) > layer_of(a)]
    assert ("posenc.positions", "posenc.registry") in up
    fake.write_text("import posenc\n\ndef f():\n    return posenc.analysis.fingerprint\n", encoding="utf-8")
    up = [(a, b) for a, b, _ in imports(known) if layer_of(b) > layer_of(a)]
    assert ("posenc.positions", "posenc.analysis") in up and ("posenc.positions", "posenc") in up


def test_modules_import_in_layer_order_in_a_fresh_interpreter():
    """Importing each module, floor by floor, pulls in no module of a higher floor."""
    order = sorted((m for m in modules() if m not in ("posenc", "posenc.__main__")), key=lambda m: (layer_of(m), m))
    code = textwrap.dedent(f"""
        import importlib, json, sys
        seen, out = set(), []
        for name in {order!r}:
            try:
                importlib.import_module(name)
            except ImportError as e:  # an optional dependency (triton) that this machine lacks
                if (e.name or "").startswith("posenc"):
                    raise
                out.append([name, None])
                continue
            new = sorted(m for m in sys.modules if m.split(".")[0] == "posenc" and m not in seen)
            seen.update(new)
            out.append([name, new])
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pulled = json.loads(proc.stdout.strip().splitlines()[-1])
    up = [f"importing {name} (floor {layer_of(name)}) imports {m} (floor {layer_of(m)})"
          for name, new in pulled if new for m in new
          if not any(n.startswith(m + ".") for n in [name, *new])  # a submodule's packages run first
          and layer_of(m) > layer_of(name)]
    assert not up, "\n".join(up)
    assert len(pulled) == len(order)
