"""GPT-2: a learned absolute table (``transformer.wpe [n_positions, n_embd]``) added to the token
embeddings, and attention layers that call transformers' attention interface with no rotary.

While patched the table returns zeros (:class:`ZeroTable`: ``GPT2Model`` still adds it, now
nothing), and the model's own table comes back on ``unpatch``. Its own encoding as a posenc spec
(``hf_layer_specs``) is ``{"scheme": "learned", "d_model": n_embd, "max_positions": n_positions}``:
``patch`` starts a ``learned`` module of the table's size from the model's table, so
``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ZeroTable(nn.Module):
    """A learned position table that adds nothing: ``forward(positions) -> zeros [.., C]`` in the
    table's dtype. Holds the original (not as a submodule: its parameters are the model's)."""

    def __init__(self, original: nn.Embedding) -> None:
        super().__init__()
        self.__dict__["original"] = original

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        w = self.original.weight
        return w.new_zeros((*positions.shape, w.shape[1]))  # (..., C)


def _get(config: Any, *names: str) -> int:
    for name in names:
        value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ValueError(f"the config needs {' or '.join(names)}")


def own_spec(config: Any) -> dict[str, Any]:
    """The learned table of a GPT-2 config (object or ``config.json`` dict) as a posenc ``learned`` spec."""
    return {"scheme": "learned", "d_model": _get(config, "hidden_size", "n_embd"),
            "max_positions": _get(config, "max_position_embeddings", "n_positions")}


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, layers="transformer.h", attention="attn", embeddings="wte", positions="learned",
                  table_attr="wpe", own_spec=own_spec)
