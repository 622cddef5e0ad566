"""DeBERTa-v2/v3: disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", arXiv:2006.03654), content-to-position and position-to-content terms of a
relative table shared by the encoder's layers (``encoder.rel_embeddings``, after its LayerNorm:
``get_rel_embedding()``), in an attention that computes itself (``DisentangledSelfAttention``, at
``encoder.layer[i].attention.self``), never through transformers' attention interface, with no
``is_causal``: an encoder, its mask the padding's alone (``get_attention_mask``).

While patched each layer's ``forward`` is :func:`forward`: its ``q, k, v [B, H, L, D]`` through
``posenc_attention`` bidirectionally (``is_causal=False``: DeBERTa-v2 builds no causal mask), the
model's padding mask, the model's attention dropout, and the scheme's own scale (posenc's
``deberta``: DeBERTa's ``1/√(D·f)``; another scheme: ``1/√D``). Its own encoding as posenc specs
(``hf_layer_specs``) is one ``deberta`` spec per layer; ``patch`` starts each from the layer and the
encoder's table (``posenc.interop.deberta_from_hf``: the table after its LayerNorm, copied; the
position projections tied to the layer's own with ``share_att_key``), so
``patch(model, hf_layer_specs(model.config))`` leaves the logits unchanged (in eval: the model's
``pos_dropout`` of its table in training is not posenc's, and is refused there).

Refused by name: a model whose embeddings add an absolute table (``position_biased_input``, the
config's default) or whose attention has no relative terms (``relative_attention`` False), DeBERTa
v1 (``deberta``: its own attention class and ``in_proj``), each with its reason. The convolution of
the first layer (``conv_kernel_size``) is kept as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.interop.state import layer_state


def forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor, output_attentions: bool = False,
            query_states: torch.Tensor | None = None, relative_pos: Any = None, rel_embeddings: Any = None):
    """``DisentangledSelfAttention.forward`` through ``posenc_attention``: ``(context [B, L, C], None)``."""
    if query_states is not None:
        raise ValueError("posenc.interop: DeBERTa's query_states (its enhanced mask decoder) is not supported while "
                         "patched")
    pe = self.__dict__.get("posenc_pe")
    if self.training and getattr(pe, "name", None) == "deberta" and self.pos_dropout.p > 0:
        raise ValueError(f"posenc.interop: DeBERTa drops its relative table in training (pos_dropout "
                         f"p={self.pos_dropout.p}, hidden_dropout_prob), which posenc's deberta does not; set "
                         "hidden_dropout_prob to 0 or call model.eval()")
    b, length, _ = hidden_states.shape
    h, d = self.num_attention_heads, self.attention_head_size
    q, k, v = (proj(hidden_states).view(b, length, h, d).transpose(1, 2)
               for proj in (self.query_proj, self.key_proj, self.value_proj))  # 3 x (B, H, L, D)
    mask = attention_mask.bool() if attention_mask is not None else None  # (B, 1, L, L): padding alone
    out, _ = layer_state(self).attention(self, q, k, v, mask, scaling=None, is_causal=False,
                                         dropout=self.dropout.p if self.training else 0.0)  # (B, L, H, D)
    return out.reshape(b, length, h * d), None


def own_spec(config: Any) -> dict[str, Any]:
    """DeBERTa-v2/v3's disentangled attention as a posenc ``deberta`` spec; ValueError for an own
    encoding posenc does not reproduce (an absolute table in the embeddings, no relative terms)."""
    get = config.get if isinstance(config, dict) else lambda k, default=None: getattr(config, k, default)
    if not get("relative_attention", False):
        raise ValueError("posenc.interop: DeBERTa-v2 with relative_attention=False has no disentangled attention "
                         "(its positions: the embeddings' absolute table); not supported, refused")
    if get("position_biased_input", True):
        raise ValueError("posenc.interop: DeBERTa-v2 with position_biased_input=True adds an absolute position table "
                         "to its embeddings besides its relative attention, which patch does not replace; refused "
                         "(DeBERTa-v3's position_biased_input=False is supported)")
    heads = int(get("num_attention_heads"))
    hidden = int(get("hidden_size"))
    max_rel = int(get("max_relative_positions", -1))
    if max_rel < 1:
        max_rel = int(get("max_position_embeddings"))
    types = get("pos_att_type") or []
    types = types.split("|") if isinstance(types, str) else list(types)
    return {"scheme": "deberta", "num_heads": heads, "head_dim": hidden // heads, "d_model": hidden,
            "position_buckets": max(int(get("position_buckets", -1)), 0), "max_relative_positions": max_rel,
            "pos_att_type": "|".join(t for t in ("c2p", "p2c") if t in types),
            "share_att_key": bool(get("share_att_key", False))}  # transformers' default: getattr(config, ..., False)


def start(modules: list, parts: Any) -> None:
    """Each ``deberta`` module of a layer's own spec replaced by ``deberta_from_hf(layer, table)``: the
    encoder's table after its LayerNorm, the layer's position projections (tied with ``share_att_key``)."""
    from posenc.interop.deberta import deberta_from_hf

    table = parts.decoder.get_rel_embedding()  # (2s', C): the encoder's, after norm_rel_ebd
    for i, (module, attention) in enumerate(zip(modules, parts.attentions)):
        if getattr(module, "name", None) != "deberta":
            continue
        with torch.no_grad():
            own = deberta_from_hf(attention, table.detach())
        if module.spec == own.spec:
            modules[i] = own


def check(name: str, parts: Any, config: Any) -> None:
    """DeBERTa-v2's own encoding read (:func:`own_spec`, refused by name where posenc does not reproduce it)."""
    own_spec(config)


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="relative_bias", attention="attention.self", forward=forward, encoder=True,
                  own_spec=own_spec, start=start, check=check)


def refuse_v1(name: str, parts: Any, config: Any) -> None:
    raise ValueError(f"posenc.interop.patch: {name} is DeBERTa v1 (DisentangledSelfAttention with a fused in_proj and "
                     "its own relative terms), which posenc does not reproduce; DeBERTa-v2/v3 (deberta-v2) is supported")


def _v1_family():
    from posenc.interop.families.record import Family

    def refused(config: Any) -> dict[str, Any]:
        refuse_v1("DeBERTa (model_type 'deberta')", None, config)

    return Family(rotary=None, positions="relative_bias", attention="attention.self", check=refuse_v1,
                  own_spec=refused)
