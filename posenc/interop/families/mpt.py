"""MPT: ALiBi built by the decoder (``build_mpt_alibi_tensor``: slope ``m_h`` times each key's index
counted back from the last, which the softmax turns into ``-m_h (i - j)``), a fused ``Wqkv`` and an
attention that computes itself, never through transformers' attention interface; its mask is
boolean with True where a key is hidden (``masked_fill(attention_mask, min)``).

While patched each attention layer's ``forward`` is :func:`forward` (posenc's attention, the
model's ALiBi ignored: the scheme replaces it). Its own encoding as a posenc spec is
``{"scheme": "alibi", "num_heads": n_heads}``, checked before patching against the model's own
slopes (:func:`slopes`: MPT orders the slopes of a head count that is not a power of two otherwise
than the ALiBi paper, and such a model is refused by name)."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, hidden_states: torch.Tensor, position_bias: torch.Tensor | None = None,
            cache: Any = None, attention_mask: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """``MptAttention.forward`` through ``posenc_attention``: ``Wqkv`` (clipped at ``clip_qkv`` as
    MPT's) split into ``q, k, v [B, H, L, D]``, the cache updated, MPT's mask inverted (True: attend)
    and its ``softmax_scale``, then ``out_proj``."""
    b, length = hidden_states.shape[:2]
    mixed = self.Wqkv(hidden_states)  # (B, L, 3 C)
    if self.clip_qkv:
        mixed = mixed.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    query, key, value = (x.reshape(b, length, self.n_heads, self.head_dim).transpose(1, 2)
                         for x in mixed.chunk(3, dim=2))  # 3 x (B, H, L, D)
    cache = kwargs.pop("past_key_values", cache)
    if cache is not None:
        key, value = cache.update(key, value, self.layer_idx)  # (B, H, Lk, D)
    mask = None if attention_mask is None else ~attention_mask.to(torch.bool)  # (B, 1, Lq, Lk), True: attend
    out, _ = layer_state(self).attention(self, query, key, value, mask, scaling=self.softmax_scale,
                                         dropout=self.attn_dropout_p if self.training else 0.0)  # (B, L, H, D)
    return self.out_proj(out.reshape(b, length, self.n_heads * self.head_dim)), None


def own_spec(config: Any) -> dict[str, Any]:
    """MPT's ALiBi (config object or ``config.json`` dict) as a posenc ``alibi`` spec."""
    heads = config.get("n_heads") if isinstance(config, dict) else config.num_attention_heads
    return {"scheme": "alibi", "num_heads": int(heads)}


def slopes(attention: nn.Module) -> torch.Tensor:
    """The model's own ALiBi slopes ``[H]``: its modeling module's ``build_mpt_alibi_tensor`` at two
    keys (the first key's bias is ``-m_h``), with the default ``alibi_bias_max`` the model uses."""
    build = sys.modules[type(attention).__module__].build_mpt_alibi_tensor
    return -build(attention.n_heads, 2)[:, 0, 0]  # (H,)


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, layers="transformer.blocks", attention="attn", embeddings="wte", forward=forward,
                  positions="alibi", own_spec=own_spec, slopes=slopes)
