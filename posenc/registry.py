"""The one registry: a scheme's name binds its kind, its torch module, its parameters and its
float64 reference in one place, so nothing can drift between them.

A new scheme is one file in ``posenc/encodings/`` whose module class carries ``@register(...)``,
one reference file in ``posenc/reference/`` and one test file; the schemes package is scanned
at first use, so nothing else needs editing.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from posenc import limits as _limits
from posenc._validate import did_you_mean
from posenc.limits import limits_of

KINDS = ("none", "additive", "rotary", "bias", "relative", "content")
"""How a scheme injects position:

- ``none``: nothing (the NoPE control);
- ``additive``: ``module(positions) -> [..., L, d_model]``, added to the token embeddings;
- ``rotary``: ``module(x, positions) -> x rotated``, applied to queries and keys;
- ``bias``: ``module(q_positions, k_positions) -> [H, Lq, Lk]``, added to the attention scores;
- ``relative``: ``module(q, k, q_positions, k_positions) -> [B, H, Lq, Lk]``, a query/key-dependent
  term added to the scaled scores (Shaw, Transformer-XL);
- ``content``: ``module(q, k, v, hidden=None, *, causal=True, ...) -> [B, H, Lq, Dv]``, positions that
  depend on the tokens (FoX, CoPE, DAPE, stick-breaking, PaTH): the scheme owns the attention, and
  declares what it reads beyond q, k, v (``reads_hidden``: the layer's input).
"""


@dataclass(frozen=True)
class Scheme:
    """A registered scheme: what ``posenc.build`` needs, and what ``posenc list`` shows."""

    name: str
    kind: str
    cls: type
    params: Mapping[str, Any]  # parameter -> default; REQUIRED when the spec must give it
    summary: str
    limits: Mapping[str, Any] = field(default_factory=dict)  # parameter -> posenc.limits.Limit

    @property
    def required(self) -> list[str]:
        return [k for k, v in self.params.items() if v is REQUIRED]


class _Required:
    def __repr__(self) -> str:  # shown by `posenc list`
        return "<required>"


REQUIRED: Any = _Required()
_REGISTRY: dict[str, Scheme] = {}
_LOADED = False


def register(name: str, kind: str) -> Callable[[type], type]:
    """Class decorator: registers a module class under ``name``.

    The spec's allowed keys and defaults are read from the keyword-only parameters of the
    class's ``__init__``; the class must also define ``reference`` (its float64 specification)
    and subclass its kind's base (``AdditiveEncoding``, ``RotaryEncoding``, ``BiasEncoding``,
    ``RelativeEncoding``, ``ContentEncoding``; ``PositionalEncoding`` for ``none``), which declares the kind's calls.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")

    def decorate(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise ValueError(f"scheme {name!r} is already registered by {_REGISTRY[name].cls.__qualname__}")
        params: dict[str, Any] = {}
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise TypeError(f"{cls.__qualname__}.__init__ must take keyword-only parameters, not {p.name!r}")
            params[p.name] = REQUIRED if p.default is inspect.Parameter.empty else p.default
        from posenc.encodings._base import KIND_BASES  # torch: only when a scheme registers

        base = KIND_BASES[kind]
        if not issubclass(cls, base):
            raise TypeError(f"{cls.__qualname__} is registered as kind {kind!r}, so it must subclass "
                            f"posenc.encodings._base.{base.__name__} (which declares that kind's calls)")
        summary = (inspect.getdoc(cls) or "").strip().splitlines()[0] if cls.__doc__ else ""
        cls.name = name
        cls.kind = kind
        _REGISTRY[name] = Scheme(name=name, kind=kind, cls=cls, params=params, summary=summary,
                                 limits=limits_of(cls))
        return cls

    return decorate


def _load() -> None:
    """Imports every module of ``posenc.encodings`` once; each registers itself."""
    global _LOADED
    if _LOADED:
        return
    package = importlib.import_module("posenc.encodings")
    modules = [f"posenc.encodings.{info.name}" for info in sorted(pkgutil.iter_modules(package.__path__),
                                                                 key=lambda i: i.name) if not info.name.startswith("_")]
    for module in modules:
        importlib.import_module(module)
    # registration order follows imports (``mrope`` imports ``rope``; a caller may import any module
    # first): put the schemes in module order, each module's in its own order, so that every list
    # (``schemes()``, ``posenc list``, the errors page) is the same whatever was imported first
    rank = {m: i for i, m in enumerate(modules)}
    ordered = sorted(enumerate(_REGISTRY.items()), key=lambda t: (rank.get(t[1][1].cls.__module__, len(rank)), t[0]))
    _REGISTRY.clear()
    _REGISTRY.update(item for _, item in ordered)
    _LOADED = True


def schemes(kind: str | None = None) -> list[str]:
    """Names of the registered schemes (optionally of one kind): by module name, then as each module registers them."""
    _load()
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return [n for n, s in _REGISTRY.items() if kind is None or s.kind == kind]


def get(name: str) -> Scheme:
    _load()
    if not isinstance(name, str):
        raise TypeError(f"scheme must be a string, got {name!r} ({type(name).__name__})")
    if name not in _REGISTRY:
        raise ValueError(f"unknown scheme {name!r}{did_you_mean(name, _REGISTRY)}; "
                         f"known schemes: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def unknown_key(scheme: Scheme, key: str) -> str:
    """The error for a key that is not a parameter of ``scheme``: the closest parameters, a
    transformers-style rope key's posenc name (``posenc.scaling.foreign_key_hint``), the allowed keys."""
    from posenc.scaling import foreign_key_hint

    hint = foreign_key_hint(key, where="spec") if "scaling" in scheme.params else ""
    allowed = ", ".join(scheme.params) or "(none)"
    return (f"unknown key {key!r} for scheme {scheme.name!r}{did_you_mean(key, scheme.params)}{hint}; "
            f"allowed keys: {allowed}")


def normalize_spec(spec: Any) -> dict[str, Any]:
    """A spec (name or ``{"scheme": name, **params}``) as a full dict with every default filled."""
    if isinstance(spec, str):
        spec = {"scheme": spec}
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a scheme name or a dict with a 'scheme' key, got {spec!r} ({type(spec).__name__})")
    if "scheme" not in spec:
        raise ValueError(f"spec must have a 'scheme' key naming one of: {', '.join(schemes())}; got keys {sorted(spec)}")
    scheme = get(spec["scheme"])
    given = {k: v for k, v in spec.items() if k != "scheme"}
    unknown = sorted(set(given) - set(scheme.params))
    if unknown:
        raise ValueError(unknown_key(scheme, unknown[0]))
    missing = [k for k in scheme.required if k not in given]
    if missing:
        raise ValueError(f"scheme {scheme.name!r} needs {', '.join(map(repr, missing))}; "
                         f"e.g. {{'scheme': {scheme.name!r}, {missing[0]!r}: ...}}")
    return {"scheme": scheme.name, **{k: given.get(k, d) for k, d in scheme.params.items()}}


def build(spec: Any):
    """Builds the ``torch.nn.Module`` a spec describes.

    ``spec`` is a scheme name (``"rope"`` needs parameters, ``"nope"`` does not) or a dict
    ``{"scheme": name, **params}``. The module's ``kind`` says how to apply it and its ``spec``
    rebuilds an equivalent module: ``build(m.spec)``.
    """
    full = normalize_spec(spec)
    scheme = get(full["scheme"])
    try:
        module = scheme.cls(**{k: v for k, v in full.items() if k != "scheme"})
    except MemoryError:  # a table larger than its scheme's own check foresaw: our words, not numpy's
        raise ValueError(f"not enough memory to build {scheme.name!r} with {full}") from None
    except RuntimeError as e:
        if "alloc" not in str(e):
            raise
        raise ValueError(f"not enough memory to build {scheme.name!r} with {full}: {str(e).splitlines()[0]}") from None
    module._spec = copy.deepcopy(full)  # the caller's dicts and lists may change after this
    return module


def real_schemes() -> list[str]:
    """The registered schemes that accept real-valued positions (``cls.real_positions``)."""
    return [n for n in schemes() if getattr(get(n).cls, "real_positions", False)]


def check_limits(spec: Mapping[str, Any]) -> None:
    """Every size in a full or partial spec is within its scheme's ``Limit`` (the command line's bounds,
    ``posenc.limits``); raises ValueError naming the key, the value and the limit."""
    scheme = get(spec["scheme"])
    for key, value in spec.items():
        if key in scheme.limits and value is not None:
            scheme.limits[key].check(key, value)
    scaling = spec.get("scaling")
    if isinstance(scaling, Mapping):
        from posenc.scaling import SCALINGS

        fn = SCALINGS.get(scaling.get("type"))  # an unknown type: the rotary module's own check names it
        for key, limit in (limits_of(fn) if fn is not None else {}).items():
            if key in scaling and scaling[key] is not None:
                limit.check(f"scaling.{key}", scaling[key])


def limits_table() -> list[tuple[str, str, str, str]]:
    """``(scheme, key, limit, what it counts)`` for every bounded key of every scheme."""
    rows = []
    for name in schemes():
        for key, lim in get(name).limits.items():
            rows.append((name, key, f"{lim.max:g}" if lim.max < 1e6 else f"2^{int(math.log2(lim.max))}", lim.what))
    return rows


def limits_markdown() -> str:
    """The documentation's table of command-line bounds: every scheme's bounded keys (``limits_table``)
    and the work limits of ``posenc.limits`` (a test keeps the page equal to it)."""
    return _limits.markdown(limits_table())
