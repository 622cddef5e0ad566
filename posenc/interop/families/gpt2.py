"""GPT-2: a learned absolute table (``transformer.wpe [n_positions, n_embd]``) added to the token
embeddings, and attention layers that call transformers' attention interface with no rotary
(GPT-BigCode the same; OPT and BioGPT with the table offset by 2 rows and positions counted from the
attention mask: ``_offset_family``).

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

    def forward(self, positions: torch.Tensor, *args: Any, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """GPT-2's ``wpe(position_ids)``, or OPT's ``embed_positions(attention_mask, cache_length,
        position_ids=...)``: zeros of the positions' shape."""
        w = self.original.weight
        shape = (position_ids if position_ids is not None else positions).shape
        return w.new_zeros((*shape, w.shape[1]))  # (..., C)


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


def _offset_family(mask_positions: bool):
    """OPT and BioGPT: a learned table ``embed_positions`` whose row ``p + 2`` holds position ``p``;
    OPT counts positions from the attention mask (``cumsum - 1``) when none are given, BioGPT from
    the cache; the decoder and its layers found from structure."""
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="learned", table_attr="embed_positions", table_offset=2,
                  mask_positions=mask_positions, own_spec=own_spec)
