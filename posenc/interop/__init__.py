"""Interoperability with other libraries and checkpoints.

- ``from_hf(config, *, layer_type=None, layout=None)``: the posenc rotary module that reproduces a
  transformers model's RoPE (of one layer type for Gemma 3: ``rope_layer_types(config)``);
  ``HFRotaryEmbedding(rope)`` (or ``HFRotaryEmbedding.from_config(config)``, one rope per layer
  type) puts it back into a transformers model, with the table its family expects
  (``HF_FAMILIES``: where the rotary lives, what it returns);
- ``hf_layer_specs(config)``: one posenc spec per decoder layer (Gemma 3's local/global RoPE,
  Llama 4's NoPE layers as ``nope_temperature``; given a model, T5's buckets for each layer of its
  encoder and decoder stacks, ``families/t5.py``);
- ``resize_grid(weight, old_grid, new_grid, *, extra_tokens=0, mode="bicubic", antialias=False)``: a
  learned grid table resized to another grid, as transformers' ViT ``interpolate_pos_encoding``
  (``antialias=True``: as timm's ``resample_abs_pos_embed``);
- ``deberta_from_hf(layer, rel_embeddings)``: the ``deberta`` module of a transformers DeBERTa-v2/v3
  attention layer (its relative embeddings and position projections);
- ``patch(model, pe, *, layers=None)`` / ``unpatch(model)`` / ``from_pretrained(path)``: any posenc
  scheme inside a transformers causal LM or bidirectional encoder (``posenc.interop.patching``:
  transformers' attention interface, padding, grouped heads, the KV cache, save and reload);
- ``interleaved_to_half`` / ``half_to_interleaved``: permute q/k projection weights between
  Meta's interleaved pairs and transformers' half layout.

transformers is never imported here: ``from_hf`` reads the config's attributes (or dict keys);
``patch`` imports it when called.

The modules, by what they do: reading configs (``configs``; a config's RoPE: ``rope_types``,
``rope_spec``), the rotary module and its drop-in (``hf_rotary``), one spec per layer (``hf``),
finding a model's parts (``families.structure``; the family records: ``families``), classifying
attention (``classify``), checking (``families.check``, ``patching.checks``), installing
(``patching.install``; each patched layer's state: ``state.LayerState``), the runtime attention
function (``patching.attention_function``), persistence (``patching.persistence``);
``patching`` itself is ``patch`` and ``unpatch``.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it, imported on first use: ``posenc.interop.grid`` (a torch
# table, below the registry) imports without ``posenc.interop.hf`` (which builds through it).
_LAZY = {
    "from_hf": "posenc.interop.hf",
    "hf_rope_spec": "posenc.interop.hf",
    "HFRotaryEmbedding": "posenc.interop.hf",
    "hf_layer_specs": "posenc.interop.hf",
    "rope_layer_types": "posenc.interop.hf",
    "HF_FAMILIES": "posenc.interop.hf",
    "HF_TABLES": "posenc.interop.hf",
    "interleaved_to_half": "posenc.interop.layout",
    "half_to_interleaved": "posenc.interop.layout",
    "resize_grid": "posenc.interop.grid",
    "deberta_from_hf": "posenc.interop.deberta",
    "patch": "posenc.interop.patching",
    "unpatch": "posenc.interop.patching",
    "from_pretrained": "posenc.interop.patching",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'posenc.interop' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
