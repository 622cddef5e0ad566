"""Speech encoders with a convolutional position embedding: wav2vec 2.0 (Baevski et al. 2020,
arXiv:2006.11477, §2: "a convolutional layer ... which acts as relative positional embedding") and
HuBERT (Hsu et al. 2021, arXiv:2106.07447), whose encoder adds ``pos_conv_embed(x)`` (a grouped 1D
convolution over the frames, kernel ``num_conv_pos_embeddings``, ``num_conv_pos_embedding_groups``
groups, weight-normed) to the features before its LayerNorm and first layer; their self-attention
(``is_causal`` False) has no positions.

**Decided: the convolution is kept, and a posenc scheme goes in attention beside it.** The
convolution is part of the features (it mixes neighbouring frames' content, not only their
positions): removing it would change what every layer sees, and it cannot be read as a posenc
scheme. So ``patch`` leaves ``pos_conv_embed`` as it is, and its attention takes the scheme with the
frames' positions ``0..L−1`` (the model's padding mask kept), bidirectionally. Its own encoding in
attention is none: ``hf_layer_specs`` gives ``{"scheme": "nope"}`` on every layer, so ``patch(model,
hf_layer_specs(model.config))`` leaves the outputs unchanged. An additive scheme (``sinusoidal``,
``learned``) is refused by name: it would be a second table beside the convolution, on the
features, which no speech model has.

Refused by name (``Family.refused``): WavLM (its gated relative position bias, ``rel_attn_embed``
and ``gru_rel_pos_*``, inside an attention that makes no call to transformers' attention interface)
and wav2vec2-Conformer (its ``position_embeddings_type``: ``"relative"``, Transformer-XL's
``pos_bias_u``/``pos_bias_v`` terms, or ``"rotary"``, a rotary of base ``rotary_embedding_base``,
both inside its own self-attention, which makes no call to the interface).
"""

from __future__ import annotations

from typing import Any

ADDITIVE = ("an additive scheme would be a second table on the features beside the model's convolutional position "
            "embedding (pos_conv_embed, kept); give a scheme that goes in attention (alibi, rope, t5, ...)")

WAVLM = ("WavLM's gated relative position bias (rel_attn_embed, gru_rel_pos_linear) is computed inside its own "
         "attention (WavLMAttention), which does not call transformers' attention interface; posenc would drop it")

CONFORMER = ("wav2vec2-Conformer's position_embeddings_type ('relative': Transformer-XL's pos_bias_u/pos_bias_v "
             "terms; 'rotary': a rotary of base rotary_embedding_base) is computed inside its own self-attention "
             "(Wav2Vec2ConformerSelfAttention), which does not call transformers' attention interface")


def own_spec(config: Any) -> dict[str, Any]:
    """No position in attention: the convolution, kept, is the model's."""
    return {"scheme": "nope"}


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="none", own_spec=own_spec, attention_only=ADDITIVE)


def _refused(reason: str):
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="none", refused=reason)
