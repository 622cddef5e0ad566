"""``HF_FAMILIES``: the families ``posenc.interop.hf`` reads a config by, a view of the one table
``posenc.interop.families.FAMILIES`` (the rows with a rotary module), and the rope keys each rope
type takes. ``HFFamily`` is ``posenc.interop.families.Family``."""

from __future__ import annotations

from posenc.interop.families import _GEMMA3_THETAS, FAMILIES, HF_TABLES, Family  # noqa: F401

HFFamily = Family
HF_FAMILIES: dict[str, Family] = {t: f for t, f in FAMILIES.items() if f.positions == "rope" and f.rotary}
"""model type -> its :class:`Family` (a composite vision-language type names its text model's
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
