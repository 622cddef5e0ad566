"""transformers families: what posenc needs to know about a model family, as ONE table of
:class:`Family` records (``FAMILIES``), with a family's own code in a file of its own here
(``falcon.py``, ``gpt2.py``, ``bloom.py``).

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
  model's own outside its rotary (``own_positions``, ``decoder_positions``);
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

HF_TABLES = ("rotate_half", "interleaved", "half_width", "complex")
"""What a transformers rotary module returns, each ``[B, L, ...]`` with the attention factor applied:
``rotate_half``: ``cos, sin = cat(c, c)`` (Llama and most); ``interleaved``: each entry repeated
twice, ``c0 c0 c1 c1 ...`` (Cohere); ``half_width``: ``cos, sin = c`` (GPT-OSS); ``complex``: one
complex tensor ``c + i·s`` (Llama 4's ``freqs_cis``), each ``[B, L, rotary_dim/2]``."""

POSITIONS = ("rope", "learned", "alibi")
"""A family's own position encoding: RoPE through a rotary module, a learned absolute table added
to the token embeddings, ALiBi biases built by the decoder."""

_GEMMA3_THETAS = {"sliding_attention": ("rope_local_base_freq", 10000.0), "full_attention": ("rope_theta", 1e6)}


@dataclass(frozen=True)
class Family:
    """What differs in a transformers family from the common pattern (every field's default is the
    pattern: a Llama-style decoder found from its structure)."""

    # where the rotary module lives (attribute path from the *ForCausalLM or ...ForConditionalGeneration);
    # None: found from structure (a *RotaryEmbedding beside the decoder layers), or none (no RoPE)
    rotary: str | None = "model.rotary_emb"
    table: str = "rotate_half"  # what that module returns: one of HF_TABLES
    layout: str = "half"  # the pairs its attention rotates ("half": (i, i + d/2); "interleaved": (2i, 2i+1))
    interleave_key: str | None = None  # a boolean config key that switches the layout to interleaved (default true)
    partial_rotary_factor: float = 1.0  # when the config gives none
    layer_thetas: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # legacy per-layer-type bases:
    # layer type -> (top-level config key, default), for config.json files without nested rope_parameters
    nope_temperature: bool = False  # default of attn_temperature_tuning in the layers no_rope_layers turns off
    # multimodal RoPE: (sections, sections_layout) transformers' text rotary class uses when the config
    # has no mrope_section (and whether it interleaves them)
    mrope: tuple[tuple[int, ...], str] | None = None
    # -- patch: where the layers are (None: found from structure) and how they compute attention
    layers: str | None = None  # attribute path of the decoder layers' ModuleList
    attention: str | None = None  # attribute of a decoder layer holding its attention module
    rotary_only: str | None = None  # the reason, for a family whose attention posenc's cannot stand in for
    embeddings: str | None = None  # the decoder's token embedding (None: the model's get_input_embeddings())
    own_positions: tuple[str, ...] = ()  # boolean attributes of an attention layer that switch on a position
    # effect of its own outside the rotary (Llama 4's NoPE query temperature): off while patched, the
    # layer's posenc scheme (``nope_temperature`` from ``hf_layer_specs``) computes it instead
    head_dim: tuple[str, ...] = ()  # config keys whose sum is the query/key head size, when not head_dim
    rope_part: str | None = None  # config key of the rotary width at the end of each q/k head (MLA: [nope, rope])
    # a term of the family's softmax that posenc.attention computes (softcap=, sinks=) and a content
    # scheme takes only if it declares it: (config key that switches it on, or None if always on;
    # what it is; posenc.attention's keyword for it). A scheme that does not take it (stick-breaking:
    # no softmax for a sink; posenc.rowwise.check_takes) is refused on such a model rather than
    # dropping the term.
    softmax_term: tuple[str | None, str, str] | None = None
    # the attention layers' forward while patched, for a family whose layers compute attention
    # themselves and never call transformers' AttentionInterface (Falcon, BLOOM): it calls
    # posenc_attention as the interface would, and the model keeps its attention implementation
    # (and the mask it builds)
    forward: Callable[..., Any] | None = None
    # boolean attributes of the decoder (the module holding the rotary) that switch on a position
    # encoding of the model's own in place of its rotary (Falcon's ALiBi, use_alibi): off while
    # patched through the attention function, whose scheme replaces it
    decoder_positions: tuple[str, ...] = ()
    positions: str = "rope"  # the family's own encoding: one of POSITIONS
    table_attr: str | None = None  # "learned": the decoder's attribute holding the table (GPT-2's wpe)
    # "learned"/"alibi": config -> the posenc spec of the family's own encoding on every layer
    own_spec: Callable[[Any], dict[str, Any]] | None = None
    # "alibi": module -> the model's slopes [H] (compared with posenc's before patching)
    slopes: Callable[[Any], Any] | None = None


def _families() -> dict[str, Family]:
    from posenc.interop.families import bloom, falcon, gpt2

    llama = Family()
    qwen_vl = Family("model.language_model.rotary_emb", mrope=((16, 24, 24), "chunked"),
                     layers="model.language_model.layers")  # the text model's layers, not the vision tower's
    qwen3_vl = Family("model.language_model.rotary_emb", mrope=((24, 20, 20), "interleaved"),
                      layers="model.language_model.layers")
    cohere = Family(table="interleaved", layout="interleaved")
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
        **{t: cohere for t in ("cohere", "cohere2", "cohere2_moe")},
        "gemma3_text": Family(layer_thetas=_GEMMA3_THETAS),
        "gemma3": Family("model.language_model.rotary_emb", layer_thetas=_GEMMA3_THETAS,
                         layers="model.language_model.layers"),
        "gpt_neox": Family("gpt_neox.rotary_emb", partial_rotary_factor=0.25, embeddings="embed_in"),
        "falcon": falcon._family(),
        "llama4_text": Family(**llama4),
        "llama4": Family("language_model.model.rotary_emb", **llama4),
        "deepseek_v3": Family(interleave_key="rope_interleave", head_dim=("qk_nope_head_dim", "qk_rope_head_dim"),
                              rope_part="qk_rope_head_dim"),
        **{t: qwen_vl for t in ("qwen2_vl", "qwen2_5_vl")},
        **{t: qwen3_vl for t in ("qwen3_vl", "qwen3_vl_moe")},
        # no RoPE: a learned table (the table stops being added while patched) or ALiBi (off while patched)
        "gpt2": gpt2._family(),
        "bloom": bloom._family(),
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
