"""The RoPE scalings ``posenc extend`` applies to a pretrained model, each as a posenc ``rope`` spec.

Every method starts from the model's own RoPE as posenc reads its config (``hf_rope_spec``) and
sets ``scaling`` with one factor for the whole run, ``factor = max(1, N / L₀)`` (``N`` the target
length ``--to``, ``L₀`` the model's ``max_position_embeddings``):

- ``none``: the model's RoPE without scaling (Su et al. 2021);
- ``linear``: Position Interpolation, θ_i / factor (Chen et al. 2023);
- ``ntk``: NTK-aware, base · factor^(d/(d−2)) (bloc97 2023);
- ``dynamic``: dynamic NTK, the factor grown from the sequence length past L₀ (emozilla 2023);
- ``yarn``: YaRN, β_fast = 32, β_slow = 1, attention factor 0.1·ln(factor) + 1 (Peng et al. 2023);
- ``llama3``: Llama 3.1's, low/high frequency factors 1 and 4 (Meta 2024);
- ``longrope``: the model's own LongRoPE factors (Ding et al. 2024), only where its config has them.

The static methods (all but ``dynamic`` and ``longrope``) give every position the same angles at
any sequence length, so with a causal model the first ``L`` tokens of a longer forward are exactly
an ``L``-token forward: one forward at the largest length measures every shorter one.
"""

from __future__ import annotations

from typing import Any

METHODS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
LENGTH_DEPENDENT = ("dynamic", "longrope")  # their angles depend on the sequence length


def context_of(config: Any) -> int:
    """``L₀``: the model's pre-training context (``max_position_embeddings``, or the original one of a
    config that is already scaled)."""
    rp = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    original = rp.get("original_max_position_embeddings") if isinstance(rp, dict) else None
    length = original or getattr(config, "max_position_embeddings", None)
    if not length:
        raise ValueError(f"the model's config ({type(config).__name__}) has no max_position_embeddings")
    return int(length)


def factor_for(to: int, context: int) -> float:
    """The scaling factor of every method: ``max(1, to / context)``."""
    return max(1.0, to / context)


def check_methods(methods: list[str] | tuple[str, ...]) -> list[str]:
    """``methods`` without repeats, each one of ``METHODS`` (a ValueError names an unknown one)."""
    out: list[str] = []
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"--method must be one of {', '.join(METHODS)}; got {m!r}")
        if m not in out:
            out.append(m)
    if not out:
        raise ValueError(f"--method: give at least one of {', '.join(METHODS)}")
    return out


def unavailable(config: Any, method: str) -> str | None:
    """Why ``method`` cannot run on this model (None: it can)."""
    if method == "longrope":
        rp = getattr(config, "rope_parameters", None) or {}
        if not (isinstance(rp, dict) and rp.get("short_factor") and rp.get("long_factor")):
            return "the model's config has no LongRoPE factors (short_factor, long_factor)"
    return None


def check_arms(config: Any, to: int, methods: list[str]) -> list[str]:
    """The methods that run on this model (``unavailable`` ones left out); ValueError (before anything of
    ``to`` is allocated) when ``to`` does not extend the model's context (factor 1: every method is the
    model unchanged) or when every method that runs is the same model (one spec)."""
    context = context_of(config)
    if to <= context:
        raise ValueError(f"--to {to} does not extend the model's context of {context} tokens (the factor would be "
                         f"1 and every method the model unchanged); give --to {context + 1} or more (--to "
                         f"{2 * context}: twice the context, what the claims about extension need)")
    runs = [m for m in methods if unavailable(config, m) is None]
    if not runs:
        why = "; ".join(f"{m}: {unavailable(config, m)}" for m in methods)
        raise ValueError(f"--method {' '.join(methods)}: none of them runs on this model ({why}); give another "
                         f"of {', '.join(m for m in METHODS if m not in methods)}")
    import json

    specs = {json.dumps(method_spec(config, m, factor_for(to, context)), sort_keys=True) for m in runs}
    if len(runs) > 1 and len(specs) == 1:
        raise ValueError(f"--method {' '.join(runs)}: at --to {to} every one of them is the same model; give methods "
                         "that differ")
    return runs


def method_spec(config: Any, method: str, factor: float) -> dict[str, Any]:
    """The posenc ``rope`` spec of ``method`` on this model (its parameters are the record's ``params``)."""
    from posenc.interop.hf import hf_rope_spec

    spec = dict(hf_rope_spec(config))
    original = context_of(config)
    scalings: dict[str, dict[str, Any] | None] = {
        "none": None,
        "linear": {"type": "linear", "factor": factor},
        "ntk": {"type": "ntk", "factor": factor},
        "dynamic": {"type": "dynamic", "factor": factor, "original_max_positions": original},
        "yarn": {"type": "yarn", "factor": factor, "original_max_positions": original, "beta_fast": 32.0,
                 "beta_slow": 1.0},
        "llama3": {"type": "llama3", "factor": factor, "original_max_positions": original, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0},
    }
    if method == "longrope":
        why = unavailable(config, method)
        if why is not None:
            raise ValueError(f"--method longrope: {why}")
        rp = config.rope_parameters
        spec["scaling"] = {"type": "longrope", "short_factor": list(rp["short_factor"]),
                           "long_factor": list(rp["long_factor"]), "factor": factor, "original_max_positions": original}
        return spec
    spec["scaling"] = scalings[method]
    return spec


def apply(model: Any, method: str, factor: float) -> dict[str, Any]:
    """Patches ``model`` with ``method`` through ``posenc.interop.patch`` (which first compares the model's
    own rotary with posenc's reading of its config, and refuses a mismatch by name); returns the spec."""
    from posenc.interop.patching import patch

    spec = method_spec(model.config, method, factor)
    patch(model, spec)
    return spec
