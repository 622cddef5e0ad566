"""transformers' DeBERTa-v2/v3 attention as posenc: a ``deberta`` module loaded from a layer.

    from posenc.interop import deberta_from_hf
    attn = model.deberta.encoder.layer[0].attention.self        # DisentangledSelfAttention
    pe = deberta_from_hf(attn, model.deberta.encoder.get_rel_embedding())

    q, k, v = (split(p(h)) for p in (attn.query_proj, attn.key_proj, attn.value_proj))  # (B, H, L, D)
    out = posenc.attention(q, k, v, pe)            # the layer's context, before its output dense layer

The layer's ``query_proj``/``key_proj``/``value_proj`` make ``q, k, v``; the relative
embeddings (the encoder's table after its ``norm_rel_ebd`` LayerNorm, ``get_rel_embedding()``:
the rows the layer is given) and the position projections become the module's parameters. With
``share_att_key`` the position projections *are* the layer's query and key projections:
``pe.tie`` shares them (no copy). ``posenc.attention``'s default scale for this module is
DeBERTa's ``1/√(D·f)``. transformers is never imported.
"""

from __future__ import annotations

from typing import Any

import torch

from posenc.registry import build


def deberta_from_hf(layer: Any, rel_embeddings: torch.Tensor):
    """The ``deberta`` module equal to transformers' ``DisentangledSelfAttention`` ``layer``.

    ``rel_embeddings`` is the table the encoder passes to its layers, ``[≥ 2s, d_model]``; its
    first ``2s`` rows are used, as the layer does. The module takes the layer's dtype and device.
    """
    if not getattr(layer, "relative_attention", False):
        raise ValueError("layer has relative_attention=False: it has no position terms for a deberta module")
    if not isinstance(rel_embeddings, torch.Tensor) or rel_embeddings.dim() != 2:
        raise TypeError(f"rel_embeddings must be a [2s, d_model] tensor, got {type(rel_embeddings).__name__} "
                        f"{list(getattr(rel_embeddings, 'shape', []))}")
    buckets = int(layer.position_buckets)
    terms = [t for t in ("c2p", "p2c") if t in layer.pos_att_type]
    weight = layer.query_proj.weight
    spec = {"scheme": "deberta", "num_heads": int(layer.num_attention_heads),
            "head_dim": int(layer.attention_head_size), "d_model": int(layer.query_proj.in_features),
            "position_buckets": max(buckets, 0), "max_relative_positions": int(layer.max_relative_positions),
            "pos_att_type": "|".join(terms), "share_att_key": bool(layer.share_att_key)}
    pe = build(spec).to(device=weight.device, dtype=weight.dtype)
    rows = 2 * pe.span
    if rel_embeddings.shape[0] < rows or rel_embeddings.shape[1] != pe.d_model:
        raise ValueError(f"rel_embeddings must have at least 2s = {rows} rows of d_model = {pe.d_model}, "
                         f"got shape {list(rel_embeddings.shape)}")
    with torch.no_grad():
        pe.rel_embeddings.copy_(rel_embeddings[:rows])
        if pe.share_att_key:
            pe.tie(layer.query_proj, layer.key_proj)
        else:
            for name in ("pos_key_proj", "pos_query_proj"):
                if hasattr(pe, name):
                    getattr(pe, name).load_state_dict(getattr(layer, name).state_dict())
    return pe
