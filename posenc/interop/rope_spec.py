"""A transformers config's RoPE as a posenc spec: :func:`hf_rope_spec` (one layer type's, or the
model's), :func:`rope_layer_types`, and what they read on the way: the rope parameters (transformers
5's ``rope_parameters`` or the legacy ``rope_scaling`` with top-level ``rope_theta``), per layer type
(Gemma 3's legacy ``rope_local_base_freq``, Gemma 4's ``per_layer_config``), the rotary width
(``partial_rotary_factor``, ``rotary_pct``, GPT-J's ``rotary_dim``), multimodal RoPE's sections
(the family record's ``mrope`` where the config has no ``mrope_section``), a family's query
temperature (``Family.query_temperature``). The rope types themselves are
``posenc.interop.rope_types.HF_ROPE_TYPES``; the module built from the spec, checked against the
model, is ``posenc.interop.hf_rotary.from_hf``. ``posenc.interop.hf``'s docstring says what each
family's config holds.

``HF_FAMILIES``: the rows of ``posenc.interop.families.FAMILIES`` with a rotary module (model type ->
its :class:`~posenc.interop.families.Family`; a composite vision-language type names its text
model's rotary). A model type not listed is read as a Llama-style config, layout ``"half"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc._validate import check_float, check_int
from posenc.interop.configs import config_keys as _config_keys
from posenc.interop.configs import get as _get, has as _has, text_config_and_type as _text_config
from posenc.interop.families import FAMILIES, Family
from posenc.interop.families.record import _GEMMA3_THETAS
from posenc.interop.rope_types import _REFUSED_KEYS, _TOP_LEVEL_KEYS, hf_rope_type as _hf_rope_type

HF_FAMILIES: dict[str, Family] = {t: f for t, f in FAMILIES.items() if f.positions == "rope" and f.rotary}
"""model type -> its :class:`Family` (a composite vision-language type names its text model's
rotary). A model type not listed is read as a Llama-style config, layout ``"half"``."""


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


def _family(model_type: str, config: Any = None) -> Family | None:
    """The family's record: its row, or one found from the config's modeling module (MLA)."""
    from posenc.interop.families import family_of_config

    row = HF_FAMILIES.get(model_type)
    if row is not None or model_type in FAMILIES:
        return row
    return family_of_config(model_type, config)


def _legacy_layer_params(config: Any, params: Mapping[str, Any], family: Family | None) -> dict[str, Any] | None:
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


def _all_rope_parameters(config: Any, family: Family | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
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


def _rope_parameters(config: Any, layer_type: str | None, family: Family | None = None) -> dict[str, Any]:
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


def _mrope_sections(rp: Mapping[str, Any], model_type: str) -> tuple[list[int], str] | None:
    """``(sections, sections_layout)`` of a multimodal RoPE config, None for a 1D one. Where the
    config has no ``mrope_section``, the sections (and their layout) transformers' text rotary class
    of that model type falls back to: the ``mrope`` field of its row in ``FAMILIES``."""
    row = FAMILIES.get(model_type)
    default = None if row is None or row.mrope is None else (list(row.mrope[0]), row.mrope[1])
    sections, interleaved = rp.get("mrope_section"), rp.get("mrope_interleaved")
    if sections is None:
        if default is None:
            if interleaved is not None:
                raise ValueError("the config sets mrope_interleaved but has no mrope_section; "
                                 "give mrope_section, e.g. [24, 20, 20]")
            return None
        sections, default_layout = default
    else:
        default_layout = "chunked" if default is None else default[1]
    if interleaved is None:
        return list(sections), default_layout
    if not isinstance(interleaved, bool):
        raise TypeError(f"mrope_interleaved must be true or false, got {interleaved!r}")
    return list(sections), "interleaved" if interleaved else "chunked"


def _rotary_parameters(rp: Mapping[str, Any], config: Any, family: Family | None) -> dict[str, Any]:
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


def _rotary_width(config: Any, rp: Mapping[str, Any], family: Family | None, head_dim: int, rope_type: str) -> int:
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


def _read_rope(config: Any, layer_type: str | None = None, layout: str | None = None):
    """:func:`from_hf`'s module, unchecked: what ``patch`` compares each of the model's own rotaries with."""
    from posenc.registry import build

    module = build(hf_rope_spec(config, layer_type=layer_type, layout=layout))
    family = _family(_text_config(config)[1], _text_config(config)[0])
    module.hf_table = family.table if family is not None else None
    module.hf_apply_direction = family.direction if family is not None else None
    return module
