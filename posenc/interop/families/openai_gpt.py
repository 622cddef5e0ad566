"""OpenAI GPT (GPT-1): a learned absolute table (``transformer.positions_embed``) added to the token
embeddings, and an attention that computes itself (``Attention``: a fused ``c_attn``, its causal
mask a buffer, no cache), never through transformers' attention interface.

While patched each attention layer's ``forward`` is :func:`forward` (posenc's attention) and the
table adds zeros (``gpt2.ZeroTable``); its own encoding as a posenc spec is GPT-2's
(``gpt2.own_spec``: a ``learned`` table of the model's size, started from the model's), so
``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
            output_attentions: bool = False) -> list[torch.Tensor]:
    """``Attention.forward`` through ``posenc_attention``: ``c_attn`` split into ``q, k, v [B, H, L,
    D]``, the model's padding mask (additive, ``[B, 1, 1, L]``, given every query), causal, its scale (``1/sqrt(D)``
    when the layer's ``scale``, else 1); then ``c_proj`` with the model's dropout."""
    b, length, _ = x.shape
    query, key, value = (part.view(b, length, self.n_head, -1).transpose(1, 2)
                         for part in self.c_attn(x).split(self.split_size, dim=2))  # 3 x (B, H, L, D)
    scaling = 1.0 / math.sqrt(value.shape[-1]) if self.scale else 1.0
    if attention_mask is not None:  # (B, 1, 1, L) -> (B, 1, L, L): no cache, every key is a query too
        attention_mask = attention_mask.expand(-1, -1, length, -1)
    out, _ = layer_state(self).attention(self, query, key, value, attention_mask, scaling=scaling,
                                         dropout=self.attn_dropout.p if self.training else 0.0)  # (B, L, H, D)
    return [self.resid_dropout(self.c_proj(out.reshape(b, length, self.split_size)))]  # (B, L, C)


def _family():
    from posenc.interop.families import gpt2
    from posenc.interop.families.record import Family

    return Family(rotary=None, layers="transformer.h", attention="attn", embeddings="tokens_embed", forward=forward,
                  positions="learned", table_attr="positions_embed", own_spec=gpt2.own_spec)
