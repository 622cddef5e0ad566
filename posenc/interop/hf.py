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

rope types: ``default``, ``linear``, ``dynamic`` (its original length is
``max_position_embeddings``), ``yarn``, ``longrope``, ``llama3``, the ones transformers'
``ROPE_INIT_FUNCTIONS`` and Llama-style models define. Values transformers only warns about
(a factor below 1, LongRoPE lists of the wrong length, ...) raise ``ValueError`` here.

**Multimodal RoPE** (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): a config whose rope parameters carry
``mrope_section`` gives an ``mrope`` module, with ``sections_layout="interleaved"`` when
``mrope_interleaved`` is true (Qwen3-VL's config.json) and ``"chunked"`` when it is false or
absent. A config of one of these model types without ``mrope_section`` gets the sections and
layout transformers' rotary class falls back to (``MROPE_DEFAULTS``). A config whose rope
parameters live in ``text_config`` (the composite ``Qwen2VLConfig``/``Qwen3VLConfig``, Qwen3-VL's
config.json) is read there. ``rope_type: "mrope"`` (Qwen2-VL's legacy name) is ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from posenc._validate import check_float, check_int
from posenc.positions import text_positions

HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
_ALIASES = {"su": "longrope", "mrope": "default"}  # early Phi-3's LongRoPE; Qwen2-VL's legacy "type"
MROPE_DEFAULTS = {
    "qwen2_vl": ([16, 24, 24], "chunked"),
    "qwen2_5_vl": ([16, 24, 24], "chunked"),
    "qwen3_vl": ([24, 20, 20], "interleaved"),
    "qwen3_vl_moe": ([24, 20, 20], "interleaved"),
}
"""model type -> (sections, sections_layout) that transformers' text rotary class of that model
uses when the config has no ``mrope_section`` (and whether it interleaves them)."""
_MISSING = object()


def _get(config: Any, name: str, default: Any = None) -> Any:
    """A field of a config object or dict (``default`` when absent or None)."""
    value = config.get(name, _MISSING) if isinstance(config, Mapping) else getattr(config, name, _MISSING)
    return default if value is _MISSING or value is None else value


def _has(config: Any, name: str) -> bool:
    if isinstance(config, Mapping):
        return config.get(name) is not None
    return getattr(config, name, None) is not None


def _rope_parameters(config: Any, layer_type: str | None) -> dict[str, Any]:
    """The flat rope-parameter dict of ``config`` (of ``layer_type`` when it is nested per layer)."""
    # transformers: `rope_scaling` (legacy) wins over `rope_parameters` when both are given
    params = _get(config, "rope_scaling") or _get(config, "rope_parameters") or {}
    if not isinstance(params, Mapping):
        raise TypeError(f"rope_parameters must be a dict, got {params!r}")
    labels = set(_get(config, "_rope_type_labels") or _get(config, "layer_types") or ())
    nested = [k for k, v in params.items() if isinstance(v, Mapping) or k in labels]
    if nested:
        if layer_type is None:
            raise ValueError(f"this config has one RoPE per layer type ({', '.join(map(repr, nested))}); "
                             "pass layer_type=... to from_hf")
        if layer_type not in nested:
            raise ValueError(f"layer_type must be one of {', '.join(map(repr, nested))}; got {layer_type!r}")
        if params[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no RoPE (its rope_parameters are None)")
        params = params[layer_type]
    elif layer_type is not None:
        raise ValueError(f"layer_type={layer_type!r} given, but the config's RoPE is not per layer type")
    return dict(params)


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
    without rope fields of its own) and the model type to read defaults by."""
    own = any(_has(config, k) for k in ("rope_parameters", "rope_scaling", "rope_theta", "head_dim", "hidden_size"))
    if not own and _has(config, "text_config"):
        text = _get(config, "text_config")
        return text, _model_type(text) or _model_type(config)
    return config, _model_type(config)


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


def hf_rope_spec(config: Any, *, layer_type: str | None = None, layout: str = "half") -> dict[str, Any]:
    """The posenc spec (``{"scheme": "rope", ...}``, or ``"mrope"`` for a multimodal one) of a
    transformers config's RoPE.

    Args:
        config: a transformers config object or its dict (``config.json``), new or legacy style.
        layer_type: for configs with one RoPE per layer type (e.g. ``"sliding_attention"``).
        layout: ``"half"`` (transformers' ``rotate_half``, the default) or ``"interleaved"``
            (GPT-J/GLM-style ``rotate_every_two``); the config does not say which.
    """
    config, model_type = _text_config(config)
    rp = _rope_parameters(config, layer_type)
    rope_type = rp.get("rope_type") or rp.get("type") or "default"
    rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in HF_ROPE_TYPES:
        raise ValueError(f"rope type must be one of {', '.join(map(repr, HF_ROPE_TYPES))}; got {rope_type!r}")

    base = rp.get("rope_theta")
    if base is None:  # GPT-NeoX's legacy names: rotary_emb_base, rotary_pct
        base = _get(config, "rope_theta", _get(config, "rotary_emb_base", _get(config, "default_theta", 10000.0)))
    partial = rp.get("partial_rotary_factor")
    if partial is None:
        partial = _get(config, "partial_rotary_factor", _get(config, "rotary_pct", 1.0))
    head_dim = _get(config, "head_dim")
    if head_dim is None:
        hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("the config needs head_dim, or hidden_size and num_attention_heads")
        head_dim = check_int("hidden_size", hidden, min=1) // check_int("num_attention_heads", heads, min=1)
    head_dim = check_int("head_dim", head_dim, min=1)
    partial = check_float("partial_rotary_factor", partial, min=0.0, min_open=True, max=1.0)
    rotary_dim = int(head_dim * partial)
    if rotary_dim % 2 or rotary_dim < 2:
        raise ValueError(f"head_dim * partial_rotary_factor = {head_dim} * {partial} gives rotary dimension "
                         f"{rotary_dim}; posenc needs an even rotary dimension >= 2")
    max_positions = _get(config, "max_position_embeddings")
    original = None
    if rope_type in ("llama3", "yarn", "longrope"):
        # transformers: a top-level original_max_position_embeddings (Phi-3) wins, then the
        # rope parameters' own, then max_position_embeddings
        if _has(config, "original_max_position_embeddings"):
            original = _get(config, "original_max_position_embeddings")
        else:
            original = rp.get("original_max_position_embeddings") or max_positions
        if original is None:
            raise ValueError(f"rope type {rope_type!r} needs original_max_position_embeddings "
                             "(or max_position_embeddings) in the config")

    scaling: dict[str, Any] | None
    if rope_type == "default":
        scaling = None
    elif rope_type == "linear":
        _require(rp, rope_type, "factor")
        scaling = {"type": "linear", "factor": rp["factor"]}
    elif rope_type == "dynamic":
        _require(rp, rope_type, "factor")
        if max_positions is None:
            raise ValueError("rope type 'dynamic' needs max_position_embeddings in the config")
        scaling = {"type": "dynamic", "factor": rp["factor"], "original_max_positions": max_positions}
    elif rope_type == "yarn":
        factor = rp.get("factor")
        if factor is None:  # DeepSeek-V3 style: the ratio of the two lengths
            if max_positions is None:
                raise ValueError("rope type 'yarn' needs factor (or max_position_embeddings) in the config")
            factor = max_positions / original
        scaling = {"type": "yarn", "factor": factor, "original_max_positions": original,
                   "beta_fast": rp.get("beta_fast") or 32.0, "beta_slow": rp.get("beta_slow") or 1.0,
                   "truncate": rp.get("truncate", True)}
        if rp.get("attention_factor") is not None:
            scaling["attention_factor"] = rp["attention_factor"]
        elif rp.get("mscale") and rp.get("mscale_all_dim"):  # transformers uses the pair only when both are set
            scaling["mscale"], scaling["mscale_all_dim"] = rp["mscale"], rp["mscale_all_dim"]
    elif rope_type == "longrope":
        _require(rp, rope_type, "short_factor", "long_factor")
        factor = rp.get("factor")
        if factor is None:  # Phi-3: the ratio of the two lengths; at most 1 means no attention scaling
            if max_positions is None and rp.get("attention_factor") is None:
                raise ValueError("rope type 'longrope' needs factor (or max_position_embeddings) in the config")
            factor = max(1.0, (max_positions or original) / original)
        scaling = {"type": "longrope", "short_factor": list(rp["short_factor"]),
                   "long_factor": list(rp["long_factor"]), "factor": factor, "original_max_positions": original}
        if rp.get("attention_factor") is not None:
            scaling["attention_factor"] = rp["attention_factor"]
    else:  # llama3
        _require(rp, rope_type, "factor", "low_freq_factor", "high_freq_factor")
        scaling = {"type": "llama3", "factor": rp["factor"], "original_max_positions": original,
                   "low_freq_factor": rp["low_freq_factor"], "high_freq_factor": rp["high_freq_factor"]}
    multimodal = _mrope_sections(rp, model_type)
    if multimodal is not None:
        sections, sections_layout = multimodal
        return {"scheme": "mrope", "head_dim": head_dim, "sections": sections, "base": float(base),
                "rotary_dim": rotary_dim, "sections_layout": sections_layout, "layout": layout, "scaling": scaling}
    return {"scheme": "rope", "head_dim": head_dim, "base": float(base),
            "rotary_dim": rotary_dim, "layout": layout, "scaling": scaling}


def from_hf(config: Any, *, layer_type: str | None = None, layout: str = "half"):
    """The posenc ``rope`` module (``mrope`` for Qwen2-VL/Qwen3-VL) that reproduces a
    transformers model's rotary embedding.

    ``module.cos_sin(positions)`` times ``module.attention_factor`` equals the model's
    ``rotary_emb(x, position_ids)`` (first ``rotary_dim/2`` columns), with the angles computed
    in float64 instead of float32. See :func:`hf_rope_spec` for the arguments.

    ``partial_rotary_factor`` is honoured as transformers' scaled rope types and partial-rotary
    models (GPT-NeoX, Phi, StableLM) honour it; Llama's own default RoPE ignores it.
    """
    from posenc.registry import build

    return build(hf_rope_spec(config, layer_type=layer_type, layout=layout))


class HFRotaryEmbedding(nn.Module):
    """A posenc ``rope`` or ``mrope`` module with the interface of transformers' ``*RotaryEmbedding``.

    ``forward(x, position_ids) -> (cos, sin)``, each ``[B, L, rotary_dim]`` in ``x``'s dtype, with
    the attention factor applied and each half-table repeated as transformers' ``rotate_half``
    expects (interleaved for an interleaved module). ``position_ids`` is ``[B, L]`` for ``rope``;
    for ``mrope`` it is transformers' ``[3, B, L]`` (time, height, width: what Qwen2-VL's
    ``get_rope_index`` returns) or ``[B, L]`` (text: three equal positions, as transformers
    expands it). Assign it to the model's ``rotary_emb`` to run the model on posenc's
    float64-exact tables::

        model.model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))
        model.model.language_model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))  # Qwen2-VL
    """

    def __init__(self, rope: nn.Module) -> None:
        super().__init__()
        if getattr(rope, "name", None) not in ("rope", "mrope"):
            raise TypeError(f"HFRotaryEmbedding needs a posenc 'rope' module (or 'mrope'), got {type(rope).__name__}")
        if rope.scaling.decay is not None:
            raise ValueError("xpos scales queries and keys differently; transformers' rotary interface "
                             "(one cos/sin for both) cannot express it")
        self.rope = rope

    @property
    def attention_scaling(self) -> float:
        return self.rope.attention_factor

    def _positions(self, position_ids: torch.Tensor) -> torch.Tensor:
        """transformers' position ids as the posenc module's positions (``[B, L, 3]`` for mrope)."""
        if not isinstance(position_ids, torch.Tensor):
            raise TypeError(f"position_ids must be a torch.Tensor, got {type(position_ids).__name__}")
        if self.rope.name == "rope":
            if position_ids.dim() == 3:
                raise ValueError(f"position_ids of shape {list(position_ids.shape)} are multimodal ([3, B, L]); "
                                 "this module is a 1D 'rope': build an 'mrope' one (from_hf of a Qwen2-VL/Qwen3-VL "
                                 "config) or pass [B, L]")
            return position_ids
        if position_ids.dim() == 2:  # text: (B, L) -> (B, L, 3), as transformers expands it
            return text_positions(position_ids, self.rope.axes)
        if position_ids.dim() == 3 and position_ids.shape[0] == 3:
            return position_ids.permute(1, 2, 0)  # (3, B, L) -> (B, L, 3)
        raise ValueError(f"position_ids must have shape [3, B, L] (time, height, width) or [B, L] (text) for an "
                         f"mrope module, got shape {list(position_ids.shape)}")

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rope.cos_sin(self._positions(position_ids), torch.float64)  # (B, L, R) float64
        factor = self.rope.attention_factor
        if self.rope.layout == "half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        else:
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        return (cos * factor).to(device=x.device, dtype=x.dtype), (sin * factor).to(device=x.device, dtype=x.dtype)
