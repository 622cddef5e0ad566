"""BERT: a learned absolute table ``embeddings.position_embeddings [max_position_embeddings,
hidden_size]`` added with the token-type table to the word embeddings *before* the embeddings'
LayerNorm, and bidirectional self-attention (``BertSelfAttention``, ``is_causal`` False, inside
``BertAttention``, which makes no attention call of its own: the finder takes the inner module that
calls transformers' attention interface).

While patched the table itself takes the scheme (:class:`PositionTable`, in the embeddings, so an
additive scheme's vectors pass through the LayerNorm as BERT's own rows do; token types untouched):
an additive scheme (``learned``, ``sinusoidal``) gives its vectors at the positions BERT gives the
table (``position_ids``, ``0..L-1`` by default); any other scheme gets zeros there and runs in
attention, with those positions. Its own encoding as a posenc spec (``hf_layer_specs``) is
``{"scheme": "learned", "d_model": hidden_size, "max_positions": max_position_embeddings}``, started
from BERT's table, so ``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class PositionTable(nn.Module):
    """A position table in place of a model's own while patched: ``forward(position_ids) -> [..., C]``,
    the additive scheme ``pe``'s vectors, or zeros (``pe`` None) in the table's dtype. It records the
    call's ``position_ids`` and counts the calls (``step``), as a neutralised rotary does, for the
    attention function. Holds the original and ``pe`` as references (not submodules: the original's
    parameters are the model's, ``pe``'s the decoder's ``posenc_modules``)."""

    def __init__(self, original: nn.Embedding, pe: nn.Module | None = None) -> None:
        super().__init__()
        self.__dict__["original"] = original
        self.__dict__["pe"] = pe
        self.position_ids: torch.Tensor | None = None
        self.step = 0

    def forward(self, position_ids: torch.Tensor, *args: Any) -> torch.Tensor:
        self.position_ids = position_ids  # (B or 1, L)
        self.step += 1
        w = self.original.weight
        if self.pe is None:
            return w.new_zeros((*position_ids.shape, w.shape[1]))  # (..., C)
        return self.pe(position_ids.long()).to(w.dtype)  # (..., C)


def _family():
    from posenc.interop.families import gpt2
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="learned", table_holder="embeddings", table_attr="position_embeddings",
                  own_spec=gpt2.own_spec)
