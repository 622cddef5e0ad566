"""Interoperability with other libraries and checkpoints.

- ``from_hf(config)``: the posenc rotary module that reproduces a transformers model's RoPE;
  ``HFRotaryEmbedding(rope)`` puts it back into a transformers model.
- ``resize_grid(weight, old_grid, new_grid, *, extra_tokens=0, mode="bicubic")``: a learned grid
  table resized to another grid, as transformers' ViT ``interpolate_pos_encoding``;
- ``deberta_from_hf(layer, rel_embeddings)``: the ``deberta`` module of a transformers DeBERTa-v2/v3
  attention layer (its relative embeddings and position projections);
- ``interleaved_to_half`` / ``half_to_interleaved``: permute q/k projection weights between
  Meta's interleaved pairs and transformers' half layout.

transformers is never imported here: ``from_hf`` reads the config's attributes (or dict keys).
"""

from __future__ import annotations

from posenc.interop.hf import HFRotaryEmbedding, from_hf, hf_rope_spec
from posenc.interop.grid import resize_grid
from posenc.interop.deberta import deberta_from_hf
from posenc.interop.layout import half_to_interleaved, interleaved_to_half

__all__ = ["from_hf", "hf_rope_spec", "HFRotaryEmbedding", "interleaved_to_half", "half_to_interleaved",
           "resize_grid", "deberta_from_hf"]
