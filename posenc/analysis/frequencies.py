"""Frequencies (rotary kind): wavelengths, turns over a length, the spectrum before and after a RoPE scaling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.analysis.base import _numpy, build, NotApplicable
from posenc.spec import label


def wavelengths(inv_freq: np.ndarray) -> np.ndarray:
    """``λ_i = 2π / θ_i``: the number of positions one turn of pair ``i`` takes.

    A frequency of 0, or one so small that ``2π/θ`` is past float64's range (a linear scaling by
    1e308), never turns: its wavelength is ``inf``, without NumPy's overflow warning."""
    with np.errstate(divide="ignore", over="ignore"):
        return 2.0 * np.pi / np.asarray(inv_freq, dtype=np.float64)


def turns(inv_freq: np.ndarray, length: int) -> np.ndarray:
    """``length · θ_i / 2π``: how many full turns pair ``i`` makes within ``length`` positions.

    Pairs with fewer than one turn never repeat inside the context: they carry its coarse
    position, as the high bits of a binary counter do.
    """
    return length * np.asarray(inv_freq, dtype=np.float64) / (2.0 * np.pi)


def inv_freq(spec: Any, *, dim: int = 64) -> np.ndarray:
    """The frequencies θ an encoding uses (``module.inv_freq``), after any scaling."""
    m = build(spec, dim=dim, length=1)
    if not hasattr(m, "inv_freq"):
        raise NotApplicable(f"{m.name!r} has no frequencies (inv_freq): it is not a sinusoidal or rotary encoding")
    return _numpy(m.inv_freq)


@dataclass(frozen=True)
class Spectrum:
    """Frequencies of a rotary encoding before and after its scaling."""

    label: str
    before: np.ndarray  # θ_i without scaling, [R]
    after: np.ndarray  # θ_i with the spec's scaling, [R]
    attention_factor: float
    scaling: Mapping[str, Any] | None
    context: int | None = None  # the context the frequencies were trained for (original_max_positions)
    extended: int | None = None  # context × factor, when both are known

    @property
    def wavelengths_before(self) -> np.ndarray:
        return wavelengths(self.before)

    @property
    def wavelengths_after(self) -> np.ndarray:
        return wavelengths(self.after)


def spectrum(spec: Any, *, dim: int = 128) -> Spectrum:
    """θ per pair before and after a spec's ``scaling`` (any type ``posenc.scaling`` knows).

    "Before" is the same spec with ``scaling=None``; "after" is the built module's ``inv_freq``,
    or, for a length-dependent scaling (``module.scaling.at``), the frequencies at the extended
    context ``original_max_positions × factor``. A new scaling type needs no change here.
    """
    m = build(spec, dim=dim, length=1)
    after = inv_freq(m)
    full = m.spec
    scaling = full.get("scaling")
    before = inv_freq({**full, "scaling": None}) if scaling is not None else after
    context = extended = None
    if isinstance(scaling, Mapping):
        context = scaling.get("original_max_positions")
        factor = scaling.get("factor")
        if context and isinstance(factor, (int, float)) and not isinstance(factor, bool):
            extended = int(round(context * factor))
    scaled = getattr(m, "scaling", None)
    if extended and getattr(scaled, "length_dependent", False):
        after = np.asarray(scaled.at(extended), dtype=np.float64)  # dynamic, longrope: at the extended length
    return Spectrum(label(full), before, after, float(getattr(m, "attention_factor", 1.0)),
                    scaling, context, extended)
