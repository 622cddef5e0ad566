"""Hugging Face transformers interop: a model config -> the posenc rotary module of that model.

    import posenc
    from transformers import AutoConfig
    rope = posenc.from_hf(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))
    rope.spec   # {'scheme': 'rope', 'head_dim': 128, 'base': 500000.0, ..., 'scaling': {'type': 'llama3', ...}}

    model.model.rotary_emb = HFRotaryEmbedding(rope)   # transformers now uses posenc's exact tables

Both config styles are read, as objects (``PreTrainedConfig``) or plain dicts (``config.json``):
transformers 5's ``rope_parameters`` (with ``rope_type`` and ``rope_theta`` inside) and the
legacy ``rope_scaling`` (with ``type`` or ``rope_type``) plus top-level ``rope_theta`` and
``partial_rotary_factor``. transformers itself is never imported. The keys transformers names
otherwise than posenc (``rope_type`` → ``type``, ``original_max_position_embeddings`` →
``original_max_positions``, ``rope_theta`` → ``base``, ...) are ``posenc.scaling.TRANSFORMERS_KEYS``,
which the errors of a spec written with transformers' keys quote (tests/test_cli_errors.py checks
that this translation agrees with it).

**Rope types** are a table, ``HF_ROPE_TYPES`` (type -> the rope-parameter keys transformers
defines for it and the function that reads them), as transformers' ``ROPE_INIT_FUNCTIONS`` is:
``default``, ``linear``, ``dynamic`` (its original length is ``max_position_embeddings``),
``yarn``, ``longrope``, ``llama3`` and ``proportional`` (p-RoPE, Gemma 4's full-attention layers:
``rope``'s ``partial_rotary="proportional"``, frequencies over the whole head, zero past
``partial_rotary_factor``). Values transformers only warns about (a factor below 1, LongRoPE
lists of the wrong length, ...) raise ``ValueError`` here.

**Keys families add**: GPT-J's and CodeGen's top-level ``rotary_dim`` (in another family's
config, as MiniMax-M3's, whose model reads ``partial_rotary_factor`` instead, read only where it
equals ``head_dim * partial_rotary_factor``, else refused); Gemma 4's
``per_layer_config`` (its full-attention layers' ``head_dim``, read per ``layer_type``); Granite
SWA's ``layer_rope_theta`` (one base per layer: :func:`hf_layer_specs`); Ministral 3's
``llama_4_scaling_beta`` (a query temperature of its attention, outside the rotary:
``Family.query_temperature``, read by :func:`hf_layer_specs` as ``rope``'s ``query_temperature``;
``from_hf`` gives the rotary alone, and the copy of ``max_position_embeddings`` its rope parameters
carry is read where it equals the config's). Refused with their reason: DeepSeek-V4's
``compress_rope_theta``, RoFormer's ``rotary_value``, Molmo 2's ``rope_scaling_layers``,
``llama_4_scaling_beta`` in a family whose attention does not read it.

**Multimodal RoPE** (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): a config whose rope parameters carry
``mrope_section`` gives an ``mrope`` module, with ``sections_layout="interleaved"`` when
``mrope_interleaved`` is true (Qwen3-VL's config.json) and ``"chunked"`` when it is false or
absent. A config of one of these model types without ``mrope_section`` gets the sections and
layout transformers' rotary class falls back to (``MROPE_DEFAULTS``). A config whose rope
parameters live in ``text_config`` (the composite ``Qwen2VLConfig``/``Qwen3VLConfig``, Qwen3-VL's
config.json) is read there. ``rope_type: "mrope"`` (Qwen2-VL's legacy name) is ``default``.

**Families** (``HF_FAMILIES``, one row per transformers model type): where the causal LM keeps its
rotary module, what that module returns (``HF_TABLES``) and how its attention pairs dimensions:

- Gemma 3: one RoPE per layer type. ``config.json``'s ``rope_local_base_freq`` is the base of the
  ``"sliding_attention"`` layers (no scaling), ``rope_theta`` and ``rope_scaling`` those of the
  ``"full_attention"`` layers (defaults 10000 and 1e6, as ``Gemma3TextConfig``); transformers 5's
  ``rope_parameters`` keyed by layer type is read as it is. ``from_hf`` needs ``layer_type=``;
  ``HFRotaryEmbedding.from_config`` holds one rope per layer type and takes transformers'
  ``forward(x, position_ids, layer_type)``.
- GPT-OSS: a half-width table (``cos, sin [B, L, rotary_dim/2]``).
- Llama 4: interleaved pairs and a complex ``freqs_cis`` ``[B, L, rotary_dim/2]``; its NoPE layers
  (``no_rope_layers``, with ``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``) are
  ``nope_temperature`` in :func:`hf_layer_specs`; ``from_hf`` gives the RoPE of its RoPE layers.
- DeepSeek-V3 (MLA): the rotary part is ``qk_rope_head_dim`` wide; ``rope_interleave`` (true by
  default) rotates interleaved pairs, from transformers' ``rotate_half`` table; YaRN's ``mscale``
  pair is the rotary's attention factor (the softmax's ``mscale_all_dim`` correction stays the model's).
- GPT-NeoX (``rotary_pct``, 0.25 when absent), Falcon (RoPE only: ``alibi: true`` is refused),
  Cohere (interleaved pairs and table), Llama-style models (``model.rotary_emb``), Qwen2-VL/Qwen3-VL.

**Keys.** A rope-parameter key that transformers does not define for its rope type, and a
top-level key naming a rope or rotary setting (``*rope*``, ``*rotary*``) that this module does not
read, raise ``ValueError`` naming the key: a setting posenc would ignore is an error, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc._validate import check_choice, check_float, check_int
from posenc.interop.hf_families import (  # noqa: F401  (HF_FAMILIES, HF_TABLES, HFFamily: public here too)
    _GEMMA3_THETAS, FAMILIES, HF_FAMILIES, HF_TABLES, HFFamily,
)
from posenc.positions import text_positions
from posenc.rotary import DIRECTIONS

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
MROPE_DEFAULTS = {t: (list(f.mrope[0]), f.mrope[1]) for t, f in FAMILIES.items() if f.mrope is not None}
"""model type -> (sections, sections_layout) that transformers' text rotary class of that model
uses when the config has no ``mrope_section`` (and whether it interleaves them): the ``mrope``
field of the family's record in ``posenc.interop.families.FAMILIES``."""
_MISSING = object()

def _get(config: Any, name: str, default: Any = None) -> Any:
    """A field of a config object or dict (``default`` when absent or None)."""
    value = config.get(name, _MISSING) if isinstance(config, Mapping) else getattr(config, name, _MISSING)
    return default if value is _MISSING or value is None else value


def _has(config: Any, name: str) -> bool:
    if isinstance(config, Mapping):
        return config.get(name) is not None
    return getattr(config, name, None) is not None


def _config_keys(config: Any) -> list[str]:
    """The top-level keys of a config dict, or the fields of a config object."""
    if isinstance(config, Mapping):
        return list(config)
    to_dict = getattr(config, "to_dict", None)
    return list(to_dict()) if callable(to_dict) else list(vars(config))


def _check_top_level_keys(config: Any) -> None:
    unknown = [k for k in _config_keys(config)
               if ("rope" in k.lower() or "rotary" in k.lower()) and k not in _TOP_LEVEL_KEYS]
    if unknown and unknown[0] in _REFUSED_KEYS:
        raise ValueError(f"config key {unknown[0]!r} is refused by posenc.from_hf: {_REFUSED_KEYS[unknown[0]]}")
    if unknown:
        raise ValueError(f"config key {unknown[0]!r} is a rope setting posenc.from_hf does not read (it reads "
                         f"{', '.join(sorted(_TOP_LEVEL_KEYS))}); it would be ignored, so the config is refused")
    if _get(config, "alibi") is True:
        raise ValueError("the config sets alibi: true (a Falcon with ALiBi): its attention has no RoPE; "
                         "build posenc's 'alibi' scheme instead of from_hf")


def _family(model_type: str, config: Any = None) -> HFFamily | None:
    """The family's record: its row, or one found from the config's modeling module (MLA)."""
    from posenc.interop.families import family_of_config

    row = HF_FAMILIES.get(model_type)
    if row is not None or model_type in FAMILIES:
        return row
    return family_of_config(model_type, config)


def _legacy_layer_params(config: Any, params: Mapping[str, Any], family: HFFamily | None) -> dict[str, Any] | None:
    """Gemma 3's ``config.json`` (``rope_theta``, ``rope_local_base_freq``, ``rope_scaling``) as
    transformers 5's ``rope_parameters`` keyed by layer type; None for a config of one RoPE."""
    thetas = dict(family.layer_thetas) if family is not None else {}
    if not thetas and _has(config, "rope_local_base_freq"):  # a Gemma-3-like config of an unlisted type
        thetas = _GEMMA3_THETAS
    if not thetas:
        return None
    nested = {}
    for layer_type, (key, default) in thetas.items():
        if key == "rope_theta":  # the global layers: the config's (legacy, flat) rope parameters and base
            rp = {"rope_type": "default", **params}
            rp.setdefault("rope_theta", _get(config, "rope_theta", default))
        else:  # the local layers: their own base, no scaling (transformers' Gemma3TextConfig)
            rp = {"rope_type": "default", "rope_theta": _get(config, key, default)}
        nested[layer_type] = rp
    return nested


def _all_rope_parameters(config: Any, family: HFFamily | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(flat, None)`` for a config of one RoPE, ``({}, {layer type: its parameters or None})``
    for one RoPE per layer type."""
    # transformers: `rope_scaling` (legacy) wins over `rope_parameters` when both are given
    params = _get(config, "rope_scaling") or _get(config, "rope_parameters") or {}
    if not isinstance(params, Mapping):
        raise TypeError(f"rope_parameters must be a dict, got {params!r}")
    labels = set(_get(config, "_rope_type_labels") or _get(config, "layer_types") or ())
    nested = {k: v for k, v in params.items() if isinstance(v, Mapping) or k in labels}
    if nested:
        return {}, nested
    return dict(params), _legacy_layer_params(config, params, family)


def _rope_parameters(config: Any, layer_type: str | None, family: HFFamily | None = None) -> dict[str, Any]:
    """The flat rope-parameter dict of ``config`` (of ``layer_type`` when it is nested per layer)."""
    params, nested = _all_rope_parameters(config, family)
    if nested:
        if layer_type is None:
            raise ValueError(f"this config has one RoPE per layer type ({', '.join(map(repr, nested))}); "
                             "pass layer_type=... to from_hf, or use HFRotaryEmbedding.from_config(config) "
                             "(one rope per layer type, as transformers' rotary module)")
        if layer_type not in nested:
            raise ValueError(f"layer_type must be one of {', '.join(map(repr, nested))}; got {layer_type!r}")
        if nested[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no RoPE (its rope_parameters are None)")
        return dict(nested[layer_type])
    if layer_type is not None:
        raise ValueError(f"layer_type={layer_type!r} given, but the config's RoPE is not per layer type")
    return params


def rope_layer_types(config: Any) -> list[str]:
    """The layer types of a config with one RoPE per layer type, sorted as transformers' rotary
    module keeps them (``["full_attention", "sliding_attention"]`` for Gemma 3; a type whose
    parameters are None is left out); ``[]`` when one RoPE serves every layer."""
    config, model_type = _text_config(config)
    _, nested = _all_rope_parameters(config, _family(model_type, config))
    return sorted(k for k, v in (nested or {}).items() if v is not None)


def _layer_overrides(config: Any, layer_type: str | None) -> dict[str, Any]:
    """What ``per_layer_config`` (Gemma 4: layer index -> overrides, ``{"head_dim": 512}`` on its
    full-attention layers) sets for the layers of ``layer_type``: ``head_dim`` is read; a rope key
    there is refused by name, as is a layer type whose layers disagree."""
    table = config.get("per_layer_config") if isinstance(config, Mapping) else None  # objects: read as dicts
    if not table:
        return {}
    rotary = sorted({k for v in table.values() for k in (v or {}) if k == "head_dim" or "rope" in k or "rotary" in k})
    if layer_type is None:
        if rotary:
            raise ValueError(f"per_layer_config sets {rotary[0]!r} for some layers only; posenc.from_hf reads it "
                             "per layer type (layer_type=...), and this config's RoPE is not per layer type")
        return {}
    types = list(_get(config, "layer_types") or ())
    by_index = {int(k): v for k, v in table.items()}  # keys are layer indices, "05" in transformers' dict
    found = [dict(by_index.get(i) or {}) for i, t in enumerate(types) if t == layer_type]
    if any(f != found[0] for f in found):
        raise ValueError(f"per_layer_config gives the {layer_type!r} layers different overrides: {found}")
    unread = [k for k in rotary if k != "head_dim"]
    if unread:
        raise ValueError(f"per_layer_config key {unread[0]!r} is a rope setting posenc.from_hf does not read")
    return found[0] if found else {}


def _require(rp: Mapping[str, Any], rope_type: str, *keys: str) -> None:
    missing = [k for k in keys if rp.get(k) is None]
    if missing:
        raise ValueError(f"rope type {rope_type!r} needs {', '.join(map(repr, missing))} in the config's "
                         f"rope_parameters (or rope_scaling); got keys {sorted(rp)}")


def _model_type(config: Any) -> str:
    """``qwen2_vl`` for ``qwen2_vl`` and ``qwen2_vl_text`` (a composite config's text part)."""
    name = _get(config, "model_type", "")
    name = name if isinstance(name, str) else ""
    return name[: -len("_text")] if name.endswith("_text") else name


def _text_config(config: Any) -> tuple[Any, str]:
    """The config that holds the RoPE (``text_config`` of a composite vision-language config
    without rope fields of its own) and the model type to read defaults by. A config object with
    ``per_layer_config`` (Gemma 4, whose per-layer fields transformers refuses to read globally) is
    read as its dict."""
    own = any(_has(config, k) for k in ("rope_parameters", "rope_scaling", "rope_theta", "head_dim", "hidden_size"))
    if not own and _has(config, "text_config"):
        text = _get(config, "text_config")
        return _as_read(text), _model_type(text) or _model_type(config)
    return _as_read(config), _model_type(config)


def _as_read(config: Any) -> Any:
    """``config``, or its dict when it is an object with a non-empty ``per_layer_config``."""
    if isinstance(config, Mapping) or not callable(getattr(config, "to_dict", None)):
        return config
    as_dict = config.to_dict()
    return as_dict if as_dict.get("per_layer_config") else config


def _mrope_sections(rp: Mapping[str, Any], model_type: str) -> tuple[list[int], str] | None:
    """``(sections, sections_layout)`` of a multimodal RoPE config, None for a 1D one."""
    sections, interleaved = rp.get("mrope_section"), rp.get("mrope_interleaved")
    if sections is None:
        if model_type not in MROPE_DEFAULTS:
            if interleaved is not None:
                raise ValueError("the config sets mrope_interleaved but has no mrope_section; "
                                 "give mrope_section, e.g. [24, 20, 20]")
            return None
        sections, default_layout = MROPE_DEFAULTS[model_type]
    else:
        default_layout = MROPE_DEFAULTS.get(model_type, (None, "chunked"))[1]
    if interleaved is None:
        return list(sections), default_layout
    if not isinstance(interleaved, bool):
        raise TypeError(f"mrope_interleaved must be true or false, got {interleaved!r}")
    return list(sections), "interleaved" if interleaved else "chunked"


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


def _hf_rope_type(rp: Mapping[str, Any]) -> tuple[str, HFRopeType]:
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


def _rotary_parameters(rp: Mapping[str, Any], config: Any, family: HFFamily | None) -> dict[str, Any]:
    """``rp`` without what configures the attention rather than the rotary: the family's query
    temperature key (``Family.query_temperature``, Ministral 3's ``llama_4_scaling_beta``, read by
    :func:`hf_layer_specs`) and a copy of the config's ``max_position_embeddings`` (Ministral 3's rope
    parameters repeat it; transformers' rotary reads the top-level one: another value is refused)."""
    rp = dict(rp)
    temperature = family.query_temperature if family is not None else None
    if temperature is not None:
        rp.pop(temperature.key, None)
    if "max_position_embeddings" in rp and temperature is not None:
        copy, top = rp.pop("max_position_embeddings"), _get(config, "max_position_embeddings")
        if copy is not None and copy != top:
            raise ValueError(f"rope parameter 'max_position_embeddings' ({copy}) is not the config's "
                             f"max_position_embeddings ({top}); transformers' rotary reads the top-level one, so "
                             "posenc would ignore it: the config is refused")
    return rp


def _query_temperature(config: Any, layer_type: str | None) -> dict[str, Any] | None:
    """``rope``'s ``query_temperature`` of the family's attention (``Family.query_temperature``:
    Ministral 3's ``llama_4_scaling_beta``), or None."""
    config, model_type = _text_config(config)
    family = _family(model_type, config)
    temperature = family.query_temperature if family is not None else None
    if temperature is None:
        return None
    rp = _rope_parameters(config, layer_type, family)
    return None if rp.get(temperature.key) is None else temperature.spec(rp)


def _layer_rope_spec(config: Any, layer_type: str | None = None, layout: str | None = None) -> dict[str, Any]:
    """The rope of a decoder layer: :func:`hf_rope_spec`, with the family's query temperature."""
    spec = hf_rope_spec(config, layer_type=layer_type, layout=layout)
    temperature = _query_temperature(config, layer_type)
    return spec if temperature is None else {**spec, "query_temperature": temperature}


def _head_dim(config: Any, overrides: Mapping[str, Any]) -> int:
    """The rotary head width: a layer type's own ``head_dim`` (Gemma 4's ``per_layer_config``),
    MLA's ``qk_rope_head_dim`` (transformers sets ``head_dim`` to it), ``head_dim``, or
    ``hidden_size / num_attention_heads``."""
    head_dim = overrides.get("head_dim") or _get(config, "qk_rope_head_dim", _get(config, "head_dim"))
    if head_dim is None:
        hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("the config needs head_dim, or hidden_size and num_attention_heads")
        head_dim = check_int("hidden_size", hidden, min=1) // check_int("num_attention_heads", heads, min=1)
    return check_int("head_dim", head_dim, min=1)


def _rotary_width(config: Any, rp: Mapping[str, Any], family: HFFamily | None, head_dim: int, rope_type: str) -> int:
    """The rotated dims: ``partial_rotary_factor`` (of the rope parameters, else top-level, else
    GPT-NeoX's ``rotary_pct``, else the family's default) times ``head_dim`` as transformers rounds
    it (``int(head_dim · p)``; ``2·int(p·head_dim // 2)`` for ``proportional``), or the top-level
    ``rotary_dim`` of GPT-J and CodeGen (their models read it; in another family's config, read when it
    equals the factor's width (MiniMax-M3's model reads the factor), else refused)."""
    partial = rp.get("partial_rotary_factor")
    if partial is None:
        default = family.partial_rotary_factor if family is not None else 1.0
        partial = _get(config, "partial_rotary_factor", _get(config, "rotary_pct", default))
    partial = check_float("partial_rotary_factor", partial, min=0.0, min_open=True, max=1.0)
    rotary_dim = 2 * int(partial * head_dim // 2) if rope_type == "proportional" else int(head_dim * partial)
    given = _get(config, "rotary_dim")
    if given is not None and (family is None or family.table != "sin_cos_half_width"):
        if not (_has(config, "rope_parameters") and given == rotary_dim):  # MiniMax-M3's agreeing key: read
            raise ValueError(f"config key 'rotary_dim' = {given} is read for GPT-J and CodeGen (model types gptj, "
                             "codegen); in a config of another model type (MiniMax-M3's model reads "
                             f"partial_rotary_factor instead: head_dim * partial_rotary_factor = {head_dim} * {partial} "
                             f"= {rotary_dim}) posenc cannot tell which dims and pairs the model rotates unless the "
                             "two agree, so it is refused")
    if given is not None:
        given = check_int("rotary_dim", given, min=1, max=head_dim)
        if _has(config, "rope_parameters") and given != rotary_dim:  # MiniMax-M3: its model reads the factor
            raise ValueError(f"config key 'rotary_dim' = {given} disagrees with head_dim * partial_rotary_factor = "
                             f"{head_dim} * {partial} = {rotary_dim}; posenc.from_hf cannot tell which the model rotates")
        rotary_dim = given
    if rotary_dim % 2 or rotary_dim < 2:
        raise ValueError(f"head_dim * partial_rotary_factor = {head_dim} * {partial} gives rotary dimension "
                         f"{rotary_dim}; posenc needs an even rotary dimension >= 2")
    return rotary_dim


def hf_rope_spec(config: Any, *, layer_type: str | None = None, layout: str | None = None) -> dict[str, Any]:
    """The posenc spec (``{"scheme": "rope", ...}``, or ``"mrope"`` for a multimodal one) of a
    transformers config's RoPE: the rope type's row of ``HF_ROPE_TYPES`` reads its parameters.

    Args:
        config: a transformers config object or its dict (``config.json``), new or legacy style.
        layer_type: for configs with one RoPE per layer type (Gemma 3, Gemma 4: ``"sliding_attention"``
            or ``"full_attention"``; :func:`rope_layer_types` lists them).
        layout: the pairs the model rotates: ``"half"`` (transformers' ``rotate_half``) or
            ``"interleaved"`` (GPT-J/GLM/Cohere/Llama 4-style ``rotate_every_two``). None (the
            default): the family's (``HF_FAMILIES``; DeepSeek-V3: ``"interleaved"`` when
            ``rope_interleave`` is true), ``"half"`` for a model type not listed. Pass it when the
            q/k weights were permuted (``interleaved_to_half``).

    Raises:
        ValueError: a rope-parameter key transformers does not define for the rope type, or a
            top-level rope/rotary key this function does not read (named in the message).
    """
    config, model_type = _text_config(config)
    family = _family(model_type, config)
    row = FAMILIES.get(model_type)
    if row is not None and row.positions != "rope":
        raise ValueError(f"model type {model_type!r} has no RoPE (its own encoding: {row.positions}); "
                         "hf_layer_specs(config) gives it as posenc specs")
    _check_top_level_keys(config)
    rp = _rotary_parameters(_rope_parameters(config, layer_type, family), config, family)
    rope_type, row = _hf_rope_type(rp)
    if layout is None:
        layout = family.layout if family is not None else "half"
        if family is not None and family.interleave_key is not None:
            layout = "interleaved" if _get(config, family.interleave_key, True) else "half"
    elif layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half', 'interleaved' or None; got {layout!r}")
    base = rp.get("rope_theta")
    if base is None:  # GPT-NeoX's legacy names: rotary_emb_base, rotary_pct
        default = _get(config, "default_theta", 10000.0)
        default = default if isinstance(default, (int, float)) else 10000.0  # Gemma 3's is a dict per layer kind
        base = _get(config, "rope_theta", _get(config, "rotary_emb_base", default))
    bases = {float(t) for t in _get(config, "layer_rope_theta", ()) if t}  # Granite SWA: a base per layer (0: NoPE)
    if bases - {float(base)}:
        raise ValueError(f"config key 'layer_rope_theta' gives the layers their own bases {sorted(bases)} (0: no "
                         "RoPE); from_hf gives one rope: hf_layer_specs(config) reads them, one spec per layer")
    head_dim = _head_dim(config, _layer_overrides(config, layer_type))
    read = row.read(rp, config)
    rotary_dim = _rotary_width(config, rp, family, head_dim, rope_type)
    spec = {"scheme": "rope", "head_dim": head_dim, "base": float(base), "rotary_dim": rotary_dim, "layout": layout,
            **read}
    if family is not None and family.direction != "counterclockwise":  # NanoChat: its apply turns clockwise
        spec["direction"] = family.direction
    multimodal = _mrope_sections(rp, model_type)
    if multimodal is not None:
        if "partial_rotary" in spec:
            raise ValueError(f"rope type {rope_type!r} with mrope_section: posenc's mrope has no p-RoPE")
        spec.update(scheme="mrope", sections=multimodal[0], sections_layout=multimodal[1])
    return spec


def from_hf(config: Any, *, layer_type: str | None = None, layout: str | None = None):
    """The posenc ``rope`` module (``mrope`` for Qwen2-VL/Qwen3-VL) that reproduces a
    transformers model's rotary embedding.

    ``module.cos_sin(positions)`` times ``module.attention_factor`` equals the model's
    ``rotary_emb(x, position_ids)`` (first ``rotary_dim/2`` columns), with the angles computed
    in float64 instead of float32. See :func:`hf_rope_spec` for the arguments; a config with one
    RoPE per layer type (Gemma 3) needs ``layer_type=`` (or :meth:`HFRotaryEmbedding.from_config`).

    ``partial_rotary_factor`` is honoured as transformers' scaled rope types and partial-rotary
    models (GPT-NeoX, Phi, StableLM) honour it (frequencies over the rotated width); Llama's own
    default RoPE ignores it. Rope type ``proportional`` honours it as p-RoPE does (frequencies
    over the whole head, zero past the factor: ``partial_rotary="proportional"``).

    The module's ``hf_table`` names the table the family's rotary module returns (one of
    ``HF_TABLES``; None for a model type not in ``HF_FAMILIES``): ``HFRotaryEmbedding`` returns it.
    Its ``hf_apply_direction`` is the way the family's ``apply_rotary_pos_emb`` turns pairs by that
    table's angles (``Family.direction``): NanoChat's turns them clockwise, so its rope is
    ``direction="clockwise"`` and ``HFRotaryEmbedding`` hands NanoChat's apply the table its own
    rotary returns.

    A transformers config object (not a dict) is checked: the rotary class of its own modeling
    module, built from it, is compared at a few positions with ``HFRotaryEmbedding(module)``
    (``posenc.interop.families.check``); a difference (Cohere-style interleaved pairs read as
    ``"half"``, another base or scaling) is a ValueError naming the family, never a silently
    different model.
    """
    module = _read_rope(config, layer_type, layout)  # bases that differ between layers: refused there, by name
    if _get(_text_config(config)[0], "layer_rope_theta") is not None:
        raise ValueError("config key 'layer_rope_theta' (Granite SWA): the model runs one rotary per base of its "
                         "layers (rotary_embs) and leaves its rotary_emb unused, so HFRotaryEmbedding(from_hf(config)) "
                         "placed there would have no effect; use posenc.interop.patch(model, pe), which puts pe "
                         "into each layer, and hf_layer_specs(config) for the model's own bases")
    if layout is None:  # the family's own reading: checked against its modeling module's rotary
        from posenc.interop.families.check import check_from_hf

        check_from_hf(config, module, layer_type, HFRotaryEmbedding)
    return module


def _read_rope(config: Any, layer_type: str | None = None, layout: str | None = None):
    """:func:`from_hf`'s module, unchecked: what ``patch`` compares each of the model's own rotaries with."""
    from posenc.registry import build

    module = build(hf_rope_spec(config, layer_type=layer_type, layout=layout))
    family = _family(_text_config(config)[1], _text_config(config)[0])
    module.hf_table = family.table if family is not None else None
    module.hf_apply_direction = family.direction if family is not None else None
    return module


def _layer_types(config: Any, num_layers: int) -> list[str]:
    """``layer_types``, or Gemma 3's legacy ``sliding_window_pattern`` (every n-th layer global)."""
    types = _get(config, "layer_types")
    if types is None:
        pattern = check_int("sliding_window_pattern", _get(config, "sliding_window_pattern", 6), min=1)
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if len(types) != num_layers:
        raise ValueError(f"layer_types has {len(types)} entries; the config has num_hidden_layers={num_layers}")
    return list(types)


def hf_layer_specs(config: Any, *, layout: str | None = None) -> list[dict[str, Any]]:
    """One posenc spec per decoder layer of a transformers config, in layer order
    (``len == num_hidden_layers``), each one ``posenc.build`` takes: a per-layer pattern like the
    benchmark's.

    - one RoPE for every layer: ``[hf_rope_spec(config)] * num_hidden_layers``;
    - one RoPE per layer type (Gemma 3): layer ``i`` gets the spec of ``layer_types[i]``
      (``sliding_window_pattern`` when the config has no ``layer_types``), ``{"scheme": "nope"}``
      for a type whose rope parameters are None;
    - ``no_rope_layers`` (Llama 4, SmolLM3: 1 = RoPE, 0 = none; Llama 4's ``no_rope_layer_interval``,
      default 4, when absent): a layer without RoPE is ``{"scheme": "nope_temperature",
      "attn_scale": ..., "floor_scale": ...}`` when ``attn_temperature_tuning`` is true (Llama 4's
      default), else ``{"scheme": "nope"}``.

    - a family whose full-attention layers have no RoPE when it has sliding windows (Cohere 2,
      Flint, EXAONE 4: ``Family.nope_layers``): ``{"scheme": "nope"}`` on those layers.
    - ``layer_rope_theta`` (Granite SWA): layer ``i`` gets the rope with base ``layer_rope_theta[i]``,
      ``{"scheme": "nope"}`` where it is 0.
    - a query temperature of the family's attention (``Family.query_temperature``): Ministral 3's
      ``llama_4_scaling_beta`` β gives every rope layer ``query_temperature={"attn_scale": β,
      "floor_scale": original_max_position_embeddings, "position_offset": 0}`` (its queries times
      ``1 + β·log(1 + ⌊p / L₀⌋)``); :func:`from_hf` gives the rotary alone.
    - a family without RoPE (its record's ``own_spec``): GPT-2's learned table as
      ``{"scheme": "learned", "d_model": ..., "max_positions": ...}`` (``patch`` starts it from the
      model's table), BLOOM's ALiBi as ``{"scheme": "alibi", "num_heads": ...}``.

    Masks (Gemma 3's sliding windows, Llama 4's chunked attention) stay the model's.
    """
    text, model_type = _text_config(config)
    family = _family(model_type, text)
    num_layers = check_int("num_hidden_layers", _get(text, "num_hidden_layers"), min=1)
    row = FAMILIES.get(model_type)
    if row is not None and row.own_spec is not None:  # no RoPE: GPT-2's learned table, BLOOM's ALiBi
        return [row.own_spec(text) for _ in range(num_layers)]
    types = rope_layer_types(config)
    if types:
        by_type = {t: _layer_rope_spec(config, t, layout) for t in types}
        return [dict(by_type.get(t, {"scheme": "nope"})) for t in _layer_types(text, num_layers)]
    bases = _get(text, "layer_rope_theta")
    if bases is not None:  # Granite SWA: layer i's base, 0 for no RoPE
        if len(bases) != num_layers:
            raise ValueError(f"layer_rope_theta has {len(bases)} entries; the config has num_hidden_layers={num_layers}")
        one = {k: v for k, v in (text.items() if isinstance(text, Mapping) else text.to_dict().items())
               if k != "layer_rope_theta"}
        return [{**_layer_rope_spec(one, layout=layout), "base": float(b)} if b else {"scheme": "nope"} for b in bases]
    rope = _layer_rope_spec(config, layout=layout)
    use_rope = _get(text, "no_rope_layers")
    nope_family = family is not None and family.nope_temperature
    if use_rope is None and nope_family:
        interval = check_int("no_rope_layer_interval", _get(text, "no_rope_layer_interval", 4), min=1)
        use_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if use_rope is None and row is not None and row.nope_layers and _get(text, "sliding_window") is not None:
        use_rope = [int(t not in row.nope_layers) for t in _layer_types(text, num_layers)]  # Cohere 2, Flint, EXAONE 4
    if use_rope is None:
        return [dict(rope) for _ in range(num_layers)]
    use_rope = list(use_rope)
    if len(use_rope) != num_layers or any(u not in (0, 1) for u in use_rope):
        raise ValueError(f"no_rope_layers must be {num_layers} entries (num_hidden_layers), each 0 (no RoPE) "
                         f"or 1 (RoPE); got {use_rope!r}")
    tuning = _get(text, "attn_temperature_tuning", nope_family)
    if not isinstance(tuning, bool):
        raise TypeError(f"attn_temperature_tuning must be true or false, got {tuning!r}")
    nope: dict[str, Any] = {"scheme": "nope"}
    if tuning:
        nope = {"scheme": "nope_temperature",
                "attn_scale": check_float("attn_scale", _get(text, "attn_scale", 0.1), min=0.0),
                "floor_scale": check_float("floor_scale", _get(text, "floor_scale", 8192), min=0.0, min_open=True)}
    return [dict(rope) if u else dict(nope) for u in use_rope]


def _length_rule(rope: nn.Module) -> tuple[str, int] | None:
    """``(scaling type, original length)`` of a rope whose frequencies depend on the length."""
    scaling = rope.spec.get("scaling") or {}
    if scaling.get("type") in ("longrope", "dynamic"):
        return scaling["type"], int(scaling["original_max_positions"])
    return None


class HFRotaryEmbedding(nn.Module):
    """posenc ``rope``/``mrope`` modules with the interface of transformers' ``*RotaryEmbedding``.

    ``forward(x, position_ids, layer_type=None)`` returns the family's table (``table``, one of
    ``HF_TABLES``) with the attention factor applied, in ``x``'s dtype (complex64, or complex128
    for a float64 ``x``, for ``"complex"``): ``cos, sin [B, L, rotary_dim]`` with each half-table
    repeated as ``rotate_half`` expects (``"rotate_half"``, the default for a ``"half"`` module;
    ``"interleaved"``, the default for an interleaved one), ``[B, L, rotary_dim/2]`` for
    ``"half_width"`` (GPT-OSS), ``sin, cos [B, L, rotary_dim/2]`` (that order) for
    ``"sin_cos_half_width"`` (GPT-J, CodeGen), one complex ``freqs_cis [B, L, rotary_dim/2]`` for ``"complex"``
    (Llama 4). A module from :func:`from_hf` carries its family's table (``rope.hf_table``), so
    ``HFRotaryEmbedding(from_hf(config))`` fits that family's model.

    ``apply_direction``: the way the model's ``apply_rotary_pos_emb`` turns each pair by the table's
    angles (``posenc.rotary.DIRECTIONS``): ``"counterclockwise"`` (transformers' ``rotate_half``)
    or ``"clockwise"`` (NanoChat's), so the table holds the rope's angles, negated for a clockwise
    apply, and the model turns each pair by the rope's own angle (its ``direction=`` included).
    Default: the module's family's (``rope.hf_apply_direction`` from :func:`from_hf`), else
    counterclockwise.

    ``rope`` is one module, or a mapping layer type -> module (Gemma 3): then ``forward`` needs
    ``layer_type``, as transformers' ``Gemma3RotaryEmbedding.forward(x, position_ids, layer_type)``.
    :meth:`from_config` builds either from a config.

    ``position_ids`` is ``[B, L]`` for ``rope``; for ``mrope`` it is transformers' ``[3, B, L]``
    (time, height, width: what Qwen2-VL's ``get_rope_index`` returns) or ``[B, L]`` (text: three
    equal positions, as transformers expands it).

    **Length-dependent scalings follow transformers**, call by call: LongRoPE (Phi-3) uses the long
    factors when the call's ``max(position_ids) + 1`` exceeds the original length and the short ones
    otherwise (so a short call after a long one is back on the short factors, without
    ``reset_length()``); dynamic NTK grows with the longest call and goes back to the original
    frequencies when a call is shorter than the original length.

    Assign it where the model keeps its rotary (``HF_FAMILIES[model_type].rotary``)::

        model.model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))      # Llama, GPT-OSS, Llama 4
        model.gpt_neox.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))   # GPT-NeoX / Pythia
        model.transformer.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))  # Falcon
        model.model.rotary_emb = HFRotaryEmbedding.from_config(model.config)           # Gemma 3: per layer type
        model.model.language_model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))  # Qwen2-VL
    """

    def __init__(self, rope: nn.Module | Mapping[str, nn.Module], *, table: str | None = None,
                 apply_direction: str | None = None) -> None:
        super().__init__()
        ropes = dict(rope) if isinstance(rope, Mapping) else {None: rope}
        if not ropes:
            raise ValueError("HFRotaryEmbedding needs a rope module or a non-empty mapping layer type -> rope")
        for name, module in ropes.items():
            if getattr(module, "name", None) not in ("rope", "mrope"):
                raise TypeError(f"HFRotaryEmbedding needs a posenc 'rope' module (or 'mrope'), got "
                                f"{type(module).__name__}" + (f" for layer type {name!r}" if name else ""))
            if module.scaling.decay is not None:
                raise ValueError("xpos scales queries and keys differently; transformers' rotary interface "
                                 "(one cos/sin for both) cannot express it")
            if getattr(module, "query_temperature", None) is not None:
                raise ValueError("a rope with a query_temperature scales the queries only; transformers' rotary "
                                 "interface (one cos/sin for q and k) cannot express it (Ministral 3's attention "
                                 "applies its own: from_hf(config) gives its rotary alone)")
        first = next(iter(ropes.values()))
        if table is None:
            table = getattr(first, "hf_table", None) or ("rotate_half" if first.layout == "half" else "interleaved")
        if table not in HF_TABLES:
            raise ValueError(f"table must be one of {', '.join(map(repr, HF_TABLES))}; got {table!r}")
        if table == "complex" and any(m.name != "rope" for m in ropes.values()):
            raise ValueError("table 'complex' (Llama 4's freqs_cis) takes a 1D 'rope' module")
        if apply_direction is None:
            apply_direction = getattr(first, "hf_apply_direction", None) or "counterclockwise"
        self.table = table
        self.apply_direction = check_choice("apply_direction", apply_direction, DIRECTIONS)
        if None in ropes:
            self.rope = first
            self.layer_types: list[str] = []
        else:
            self.rope = None
            self.ropes = nn.ModuleDict({str(k): m for k, m in ropes.items()})
            self.layer_types = sorted(self.ropes)

    @classmethod
    def from_config(cls, config: Any, *, layout: str | None = None, table: str | None = None) -> HFRotaryEmbedding:
        """The rotary of a transformers config: one rope (:func:`from_hf`), or one per layer type
        (:func:`rope_layer_types`, Gemma 3), with the family's table."""
        types = rope_layer_types(config)
        if types:
            return cls({t: from_hf(config, layer_type=t, layout=layout) for t in types}, table=table)
        return cls(from_hf(config, layout=layout), table=table)

    def _rope(self, layer_type: str | None) -> nn.Module:
        if self.rope is not None:
            if layer_type is not None:
                raise ValueError(f"layer_type={layer_type!r} given, but this HFRotaryEmbedding has one rope for "
                                 "every layer (build it from a mapping layer type -> rope)")
            return self.rope
        if layer_type is None:
            raise ValueError(f"this HFRotaryEmbedding has one rope per layer type ({', '.join(self.layer_types)}); "
                             "pass layer_type")
        if layer_type not in self.ropes:
            raise ValueError(f"layer_type must be one of {', '.join(map(repr, self.layer_types))}; got {layer_type!r}")
        return self.ropes[layer_type]

    @property
    def attention_scaling(self) -> float:
        if self.rope is None:
            raise ValueError("this HFRotaryEmbedding has one rope per layer type; read "
                             "module.ropes[layer_type].attention_factor")
        return self.rope.attention_factor

    def _positions(self, rope: nn.Module, position_ids: torch.Tensor) -> torch.Tensor:
        """transformers' position ids as the posenc module's positions (``[B, L, 3]`` for mrope)."""
        if not isinstance(position_ids, torch.Tensor):
            raise TypeError(f"position_ids must be a torch.Tensor, got {type(position_ids).__name__}")
        if rope.name == "rope":
            if position_ids.dim() == 3:  # (3, B, L): text has three equal rows (Qwen 3.5's text model)
                if position_ids.shape[0] == 3 and all(torch.equal(position_ids[0], r) for r in position_ids[1:]):
                    return position_ids[0]
                raise ValueError(f"position_ids of shape {list(position_ids.shape)} are multimodal ([3, B, L]) with "
                                 "rows that differ (image or video tokens); this module is a 1D 'rope': build an "
                                 "'mrope' one (from_hf of a Qwen2-VL/Qwen3-VL config) or pass [B, L]")
            return position_ids
        if position_ids.dim() == 2:  # text: (B, L) -> (B, L, 3), as transformers expands it
            return text_positions(position_ids, rope.axes)
        if position_ids.dim() == 3 and position_ids.shape[0] == 3:
            return position_ids.permute(1, 2, 0)  # (3, B, L) -> (B, L, 3)
        raise ValueError(f"position_ids must have shape [3, B, L] (time, height, width) or [B, L] (text) for an "
                         f"mrope module, got shape {list(position_ids.shape)}")

    @staticmethod
    def _follow_length(rope: nn.Module, position_ids: torch.Tensor) -> None:
        """transformers' ``dynamic_rope_update``: the frequencies of this call's length."""
        rule = _length_rule(rope)
        if rule is None or position_ids.numel() == 0:
            return
        kind, original = rule
        if kind == "longrope" or int(position_ids.max()) + 1 < original:
            rope.reset_length()  # the call's own length decides (longrope); dynamic: back to L0's frequencies

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
        rope = self._rope(layer_type)
        positions = self._positions(rope, position_ids)
        self._follow_length(rope, position_ids)
        cos, sin = rope.cos_sin(positions, torch.float64)  # (B, L, R/2) float64
        factor = rope.attention_factor
        cos, sin = cos * factor, sin * factor
        if self.apply_direction == "clockwise":  # the model's apply turns by minus the table's angles
            sin = -sin
        if self.table == "complex":
            dtype = torch.complex128 if x.dtype == torch.float64 else torch.complex64
            return torch.complex(cos, sin).to(device=x.device, dtype=dtype)  # (B, L, R/2) freqs_cis
        if self.table == "rotate_half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (B, L, R)
        elif self.table == "interleaved":
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)  # (B, L, R)
        elif self.table == "sin_cos_half_width":  # GPT-J, CodeGen: (sin, cos), each (B, L, R/2)
            return sin.to(device=x.device, dtype=x.dtype), cos.to(device=x.device, dtype=x.dtype)
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)
