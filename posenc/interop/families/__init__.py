"""transformers families: what posenc needs to know about a model family, as ONE table of
:class:`Family` records (``FAMILIES``), with a family's own code in a file of its own here
(``falcon.py``, ``gpt2.py``: GPT-2, GPT-BigCode, OPT, BioGPT; ``gpt_neo.py``, ``openai_gpt.py``; ``bloom.py``, ``mpt.py``;
``ministral3.py``; ``t5.py``: T5, mT5, UMT5, LongT5 refused; ``deberta_v2.py``: DeBERTa-v2/v3, v1 refused;
``vit.py``: vision transformers with a learned table of a patch grid; ``dinov3.py``; ``speech.py``:
wav2vec2, HuBERT), the
structure search (``structure.py``), the records read from a modeling module (``found.py``:
which pairs its ``apply_rotary_pos_emb`` rotates, multi-head latent attention) and the checks
before replacing (``check.py``).

**Found from structure.** ``posenc.interop.patch`` needs no row for a model whose decoder follows
transformers' common pattern (``structure.find``): a ``ModuleList`` of decoder layers, each with an
attention module that calls transformers' attention interface (``ALL_ATTENTION_FUNCTIONS``), a
rotary module beside the layers called with ``position_ids`` and returning ``(cos, sin)``, and an
``apply_rotary_pos_emb`` in the family's modeling module. Llama, Mistral, Qwen 2/3, OLMo, Granite,
SmolLM3, Cohere 2 and a hundred others are found that way. What differs from the pattern is a
field of the family's record:

- where its rotary, layers and attention live, when not where the structure search looks
  (``rotary``, ``layers``, ``attention``);
- what its rotary module returns (``table``, one of ``HF_TABLES``) and which pairs its attention
  rotates (``layout``, ``interleave_key``): Cohere's interleaved pairs, GPT-OSS's half-width table,
  Llama 4's complex ``freqs_cis``, DeepSeek-V3's ``rope_interleave``;
- config defaults the config leaves out (``partial_rotary_factor``, Gemma 3's legacy per-layer
  bases ``layer_thetas``, Llama 4's ``nope_temperature``, multimodal RoPE's ``mrope``: the sections
  and their layout transformers' rotary class falls back to);
- multi-head latent attention (``head_dim``, ``rope_part``), a softmax term (``softmax_term``),
  an attention that bypasses the interface (``forward``: Falcon, BLOOM), position effects of the
  model's own outside its rotary (``own_positions``, ``decoder_positions``, ``query_temperature``:
  Ministral 3's query temperature, read from a rope parameter);
- the model's own encoding when it has no RoPE (``positions``: ``"learned"`` with the decoder's
  table ``table_attr``, GPT-2; ``"alibi"``, BLOOM).

``posenc.from_hf`` reads a config by its model type (a config dict has no modules to look at):
a model type without a row is read as a Llama-style config, layout ``"half"``, and the drop-in
``HFRotaryEmbedding(posenc.from_hf(config))`` of a config object is checked against the family's
own rotary class (``check.check_from_hf``), so a family that pairs dimensions otherwise is refused
by name rather than run wrong.

Checked against transformers 5.24's modeling files: ``Gemma3RotaryEmbedding.forward(x,
position_ids, layer_type)`` (one module, one table per layer type); ``GptOssRotaryEmbedding``
returns ``cos, sin`` of ``[B, L, D/2]``; ``Llama4TextRotaryEmbedding`` returns the complex
``freqs_cis`` of ``[B, L, D/2]`` applied to ``view_as_complex`` pairs (2i, 2i+1);
``DeepseekV3`` reads the first half of ``cat(freqs, freqs)`` and rotates pairs (2i, 2i+1) when
``rope_interleave``; ``CohereRotaryEmbedding`` (and Cohere 2's) repeats each entry twice.
tests/test_hf_families.py builds each family and checks the row; tests/test_hf_walk.py walks every
causal LM the installed transformers registers.
"""

from __future__ import annotations

from typing import Any

from posenc.interop.families.record import _GEMMA3_THETAS, HF_TABLES, POSITIONS, Family  # noqa: E402,F401


def _no_positions(config: Any) -> dict[str, Any]:
    """The own encoding of a family whose attention has no positions: posenc's ``nope``."""
    return {"scheme": "nope"}


def _families() -> dict[str, Family]:
    from posenc.interop.families import (bart, bert, bloom, deberta_v2, dinov3, falcon, gpt2, gpt_neo, ministral3, mpt,
                                         openai_gpt, roberta, speech, t5, vit, whisper)

    llama = Family()
    qwen_vl = Family("model.language_model.rotary_emb", mrope=((16, 24, 24), "chunked"),
                     layers="model.language_model.layers")  # the text model's layers, not the vision tower's
    qwen3_vl = Family("model.language_model.rotary_emb", mrope=((24, 20, 20), "interleaved"),
                      layers="model.language_model.layers")
    cohere = Family(table="interleaved", layout="interleaved")
    sliding_rope = Family(nope_layers=("full_attention",))  # RoPE on sliding layers only, NoPE on the full ones
    llama4 = dict(table="complex", layout="interleaved", nope_temperature=True, own_positions=("attn_temperature_tuning",))
    return {
        # the common pattern, kept as rows because the tests name them (patch needs no row for them)
        **{t: llama for t in ("llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "granite", "gemma")},
        # the logit cap (softcap=) and GPT-OSS's sinks (s_aux=, the layer's sinks parameter) go to
        # posenc.attention's softcap= and sinks=
        "gemma2": Family(softmax_term=("attn_logit_softcapping", "caps the logits (attn_logit_softcapping)",
                                       "softcap")),
        "gpt_oss": Family(table="half_width",
                          softmax_term=(None, "adds a learned sink per head to the softmax (s_aux)", "sinks")),
        # pairs (2i, 2i+1): cos/sin repeat_interleave'd, and their own rotate_half
        "cohere": cohere,
        **{t: Family(table="interleaved", layout="interleaved", nope_layers=("full_attention",))
           for t in ("cohere2", "cohere2_moe")},
        # GPT-J, CodeGen: (sin, cos) of half the rotated width, pairs (2i, 2i+1)
        **{t: Family("transformer.rotary_emb", table="sin_cos_half_width", layout="interleaved")
           for t in ("gptj", "codegen")},
        # rotary on their sliding-window layers only when the model has sliding windows (their attention:
        # `if self.sliding_window is not None`, EXAONE 4's "global NoPE for hybrid attention")
        **{t: sliding_rope for t in ("flint", "exaone4", "exaone_moe", "kolibri1", "afmoe")},
        "gemma3_text": Family(layer_thetas=_GEMMA3_THETAS),
        "gemma3": Family("model.language_model.rotary_emb", layer_thetas=_GEMMA3_THETAS,
                         layers="model.language_model.layers"),
        "gpt_neox": Family("gpt_neox.rotary_emb", partial_rotary_factor=0.25, embeddings="embed_in"),
        "falcon": falcon._family(),
        # a query temperature by position on every layer, outside the rotary (llama_4_scaling_beta)
        "ministral3": ministral3._family(),
        "llama4_text": Family(**llama4),
        "llama4": Family("language_model.model.rotary_emb", **llama4),
        "deepseek_v3": Family(interleave_key="rope_interleave", head_dim=("qk_nope_head_dim", "qk_rope_head_dim"),
                              rope_part="qk_rope_head_dim"),
        # MLA as DeepSeek-V3's, its rotary a complex freqs_cis applied to view_as_complex pairs (2i, 2i+1)
        "deepseek_v2": Family(table="complex", layout="interleaved", head_dim=("qk_nope_head_dim", "qk_rope_head_dim"),
                              rope_part="qk_rope_head_dim"),
        **{t: qwen_vl for t in ("qwen2_vl", "qwen2_5_vl")},
        **{t: qwen3_vl for t in ("qwen3_vl", "qwen3_vl_moe")},
        # no RoPE: a learned table (the table stops being added while patched) or ALiBi (off while patched)
        **{t: gpt2._family() for t in ("gpt2", "gpt_bigcode")},  # GPT-BigCode (StarCoder 1): GPT-2's layout
        "openai-gpt": openai_gpt._family(),  # GPT-1: a learned table, an attention of its own without a cache
        "gpt_neo": gpt_neo._family(),  # GPT-2's table, an attention of its own with local (windowed) layers
        "bert": bert._family(),  # an encoder: its learned table in embeddings, before the LayerNorm
        # vision encoders: a learned table of the patch grid (and class rows) in embeddings (families/vit.py)
        **{t: vit._family() for t in ("vit", "dinov2", "vit_msn")},  # ViT-MSN: ViT's embeddings
        "ijepa": vit._family(0),  # I-JEPA: ViT's, no class token
        "deit": vit._family(2),  # a class and a distillation token, each with its row
        "dinov2_with_registers": vit._family(antialias=True),  # registers after the table: no position
        "siglip_vision_model": vit._family(0, attr="position_embedding"),  # no class token; an nn.Embedding
        "siglip": vit._family(0, attr="position_embedding", layers="vision_model.encoder.layers",
                              sub_config="vision_config"),
        **{t: vit._refused(vit.BEIT) for t in ("beit", "data2vec-vision")},
        **{t: vit._refused(vit.SWIN) for t in ("swin", "swinv2", "donut-swin")},
        # speech encoders: their convolutional positions kept, a scheme in attention beside them (families/speech.py)
        **{t: speech._family() for t in ("wav2vec2", "hubert", "sew")},  # SEW: wav2vec2's convolution, squeezed frames
        "wavlm": speech._refused(speech.WAVLM),
        "wav2vec2-conformer": speech._refused(speech.CONFORMER),
        "dinov3_vit": dinov3._family(),  # RoPE on patch coordinates (posenc's dinov3), prefix tokens not rotated
        # RoBERTa's: the table counts non-pad tokens past padding_idx (families/roberta.py)
        **{t: roberta._family() for t in roberta.TYPES},
        # BERT's layout under BERT's names: the table in embeddings, the inner self-attention calls the interface
        **{t: bert._family() for t in ("ernie", "roc_bert", "mobilebert", "distilbert")},
        "electra": bert._family(own_spec=bert.embedding_spec),  # its table embedding_size wide
        "albert": Family(rotary=None, positions="learned", refused=bert.ALBERT),
        # encoder–decoders: each stack a model of its own (patching/stacks.py); BART's tables offset by 2
        **{t: bart._family() for t in bart.TYPES},
        **{t: bart._sinusoidal_family() for t in bart.SINUSOIDAL},  # a fixed sin | cos table in each stack
        **{t: bart._family(table_offset=0) for t in bart.UNOFFSET},  # learned tables, no offset
        "whisper": whisper._family(),  # its encoder's sinusoids (base 10000^(d/(d-2))), its decoder's learned table
        "opt": gpt2._offset_family(mask_positions=True),
        "biogpt": gpt2._offset_family(mask_positions=False),
        # no position in attention: a hybrid whose Mamba layers carry order (its attention layers: nope)
        "jamba": Family(rotary=None, positions="none", own_spec=_no_positions),
        # encoder-decoders with T5's bucketed relative bias in attention (the encoder's stack, then the decoder's)
        **{t: t5._family() for t in ("t5", "mt5", "umt5")},
        "longt5": t5._longt5_family(),  # local / transient-global encoder attention: refused by name
        "deberta-v2": deberta_v2._family(),  # disentangled attention that computes itself: a forward of posenc's
        "deberta": deberta_v2._v1_family(),  # DeBERTa v1: refused by name
        "bloom": bloom._family(),
        "mpt": mpt._family(),
    }


FAMILIES: dict[str, Family] = _families()
"""model type -> :class:`Family`: the one table of what differs from transformers' common
pattern (a composite vision-language type names its text model's rotary and layers)."""

COMMON = Family(rotary=None)
"""The record of a model found from structure alone (no row)."""


def family_row(model_type: str | None) -> Family | None:
    """The row of ``model_type``, or of its text model (``gemma3_text`` of ``gemma3``), or None."""
    if not isinstance(model_type, str):
        return None
    return FAMILIES.get(model_type)


def family_of_config(model_type: str | None, config: Any = None) -> Family | None:
    """The row of ``model_type``; without one, the record found from the config's modeling module
    (``found.found_family``: multi-head latent attention, an apply that rotates pairs (2i, 2i+1));
    else None (the common pattern)."""
    row = family_row(model_type)
    if row is not None or config is None:
        return row
    from posenc.interop.families.found import found_family

    return found_family(config)
