"""Bounds on sizes: where the command line stops, and what the library refuses to build.

**Declared where the parameters are.** A scheme's size parameters carry their command-line bound
in their type annotation, so a new scheme gets its bounds by declaring its parameters::

    def __init__(self, *, num_heads: Heads, hidden: Width = 32, ...)

``Heads``, ``Width``, ... are ``typing.Annotated`` aliases of ``int`` (or ``float``) carrying a
``Limit``; the registry reads them with the parameters (``Scheme.limits``). List-valued sizes
(``sections``, ``grid``, ``axes_dims``) use ``Limit`` too: it then bounds every entry.

**The command line** (``posenc show``/``compare``/``explore``) refuses a SPEC whose size is over
its ``Limit`` (``posenc.registry.check_limits``, which knows each scheme's) with one line naming the key, the value and the limit, and bounds the *work* a
command will do as a product of sizes (``check_work``): each size may be within its bound and
their product not (``--length 16384 --dim 4096`` asks for 10^12 operations).

**The library** (``posenc.build``) caps nothing a machine could hold: a table allocated at build
time is refused only when it would need more memory than this process can have
(``check_memory``: physical memory, or the address-space limit if lower), with a ValueError
naming the parameter and the bytes, rather than the allocator's error.
"""

from __future__ import annotations

import math
import os
import resource
import typing
from dataclasses import dataclass
from typing import Annotated, Any


@dataclass(frozen=True)
class Limit:
    """The command line's bound on a size: ``value <= max`` (for a list, every entry)."""

    max: float
    what: str  # what the size counts, for the table on the errors page (docs/guide/errors.md)

    def check(self, key: str, value: Any) -> None:
        """Raises ValueError naming ``key``, the value and the limit when a number (or an entry) is over it."""
        entries = value if isinstance(value, (list, tuple)) else [value]
        for i, v in enumerate(entries):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue  # the scheme's own checks name wrong types
            if v > self.max:
                where = f"{key}[{i}]" if isinstance(value, (list, tuple)) else key
                shown = v if isinstance(v, int) else f"{v:g}"
                raise ValueError(f"{where} must be at most {self.max:g} on the command line ({self.what}), got {shown}")


MAX_LENGTH = 16384
MAX_DIM = 4096
MAX_HEADS = 256
MAX_GRID = 128
"""``posenc show --grid/--patch`` and the explorer: at most this many patches a side."""

Dim = Annotated[int, Limit(MAX_DIM, "a vector width: d_model, head_dim, rotary_dim")]
Heads = Annotated[int, Limit(MAX_HEADS, "attention heads")]
Rows = Annotated[int, Limit(MAX_LENGTH, "positions in a table")]
Distance = Annotated[int, Limit(MAX_LENGTH, "a relative distance in positions")]
Clip = Annotated[int, Limit(1024, "a clipping distance: tables of 2k+1 rows (Shaw et al. clip at k <= 64)")]
Buckets = Annotated[int, Limit(1024, "relative-position buckets")]
Width = Annotated[int, Limit(4096, "a hidden layer's width")]
Axes = Annotated[int, Limit(8, "position axes")]
Kernel = Annotated[int, Limit(64, "a short convolution's kernel size")]
Positions = Annotated[int, Limit(2.0**40, "a length in positions")]
"""A length a scaling is defined by (``original_max_positions``), read from the scaling functions of
``posenc.scaling`` by ``posenc.registry.check_limits``; the library itself refuses more than ``INT64_MAX``."""

INT64_MAX = 2**63 - 1
"""The largest position (positions are int64), and the bound of the command line's integers."""

# the work a command may do, as products of sizes (measured on 2 cores: the largest accepted
# `posenc show` runs in about 10-20 s, `posenc compare` per scheme likewise)
MAX_CELLS = 1 << 24
"""``length × dim``: table cells of one encoding (16M: a 16384 × 1024 float64 table, 128 MB)."""
MAX_PAIR_WORK = 1 << 35
"""``length² × dim``: the fingerprint comparison of every pair of positions (34G multiply-adds)."""
MAX_FIT_WORK = 1 << 32
"""``length × dim²``: the least-squares fit of ``PE(p+1) = M·PE(p)`` (4.3G multiply-adds; LAPACK least squares is slow)."""

MAX_RELATIVE_WORK = 1 << 32
"""``queries × parameters`` of a relative scheme (Transformer-XL's ``(q + v)·W_R`` per query; 4.3G
multiply-adds, about 1 GB of float64 temporaries)."""


def limits_of(cls: Any) -> dict[str, Limit]:
    """``{parameter: Limit}`` from the annotations of ``cls.__init__``'s keyword-only parameters (of a
    function's parameters when ``cls`` is a function, such as a scaling of ``posenc.scaling``)."""
    hints = typing.get_type_hints(cls if callable(cls) and not isinstance(cls, type) else cls.__init__,
                                  include_extras=True)
    out = {}
    for name, hint in hints.items():
        for arg in _annotated_args(hint):
            if isinstance(arg, Limit):
                out[name] = arg
    return out


def _annotated_args(hint: Any) -> list[Any]:
    """The metadata of ``Annotated[...]`` hints, also inside ``X | None`` and ``list[X]``."""
    if typing.get_origin(hint) is Annotated:
        return list(hint.__metadata__)
    return [a for sub in typing.get_args(hint) for a in _annotated_args(sub)]


def check_work(what: str, amount: float, limit: float, sizes: str) -> None:
    """Refuses a command whose work (a product of sizes) is over ``limit``, naming the sizes."""
    if amount > limit:
        raise ValueError(f"{sizes} makes {what} of {amount:.3g}, over the command line's limit of {limit:.3g}; "
                         "use a smaller --length or --dim")


def available_bytes() -> int:
    """The memory this process can have: physical memory, or the address-space limit if lower."""
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux/macOS
        phys = 1 << 62
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(phys, soft) if soft != resource.RLIM_INFINITY else phys


def check_memory(name: str, value: Any, elements: float, *, bytes_per: int = 4, what: str = "its table") -> None:
    """Refuses, with a ValueError naming the parameter and the bytes, a build-time allocation of
    ``elements`` entries that this process cannot hold."""
    need = elements * bytes_per
    have = available_bytes()
    if need > have:
        raise ValueError(f"{name}={value} needs {format_bytes(need)} for {what}, more than the "
                         f"{format_bytes(have)} of memory this process can use")


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} PB"  # pragma: no cover


def markdown(rows: list[tuple[str, str, str, str]]) -> str:
    """The table of command-line bounds: ``rows`` of ``(scheme, key, at most, what it counts)`` (the
    registry's ``limits_table()``; ``posenc.registry.limits_markdown()`` joins the two), then the work limits."""
    lines = ["| scheme | key | at most | what it counts |", "|---|---|---|---|"]
    lines += [f"| `{s}` | `{k}` | {m} | {w} |" for s, k, m, w in rows]
    lines += [
        f"| (any) | `--length` × width | {MAX_CELLS:,} | table cells of `show`/`compare` |",
        f"| (any) | `--length`² × width | 2^{int(math.log2(MAX_PAIR_WORK))} | the fingerprint comparison of every pair |",
        f"| (any) | `--length` × width² | 2^{int(math.log2(MAX_FIT_WORK))} | the fit of `PE(p+1) = M·PE(p)` |",
        f"| relative | queries × parameters | 2^{int(math.log2(MAX_RELATIVE_WORK))} | the query-dependent term |",
    ]
    return "\n".join(lines)
