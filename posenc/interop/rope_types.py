"""transformers' rope types as posenc reads them: ``HF_ROPE_TYPES`` (type -> the rope-parameter
keys transformers defines for it and the function that reads them into posenc's spec keys), one row
per type as transformers' ``ROPE_INIT_FUNCTIONS`` is: ``default``, ``linear``, ``dynamic`` (its
original length is ``max_position_embeddings``), ``yarn``, ``longrope``, ``llama3`` and
``proportional`` (p-RoPE, Gemma 4's full-attention layers). Values transformers only warns about (a
factor below 1, LongRoPE lists of the wrong length, ...) raise ``ValueError`` downstream; a key a
type does not define is refused by name (:func:`hf_rope_type`), and the keys refused with a reason
are ``REFUSED_KEYS``. tests/test_hf.py checks that this table lists transformers' types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from posenc.interop.configs import get as _get

# rope-parameter keys every rope type may carry (each type's own are its row of HF_ROPE_TYPES)
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
# top-level keys about rope that this module reads (every other ``*rope*``/``*rotary*`` key is refused)
_TOP_LEVEL_KEYS = {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "rotary_pct",
                   "rotary_emb_base", "rope_local_base_freq", "rope_interleave", "qk_rope_head_dim",
                   "no_rope_layers", "no_rope_layer_interval", "rotary_dim", "layer_rope_theta"}
# rope keys refused with a reason (top-level or rope parameters; every other unread one is refused by name too)
_REFUSED_KEYS = {
    "compress_rope_theta": "DeepSeek-V4's second base, of its compressed-attention keys: a second rope beside the "
                           "layer's, which one posenc module cannot give",
    "rotary_value": "RoFormer's rotation of the values too (when true); its position module has no rotary "
                    "interface to replace either",
    "rope_scaling_layers": "Molmo 2's scaling of some layers only",
    "llama_4_scaling_beta": "Ministral 3's query temperature by position, which this family's attention does not "
                            "read (a family's record reads it: Family.query_temperature)",  # a rope parameter
}
_ALIASES = {"su": "longrope", "mrope": "default"}  # early Phi-3's LongRoPE; Qwen2-VL's legacy "type"


def _require(rp: Mapping[str, Any], rope_type: str, *keys: str) -> None:
    missing = [k for k in keys if rp.get(k) is None]
    if missing:
        raise ValueError(f"rope type {rope_type!r} needs {', '.join(map(repr, missing))} in the config's "
                         f"rope_parameters (or rope_scaling); got keys {sorted(rp)}")


def _original_length(config: Any, rp: Mapping[str, Any], rope_type: str) -> int:
    """``L₀`` of llama3/yarn/longrope: transformers reads a top-level
    ``original_max_position_embeddings`` (Phi-3) first, then the rope parameters', then
    ``max_position_embeddings``."""
    original = _get(config, "original_max_position_embeddings") or rp.get("original_max_position_embeddings")
    original = original or _get(config, "max_position_embeddings")
    if original is None:
        raise ValueError(f"rope type {rope_type!r} needs original_max_position_embeddings "
                         "(or max_position_embeddings) in the config")
    return original


@dataclass(frozen=True)
class HFRopeType:
    """A transformers rope type as :func:`hf_rope_spec` reads it, one row as transformers'
    ``ROPE_INIT_FUNCTIONS`` is: the rope-parameter keys transformers defines for it (transformers'
    ``_validate_*_rope_parameters``; every other key is refused by name) and ``read(rp, config)``,
    which gives posenc's spec keys for it (``scaling``, ``partial_rotary``)."""

    keys: frozenset[str]
    read: Callable[[Mapping[str, Any], Any], dict[str, Any]]


HF_ROPE_TYPES: dict[str, HFRopeType] = {}
"""transformers' rope type -> :class:`HFRopeType`: every type of its ``ROPE_INIT_FUNCTIONS`` and
``"default"`` (tests/test_hf.py checks that the two registries list the same types)."""


def _rope_type(name: str, *keys: str) -> Callable:
    def decorate(read: Callable[[Mapping[str, Any], Any], dict[str, Any]]) -> Callable:
        HF_ROPE_TYPES[name] = HFRopeType(frozenset(keys), read)
        return read

    return decorate


@_rope_type("default")
def _read_default(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    return {"scaling": None}


@_rope_type("linear", "factor")
def _read_linear(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    _require(rp, "linear", "factor")
    return {"scaling": {"type": "linear", "factor": rp["factor"]}}


@_rope_type("proportional", "factor")
def _read_proportional(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """p-RoPE (Gemma 4's full-attention layers): ``partial_rotary="proportional"``; transformers'
    ``factor`` (default 1) divides the frequencies, posenc's ``linear``."""
    factor = rp.get("factor")
    scaling = None if factor is None or factor == 1 else {"type": "linear", "factor": factor}
    return {"partial_rotary": "proportional", "scaling": scaling}


@_rope_type("dynamic", "factor")
def _read_dynamic(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    _require(rp, "dynamic", "factor")
    max_positions = _get(config, "max_position_embeddings")
    if max_positions is None:
        raise ValueError("rope type 'dynamic' needs max_position_embeddings in the config")
    return {"scaling": {"type": "dynamic", "factor": rp["factor"], "original_max_positions": max_positions}}


@_rope_type("yarn", "factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
            "mscale", "mscale_all_dim", "truncate")
def _read_yarn(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    original = _original_length(config, rp, "yarn")
    factor = rp.get("factor")
    if factor is None:  # DeepSeek-V3 style: the ratio of the two lengths
        if _get(config, "max_position_embeddings") is None:
            raise ValueError("rope type 'yarn' needs factor (or max_position_embeddings) in the config")
        factor = _get(config, "max_position_embeddings") / original
    scaling = {"type": "yarn", "factor": factor, "original_max_positions": original,
               "beta_fast": rp.get("beta_fast") or 32.0, "beta_slow": rp.get("beta_slow") or 1.0,
               "truncate": rp.get("truncate", True)}
    if rp.get("attention_factor") is not None:
        scaling["attention_factor"] = rp["attention_factor"]
    elif rp.get("mscale") and rp.get("mscale_all_dim"):  # transformers uses the pair only when both are set
        scaling["mscale"], scaling["mscale_all_dim"] = rp["mscale"], rp["mscale_all_dim"]
    return {"scaling": scaling}


@_rope_type("longrope", "short_factor", "long_factor", "original_max_position_embeddings", "attention_factor",
            "factor")
def _read_longrope(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    _require(rp, "longrope", "short_factor", "long_factor")
    original = _original_length(config, rp, "longrope")
    max_positions, factor = _get(config, "max_position_embeddings"), rp.get("factor")
    if factor is None:  # Phi-3: the ratio of the two lengths; at most 1 means no attention scaling
        if max_positions is None and rp.get("attention_factor") is None:
            raise ValueError("rope type 'longrope' needs factor (or max_position_embeddings) in the config")
        factor = max(1.0, (max_positions or original) / original)
    scaling = {"type": "longrope", "short_factor": list(rp["short_factor"]), "long_factor": list(rp["long_factor"]),
               "factor": factor, "original_max_positions": original}
    if rp.get("attention_factor") is not None:
        scaling["attention_factor"] = rp["attention_factor"]
    return {"scaling": scaling}


@_rope_type("llama3", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor")
def _read_llama3(rp: Mapping[str, Any], config: Any) -> dict[str, Any]:
    _require(rp, "llama3", "factor", "low_freq_factor", "high_freq_factor")
    return {"scaling": {"type": "llama3", "factor": rp["factor"], "original_max_positions":
                        _original_length(config, rp, "llama3"), "low_freq_factor": rp["low_freq_factor"],
                        "high_freq_factor": rp["high_freq_factor"]}}


def hf_rope_type(rp: Mapping[str, Any]) -> tuple[str, HFRopeType]:
    """The rope type of ``rp`` and its row; an unknown type or key is refused by name."""
    name = rp.get("rope_type") or rp.get("type") or "default"
    name = _ALIASES.get(name, name)
    if name not in HF_ROPE_TYPES:
        raise ValueError(f"rope type must be one of {', '.join(map(repr, HF_ROPE_TYPES))}; got {name!r}")
    row = HF_ROPE_TYPES[name]
    unknown = sorted(set(rp) - _COMMON_KEYS - row.keys)
    if unknown and unknown[0] in _REFUSED_KEYS:
        raise ValueError(f"rope parameter {unknown[0]!r} is refused by posenc.from_hf: {_REFUSED_KEYS[unknown[0]]}")
    if unknown:
        takes = sorted(row.keys | {"rope_theta", "partial_rotary_factor"})
        raise ValueError(f"rope parameter {unknown[0]!r} is not one of rope type {name!r} (it takes "
                         f"{', '.join(takes)}); posenc would ignore it, so the config is refused")
    return name, row
