"""Building the modules an analysis reads, the helpers every analysis shares, and ``KIND_ANALYSIS`` (filled by ``kinds``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc import registry
from posenc._validate import check_int
from posenc.spec import fill_sizes, label


DEFAULT_HEADS = 8


class NotApplicable(ValueError):
    """An analysis that does not apply to a scheme of this kind."""


# -- building ---------------------------------------------------------------------------------

def build(spec: Any, *, dim: int = 64, num_heads: int = DEFAULT_HEADS, length: int | None = None, seed: int = 0,
          head_dim: int | None = None):
    """A float64 module from a SPEC string, a spec dict or a module, sizes filled from ``dim``/``num_heads``.

    Learned tables are drawn with ``torch.manual_seed(seed)``, so figures are reproducible.
    """
    import torch

    if hasattr(spec, "kind") and hasattr(spec, "spec"):
        return copy.deepcopy(spec).double()
    full = fill_sizes(spec, dim=dim, num_heads=num_heads, length=length, head_dim=head_dim)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = registry.build(full)
    return module.double()


def untrained(module) -> str | None:
    """What a module drawn at its initialization shows, for ``show``/``compare`` and their figures
    (None when it has no trainable parameters: its numbers are the scheme's own).

    ``posenc show learned`` draws the table as ``posenc.build`` makes it, N(0, init_std²) noise, so its
    cosine similarity is about 0 at every distance; a trained table's structure comes from data
    (docs/guide/cli.md). So are the numbers of ``rope_mixed``'s learned frequencies. Tables and
    frequencies only (additive and rotary kinds): the learned biases of KERPLE and T5 start from their
    papers' initial values, and the explorer draws them (from seed 0) with the same numbers as ``show``."""
    if not KIND_ANALYSIS[module.kind].learned_signal or not any(p.requires_grad for p in module.parameters()):
        return None
    if getattr(module, "name", None) == "learned":
        std = module.spec.get("init_std")
        return (f"untrained: a random N(0, {std:g}²) table as at the start of training (cosine ≈ 0 at every "
                "distance); a trained table's structure comes from the data it is trained on")
    return "untrained: its learned parameters at their (seeded) initialization, not fitted to any data"  # rope_mixed


def shown_label(module) -> str:
    """``label(module)``, with `` (untrained)`` for a module whose learned parameters are at their
    initialization (``untrained``): the label of the text tables and the figures' titles."""
    return label(module) + (" (untrained)" if untrained(module) else "")


SAME_KERNEL = ("both are functions of cos(ω_i·r) over the same frequencies ω_i: the sinusoidal dot product "
               "PE(p)·PE(p+r) = Σ_i cos(ω_i·r) (sin·sin + cos·cos of each pair), which is RoPE's relative kernel "
               "(q·k/D with q = k = 1 is (2/D)·Σ_i cos(ω_i·r), the cosine similarity of the sinusoids)")
"""Why a sinusoidal and a rotary scheme of one base and width give the same row in ``posenc compare``."""
SAME_SIGNAL = "the same positional signal at these distances"
WHY_SAME = {frozenset({"additive", "rotary"}): SAME_KERNEL,  # when every scheme of the group has inv_freq
            frozenset({"rotary"}): "their frequencies are equal, and q·k of a rotary scheme depends only on them"}
"""Why the schemes of a group of kinds give the same row (``coinciding``); otherwise ``SAME_SIGNAL``."""


def coinciding(rows: Sequence[tuple[Any, ...]], modules: Sequence[Any]) -> list[str]:
    """Notes for ``posenc compare``: each group of schemes whose rows (every column after the label and
    kind) are equal, and why: an additive and a rotary scheme of the same frequencies (``SAME_KERNEL``),
    two rotary ones of the same frequencies, or, otherwise, the same signal at the distances shown."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(row[2:]), []).append(i)
    notes = []
    for members in groups.values():
        if len(members) < 2:
            continue
        names = " and ".join(str(rows[i][0]) for i in members)
        kinds = frozenset(modules[i].kind for i in members)
        frequencies = all(hasattr(modules[i], "inv_freq") for i in members)
        why = WHY_SAME.get(kinds, SAME_SIGNAL) if frequencies or len(kinds) == 1 else SAME_SIGNAL
        notes.append(f"{names}: the same row, because {why}.")
    return notes


def text_table(rows: list[Sequence[str]], *, width: int | None = None, wrap: Sequence[int] = (),
               min_wrap: int = 8) -> str:
    """Rows of strings (the first is the header) as aligned text columns, a rule under the header.

    ``width``: the line width to fit (a terminal's); when the table is wider, the columns ``wrap``
    (indices) are wrapped at spaces onto continuation lines, each given a share of the room the other
    columns leave in proportion to its natural width, and at least ``min_wrap`` characters."""
    import textwrap

    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    total = sum(widths) + 2 * (len(widths) - 1)
    if width is not None and wrap and total > width:
        fixed = sum(w for i, w in enumerate(widths) if i not in wrap) + 2 * (len(widths) - 1)
        room, natural = max(width - fixed, 0), sum(widths[i] for i in wrap)
        for i in wrap:
            widths[i] = min(widths[i], max(min_wrap, room * widths[i] // natural))
    else:
        wrap = ()

    def block(row: Sequence[str]) -> list[str]:
        cells = [textwrap.wrap(c, widths[i], break_on_hyphens=False) or [""] if i in wrap else [c]
                 for i, c in enumerate(row)]
        return ["  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)).rstrip()
                for k in range(max(len(c) for c in cells))]

    lines = [*block(rows[0]), "  ".join("-" * w for w in widths)]
    for r in rows[1:]:
        lines += block(r)
    return "\n".join(lines)


def progress(items, desc: str, *, big: bool = True):
    """A progress bar on stderr for long loops, when stderr is a terminal and tqdm is installed."""
    if not big:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the bench extra
        return items
    import sys

    return tqdm(items, desc=desc, file=sys.stderr, disable=None, leave=False)


def _positions(length: int, module=None):
    """``0 .. length-1``; for a module with several axes, as text tokens (the same on every axis)."""
    import torch

    from posenc.positions import text_positions

    return text_positions(torch.arange(check_int("length", length, min=1)), getattr(module, "axes", 1))


def _positions_on_axes(positions, module):
    """``[L]`` positions as text tokens of a module with several axes (the same on every axis)."""
    from posenc.positions import text_positions

    return text_positions(positions, getattr(module, "axes", 1))


def _numpy(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def _not_applicable(module, kinds: tuple[str, ...], what: str) -> NotApplicable:
    return NotApplicable(f"{what} applies to {' and '.join(kinds)} encodings, not to "
                         f"{module.name!r} ({module.kind}): not applicable")


def _ones_qk(module, length: int):
    """``q = k = 1`` of shape ``[1, H, L, D]`` for a module that rotates or scores queries and keys."""
    import torch

    d = getattr(module, "head_dim", None) or module.spec.get("head_dim")
    if d is None and module.spec.get("d_model") and getattr(module, "num_heads", None):
        d = module.spec["d_model"] // module.num_heads
    h = getattr(module, "num_heads", None) or module.spec.get("num_heads") or 1
    if not d:
        raise NotApplicable(f"cannot tell the head dimension of {module.name!r} (no head_dim)")
    return torch.ones(1, int(h), length, int(d), dtype=torch.float64)



@dataclass(frozen=True)
class KindAnalysis:
    """What the analysis and the figures read from a scheme of one kind (``KIND_ANALYSIS``): the
    functions of the module behind ``table``, ``rotary_scores``, ``score_term`` and
    ``content_weights`` (None where the quantity does not apply: ``NotApplicable``), the signal
    against distance (``score_vs_distance``) and on a grid (``grid_map``), and ``key_numbers``'
    rows (before the frequency rows when ``numbers_first``)."""

    signal: Any
    grid_signal: Any
    numbers: Any
    table: Any = None
    qk: Any = None
    term: Any = None
    weights: Any = None
    numbers_first: bool = False
    learned_signal: bool = False  # its learned parameters are its signal (``untrained``): tables, frequencies


KIND_ANALYSIS: dict[str, KindAnalysis] = {}
"""kind -> ``KindAnalysis``, filled by ``posenc.analysis.kinds`` (the one place each kind is read)."""


def _for_kind(m, quantity: str, what: str):
    """The function of ``KIND_ANALYSIS`` behind ``quantity`` for ``m``'s kind; ``NotApplicable`` naming
    the kinds it applies to when it has none."""
    fn = getattr(KIND_ANALYSIS[m.kind], quantity)
    if fn is None:
        raise _not_applicable(m, tuple(k for k, a in KIND_ANALYSIS.items() if getattr(a, quantity) is not None), what)
    return fn
