"""GPT-Neo: GPT-2's learned absolute table (``transformer.wpe``), and an attention that computes
itself (``GPTNeoSelfAttention``, under ``h[i].attn.attention``), never through transformers'
attention interface: no ``1/sqrt(D)`` scale (``softmax_scale=1``), and ``local`` layers
(``config.attention_layers``) that see only the last ``window_size`` keys (query ``i`` sees key
``j`` when ``i - window_size < j <= i``: posenc.attention's ``window=``).

While patched each attention layer's ``forward`` is :func:`forward` (posenc's attention, with the
layer's window) and the table adds zeros (``gpt2.ZeroTable``); its own encoding as a posenc spec is
GPT-2's (``gpt2.own_spec``: a ``learned`` table of the model's size, started from the model's), so
``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
            layer_past: Any = None, use_cache: bool = False, output_attentions: bool = False,
            **kwargs) -> tuple[torch.Tensor, None]:
    """``GPTNeoSelfAttention.forward`` through ``posenc_attention``: ``q, k, v [B, H, L, D]``, the
    cache updated, the model's mask, scale 1 (GPT-Neo does not scale its logits) and, on a ``local``
    layer, ``window=window_size``; then the output projection with the model's dropout."""
    b, length, _ = hidden_states.shape
    query, key, value = (self._split_heads(proj(hidden_states), self.num_heads, self.head_dim)
                         for proj in (self.q_proj, self.k_proj, self.v_proj))  # 3 x (B, H, L, D)
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_id)  # (B, H, Lk, D)
    window = self.config.window_size if self.attention_type == "local" else None
    out, _ = layer_state(self).attention(self, query, key, value, attention_mask, scaling=1.0, sliding_window=window,
                                         dropout=self.attn_dropout.p if self.training else 0.0)  # (B, L, H, D)
    out = self.out_proj(out.reshape(b, length, self.num_heads * self.head_dim))  # (B, L, C)
    return self.resid_dropout(out), None


def _family():
    from posenc.interop.families import gpt2
    from posenc.interop.families.record import Family

    return Family(rotary=None, layers="transformer.h", attention="attn.attention", embeddings="wte", forward=forward,
                  positions="learned", table_attr="wpe", own_spec=gpt2.own_spec)
