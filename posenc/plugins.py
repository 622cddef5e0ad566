"""Your own schemes, from outside posenc: ``--plugin FILE_OR_MODULE`` on every command.

A plugin is a Python file (``my_scheme.py``) or an importable module (``mylab.schemes``) whose
import registers schemes with ``posenc.registry.register``, as a built-in scheme's file does
(the module class, its float64 ``reference``, its parameters: one place). ``load`` imports each
plugin once per process — the command's process and, because spawned workers inherit nothing,
every worker process of the benchmark (``posenc.extrapolate.driver``) — and remembers which
schemes each one registered and the sha256 of its source (``origin``).

A run of a plugin's scheme carries that hash in its key (``key_fields``), so an edited scheme is
run again rather than its old numbers reused; a run of built-in schemes keeps the key it had.
The hash covers the plugin's own file (a module: the file it imports from), not what it imports.

A file is imported with ``importlib.util.spec_from_file_location`` (never ``exec`` of its text).
A plugin that cannot be imported raises ``PluginError``, one line naming it and the error.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from posenc import registry


class PluginError(ValueError):
    """A plugin that cannot be imported (the command line: exit 2, one line)."""


@dataclass(frozen=True)
class Plugin:
    """Where a scheme came from: the ``--plugin`` text as given, and the sha256 of its source."""

    source: str
    sha256: str

    def as_record(self) -> dict[str, str]:
        return {"source": self.source, "sha256": self.sha256}


_ORIGIN: dict[str, Plugin] = {}  # scheme name -> the plugin that registered it
_LOADED: dict[str, tuple[str, tuple[str, ...]]] = {}  # source -> (sha256, schemes it registered)


def _is_file(source: str) -> bool:
    return source.endswith(".py") or os.sep in source or (os.altsep or "/") in source


def _file_sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _import(source: str) -> tuple[Any, str]:
    """Imports ``source`` (a .py path or a dotted module name); the module and its source's sha256."""
    if _is_file(source):
        path = os.path.abspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such file {source!r}")
        sha = _file_sha(path)
        name = f"posenc_plugin_{sha[:12]}_{os.path.splitext(os.path.basename(path))[0]}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{source!r} is not an importable Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look a class's module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module, sha
    module = importlib.import_module(source)
    origin = getattr(module, "__file__", None)
    if not origin or not os.path.isfile(origin):
        raise ImportError(f"module {source!r} has no source file to hash")
    return module, _file_sha(origin)


def load(sources: Iterable[str] | None) -> list[Plugin]:
    """Imports each plugin (once per process and version of its source); the plugins, in order.

    Raises ``PluginError`` naming the plugin and the error when one cannot be imported."""
    registry.schemes()  # the built-in schemes first: only what a plugin adds is the plugin's
    out = []
    for source in sources or ():
        if not isinstance(source, str) or not source.strip():
            raise PluginError(f"--plugin must be a .py file or a module name, got {source!r}")
        known = _LOADED.get(source)
        if known is not None and (not _is_file(source) or _file_sha(os.path.abspath(source)) == known[0]):
            out.append(Plugin(source, known[0]))
            continue
        for name in known[1] if known else ():  # the file changed: its new version registers anew
            registry._REGISTRY.pop(name, None)
            _ORIGIN.pop(name, None)
        before = set(registry._REGISTRY)
        try:
            _, sha = _import(source)
        except Exception as e:  # noqa: BLE001 - any error of the user's code is reported as one line
            first = (str(e).strip().splitlines() or [""])[0]
            raise PluginError(f"--plugin {source!r} cannot be imported: {type(e).__name__}"
                              f"{': ' + first if first else ''}") from None
        added = tuple(n for n in registry._REGISTRY if n not in before)
        plugin = Plugin(source, sha)
        for name in added:
            _ORIGIN[name] = plugin
        _LOADED[source] = (sha, added)
        out.append(plugin)
    return out


def loaded() -> list[Plugin]:
    """The plugins this process has imported, in order: what its worker processes import again."""
    return [Plugin(source, sha) for source, (sha, _) in _LOADED.items()]


def schemes_of(plugins: Iterable[Plugin]) -> list[str]:
    """The schemes ``plugins`` registered, in registration order."""
    sources = {p.source for p in plugins}
    return [name for name, p in _ORIGIN.items() if p.source in sources]


def origin(name: str) -> Plugin | None:
    """The plugin that registered scheme ``name`` (None: a built-in scheme)."""
    return _ORIGIN.get(name)


def _names(spec: Any) -> list[str]:
    """Every scheme name a full spec uses (a per-layer pattern's entries too)."""
    if not isinstance(spec, Mapping):
        return []
    pattern = spec.get("pattern")
    if isinstance(pattern, (list, tuple)):  # a per-layer pattern: its entries are the schemes
        return [n for entry in pattern for n in _names(entry)]
    return [spec["scheme"]] if isinstance(spec.get("scheme"), str) else []


def key_fields(spec: Any) -> dict[str, str] | None:
    """``{scheme: sha256 of its plugin's source}`` for the plugin schemes ``spec`` uses; None when
    it uses built-in schemes only (their runs keep their keys)."""
    found = {n: p.sha256 for n in _names(spec) if (p := origin(n)) is not None}
    return dict(sorted(found.items())) or None


def record_field(spec: Any) -> dict[str, dict[str, str]] | None:
    """The record's ``plugin``: ``{scheme: {"source", "sha256"}}`` for the plugin schemes ``spec`` uses."""
    found = {n: p.as_record() for n in _names(spec) if (p := origin(n)) is not None}
    return dict(sorted(found.items())) or None


def buildable(spec: Any) -> bool:
    """Whether every scheme ``spec`` uses is registered in this process (built in, or a plugin given)."""
    known = set(registry.schemes())
    return all(n in known for n in _names(spec))


__all__ = ["Plugin", "PluginError", "load", "loaded", "origin", "schemes_of", "key_fields", "record_field",
           "buildable"]
