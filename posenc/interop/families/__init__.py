"""The transformers families ``posenc.interop.hf`` knows: one row per model type (where the model
keeps its rotary module, the table that module returns, the pairs its attention rotates, the
defaults its config leaves out), and the rope keys each rope type takes. A family is a row here,
not a branch in ``from_hf``.

Checked against transformers 5.24's modeling files: ``Gemma3RotaryEmbedding.forward(x,
position_ids, layer_type)`` (one module, one table per layer type); ``GptOssRotaryEmbedding``
returns ``cos, sin`` of ``[B, L, D/2]``; ``Llama4TextRotaryEmbedding`` returns the complex
``freqs_cis`` of ``[B, L, D/2]`` applied to ``view_as_complex`` pairs (2i, 2i+1);
``DeepseekV3`` reads the first half of ``cat(freqs, freqs)`` and rotates pairs (2i, 2i+1) when
``rope_interleave``; ``CohereRotaryEmbedding`` repeats each entry twice. tests/test_hf_families.py
builds each family and checks the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

HF_TABLES = ("rotate_half", "interleaved", "half_width", "complex")
"""What a transformers rotary module returns, each ``[B, L, ...]`` with the attention factor applied:
``rotate_half``: ``cos, sin = cat(c, c)`` (Llama and most); ``interleaved``: each entry repeated
twice, ``c0 c0 c1 c1 ...`` (Cohere); ``half_width``: ``cos, sin = c`` (GPT-OSS); ``complex``: one
complex tensor ``c + i·s`` (Llama 4's ``freqs_cis``), each ``[B, L, rotary_dim/2]``."""

_GEMMA3_THETAS = {"sliding_attention": ("rope_local_base_freq", 10000.0), "full_attention": ("rope_theta", 1e6)}


@dataclass(frozen=True)
class HFFamily:
    """A transformers model family: where its RoPE lives and what its attention expects."""

    rotary: str  # attribute path of the rotary module from the *ForCausalLM (or ...ForConditionalGeneration)
    table: str = "rotate_half"  # what that module returns: one of HF_TABLES
    layout: str = "half"  # the pairs its attention rotates ("half": (i, i + d/2); "interleaved": (2i, 2i+1))
    interleave_key: str | None = None  # a boolean config key that switches the layout to interleaved (default true)
    partial_rotary_factor: float = 1.0  # when the config gives none
    layer_thetas: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # legacy per-layer-type bases:
    # layer type -> (top-level config key, default), for config.json files without nested rope_parameters
    nope_temperature: bool = False  # default of attn_temperature_tuning in the layers no_rope_layers turns off


_LLAMA_STYLE = HFFamily("model.rotary_emb")
HF_FAMILIES: dict[str, HFFamily] = {
    **{name: _LLAMA_STYLE for name in ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2")},
    "cohere": HFFamily("model.rotary_emb", table="interleaved", layout="interleaved"),
    "gemma3_text": HFFamily("model.rotary_emb", layer_thetas=_GEMMA3_THETAS),
    "gemma3": HFFamily("model.language_model.rotary_emb", layer_thetas=_GEMMA3_THETAS),
    "gpt_neox": HFFamily("gpt_neox.rotary_emb", partial_rotary_factor=0.25),
    "falcon": HFFamily("transformer.rotary_emb"),
    "gpt_oss": HFFamily("model.rotary_emb", table="half_width"),
    "llama4_text": HFFamily("model.rotary_emb", table="complex", layout="interleaved", nope_temperature=True),
    "llama4": HFFamily("language_model.model.rotary_emb", table="complex", layout="interleaved",
                       nope_temperature=True),
    "deepseek_v3": HFFamily("model.rotary_emb", interleave_key="rope_interleave"),
    **{name: HFFamily("model.language_model.rotary_emb") for name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")},
}
"""model type -> its :class:`HFFamily` (a composite vision-language type names its text model's
rotary). A model type not listed is read as a Llama-style config, layout ``"half"``."""

# rope-parameter keys per rope type: transformers' own lists (``_validate_*_rope_parameters``),
# plus what every type may carry
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
_TYPE_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate"},
    "longrope": {"short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor"},
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
}
# top-level keys about rope that this module reads (every other ``*rope*``/``*rotary*`` key is refused)
_TOP_LEVEL_KEYS = {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "rotary_pct",
                   "rotary_emb_base", "rope_local_base_freq", "rope_interleave", "qk_rope_head_dim",
                   "no_rope_layers", "no_rope_layer_interval"}
