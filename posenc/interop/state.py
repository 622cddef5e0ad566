"""What ``posenc.interop.patch`` keeps on each attention layer it patches: one :class:`LayerState`,
``layer_state(attention)`` (an instance attribute, not a submodule: the layer's parameters and
``state_dict`` are the model's own). Beside it the layer holds its scheme as ``posenc_pe`` (the
public name; None for no position in attention). ``unpatch`` removes both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

STATE = "posenc_layer"  # the attention module's attribute that holds its LayerState


@dataclass(eq=False)
class LayerState:
    """One patched attention layer's state.

    - ``positions``: where the decoder's call records its ``position_ids`` and its ``step`` (the
      forward calls so far): the neutralised rotary, or a decoder pre-hook for a family without one;
    - ``attention``: the attention function a family's own ``forward`` calls (Falcon, BLOOM, MPT,
      GPT-Neo, OpenAI GPT: ``posenc.interop.patching.attention_function.posenc_attention``);
    - ``rope_part``: multi-head latent attention's ``(rope width, interleaved)``, or None;
    - ``context_parallel``, ``shard_padding``: ``patch(..., context_parallel=)``'s method and the
      shard's key padding recorder;
    - ``key_positions``, ``hidden`` (and the ``step`` each was last appended at): every key's
      positions (and layer inputs, for a scheme that reads them) kept across cached calls;
      ``input``: this call's layer input (``hidden_states``)."""

    positions: Any = None
    attention: Callable | None = None
    rope_part: tuple[int, bool] | None = None
    context_parallel: str | None = None
    shard_padding: Any = None
    key_positions: Any = None
    key_positions_step: int | None = None
    hidden: Any = None
    hidden_step: int | None = None
    input: Any = None


def layer_state(module: nn.Module) -> LayerState | None:
    """The :class:`LayerState` of a patched attention layer, None for one ``patch`` did not change."""
    return module.__dict__.get(STATE)
