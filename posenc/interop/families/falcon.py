"""Falcon: a fused ``query_key_value``, an attention that computes itself (torch's SDPA or eager)
and never calls transformers' attention interface, and an optional ALiBi (``alibi=True``) in
place of its rotary. While patched each attention layer's ``forward`` is :func:`forward`, and
the decoder's ``use_alibi`` is off (the scheme replaces it)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, hidden_states: torch.Tensor, alibi: torch.Tensor | None = None,
            attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
            layer_past: Any = None, use_cache: bool = False, output_attentions: bool = False,
            position_embeddings: Any = None, **kwargs) -> tuple[torch.Tensor, None]:
    """``FalconAttention.forward`` through ``posenc_attention``: its fused ``query_key_value``
    split into ``q [B, H, L, D]`` and ``k, v [B, H_kv, L, D]``, grouped heads as they are (the model's
    own broadcasts a ``new_decoder_architecture`` layer's keys to every query head; here the cache
    keeps ``H_kv`` heads), the cache updated, the model's mask (4D bool under SDPA, additive under
    eager) and its scale ``1/sqrt(D)``. No rotary is applied (the scheme's positions are posenc's),
    and ``alibi`` is ``None`` (the decoder's ``use_alibi`` is off while patched; transformers 5.25's
    decoder layer no longer passes it at all). Falcon's rotary path
    applies no attention dropout; neither does this."""
    fused = self.query_key_value(hidden_states)  # (B, L, (H + 2 H_kv) D), or (B, L, 3 H D)
    b, length, _ = fused.shape
    if self.new_decoder_architecture:  # per key/value head g: its H / H_kv query heads, then its key, its value
        qkv = fused.view(b, length, self.num_kv_heads, self.num_heads // self.num_kv_heads + 2, self.head_dim)
        query = qkv[:, :, :, :-2].flatten(2, 3)  # (B, L, H, D): head g·(H/H_kv) + j reads key/value head g
        key, value = qkv[:, :, :, -2], qkv[:, :, :, -1]  # (B, L, H_kv, D)
    else:  # multi-query (one key/value head) or one per query head
        query, key, value = self._split_heads(fused)  # (B, L, H, D), (B, L, H_kv, D)
    query, key, value = (x.transpose(1, 2) for x in (query, key, value))  # (B, H or H_kv, L, D)
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_idx)  # (B, H_kv, Lk, D)
    out, _ = layer_state(self).attention(self, query, key, value, attention_mask, scaling=self.inv_norm_factor,
                              position_ids=position_ids)  # (B, L, H, D)
    return self.dense(out.reshape(b, length, self.num_heads * self.head_dim)), None


def _family():
    from posenc.interop.families.record import Family

    return Family("transformer.rotary_emb", layers="transformer.h", attention="self_attention",
                  embeddings="word_embeddings", forward=forward, decoder_positions=("use_alibi",))
