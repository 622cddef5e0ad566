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
from BERT's table, so ``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged.

The same row serves the BERT-like encoders whose embeddings hold the table under the same names
and whose inner self-attention calls the interface (ELECTRA, ERNIE, RoCBert, MobileBERT,
DistilBERT), and, with an offset, RoBERTa's family (``families/roberta.py``): the table's row
``offset + p`` holds position ``p``, and a row the table keeps for padding (``nn.Embedding``'s
``padding_idx``: RoBERTa's pad tokens) stays the model's own."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def own_rows(table: nn.Embedding, args: tuple, kwargs: dict) -> torch.Tensor:
    """The rows of ``table`` that its own call with ``args, kwargs`` reads: the first argument of a
    plain ``nn.Embedding`` (BERT's, RoBERTa's ``position_ids``); for a table class with a forward of
    its own (BART's ``embed_positions(input_ids, cache_length, position_ids)``, which counts
    positions and adds its offset itself), that forward run on a copy of the table whose row ``r``
    is ``r``: the model's own count, never recounted by posenc. ``[...]`` long, the shape of the
    call's output without its last dimension."""
    if type(table).forward is nn.Embedding.forward:
        return args[0].long() if args else kwargs["input"].long()
    import copy

    probe = copy.copy(table)  # the same class and attributes; its own parameters dict, one column of row numbers
    probe._parameters = {"weight": torch.arange(table.weight.shape[0], dtype=torch.float64,
                                                device=table.weight.device).unsqueeze(1)}  # (N, 1)
    with torch.no_grad():
        return type(table).forward(probe, *args, **kwargs)[..., 0].long()


class PositionTable(nn.Module):
    """A position table in place of a model's own while patched: ``forward(position_ids) -> [..., C]``,
    the additive scheme ``pe``'s vectors, or zeros (``pe`` None) in the table's dtype. It records the
    call's positions (``position_ids - offset``: posenc's position ``p`` of the table's row
    ``offset + p``) and counts the calls (``step``), as a neutralised rotary does, for the attention
    function. Tokens at the table's padding row (``original.padding_idx``: RoBERTa's pad tokens) get
    that row as the model's own table gives it (position ``-1`` recorded: masked keys, position 0
    in attention). Holds the original and ``pe`` as references (not submodules: the original's
    parameters are the model's, ``pe``'s the decoder's ``posenc_modules``)."""

    def __init__(self, original: nn.Embedding, pe: nn.Module | None = None, offset: int = 0) -> None:
        super().__init__()
        self.__dict__["original"] = original
        self.__dict__["pe"] = pe
        self.offset = offset
        self.position_ids: torch.Tensor | None = None
        self.step = 0

    def __getattr__(self, name: str) -> Any:
        """The original's sizes (``num_embeddings``: Whisper's encoder counts its frames by it), never
        its rows: a model that reads ``weight`` itself would bypass the scheme, so that is an error."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("weight", "original", "pe") or name.startswith("_"):
                raise AttributeError(f"posenc.interop: the model reads its position table's {name!r} directly while "
                                     "patched (the table takes the scheme only through its forward)") from None
            return getattr(self.__dict__["original"], name)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rows = own_rows(self.original, args, kwargs)  # (B or 1, L): the model's own rows of its table
        positions = rows - self.offset
        self.position_ids = positions
        self.step += 1
        w = self.original.weight
        if self.pe is None:
            out = w.new_zeros((*rows.shape, w.shape[1]))  # (..., C)
        else:
            out = self.pe(positions.clamp(min=0)).to(w.dtype)  # (..., C)
        pad = self.original.padding_idx
        if pad is not None:  # the model's own padding row where it gives it (an nn.Embedding's: never trained)
            out = torch.where((rows == pad).unsqueeze(-1), w[pad].detach(), out)
        return out


def embedding_spec(config: Any) -> dict[str, Any]:
    """ELECTRA's table, ``[max_position_embeddings, embedding_size]`` (its embeddings are projected to
    ``hidden_size`` after the LayerNorm), as a posenc ``learned`` spec."""
    from posenc.interop.families import gpt2

    return {**gpt2.own_spec(config), "d_model": gpt2._get(config, "embedding_size", "hidden_size")}


def check_width(name: str, table: nn.Embedding | nn.Parameter, modules: list) -> None:
    """An additive scheme given to a table in the embeddings is as wide as that table (ELECTRA's
    ``embedding_size``, which a SPEC's ``d_model`` from ``hidden_size`` is not; a vision table's
    parameter ``[1, P + H·W, C]``); refused naming both."""
    width = getattr(table, "weight", table).shape[-1]
    for m in {id(m): m for m in modules}.values():
        d = getattr(m, "d_model", None) or (getattr(m, "spec", None) or {}).get("d_model")
        if getattr(m, "kind", None) == "additive" and d != width:
            raise ValueError(f"posenc.interop.patch: {name}'s position table is {width} wide (its embeddings' width), "
                             f"but pe {m.name!r} has d_model={d}; give d_model={width}")


ALBERT = ("ALBERT shares its layers across its depth (num_hidden_groups groups of inner_group_num layers, each "
          "run num_hidden_layers / num_hidden_groups times), where posenc places one scheme and one cache record per "
          "attention module; its table (BERT's, in embeddings) is not taken alone")
"""Why ALBERT is refused by name (``Family.refused``)."""


def _family(**fields: Any):
    from posenc.interop.families import gpt2
    from posenc.interop.families.record import Family

    return Family(**{**dict(rotary=None, positions="learned", table_holder="embeddings",
                            table_attr="position_embeddings", own_spec=gpt2.own_spec), **fields})
