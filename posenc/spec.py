"""SPEC strings and files: how the command line (and the figures) name a configured scheme.

A SPEC is one of

- a scheme name: ``rope``;
- ``name:key=value,key=value``: ``rope:base=500000,scaling=yarn,factor=4,original_max_positions=4096``.
  When ``scaling=TYPE`` is given, every key that is not a parameter of the scheme goes into the
  scaling dict, so the example means ``scaling={"type": "yarn", "factor": 4,
  "original_max_positions": 4096}``;
- a JSON file (``*.json``) or inline JSON object: ``{"scheme": "rope", "head_dim": 64}``.

Every form refuses a key given twice (at any level of a JSON object), nesting deeper than
``MAX_NESTING``, and a SPEC file that is not a regular file (a FIFO or a device is refused
without waiting on it).

Values parse strictly, never with ``eval``: integers, finite floats, ``true``/``false``,
``none``/``null``, JSON lists and objects (``short_factor=[1.0,1.1]``), quoted JSON strings, and
bare words (``layout=half``).

``fill_sizes`` completes a spec with the sizes a scheme needs (``d_model``, ``head_dim``,
``num_heads``, ``max_positions``) from one ``dim``, ``num_heads`` and ``length``, so that
``posenc show alibi`` and ``posenc show rope`` work without extra keys.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from posenc import registry

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ALLOWED_VALUES = "an integer, a number, true/false, none, a JSON list/object, a quoted string or a word"

MAX_SPEC_BYTES = 1_000_000  # a SPEC file is one small JSON object; never read a huge file whole

SIZE_PARAMS = ("d_model", "head_dim", "num_heads", "max_positions")
"""Parameters that ``fill_sizes`` fills when a scheme requires them and the spec leaves them out."""


def parse_value(text: str, *, key: str = "value") -> Any:
    """One SPEC value: ``4`` -> 4, ``0.5`` -> 0.5, ``true`` -> True, ``none`` -> None,
    ``[1, 2]`` -> [1, 2], ``"a b"`` -> 'a b', ``half`` -> 'half'. Anything else raises ValueError."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if low.lstrip("+-") in ("nan", "inf", "infinity"):
        raise ValueError(f"{key}={s} is not a finite number")
    if _INT.fullmatch(s):
        return int(s)
    if _FLOAT.fullmatch(s):
        value = float(s)
        if not math.isfinite(value):
            raise ValueError(f"{key}={s} is not a finite number")
        return value
    if s[:1] in ("[", "{", '"'):
        try:
            return _json(s, f"{key}={s if len(s) < 60 else s[:57] + '...'}")
        except json.JSONDecodeError as e:
            raise ValueError(f"{key}={s} is not valid JSON ({e.msg} at character {e.pos})") from None
    if _WORD.fullmatch(s):
        return s
    raise ValueError(f"cannot read {key}={s!r}; a value is {ALLOWED_VALUES}")


MAX_NESTING = 32
"""The deepest a SPEC may nest lists and objects (a scaling dict in a spec is 2 levels; the
``short_factor`` list of LongRoPE 3): deeper input is refused before it is parsed, rather than
ending in Python's RecursionError."""


def _check_nesting(text: str, where: str) -> None:
    """Refuses ``text`` when its brackets (outside JSON strings) nest deeper than ``MAX_NESTING``."""
    depth, quoted, escaped = 0, False, False
    for ch in text:
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise ValueError(f"{where} nests lists/objects more than {MAX_NESTING} levels deep; a SPEC is "
                                 "one flat object with a scaling dict at most")
        elif ch in "]}":
            depth -= 1


def _json(source: str, where: str) -> Any:
    """``json.loads`` for SPECs: nesting bounded, no NaN/Infinity, no key given twice in any object."""
    _check_nesting(source, where)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"key {key!r} is given twice in {where}; give each key once")
            out[key] = value
        return out

    return json.loads(source, parse_constant=_reject_constant, object_pairs_hook=pairs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a SPEC value (numbers must be finite)")


def _split_items(text: str) -> list[str]:
    """Splits ``a=1,b=[1,2],c="x,y"`` at the commas outside brackets and quotes."""
    items, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if quoted:
            if ch == '"' and text[i - 1] != "\\":
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {ch!r} in SPEC parameters {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth or quoted:
        raise ValueError(f"unclosed {'quote' if quoted else 'bracket'} in SPEC parameters {text!r}")
    items.append(text[start:])
    return items


def _load_json(text: str) -> dict[str, Any]:
    """A JSON object from a file path (``*.json`` or an existing file) or inline ``{...}``."""
    if text.lstrip().startswith("{"):
        source, where = text, "inline JSON SPEC"
    else:
        if not os.path.exists(text):
            raise ValueError(f"SPEC file {text!r} does not exist; a SPEC is a scheme name, name:key=value,... "
                             "or a JSON file")
        if os.path.isdir(text):
            raise ValueError(f"SPEC file {text!r} is a directory, not a JSON file")
        where = f"SPEC file {text!r}"
        raw = read_regular_file(text, MAX_SPEC_BYTES + 1, where=where)
        if len(raw) > MAX_SPEC_BYTES:
            raise ValueError(f"{where} is larger than {MAX_SPEC_BYTES:,} bytes; a SPEC file holds one JSON object")
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{where} is not UTF-8 text; a SPEC file holds one JSON object") from None
    try:
        data = _json(source, where)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or "scheme" not in data:
        raise ValueError(f"{where} must hold a JSON object with a 'scheme' key, e.g. "
                         '{"scheme": "rope", "head_dim": 64}')
    registry.get(data["scheme"])  # the known schemes, named in the error
    return data


def read_regular_file(path: str, limit: int, *, where: str) -> bytes:
    """The first ``limit`` bytes of ``path``, which must be a regular file: a FIFO, a device or a
    socket is refused without opening it for a blocking read (opening a FIFO waits for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens at once
    except OSError as e:
        raise ValueError(f"cannot read {where}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{where} is not a regular file (a FIFO, a device or a socket); give a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    except OSError as e:
        raise ValueError(f"cannot read {where}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def parse_spec(text: str) -> dict[str, Any]:
    """A SPEC string (see the module docstring) as ``{"scheme": name, **params}``.

    Only the keys given are returned; sizes and defaults are filled later (``fill_sizes``,
    ``posenc.registry.normalize_spec``). Unknown schemes and keys raise ValueError with the
    allowed names.
    """
    if not isinstance(text, str):
        raise TypeError(f"SPEC must be a string, got {text!r} ({type(text).__name__})")
    text = text.strip()
    if not text:
        raise ValueError(f"SPEC is empty; known schemes: {', '.join(registry.schemes())}")
    if text.startswith("{") or text.lower().endswith(".json") or os.path.isfile(text):
        return _load_json(text)
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise ValueError(f"SPEC must start with a scheme name, got {name!r}; known schemes: "
                         f"{', '.join(registry.schemes())}")
    scheme = registry.get(name)
    given: dict[str, Any] = {}
    if sep and not rest.strip():
        raise ValueError(f"SPEC {text!r} has ':' but no key=value after it")
    if rest.strip():
        for item in _split_items(rest):
            key, eq, raw = item.partition("=")
            key = key.strip()
            if not eq or not _KEY.fullmatch(key):
                raise ValueError(f"expected key=value in SPEC {text!r}, got {item.strip()!r}")
            if key in given:
                raise ValueError(f"key {key!r} is given twice in SPEC {text!r}")
            given[key] = parse_value(raw, key=key)
    return {"scheme": scheme.name, **_route_scaling(scheme, given)}


def _route_scaling(scheme: registry.Scheme, given: dict[str, Any]) -> dict[str, Any]:
    """Moves the keys that are not the scheme's parameters into ``scaling`` when ``scaling=`` is given."""
    extra = {k: v for k, v in given.items() if k not in scheme.params}
    if isinstance(given.get("scaling"), str) and "scaling" in scheme.params:
        given = {**given, "scaling": {"type": given["scaling"]}}
    if not extra:
        return given
    if "scaling" not in scheme.params or "scaling" not in given:
        from posenc.scaling import TRANSFORMERS_KEYS

        first = sorted(extra, key=lambda k: (k not in TRANSFORMERS_KEYS, k))[0]  # transformers' names first
        raise ValueError(registry.unknown_key(scheme, first))
    scaling = given["scaling"]
    if isinstance(scaling, dict):
        scaling = dict(scaling)
    else:
        raise ValueError("scaling must be a scaling type (e.g. scaling=linear,factor=4) when other keys "
                         f"({', '.join(sorted(extra))}) are given; got scaling={scaling!r}")
    scaling.update(extra)
    out = {k: v for k, v in given.items() if k in scheme.params}
    out["scaling"] = scaling
    return out


def as_spec(spec: Any) -> dict[str, Any]:
    """A SPEC string, a spec dict or a built module, as a spec dict (a copy)."""
    if isinstance(spec, str):
        return parse_spec(spec)
    if isinstance(spec, Mapping):
        if "scheme" not in spec:
            raise ValueError(f"spec must have a 'scheme' key naming one of: {', '.join(registry.schemes())}")
        registry.get(spec["scheme"])
        return dict(spec)
    if hasattr(spec, "spec") and hasattr(spec, "kind"):
        return spec.spec
    raise TypeError("spec must be a SPEC string, a dict with a 'scheme' key or a posenc module, "
                    f"got {type(spec).__name__}")


def fill_sizes(spec: Any, *, dim: int = 64, num_heads: int = 8, length: int | None = None,
               head_dim: int | None = None) -> dict[str, Any]:
    """Completes a spec with the sizes its scheme requires and the spec leaves out.

    ``d_model`` takes ``dim``, ``head_dim`` takes ``head_dim`` (``dim`` by default: the size of
    the vectors the encoding acts on), ``num_heads`` takes ``num_heads`` and ``max_positions``
    (a learned table) takes ``length``. Keys the spec gives are kept; any other required
    parameter that is missing raises ValueError naming it.
    """
    out = as_spec(spec)
    scheme = registry.get(out["scheme"])
    sizes = {"d_model": dim, "head_dim": dim if head_dim is None else head_dim, "num_heads": num_heads,
             "max_positions": length}
    # required sizes, and optional ones that default to None (a learned table's max_positions
    # unless the spec gives its grid)
    optional = [k for k in SIZE_PARAMS if scheme.params.get(k, 0) is None and not (k == "max_positions" and out.get("grid"))]
    for name in [*scheme.required, *optional]:
        if name not in out and sizes.get(name) is not None:
            out[name] = sizes[name]
    missing = [k for k in scheme.required if k not in out]
    if missing:
        raise ValueError(f"scheme {scheme.name!r} needs {', '.join(map(repr, missing))}; give it in the SPEC, "
                         f"e.g. {scheme.name}:{missing[0]}=...")
    return out


def label(spec: Any) -> str:
    """A short legend label: the scheme and the keys that differ from the defaults, sizes left out."""
    full = registry.normalize_spec(as_spec(spec))
    scheme = registry.get(full["scheme"])
    parts = []
    for key, value in full.items():
        if key == "scheme" or key in SIZE_PARAMS or value == scheme.params.get(key):
            continue
        if key == "scaling" and isinstance(value, Mapping):
            inner = ", ".join(f"{k}={v}" for k, v in value.items() if k != "type")
            parts.append(f"{value.get('type')}({inner})" if inner else str(value.get("type")))
        else:
            parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return f"{scheme.name} ({', '.join(parts)})" if parts else scheme.name
