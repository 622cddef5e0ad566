"""The :class:`Family` record (what differs in a transformers family from the common pattern) and
the names its fields take; the table of records is ``posenc.interop.families.FAMILIES``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

HF_TABLES = ("rotate_half", "interleaved", "half_width", "complex", "sin_cos_half_width")
"""What a transformers rotary module returns, each ``[B, L, ...]`` with the attention factor applied:
``rotate_half``: ``cos, sin = cat(c, c)`` (Llama and most); ``interleaved``: each entry repeated
twice, ``c0 c0 c1 c1 ...`` (Cohere); ``half_width``: ``cos, sin = c`` (GPT-OSS); ``complex``: one
complex tensor ``c + i·s`` (Llama 4's ``freqs_cis``), each ``[B, L, rotary_dim/2]``;
``sin_cos_half_width``: ``sin, cos = s, c`` in that order (GPT-J, CodeGen)."""

POSITIONS = ("rope", "learned", "alibi", "none", "relative_bias", "grid")
"""A family's own position encoding: RoPE through a rotary module, a learned absolute table added
to the token embeddings, ALiBi biases built by the decoder, none in its attention (Jamba: its
Mamba layers carry order; ``hf_layer_specs`` gives its attention layers ``nope``), a learned
bias of bucketed relative distance computed in attention (T5's: ``families/t5.py``), or a learned
table of a patch grid (``"grid"``: ViT, DeiT, DINOv2, SigLIP's vision tower; ``families/vit.py``)."""

_GEMMA3_THETAS = {"sliding_attention": ("rope_local_base_freq", 10000.0), "full_attention": ("rope_theta", 1e6)}


@dataclass(frozen=True)
class QueryTemperature:
    """A query temperature of a family's attention, outside its rotary, switched on by a rope
    parameter (Ministral 3's ``llama_4_scaling_beta``): ``spec(rope_parameters)`` gives ``rope``'s
    ``query_temperature`` of it (``hf_layer_specs``); ``model_scale(attention, positions [1, L])``
    is the model's own ``τ [L]`` (its modeling module's function), compared with posenc's before
    ``patch`` switches it off (``key`` set to 0 in the attention layers' view of their config)."""

    key: str
    spec: Callable[[Mapping[str, Any]], dict[str, Any]]
    model_scale: Callable[[Any, Any], Any]


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
    # the way its apply_rotary_pos_emb turns each pair by its rotary's angles (posenc.rotary.DIRECTIONS):
    # "counterclockwise" (transformers' rotate_half), "clockwise" (NanoChat's rotate_half returns (x2, -x1)):
    # from_hf gives rope's direction= of it, HFRotaryEmbedding turns its table back for that apply
    direction: str = "counterclockwise"
    partial_rotary_factor: float = 1.0  # when the config gives none
    layer_thetas: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # legacy per-layer-type bases:
    # layer type -> (top-level config key, default), for config.json files without nested rope_parameters
    nope_layers: tuple[str, ...] = ()  # layer types whose attention applies no rotary (Flint's full-attention layers)
    nope_temperature: bool = False  # default of attn_temperature_tuning in the layers no_rope_layers turns off
    # multimodal RoPE: (sections, sections_layout) transformers' text rotary class uses when the config
    # has no mrope_section (and whether it interleaves them)
    mrope: tuple[tuple[int, ...], str] | None = None
    # -- patch: where the layers are (None: found from structure) and how they compute attention
    layers: str | None = None  # attribute path of the decoder layers' ModuleList
    attention: str | None = None  # attribute (path) of a decoder layer holding its attention module
    rotary_only: str | None = None  # the reason, for a family whose attention posenc's cannot stand in for
    embeddings: str | None = None  # the decoder's token embedding (None: the model's get_input_embeddings())
    own_positions: tuple[str, ...] = ()  # boolean attributes of an attention layer that switch on a position
    # effect of its own outside the rotary (Llama 4's NoPE query temperature): off while patched, the
    # layer's posenc scheme (``nope_temperature`` from ``hf_layer_specs``) computes it instead
    query_temperature: QueryTemperature | None = None  # Ministral 3's (families/ministral3.py)
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
    encoder: bool = False  # that forward runs an encoder's attention, bidirectional (DeBERTa-v2: no causal mask)
    # boolean attributes of the decoder (the module holding the rotary) that switch on a position
    # encoding of the model's own in place of its rotary (Falcon's ALiBi, use_alibi): off while
    # patched through the attention function, whose scheme replaces it
    decoder_positions: tuple[str, ...] = ()
    positions: str = "rope"  # the family's own encoding: one of POSITIONS
    table_attr: str | None = None  # "learned": the decoder's attribute holding the table (GPT-2's wpe)
    # "learned": the table's row of position 0 (OPT and BioGPT: 2), or config -> that row (RoBERTa: pad_token_id + 1)
    table_offset: int | Callable[[Any], int] = 0
    # "learned": the name of the model's module holding the table when it is not the decoder (BERT's
    # "embeddings", before its LayerNorm): there the table itself takes the scheme (families/bert.py)
    table_holder: str | None = None
    mask_positions: bool = False  # positions counted from the attention mask when none are given (OPT, BioGPT)
    # "learned"/"alibi"/"none": config -> the posenc spec of the family's own encoding on every layer
    own_spec: Callable[[Any], dict[str, Any]] | None = None
    # "alibi": module -> the model's slopes [H] (compared with posenc's before patching)
    slopes: Callable[[Any], Any] | None = None
    # -- an encoder-decoder (T5): the name of each stack's ModuleList of layers ("block"); every ModuleList of that
    # name holds layers (the encoder's, then the decoder's), and each stack's forward is one pass over its own
    stack_lists: str | None = None
    # (config, model or None) -> the own encoding's spec of every attention layer, all stacks in order, when
    # one spec per layer of num_hidden_layers does not say it (T5: the encoder's buckets, then the decoder's)
    layer_specs: Callable[[Any, Any], list[dict[str, Any]]] | None = None
    # (name, parts, config) -> None: the family's own check before replacing (T5's buckets against posenc's),
    # ValueError naming what differs; and (modules, parts) -> None: posenc's modules started from the model's
    # own weights where they compute the model's own encoding (T5's bias tables)
    check: Callable[[str, Any, Any], None] | None = None
    start: Callable[[list, Any], None] | None = None
    # "grid": where a vision family keeps its table and its prefix rows (families/vit.py's GridTable)
    grid_table: Any = None
    # the sub-config of the model patch works on, when not the text config (SigLIP's "vision_config")
    sub_config: str | None = None
    # a family posenc does not support: the reason, given by patch and hf_layer_specs (BEiT's, Swin's
    # windowed relative tables; WavLM's gated bias; ALBERT's layers shared across depth)
    refused: str | None = None
    # the reason an additive scheme is refused where the family's attention takes the others (speech
    # encoders: their convolutional positions kept on the features, families/speech.py)
    attention_only: str | None = None
    # an encoder–decoder's stacks (patching/stacks.py), in order: (a word of the stack's class name,
    # the config key of its layer count, of its head count[, config -> the stack's own spec when not
    # own_spec's: Whisper's sinusoidal encoder]); each stack is patched as a model of its own
    stacks: tuple[tuple[Any, ...], ...] = ()




def table_offset(family: Family, config: Any) -> int:
    """The row of position 0 in ``family``'s learned table for ``config`` (``Family.table_offset``)."""
    offset = family.table_offset
    return int(offset(config)) if callable(offset) else offset


def own_spec_of(family: Family, config: Any, holder: Any = None) -> dict[str, Any]:
    """The posenc spec of ``family``'s own encoding: a stack's own (``Family.stacks``' fourth entry)
    where ``holder`` is that stack (its class named by the entry's word), else ``family.own_spec``."""
    for stack in family.stacks:
        if len(stack) > 3 and holder is not None and stack[0] in type(holder).__name__:
            return stack[3](config)
    return family.own_spec(config)
