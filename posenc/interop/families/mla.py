"""Multi-head latent attention (MLA: DeepSeek-V2/V3 and the families built like it: AXK, GLM-4
MoE Lite, Youtu, LongCat-Flash, MiniCPM 3, ...) found from structure: a config with
``qk_nope_head_dim`` and ``qk_rope_head_dim`` (each q/k head is ``[nope part, rope part]``, the
rotary ``qk_rope_head_dim`` wide) and a modeling module whose attention rotates the rope part.

The pairs it rotates are read from the attention's own ``forward``: one that calls
``apply_rotary_pos_emb_interleave`` only if ``config.rope_interleave`` is set reads that key
(DeepSeek-V3, AXK-1), one that calls it unconditionally rotates pairs (2i, 2i+1) (AXK-2,
LongCat-Flash), one that calls only ``apply_rotary_pos_emb`` rotates (i, i + d/2) (MiniCPM 3). A
model type with a row of ``FAMILIES`` keeps its row."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from posenc.interop.families.record import Family


def _attention_source(config_module: str) -> str | None:
    """The source of the MLA attention's ``forward`` in the config's own modeling module, or None."""
    if not config_module.startswith("transformers.models.") or ".configuration_" not in config_module:
        return None
    try:
        modeling = importlib.import_module(config_module.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    for name, cls in vars(modeling).items():
        if not (isinstance(cls, type) and name.endswith("Attention") and cls.__module__ == modeling.__name__):
            continue
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            continue
        if "qk_rope_head_dim" in source or "q_rot" in source:
            return source
    return None


@functools.lru_cache(maxsize=None)
def _record(config_module: str) -> Family | None:
    source = _attention_source(config_module)
    if source is None:
        return None
    interleaved = "apply_rotary_pos_emb_interleave" in source
    key = "rope_interleave" if interleaved and "rope_interleave" in source else None
    return Family(layout="interleaved" if interleaved and key is None else "half", interleave_key=key,
                  head_dim=("qk_nope_head_dim", "qk_rope_head_dim"), rope_part="qk_rope_head_dim")


def mla_family(config: Any) -> Family | None:
    """The MLA record of a transformers config object without a row (None for a dict, a config
    without ``qk_nope_head_dim`` and ``qk_rope_head_dim``, or no MLA attention in its modeling module)."""
    if isinstance(config, dict):
        return None
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    if getattr(text, "qk_nope_head_dim", None) is None or getattr(text, "qk_rope_head_dim", None) is None:
        return None
    return _record(type(text).__module__)
