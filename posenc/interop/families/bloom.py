"""BLOOM: ALiBi built by the decoder (``build_alibi_tensor``: slope ``m_h`` times each key's
position, which the softmax turns into ``-m_h (i - j)``), a fused ``query_key_value`` and an
attention that computes itself, never through transformers' attention interface.

While patched each attention layer's ``forward`` is :func:`forward` (posenc's attention, the
model's ALiBi tensor ignored: the scheme replaces it). Its own encoding as a posenc spec is
``{"scheme": "alibi", "num_heads": n_head}``, checked before patching against the model's own
slopes (``_get_alibi_slopes``), so ``patch(model, hf_layer_specs(model.config))`` leaves the logits
unchanged."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, hidden_states: torch.Tensor, residual: torch.Tensor, alibi: torch.Tensor | None,
            attention_mask: torch.Tensor | None, layer_past: Any = None, use_cache: bool = False,
            output_attentions: bool = False, **kwargs) -> tuple[torch.Tensor, None]:
    """``BloomAttention.forward`` through ``posenc_attention``: its fused ``query_key_value`` as
    ``q, k, v [B, H, L, D]``, the cache updated, the model's mask (4D) and scale ``1/sqrt(D)``, then
    the output projection and the residual (with the model's hidden dropout), as BLOOM's own."""
    b, length, _ = hidden_states.shape
    query, key, value = self._reshape(self.query_key_value(hidden_states))  # 3 x (B, H, L, D)
    if layer_past is not None:
        key, value = layer_past.update(key, value, self.layer_idx)  # (B, H, Lk, D)
    out, _ = layer_state(self).attention(self, query, key, value, attention_mask, scaling=self.inv_norm_factor,
                                         dropout=self.attention_dropout.p if self.training else 0.0)  # (B, L, H, D)
    out = self.dense(out.reshape(b, length, self.num_heads * self.head_dim))  # (B, L, C)
    out = nn.functional.dropout(out, p=self.hidden_dropout, training=self.training)
    return residual + out, None


def own_spec(config: Any) -> dict[str, Any]:
    """BLOOM's ALiBi (config object or ``config.json`` dict) as a posenc ``alibi`` spec."""
    heads = config.get("n_head") if isinstance(config, dict) else config.num_attention_heads
    return {"scheme": "alibi", "num_heads": int(heads)}


def slopes(attention: nn.Module) -> torch.Tensor:
    """The model's own ALiBi slopes ``[H]`` (its modeling module's ``_get_alibi_slopes``)."""
    return sys.modules[type(attention).__module__]._get_alibi_slopes(attention.num_heads, torch.device("cpu"))


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, layers="transformer.h", attention="self_attention", embeddings="word_embeddings",
                  forward=forward, positions="alibi", own_spec=own_spec, slopes=slopes)
