"""Reading transformers configs: what ``posenc.interop`` reads a model's config through.

- ``text_config(config)``: the config of the text decoder, the one whose sizes and rope parameters
  ``patch`` and the checks read (a vision-language config's ``text_config``, through transformers'
  own ``get_text_config``); the config itself for a text model or a dict. The one copy of this
  helper: ``patching``, ``families.structure``, ``families.check`` and ``families.found`` read it
  from here.
- ``get``, ``has``, ``config_keys``: a field of a config object or of its dict (``config.json``),
  read alike; ``text_config_and_type``: the config that holds the RoPE and the model type to read
  defaults by (``posenc.interop.rope_spec``, ``posenc.interop.hf``);
- ``layer_sizes(config, family, layer)``: a decoder layer's ``num_heads``, ``head_dim``,
  ``d_model``, the sizes ``patch`` builds a spec with.

transformers is never imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MISSING = object()


def text_config(config: Any) -> Any:
    """The config of ``config``'s text decoder (``config.get_text_config()``), or ``config``."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def get(config: Any, name: str, default: Any = None) -> Any:
    """A field of a config object or dict (``default`` when absent or None)."""
    value = config.get(name, _MISSING) if isinstance(config, Mapping) else getattr(config, name, _MISSING)
    return default if value is _MISSING or value is None else value


def has(config: Any, name: str) -> bool:
    if isinstance(config, Mapping):
        return config.get(name) is not None
    return getattr(config, name, None) is not None


def config_keys(config: Any) -> list[str]:
    """The top-level keys of a config dict, or the fields of a config object."""
    if isinstance(config, Mapping):
        return list(config)
    to_dict = getattr(config, "to_dict", None)
    return list(to_dict()) if callable(to_dict) else list(vars(config))


def model_type_of(config: Any) -> str:
    """``qwen2_vl`` for ``qwen2_vl`` and ``qwen2_vl_text`` (a composite config's text part)."""
    name = get(config, "model_type", "")
    name = name if isinstance(name, str) else ""
    return name[: -len("_text")] if name.endswith("_text") else name


def text_config_and_type(config: Any) -> tuple[Any, str]:
    """The config that holds the RoPE (``text_config`` of a composite vision-language config
    without rope fields of its own) and the model type to read defaults by. A config object with
    ``per_layer_config`` (Gemma 4, whose per-layer fields transformers refuses to read globally) is
    read as its dict."""
    own = any(has(config, k) for k in ("rope_parameters", "rope_scaling", "rope_theta", "head_dim", "hidden_size"))
    # a composite config whose own fields leave out the layers (Voxtral's hidden_size beside its text_config)
    if (not own or not has(config, "num_hidden_layers")) and has(config, "text_config"):
        text = get(config, "text_config")
        return as_read(text), model_type_of(text) or model_type_of(config)
    return as_read(config), model_type_of(config)


def as_read(config: Any) -> Any:
    """``config``, or its dict when it is an object with a non-empty ``per_layer_config``."""
    if isinstance(config, Mapping) or not callable(getattr(config, "to_dict", None)):
        return config
    as_dict = config.to_dict()
    return as_dict if as_dict.get("per_layer_config") else config


def layer_sizes(config: Any, family: Any, layer: int = 0) -> dict[str, int]:
    """The sizes of decoder layer ``layer``: a heterogeneous config's (Gemma 4, dots3: sizes per layer
    in ``per_layer_config``, whose global read transformers refuses) from that layer's view."""
    sub = getattr(family, "sub_config", None)  # SigLIP's vision tower: its vision_config
    config = text_config(config) if sub is None or getattr(config, sub, None) is None else getattr(config, sub)
    if getattr(config, "is_heterogeneous", False):
        config = config.per_layer_config[layer]
    heads = config.num_attention_heads
    if family.head_dim:  # DeepSeek-V3: q/k heads of qk_nope_head_dim + qk_rope_head_dim
        head_dim = sum(getattr(config, key) for key in family.head_dim)
    else:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"num_heads": heads, "head_dim": head_dim, "d_model": config.hidden_size}
