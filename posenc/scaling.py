"""Long-context scalings of RoPE: pure functions of the float64 base frequencies.

Each method maps ``inv_freq [rotary_dim/2]`` (float64) and its parameters to a new
``(inv_freq, attention_factor)``, as transformers' ``ROPE_INIT_FUNCTIONS`` do; they never touch
tensors of activations. NumPy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc._validate import check_float


@dataclass(frozen=True)
class Scaled:
    """Frequencies after scaling, and the factor on the rotated dimensions."""

    inv_freq: np.ndarray
    attention_factor: float = 1.0
    type: str = "default"


ScalingFn = Callable[..., tuple[np.ndarray, float]]
SCALINGS: dict[str, ScalingFn] = {}


def register_scaling(name: str) -> Callable[[ScalingFn], ScalingFn]:
    def decorate(fn: ScalingFn) -> ScalingFn:
        SCALINGS[name] = fn
        return fn

    return decorate


@register_scaling("linear")
def linear(inv_freq: np.ndarray, *, factor: float, head_dim: int, base: float) -> tuple[np.ndarray, float]:
    """Position interpolation (Chen et al. 2023, arXiv:2306.15595): θ_i / factor."""
    factor = check_float("factor", factor, min=1.0)
    return inv_freq / factor, 1.0


def resolve(scaling: Mapping[str, Any] | None, inv_freq: np.ndarray, *, head_dim: int, base: float) -> Scaled:
    """Applies ``scaling`` (``None`` or ``{"type": name, **params}``) to the base frequencies."""
    if scaling is None:
        return Scaled(inv_freq)
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict like {{'type': 'linear', 'factor': 4}}, got {scaling!r}")
    params = dict(scaling)
    kind = params.pop("type", None)
    if kind not in SCALINGS:
        raise ValueError(f"scaling type must be one of {', '.join(map(repr, SCALINGS))}; got {kind!r}")
    import inspect

    allowed = [p for p in inspect.signature(SCALINGS[kind]).parameters if p not in ("inv_freq", "head_dim", "base")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} for scaling {kind!r}; allowed keys: type, {', '.join(allowed)}")
    try:
        new, factor = SCALINGS[kind](np.asarray(inv_freq, dtype=np.float64), head_dim=head_dim, base=base, **params)
    except TypeError as e:  # a missing required parameter
        raise ValueError(f"scaling {kind!r}: {e}") from None
    return Scaled(np.asarray(new, dtype=np.float64), float(factor), kind)
