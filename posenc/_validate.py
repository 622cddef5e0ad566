"""Argument checks that raise a clear error: the parameter, the value given, what is allowed.

Pure Python (no torch, no numpy) so that every layer can use it. Errors are ValueError for a
value out of range and TypeError for a value of the wrong type; never a warning, never assert.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


MAX_INIT_STD = 1e6
"""Largest ``init_std`` of a learned table: initial weights are O(0.01..1); past ~1e19 a float32
table (and the squares attention takes of it) overflows to inf."""


def check_int(name: str, value: Any, *, min: int | None = None, max: int | None = None) -> int:
    """An integer in [min, max]."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if min is not None and value < min:
        raise ValueError(f"{name} must be >= {min}, got {value}")
    if max is not None and value > max:
        raise ValueError(f"{name} must be <= {max}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
) -> float:
    """A finite real number in [min, max] (or (min, max] when min_open)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if min is not None:
        if min_open and value <= min:
            raise ValueError(f"{name} must be > {min}, got {value}")
        if not min_open and value < min:
            raise ValueError(f"{name} must be >= {min}, got {value}")
    if max is not None and value > max:
        raise ValueError(f"{name} must be <= {max}, got {value}")
    return value


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_even(name: str, value: int) -> int:
    if value % 2:
        raise ValueError(f"{name} must be even (dimensions are rotated or paired two at a time), got {value}")
    return value


def check_float_list(name: str, value: Any, *, length: int | None = None, min: float | None = None) -> list[float]:
    """A list of finite numbers, optionally of a given length and lower bound."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of numbers, got {value!r} ({type(value).__name__})")
    out = [check_float(f"{name}[{i}]", v, min=min) for i, v in enumerate(value)]
    if length is not None and len(out) != length:
        raise ValueError(f"{name} must have {length} entries, got {len(out)}")
    return out


def did_you_mean(name: Any, allowed: Iterable[str]) -> str:
    """`` (did you mean 'rope'?)`` for the closest of ``allowed`` to a mistyped ``name``, else ``""``.

    The one "did you mean" of every error about an unknown name (schemes, spec keys, scaling keys),
    from ``difflib.get_close_matches`` (at most 3 names, similarity ratio at least 0.6).
    """
    import difflib

    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(allowed), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(map(repr, close))}?)"
