"""Ministral 3 (``ministral3``): Llama's decoder, YaRN, and a query temperature of its attention
outside the rotary, switched on by the rope parameter ``llama_4_scaling_beta``.

transformers 5.24's ``Ministral3Attention.forward`` rotates q and k, then multiplies the queries by
``get_llama_4_attn_scale(position_ids, β, L₀)``,

    τ(p) = 1 + β · log(1 + ⌊p / L₀⌋),   β = llama_4_scaling_beta,  L₀ = original_max_position_embeddings

(both read from ``config.rope_parameters``), on every layer, at ``position_ids`` (a left-padded row
counts from its first token, as posenc's positions do). It is Llama 4's attention temperature
tuning (``nope_temperature``: ``1 + attn_scale · log(1 + ⌊(p + 1) / floor_scale⌋)``) with two
differences: it counts ``p`` where Llama 4 counts ``p + 1`` (τ first leaves 1 at ``p = L₀``, one
position later than Llama 4's at ``floor_scale − 1``), and it scales the RoPE layers' queries where
Llama 4 scales its NoPE layers'. posenc gives it as ``rope``'s ``query_temperature={"attn_scale":
β, "floor_scale": L₀, "position_offset": 0}`` (``hf_layer_specs``); ``from_hf`` gives the rotary
alone, which the drop-in ``HFRotaryEmbedding`` replaces while the model keeps its temperature.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from posenc.interop.families.record import Family, QueryTemperature

KEY = "llama_4_scaling_beta"


def _spec(rope_parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``rope``'s ``query_temperature`` of the rope parameters (β and L₀ as the model reads them)."""
    original = rope_parameters.get("original_max_position_embeddings")
    if original is None:
        raise ValueError(f"rope parameter {KEY!r} needs 'original_max_position_embeddings' in the same rope "
                         "parameters (Ministral 3's attention divides the position by it)")
    return {"attn_scale": rope_parameters[KEY], "floor_scale": original, "position_offset": 0}


def _model_scale(attention: Any, positions: Any) -> Any:
    """The model's own ``τ [L]`` at ``positions [1, L]``: its modeling module's ``get_llama_4_attn_scale``
    with the parameters its attention reads."""
    modeling = sys.modules[type(attention).__module__]
    rp = attention.config.rope_parameters
    return modeling.get_llama_4_attn_scale(positions, rp.get(KEY), rp.get("original_max_position_embeddings"))[0, 0, :, 0]


def _family() -> Family:
    return Family(query_temperature=QueryTemperature(KEY, _spec, _model_scale))
