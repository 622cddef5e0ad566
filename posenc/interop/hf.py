"""Hugging Face transformers interop: a model config -> the posenc rotary module of that model, and
one posenc spec per decoder layer (:func:`hf_layer_specs`).

    import posenc
    from transformers import AutoConfig
    rope = posenc.from_hf(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))
    rope.spec   # {'scheme': 'rope', 'head_dim': 128, 'base': 500000.0, ..., 'scaling': {'type': 'llama3', ...}}

    model.model.rotary_emb = HFRotaryEmbedding(rope)   # transformers now uses posenc's exact tables

Both config styles are read, as objects (``PreTrainedConfig``) or plain dicts (``config.json``):
transformers 5's ``rope_parameters`` (with ``rope_type`` and ``rope_theta`` inside) and the
legacy ``rope_scaling`` (with ``type`` or ``rope_type``) plus top-level ``rope_theta`` and
``partial_rotary_factor``. transformers itself is never imported. The keys transformers names
otherwise than posenc (``rope_type`` → ``type``, ``original_max_position_embeddings`` →
``original_max_positions``, ``rope_theta`` → ``base``, ...) are ``posenc.scaling.TRANSFORMERS_KEYS``,
which the errors of a spec written with transformers' keys quote (tests/test_cli_errors.py checks
that this translation agrees with it).

**Rope types** are a table, ``HF_ROPE_TYPES`` (type -> the rope-parameter keys transformers
defines for it and the function that reads them), as transformers' ``ROPE_INIT_FUNCTIONS`` is:
``default``, ``linear``, ``dynamic`` (its original length is ``max_position_embeddings``),
``yarn``, ``longrope``, ``llama3`` and ``proportional`` (p-RoPE, Gemma 4's full-attention layers:
``rope``'s ``partial_rotary="proportional"``, frequencies over the whole head, zero past
``partial_rotary_factor``). Values transformers only warns about (a factor below 1, LongRoPE
lists of the wrong length, ...) raise ``ValueError`` here.

**Keys families add**: GPT-J's and CodeGen's top-level ``rotary_dim`` (in another family's
config, as MiniMax-M3's, whose model reads ``partial_rotary_factor`` instead, read only where it
equals ``head_dim * partial_rotary_factor``, else refused); Gemma 4's
``per_layer_config`` (its full-attention layers' ``head_dim``, read per ``layer_type``); Granite
SWA's ``layer_rope_theta`` (one base per layer: :func:`hf_layer_specs`); Ministral 3's
``llama_4_scaling_beta`` (a query temperature of its attention, outside the rotary:
``Family.query_temperature``, read by :func:`hf_layer_specs` as ``rope``'s ``query_temperature``;
``from_hf`` gives the rotary alone, and the copy of ``max_position_embeddings`` its rope parameters
carry is read where it equals the config's). Refused with their reason: DeepSeek-V4's
``compress_rope_theta``, RoFormer's ``rotary_value``, Molmo 2's ``rope_scaling_layers``,
``llama_4_scaling_beta`` in a family whose attention does not read it.

**Multimodal RoPE** (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): a config whose rope parameters carry
``mrope_section`` gives an ``mrope`` module, with ``sections_layout="interleaved"`` when
``mrope_interleaved`` is true (Qwen3-VL's config.json) and ``"chunked"`` when it is false or
absent. A config of one of these model types without ``mrope_section`` gets the sections and
layout transformers' rotary class falls back to (the ``mrope`` field of the family's row in
``FAMILIES``). A config whose rope
parameters live in ``text_config`` (the composite ``Qwen2VLConfig``/``Qwen3VLConfig``, Qwen3-VL's
config.json) is read there. ``rope_type: "mrope"`` (Qwen2-VL's legacy name) is ``default``.

**Families** (``HF_FAMILIES``, one row per transformers model type): where the causal LM keeps its
rotary module, what that module returns (``HF_TABLES``) and how its attention pairs dimensions:

- Gemma 3: one RoPE per layer type. ``config.json``'s ``rope_local_base_freq`` is the base of the
  ``"sliding_attention"`` layers (no scaling), ``rope_theta`` and ``rope_scaling`` those of the
  ``"full_attention"`` layers (defaults 10000 and 1e6, as ``Gemma3TextConfig``); transformers 5's
  ``rope_parameters`` keyed by layer type is read as it is. ``from_hf`` needs ``layer_type=``;
  ``HFRotaryEmbedding.from_config`` holds one rope per layer type and takes transformers'
  ``forward(x, position_ids, layer_type)``.
- GPT-OSS: a half-width table (``cos, sin [B, L, rotary_dim/2]``).
- Llama 4: interleaved pairs and a complex ``freqs_cis`` ``[B, L, rotary_dim/2]``; its NoPE layers
  (``no_rope_layers``, with ``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``) are
  ``nope_temperature`` in :func:`hf_layer_specs`; ``from_hf`` gives the RoPE of its RoPE layers.
- DeepSeek-V3 (MLA): the rotary part is ``qk_rope_head_dim`` wide; ``rope_interleave`` (true by
  default) rotates interleaved pairs, from transformers' ``rotate_half`` table; YaRN's ``mscale``
  pair is the rotary's attention factor (the softmax's ``mscale_all_dim`` correction stays the model's).
- GPT-NeoX (``rotary_pct``, 0.25 when absent), Falcon (RoPE only: ``alibi: true`` is refused),
  Cohere (interleaved pairs and table), Llama-style models (``model.rotary_emb``), Qwen2-VL/Qwen3-VL.

**Keys.** A rope-parameter key that transformers does not define for its rope type, and a
top-level key naming a rope or rotary setting (``*rope*``, ``*rotary*``) that this module does not
read, raise ``ValueError`` naming the key: a setting posenc would ignore is an error, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc._validate import check_float, check_int
from posenc.interop.configs import get as _get, model_type_of, text_config_and_type as _text_config
from posenc.interop.families import FAMILIES
from posenc.interop.families.record import HF_TABLES  # noqa: F401  (public here too)
from posenc.interop.hf_rotary import HFRotaryEmbedding, from_hf  # noqa: F401  (public here too)
from posenc.interop.rope_spec import (  # noqa: F401  (public here too)
    HF_FAMILIES, _family, _layer_rope_spec, _read_rope, hf_rope_spec, rope_layer_types,
)
from posenc.interop.rope_types import HF_ROPE_TYPES, HFRopeType  # noqa: F401  (public here too)


def _layer_types(config: Any, num_layers: int) -> list[str]:
    """``layer_types``, or Gemma 3's legacy ``sliding_window_pattern`` (every n-th layer global)."""
    types = _get(config, "layer_types")
    if types is None:
        pattern = check_int("sliding_window_pattern", _get(config, "sliding_window_pattern", 6), min=1)
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if len(types) != num_layers:
        raise ValueError(f"layer_types has {len(types)} entries; the config has num_hidden_layers={num_layers}")
    return list(types)


def hf_layer_specs(config: Any, *, layout: str | None = None) -> list[dict[str, Any]]:
    """One posenc spec per decoder layer of a transformers config (or of a model: its config, and
    its stacks where the family counts them), in layer order (``len == num_hidden_layers``), each
    one ``posenc.build`` takes: a per-layer pattern like the benchmark's.

    - one RoPE for every layer: ``[hf_rope_spec(config)] * num_hidden_layers``;
    - one RoPE per layer type (Gemma 3): layer ``i`` gets the spec of ``layer_types[i]``
      (``sliding_window_pattern`` when the config has no ``layer_types``), ``{"scheme": "nope"}``
      for a type whose rope parameters are None;
    - ``no_rope_layers`` (Llama 4, SmolLM3: 1 = RoPE, 0 = none; Llama 4's ``no_rope_layer_interval``,
      default 4, when absent): a layer without RoPE is ``{"scheme": "nope_temperature",
      "attn_scale": ..., "floor_scale": ...}`` when ``attn_temperature_tuning`` is true (Llama 4's
      default), else ``{"scheme": "nope"}``.

    - a family whose full-attention layers have no RoPE when it has sliding windows (Cohere 2,
      Flint, EXAONE 4: ``Family.nope_layers``): ``{"scheme": "nope"}`` on those layers.
    - ``layer_rope_theta`` (Granite SWA): layer ``i`` gets the rope with base ``layer_rope_theta[i]``,
      ``{"scheme": "nope"}`` where it is 0.
    - a query temperature of the family's attention (``Family.query_temperature``): Ministral 3's
      ``llama_4_scaling_beta`` β gives every rope layer ``query_temperature={"attn_scale": β,
      "floor_scale": original_max_position_embeddings, "position_offset": 0}`` (its queries times
      ``1 + β·log(1 + ⌊p / L₀⌋)``); :func:`from_hf` gives the rotary alone.
    - a family without RoPE (its record's ``own_spec``): GPT-2's learned table as
      ``{"scheme": "learned", "d_model": ..., "max_positions": ...}`` (``patch`` starts it from the
      model's table), BLOOM's ALiBi as ``{"scheme": "alibi", "num_heads": ...}``.

    - an encoder-decoder with a relative bias (T5, mT5, UMT5: ``Family.layer_specs``,
      ``families/t5.py``): one ``t5`` spec per self-attention layer, the encoder's
      (``bidirectional`` True) then the decoder's (False); the layers of one stack that share T5's
      table share one dict (``patch`` builds one module for them, started from the model's table).

    Masks (Gemma 3's sliding windows, Llama 4's chunked attention) stay the model's.
    """
    model = None
    if callable(getattr(config, "named_modules", None)) and hasattr(config, "config"):  # a model: its config
        model, config = config, config.config
    outer = FAMILIES.get(model_type_of(config))
    if outer is not None and outer.refused is not None:
        raise ValueError(f"posenc.interop.hf_layer_specs: model_type {model_type_of(config)!r} is not supported: "
                         f"{outer.refused}")
    if outer is not None and outer.sub_config is not None and _get(config, outer.sub_config) is not None:
        sub = _get(config, outer.sub_config)  # SigLIP's vision tower: its layers, its table
        return [outer.own_spec(config) for _ in range(check_int("num_hidden_layers", _get(sub, "num_hidden_layers"),
                                                                min=1))]
    text, model_type = _text_config(config)
    row = FAMILIES.get(model_type)
    if row is not None and row.layer_specs is not None:  # T5: every stack's layers (the model's, where given)
        return row.layer_specs(text, model)
    if row is None and _get(text, "is_encoder_decoder", False) is True:  # never read as a decoder's rope
        raise ValueError(f"posenc.interop.hf_layer_specs: model type {model_type!r} is an encoder–decoder without a "
                         "row of FAMILIES (posenc/interop/families); its positions are not read (those of T5, mT5, "
                         "UMT5, BART, mBART, PLBart, BlenderBot, Marian, Pegasus and Whisper are)")
    if row is not None and row.refused is not None:
        raise ValueError(f"posenc.interop.hf_layer_specs: model type {model_type!r} is not supported: {row.refused}")
    if row is not None and row.stacks:  # an encoder–decoder: the encoder's layers, then the decoder's
        return [dict(stack[3](text) if len(stack) > 3 else row.own_spec(text))
                for stack in row.stacks for _ in range(check_int(stack[1], _get(text, stack[1]), min=1))]
    family = _family(model_type, text)
    num_layers = check_int("num_hidden_layers", _get(text, "num_hidden_layers"), min=1)
    if row is not None and row.own_spec is not None:  # no RoPE: GPT-2's learned table, BLOOM's ALiBi
        return [row.own_spec(text) for _ in range(num_layers)]
    types = rope_layer_types(config)
    if types:
        by_type = {t: _layer_rope_spec(config, t, layout) for t in types}
        return [dict(by_type.get(t, {"scheme": "nope"})) for t in _layer_types(text, num_layers)]
    bases = _get(text, "layer_rope_theta")
    if bases is not None:  # Granite SWA: layer i's base, 0 for no RoPE
        if len(bases) != num_layers:
            raise ValueError(f"layer_rope_theta has {len(bases)} entries; the config has num_hidden_layers={num_layers}")
        one = {k: v for k, v in (text.items() if isinstance(text, Mapping) else text.to_dict().items())
               if k != "layer_rope_theta"}
        return [{**_layer_rope_spec(one, layout=layout), "base": float(b)} if b else {"scheme": "nope"} for b in bases]
    rope = _layer_rope_spec(config, layout=layout)
    use_rope = _get(text, "no_rope_layers")
    nope_family = family is not None and family.nope_temperature
    if use_rope is None and nope_family:
        interval = check_int("no_rope_layer_interval", _get(text, "no_rope_layer_interval", 4), min=1)
        use_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if use_rope is None and row is not None and row.nope_layers and _get(text, "sliding_window") is not None:
        use_rope = [int(t not in row.nope_layers) for t in _layer_types(text, num_layers)]  # Cohere 2, Flint, EXAONE 4
    if use_rope is None:
        return [dict(rope) for _ in range(num_layers)]
    use_rope = list(use_rope)
    if len(use_rope) != num_layers or any(u not in (0, 1) for u in use_rope):
        raise ValueError(f"no_rope_layers must be {num_layers} entries (num_hidden_layers), each 0 (no RoPE) "
                         f"or 1 (RoPE); got {use_rope!r}")
    tuning = _get(text, "attn_temperature_tuning", nope_family)
    if not isinstance(tuning, bool):
        raise TypeError(f"attn_temperature_tuning must be true or false, got {tuning!r}")
    nope: dict[str, Any] = {"scheme": "nope"}
    if tuning:
        nope = {"scheme": "nope_temperature",
                "attn_scale": check_float("attn_scale", _get(text, "attn_scale", 0.1), min=0.0),
                "floor_scale": check_float("floor_scale", _get(text, "floor_scale", 8192), min=0.0, min_open=True)}
    return [dict(rope) if u else dict(nope) for u in use_rope]
