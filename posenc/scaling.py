"""Long-context scalings of RoPE: pure functions of the float64 base frequencies.

Each method maps the base frequencies ``inv_freq [rotary_dim/2]`` (float64,
``θ_i = base^(-2i/rotary_dim)``) and its parameters to new frequencies and an attention factor,
as transformers' ``ROPE_INIT_FUNCTIONS`` do; none of them touches activations. NumPy only.

A spec chooses one with ``{"scheme": "rope", "head_dim": D, "scaling": {"type": name, ...}}``:

- ``linear``: θ_i / factor (position interpolation, Chen et al. 2023);
- ``ntk``: base → base·factor^(d/(d−2)) (static NTK-aware);
- ``dynamic``: the same with factor → factor·L/L₀ − (factor − 1) once L > L₀;
- ``yarn``: a ramp between θ_i/factor and θ_i over the correction range (Peng et al. 2023);
  attention factor 0.1·ln(factor) + 1, or DeepSeek's mscale ratio;
- ``llama3``: θ_i/factor at long wavelengths, θ_i at short ones, smoothed between;
- ``longrope``: θ_i/short_factor_i, or θ_i/long_factor_i once L > L₀; attention factor
  √(1 + ln factor / ln L₀);
- ``xpos``: θ_i; q is scaled by ζ_i^(m/scale_base), k by ζ_i^(−n/scale_base) (Sun et al. 2022).

where ``d`` is the rotary dimension, ``L₀`` is ``original_max_positions`` (the pre-training
context) and ``L`` is the sequence length, the largest position + 1.

**Length-dependent methods.** ``dynamic`` and ``longrope`` choose their frequencies from the
sequence length. Their result carries a :class:`ByLength`, a small table that evaluates to the
frequencies at any ``L`` (``Scaled.at(L)`` in NumPy; the rotary module evaluates the same data
in torch, also under ``torch.compile``). How the module picks ``L`` when decoding with a
KV cache is documented in ``posenc.encodings.rope``.

**Exact frequencies.** ``resolve`` calls a scaling function twice: on the float64 frequencies
(validation, attention factor, length rule) and on the exact ones (an object array of 40-digit
mpmath numbers, ``posenc.reference.positions.exact_inv_freq``), so every static method and both
tables of LongRoPE get their true frequencies as double-doubles (``Scaled.inv_freq`` and
``Scaled.inv_freq_lo``), evaluated from ``base``, ``i`` and the parameters with no float64
rounding in between (the helpers ``_like`` and ``_two_pi`` keep the number type). ``dynamic``
past ``original_max_positions`` changes its frequencies with every length: those are float64
(``lo = 0``). With ``truncate=False`` YaRN's ramp ends are float64 logarithms, taken as given.
A registered function that does not compute on object arrays gets float64 frequencies (``lo = 0``).

A scaling function has the signature ``fn(inv_freq, *, head_dim, base, **params)`` and returns
``(inv_freq, attention_factor)``, or a :class:`Scaled` when it needs more (a ``ByLength``, or
xPos's per-pair ``decay``). Invalid parameters raise ``ValueError`` naming the parameter, the
value and what is allowed; transformers only logs warnings for most of them.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from posenc._validate import check_bool, check_float, check_float_list, check_int, did_you_mean
from posenc.limits import INT64_MAX, Positions
from posenc.reference.positions import exact_context, exact_split


@dataclass(frozen=True)
class ByLength:
    """Frequencies that depend on the sequence length ``L`` (largest position + 1)::

        L <= switch:  short
        L >  switch:  long · s(L) ** exponent,   s(L) = max(1, slope·L + intercept)

    ``exponent=None`` means no power term (LongRoPE switches between two fixed tables);
    dynamic NTK has ``long = short`` and a power that grows with ``L``. ``long_lo``: the low
    halves of ``long`` as double-doubles (None: zeros).
    """

    switch: int
    short: np.ndarray
    long: np.ndarray
    slope: float = 0.0
    intercept: float = 1.0
    exponent: np.ndarray | None = None
    long_lo: np.ndarray | None = None

    def __call__(self, seq_len: int) -> np.ndarray:
        seq_len = check_int("seq_len", seq_len, min=0)
        if seq_len <= self.switch:
            return self.short
        if self.exponent is None:
            return self.long
        s = max(1.0, self.slope * seq_len + self.intercept)
        return self.long * s ** self.exponent


@dataclass(frozen=True)
class Scaled:
    """Frequencies after scaling, and the factor on the rotated dimensions.

    ``inv_freq`` holds the frequencies of short sequences (of every length when
    ``by_length`` is None). ``decay`` (xPos only) is ``ln ζ_i / scale_base`` per pair: a query
    at ``m`` is multiplied by ``exp(m·decay)``, a key at ``n`` by ``exp(−n·decay)``.
    ``inv_freq_lo``: the low halves, ``inv_freq + inv_freq_lo`` being the true frequencies to
    2^-106 (zeros when they were given as float64).
    """

    inv_freq: np.ndarray
    attention_factor: float = 1.0
    type: str = "default"
    by_length: ByLength | None = None
    decay: np.ndarray | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    inv_freq_lo: np.ndarray | None = None

    @property
    def length_dependent(self) -> bool:
        return self.by_length is not None

    def at(self, seq_len: int | None = None) -> np.ndarray:
        """The float64 frequencies used for a sequence of ``seq_len`` positions (None: short)."""
        if self.by_length is None or seq_len is None:
            return self.inv_freq
        return self.by_length(seq_len)

    def exact_at(self, seq_len: int | None = None) -> np.ndarray:
        """The frequencies at ``seq_len`` as ``at`` gives them, but as 40-digit numbers (an object
        array: ``hi + lo``) where they are double-doubles, for the NumPy references."""
        import mpmath

        freq = self.at(seq_len)
        rule = self.by_length
        long = rule is not None and seq_len is not None and seq_len > rule.switch
        lo = (rule.long_lo if rule.exponent is None else None) if long else self.inv_freq_lo
        if lo is None:
            return freq
        with exact_context():
            return np.array([mpmath.mpf(float(h)) + float(v) for h, v in zip(freq, lo)], dtype=object)


ScalingFn = Callable[..., "tuple[np.ndarray, float] | Scaled"]
SCALINGS: dict[str, ScalingFn] = {}
_CONTEXT = ("inv_freq", "head_dim", "base")  # what resolve() passes; not spec keys


def register_scaling(name: str) -> Callable[[ScalingFn], ScalingFn]:
    """Registers ``fn(inv_freq, *, head_dim, base, **params)`` as scaling type ``name``."""

    def decorate(fn: ScalingFn) -> ScalingFn:
        SCALINGS[name] = fn
        return fn

    return decorate


def _rotary_dim(inv_freq: np.ndarray) -> int:
    return 2 * len(inv_freq)


def _like(inv_freq: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Exact ``values`` (integers) in the number type of ``inv_freq``: float64, or mpmath numbers
    when ``inv_freq`` holds exact frequencies (an object array)."""
    if inv_freq.dtype != object:
        return np.asarray(values, dtype=np.float64)
    import mpmath

    return np.array([mpmath.mpf(int(v)) for v in np.ravel(values)], dtype=object).reshape(np.shape(values))


def _two_pi(inv_freq: np.ndarray):
    """2π in the number type of ``inv_freq``."""
    if inv_freq.dtype != object:
        return 2 * math.pi
    import mpmath

    return 2 * mpmath.pi


def _pair_index(inv_freq: np.ndarray) -> np.ndarray:
    """``2i`` for every pair: ``[0, 2, ..., d−2]`` (float64, or exact numbers, see ``_like``)."""
    return _like(inv_freq, np.arange(0, _rotary_dim(inv_freq), 2))


def _ntk_exponent(inv_freq: np.ndarray) -> np.ndarray:
    """``−2i/(d−2)``: multiplying θ_i by ``α**exponent`` is the base change base → base·α^(d/(d−2)).

    With ``d = 2`` the only pair has θ_0 = 1 whatever the base, so its exponent is 0.
    """
    d = _rotary_dim(inv_freq)
    if d <= 2:
        return np.zeros(len(inv_freq))
    return -_pair_index(inv_freq) / (d - 2)


def _factor(factor: Any) -> float:
    return check_float("factor", factor, min=1.0)


def _original(original_max_positions: Any) -> int:
    """``L₀``: a length in positions, and positions are int64, so at most ``2^63 − 1`` (a larger one
    could never be reached, and the rotary module compares it with an int64 length)."""
    value = check_int("original_max_positions", original_max_positions, min=1)
    if value > INT64_MAX:
        raise ValueError(f"original_max_positions must be at most 2^63 - 1 (positions are int64), got {value}")
    return value


# -- static methods -----------------------------------------------------------------------------

@register_scaling("linear")
def linear(inv_freq: np.ndarray, *, factor: float, head_dim: int, base: float) -> tuple[np.ndarray, float]:
    """Position interpolation (Chen et al. 2023, arXiv:2306.15595): θ_i / factor."""
    factor = _factor(factor)
    return inv_freq / factor, 1.0


@register_scaling("ntk")
def ntk(inv_freq: np.ndarray, *, factor: float, head_dim: int, base: float) -> tuple[np.ndarray, float]:
    """Static NTK-aware scaling (bloc97, 2023): base → base · factor^(d/(d−2)).

    Low frequencies are interpolated by about ``factor`` and the highest is left as it is:
    ``θ_i' = θ_i · factor^(−2i/(d−2))``.
    """
    factor = _factor(factor)
    return inv_freq * factor ** _ntk_exponent(inv_freq), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1·mscale·ln(scale) + 1`` (1 when ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(rotary_dim: int, base: float, original_max_positions: int, beta_fast: float,
                          beta_slow: float, truncate: bool = True) -> tuple[float, float]:
    """The pairs ``(low, high)`` between which YaRN ramps from extrapolation to interpolation.

    Pair ``i`` completes ``L₀·θ_i / 2π`` rotations over the original context; ``low`` is the
    pair that completes ``beta_fast`` of them, ``high`` the one that completes ``beta_slow``:
    ``i(β) = d·ln(L₀ / (2π·β)) / (2·ln base)``, floored/ceiled when ``truncate``, clipped to
    ``[0, d−1]``.
    """

    def dim_of(rotations: float) -> float:
        return rotary_dim * math.log(original_max_positions / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


@register_scaling("yarn")
def yarn(inv_freq: np.ndarray, *, factor: float, original_max_positions: Positions, beta_fast: float = 32.0,
         beta_slow: float = 1.0, mscale: float = 1.0, mscale_all_dim: float = 0.0,
         attention_factor: float | None = None, truncate: bool = True, head_dim: int,
         base: float) -> tuple[np.ndarray, float]:
    """YaRN (Peng et al. 2023, arXiv:2309.00071).

    Pairs that rotate more than ``beta_fast`` times over the original context keep θ_i
    (extrapolation), those that rotate fewer than ``beta_slow`` times get θ_i/factor
    (interpolation), with a linear ramp between (see :func:`yarn_correction_range`).

    The attention factor is ``attention_factor`` when given, else DeepSeek's ratio
    ``yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)``, which is the paper's
    ``0.1·ln(factor) + 1`` with the defaults (``mscale=1``, ``mscale_all_dim=0``).
    """
    factor = _factor(factor)
    original = _original(original_max_positions)
    beta_fast = check_float("beta_fast", beta_fast, min=0.0, min_open=True)
    beta_slow = check_float("beta_slow", beta_slow, min=0.0, min_open=True)
    if beta_fast <= beta_slow:
        raise ValueError(f"beta_fast must be > beta_slow (pairs rotating more than beta_fast times are "
                         f"extrapolated, fewer than beta_slow interpolated); got beta_fast={beta_fast}, "
                         f"beta_slow={beta_slow}")
    mscale = check_float("mscale", mscale, min=0.0)
    mscale_all_dim = check_float("mscale_all_dim", mscale_all_dim, min=0.0)
    truncate = check_bool("truncate", truncate)
    if attention_factor is None:
        attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    else:
        attention_factor = check_float("attention_factor", attention_factor, min=0.0, min_open=True)

    if base <= 1:
        raise ValueError(f"base must be > 1 for yarn (its correction range divides by ln base), got {base}")
    d = _rotary_dim(inv_freq)
    low, high = yarn_correction_range(d, base, original, beta_fast, beta_slow, truncate)
    if low == high:
        high += 0.001  # a step instead of a ramp, as transformers does
    ramp = np.clip((_like(inv_freq, np.arange(d // 2)) - low) / (high - low), 0.0, 1.0)  # 0: keep θ_i
    return inv_freq / factor * ramp + inv_freq * (1.0 - ramp), float(attention_factor)


@register_scaling("llama3")
def llama3(inv_freq: np.ndarray, *, factor: float, original_max_positions: Positions, low_freq_factor: float = 1.0,
           high_freq_factor: float = 4.0, head_dim: int, base: float) -> tuple[np.ndarray, float]:
    """Llama 3.1's scaling (Meta 2024): by wavelength λ_i = 2π/θ_i relative to the original context.

    λ_i > L₀/low_freq_factor: θ_i/factor; λ_i < L₀/high_freq_factor: θ_i; between, the mix
    ``(1−s)·θ_i/factor + s·θ_i`` with ``s = (L₀/λ_i − low_freq_factor)/(high_freq_factor − low_freq_factor)``.
    Defaults are Llama 3.1's (1 and 4). ``high_freq_factor == low_freq_factor`` (Llama 4 Scout's
    config: both 1) has no band between: θ_i/factor above ``L₀/low_freq_factor``, θ_i at and below.
    """
    factor = _factor(factor)
    original = _original(original_max_positions)
    low = check_float("low_freq_factor", low_freq_factor, min=0.0, min_open=True)
    high = check_float("high_freq_factor", high_freq_factor, min=0.0, min_open=True)
    if high < low:
        raise ValueError(f"high_freq_factor must be >= low_freq_factor; got high_freq_factor={high}, "
                         f"low_freq_factor={low}")
    wavelen = _two_pi(inv_freq) / inv_freq
    out = np.where((wavelen > original / low).astype(bool), inv_freq / factor, inv_freq)
    if high == low:  # no smoothing band (transformers' band is then empty too, up to 0/0 at λ = L₀/low)
        return out, 1.0
    smooth = (original / wavelen - low) / (high - low)
    medium = (wavelen >= original / high).astype(bool) & (wavelen <= original / low).astype(bool)
    out = np.where(medium, (1 - smooth) * out / factor + smooth * out, out)
    return out, 1.0


# -- length-dependent methods ---------------------------------------------------------------------

@register_scaling("dynamic")
def dynamic(inv_freq: np.ndarray, *, factor: float, original_max_positions: Positions, head_dim: int,
            base: float) -> Scaled:
    """Dynamic NTK (emozilla, 2023): the NTK base change with the factor grown from the length.

    ``L <= L₀``: θ_i. ``L > L₀``: base → base·α^(d/(d−2)), ``α = factor·L/L₀ − (factor − 1)``;
    the frequencies therefore change with every new length past ``L₀``.
    """
    factor = _factor(factor)
    original = _original(original_max_positions)
    rule = ByLength(switch=original, short=inv_freq, long=inv_freq, slope=factor / original,
                    intercept=1.0 - factor, exponent=_ntk_exponent(inv_freq))
    return Scaled(inv_freq, 1.0, by_length=rule)


@register_scaling("longrope")
def longrope(inv_freq: np.ndarray, *, short_factor: list[float], long_factor: list[float], factor: float,
             original_max_positions: Positions, attention_factor: float | None = None, head_dim: int,
             base: float) -> Scaled:
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753; Phi-3): a searched rescale per pair.

    ``L <= L₀``: θ_i/short_factor_i; ``L > L₀``: θ_i/long_factor_i. ``factor`` is the context
    extension ``L/L₀`` (Phi-3: max_position_embeddings / original_max_position_embeddings); the
    attention factor is ``√(1 + ln factor / ln L₀)`` (1 when factor is 1) unless given.
    """
    n = len(inv_freq)
    short = np.asarray(check_float_list("short_factor", short_factor, length=n), dtype=np.float64)
    long = np.asarray(check_float_list("long_factor", long_factor, length=n), dtype=np.float64)
    for name, values in (("short_factor", short), ("long_factor", long)):
        if (values <= 0).any():
            raise ValueError(f"{name} entries must be > 0, got {float(values.min())} at index {int(values.argmin())}")
    factor = _factor(factor)
    original = _original(original_max_positions)
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    else:
        attention_factor = check_float("attention_factor", attention_factor, min=0.0, min_open=True)
    rule = ByLength(switch=original, short=inv_freq / short, long=inv_freq / long)
    return Scaled(rule.short, float(attention_factor), by_length=rule)


@register_scaling("xpos")
def xpos(inv_freq: np.ndarray, *, scale_base: float = 512.0, gamma: float = 0.4, head_dim: int,
         base: float) -> Scaled:
    """xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554).

    Frequencies stay θ_i; pair ``i`` of a query at ``m`` is scaled by ``ζ_i^(m/scale_base)`` and
    of a key at ``n`` by ``ζ_i^(−n/scale_base)``, ``ζ_i = (2i/d + γ)/(1 + γ)`` < 1, so the score
    gains ``ζ_i^((m−n)/scale_base)``: still relative, and decaying with distance. The scales are
    exponential in the absolute position: in float32 they leave the representable range past
    roughly ``70·scale_base`` positions (ζ_0 ≈ 0.29 with γ = 0.4), so xPos suits contexts of
    thousands, not millions, of positions.
    """
    scale_base = check_float("scale_base", scale_base, min=0.0, min_open=True)
    gamma = check_float("gamma", gamma, min=0.0, min_open=True)
    zeta = (np.arange(0, len(inv_freq) * 2, 2, dtype=np.float64) / _rotary_dim(inv_freq) + gamma) / (1 + gamma)
    return Scaled(inv_freq, 1.0, decay=np.log(zeta) / scale_base)


# -- transformers' names --------------------------------------------------------------------------

TRANSFORMERS_KEYS: dict[str, tuple[str, str]] = {
    "rope_type": ("type", "scaling"),
    "original_max_position_embeddings": ("original_max_positions", "scaling"),
    "rope_theta": ("base", "spec"),
    "partial_rotary_factor": ("rotary_dim", "spec"),
    "mrope_section": ("sections", "spec"),
}
"""transformers' rope-parameter keys that posenc names otherwise: key -> (posenc's name, where it goes:
``"scaling"``, a key of the scaling dict, or ``"spec"``, a key of the rope spec beside it). The other keys
of transformers' scalings (``factor``, ``beta_fast``, ``low_freq_factor``, ``short_factor``, ...) have the
same names in posenc. ``posenc.interop.hf.hf_rope_spec`` translates a whole config (tests/test_cli_errors.py
checks that it agrees with this table); this table only names the keys in errors."""

_HOW = {"rotary_dim": "rotary_dim = head_dim × partial_rotary_factor"}


def foreign_key_hint(key: str, *, where: str) -> str:
    """`` (transformers' name; posenc calls it 'base', a key of the spec)`` for one of
    ``TRANSFORMERS_KEYS`` found among the keys of ``where`` (``"spec"`` or ``"scaling"``), else ``""``."""
    if key not in TRANSFORMERS_KEYS:
        if where == "spec" and any(key in scaling_keys(scaling_type) for scaling_type in SCALINGS):
            return " (a key of a scaling: give scaling=TYPE with it, e.g. scaling=linear,factor=4)"
        return ""
    name, home = TRANSFORMERS_KEYS[key]
    if key == "rope_type" and where == "spec":
        return (" (transformers' name; posenc's is scaling=TYPE, e.g. rope:scaling=yarn,factor=4,...; "
                "posenc.from_hf(config) reads a transformers config)")
    place = "" if home == where else (", a key of the scaling dict" if home == "scaling" else
                                      ", a key of the spec beside scaling")
    return (f" (transformers' name; posenc calls it {_HOW.get(name, repr(name))}{place}; "
            "posenc.from_hf(config) reads a transformers config)")


def transformers_keys_error(params: Mapping[str, Any]) -> str:
    """The error for a scaling dict written with transformers' keys: each one with its posenc name."""
    renamed = []
    for key in params:
        if key in TRANSFORMERS_KEYS:
            name, home = TRANSFORMERS_KEYS[key]
            what = _HOW.get(name, repr(name))
            renamed.append(f"{key!r} is posenc's {what}" + ("" if home == "scaling" else " (a key of the spec, "
                                                                                          "beside scaling)"))
    scaling_type = params.get("type", params.get("rope_type"))
    posenc_keys = {TRANSFORMERS_KEYS.get(k, (k,))[0] for k in params} - {"type", "base", "rotary_dim", "sections"}
    known = isinstance(scaling_type, str) and scaling_type in SCALINGS
    unknown = sorted(posenc_keys - set(scaling_keys(scaling_type))) if known else []
    extra = (f"; not keys of scaling {scaling_type!r}: {', '.join(map(repr, unknown))}" if unknown else "")
    return (f"scaling uses transformers' names: {'; '.join(renamed)}{extra}; posenc.from_hf(config) builds the "
            "rope of a transformers config (rope_parameters or rope_scaling) as it is")


def scaling_keys(scaling_type: str) -> list[str]:
    """The keys of scaling type ``scaling_type`` besides ``type`` (its function's parameters)."""
    return [p for p in inspect.signature(SCALINGS[scaling_type]).parameters if p not in _CONTEXT]


# -- resolution -----------------------------------------------------------------------------------

def resolve(scaling: Mapping[str, Any] | None, inv_freq: np.ndarray, *, head_dim: int, base: float,
            exact: np.ndarray | None = None) -> Scaled:
    """Applies ``scaling`` (``None`` or ``{"type": name, **params}``) to the base frequencies.

    ``exact``: the same frequencies as exact numbers (``posenc.reference.positions.exact_inv_freq``);
    the result then carries the true scaled frequencies as double-doubles (``inv_freq_lo``)."""
    inv_freq = np.asarray(inv_freq, dtype=np.float64)
    if scaling is None:
        out = Scaled(inv_freq)
        return out if exact is None else _exact(out, exact)
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict like {{'type': 'linear', 'factor': 4}}, got {scaling!r}")
    params = dict(scaling)
    if any(k in TRANSFORMERS_KEYS for k in params):
        raise ValueError(transformers_keys_error(params))
    types = ", ".join(map(repr, SCALINGS))
    if "type" not in params:
        raise ValueError(f"scaling has no 'type' key (got keys {', '.join(map(repr, params)) or 'none'}); give one "
                         f"of {types}, e.g. {{'type': 'linear', 'factor': 4}}")
    scaling_type = params.pop("type")
    if not isinstance(scaling_type, str) or scaling_type not in SCALINGS:
        why = " (transformers' 'default' is no scaling: scaling=None)" if scaling_type == "default" else ""
        raise ValueError(f"scaling type must be one of {types}; got {scaling_type!r}"
                         f"{did_you_mean(scaling_type, SCALINGS)}{why}")
    allowed = scaling_keys(scaling_type)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} for scaling {scaling_type!r}"
                         f"{did_you_mean(unknown[0], allowed)}; "
                         f"allowed keys: type, {', '.join(allowed)}")
    fn = SCALINGS[scaling_type]
    signature = inspect.signature(fn).parameters
    missing = [p for p in allowed if signature[p].default is inspect.Parameter.empty and p not in params]
    if missing:
        raise ValueError(f"scaling {scaling_type!r} needs {', '.join(map(repr, missing))}; "
                         f"e.g. {{'type': {scaling_type!r}, {missing[0]!r}: ...}}")
    try:
        out = fn(inv_freq, head_dim=head_dim, base=base, **params)
    except (ValueError, TypeError) as e:  # name the method in the message
        raise type(e)(f"scaling {scaling_type!r}: {e}") from None
    if not isinstance(out, Scaled):
        new, factor = out
        out = Scaled(np.asarray(new, dtype=np.float64), float(factor))
    out = Scaled(np.asarray(out.inv_freq, dtype=np.float64), float(out.attention_factor), scaling_type,
                 out.by_length, out.decay, dict(scaling))
    if exact is None:
        return out
    try:
        with exact_context():
            result = fn(np.asarray(exact, dtype=object), head_dim=head_dim, base=base, **params)
    except (TypeError, AttributeError):  # a registered function that needs float64: lo = 0
        return out
    return _exact(out, result.inv_freq if isinstance(result, Scaled) else result[0],
                  result.by_length if isinstance(result, Scaled) else None)


def _exact(out: Scaled, freq: np.ndarray, rule: ByLength | None = None) -> Scaled:
    """``out`` with its frequencies replaced by the double-doubles of the exact ``freq`` (and of
    ``rule``'s long table when it has no power term)."""
    hi, lo = exact_split(np.asarray(freq, dtype=object))
    by_length = out.by_length
    if by_length is not None:
        if by_length.exponent is None and rule is not None:
            long_hi, long_lo = exact_split(np.asarray(rule.long, dtype=object))
            by_length = replace(by_length, short=hi, long=long_hi, long_lo=long_lo)
        else:  # dynamic: long = short, with a power of the length computed in float64
            by_length = replace(by_length, short=hi, long=hi)
    return replace(out, inv_freq=hi, inv_freq_lo=lo, by_length=by_length)
