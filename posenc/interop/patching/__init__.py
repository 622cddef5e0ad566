"""``posenc.interop.patch(model, pe)``: any posenc scheme inside a transformers causal LM, or a
bidirectional encoder built like one (ModernBERT, EuroBERT, NomicBERT, GTE; BERT).

    import posenc.interop
    model = LlamaForCausalLM(config)              # or from_pretrained(...)
    posenc.interop.patch(model, "alibi")          # sizes from the model: num_heads, head_dim, d_model
    model(**batch).loss.backward()                # trains ALiBi's model; generate() decodes with the cache
    posenc.interop.unpatch(model)                 # the model's own RoPE again

**How.** A model's parts are found from its structure and its modeling module
(``posenc.interop.families``); a row of ``FAMILIES`` says only what differs from the common
pattern, never a branch; a model that fits neither is refused with its class named.

- A rotary scheme on every layer (``pe`` a ``rope``/``mrope`` module or SPEC) that rotates the
  pairs the model rotates over its rotary width: the model's rotary module is replaced by
  ``HFRotaryEmbedding(pe)`` (with the family's table: Llama 4's complex ``freqs_cis``); the model
  keeps its own attention implementation. ``patch(model, posenc.from_hf(model.config))`` leaves
  the logits unchanged. Another rotary (``"rope"``, pairs (i, i + d/2), on Llama 4, which rotates
  (2i, 2i+1)) goes through the attention function below.
- Every other case (bias, relative, content, none, per-layer patterns, rotary on some layers
  only): the model's rotary is neutralised (cos 1, sin 0: ``apply_rotary_pos_emb`` is then the
  identity), the attention function ``"posenc"`` is registered with transformers'
  ``AttentionInterface`` (and its mask function, ``sdpa_mask``, with ``AttentionMaskInterface``,
  so padding reaches it as a 4D bool mask; a sliding-window layer's window is ``posenc.attention``'s
  ``window=``, the mask dropped where it holds nothing else), and each attention layer holds its
  scheme as ``posenc_pe`` and its state as one ``posenc.interop.state.LayerState`` (the decoder
  holds each distinct module once, in ``posenc_modules``:
  their parameters train, and ``state_dict`` saves a shared table once). The
  function runs ``posenc.attention`` with grouped key/value heads as they are (never repeated),
  the model's mask, its scale, and positions from ``position_ids`` (left padding included).
- A family whose attention computes itself and never calls the ``AttentionInterface`` (Falcon,
  ``Family.forward``): each attention layer's ``forward`` is replaced while patched by one that
  splits its fused ``query_key_value`` into grouped heads, updates the cache and calls the same
  ``posenc_attention``; the model keeps its attention implementation and the mask it builds
  (4D bool under SDPA, additive under eager). Falcon's own ALiBi (``alibi=True``, no RoPE) is
  off while patched (``Family.decoder_positions``): the scheme replaces it.
- **Cached decoding.** The function keeps, per layer, the positions of the keys seen so far
  (and the layer inputs of the keys, for a scheme that reads them: FoX's full gate, PaTH),
  appended at each step and restarted when a call has no past keys: ``generate()`` through
  transformers' ``DynamicCache`` equals recomputing the whole sequence. Beam search (which
  reorders the cache) and static caches (keys padded to a maximum length) are not supported.
- A position effect of the model's own outside its rotary (Llama 4's query temperature in its
  NoPE layers, ``Family.own_positions``; Ministral 3's on every layer, ``Family.query_temperature``,
  checked against posenc's reading first and switched off by its rope parameter at 0 in each
  attention layer's view of the config) is switched off while patched: each layer runs the scheme
  it is given, and ``hf_layer_specs`` gives Llama 4's NoPE layers posenc's ``nope_temperature``
  and Ministral 3's layers ``rope`` with its ``query_temperature`` (logits unchanged). Its positions are ``position_ids`` (a left-padded row counts from its first
  token), where transformers' own counts from the start of the padded batch.
- Vision-language models (Qwen2-VL, Qwen2.5-VL): the text model's layers take the scheme, its
  vision tower keeps its attention implementation. Positions are those the model's rotary is
  called with, 3D ``[3, B, L]`` (time, height, width): posenc's ``mrope`` reads the three rows
  (image tokens included); a one-axis scheme takes text, whose rows are equal, and refuses image
  or video tokens with a ValueError.
- Multi-head latent attention (DeepSeek-V3, ``Family.rope_part``): each q/k head is ``[nope part,
  rope part]``; the attention function gives posenc ``[rope part, nope part]`` (the rope part in
  the model's pair order: the model's interleaved apply, neutralised, only de-interleaved it) and
  values of their own size (``v_head_dim``). A rotary scheme as wide as the rope part (``from_hf``,
  ``hf_layer_specs``: logits unchanged) rotates that part only; one as wide as the head (a bare
  ``"rope"``, sized ``qk_nope_head_dim + qk_rope_head_dim``) rotates all of it.
- Bidirectional self-attention (``is_causal`` False on the module, or in the call's keyword
  arguments: ``posenc.interop.classify``) runs ``posenc.attention`` with ``causal=False``, the
  model's own padding mask and local windows (ModernBERT's, read from its mask). BERT's learned
  table, in its embeddings before the LayerNorm, takes the scheme there (``families/bert.py``).
- Encoder–decoders with T5's relative buckets (T5, mT5, UMT5: ``Family.stack_lists``): the self-attention
  of both stacks, bidirectional in the encoder and causal in the decoder, each stack's passes
  counted by a position recorder of its own; cross-attention untouched; the model's own bias off
  while patched (``families/t5.py``). DeBERTa-v2/v3's disentangled attention, which computes
  itself, runs a forward of posenc's (``families/deberta_v2.py``).
- Layers not named in ``layers`` keep the model's own encoding (``hf_layer_specs(model.config)``).
- An additive scheme (sinusoidal, learned) is added to the token embeddings before the first
  layer (a pre-hook of the decoder, positions from ``position_ids``); attention then has none.

**Where.** This package is ``patch`` and ``unpatch``; ``checks`` (before anything is replaced),
``install`` (in and out of the model), ``attention_function`` (the runtime function ``"posenc"``)
and ``persistence`` (the record in the config, ``from_pretrained``) are its parts.

**Save and reload.** The patch is recorded in ``model.config.posenc`` (``{"modules": [spec, ...],
"layers": [index, ...]}``: each distinct module's spec, and which one each layer runs), which
``save_pretrained`` writes to ``config.json``; ``posenc.interop.from_pretrained(path)`` loads the
model, patches it again and loads the posenc parameters from the checkpoint (safetensors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from posenc.interop.configs import layer_sizes as _sizes, text_config as _text  # noqa: F401
from posenc.interop.families import FAMILIES, Family  # noqa: F401  (the one table; Family: public here too)
from posenc.interop.patching.attention_function import (  # noqa: F401  (public here too)
    _beyond_window, _grow, _query_positions, _window, posenc_attention,
)
from posenc.interop.patching.checks import _check_heads, _check_terms, _own_specs
from posenc.interop.patching.install import ATTENTION, _implementations, _install, _own_config, uninstall  # noqa: F401
from posenc.interop.patching.install import _start_from_own_table
from posenc.interop.patching.persistence import RECORD, forget, load_parameters, read_record, record  # noqa: F401
from posenc.interop.patching.stacks import patch_stacks, stacks_of, unpatch_stacks

PATTERN = "layers"  # {"scheme": "layers", "pattern": [...]}: a per-layer pattern, as the benchmark writes it


def family_of(model: nn.Module) -> tuple[str, Family]:
    """``model``'s model type and :class:`Family` record, found from its structure (its row of
    ``FAMILIES`` says what differs from the common pattern); ValueError naming its class and what
    was not found when it fits neither."""
    from posenc.interop.families.structure import find

    stacks = stacks_of(model)  # an encoder–decoder (BART's): each stack found as a model of its own
    if stacks is not None:
        return getattr(model.config, "model_type", None), find(stacks[0][1]).family
    return getattr(model.config, "model_type", None), find(model).family


def _parts(model: nn.Module) -> tuple[Family, nn.Module, str | None, list[nn.Module]]:
    """The family, the module that holds the rotary (the decoder), the rotary's attribute name (None:
    the family has no RoPE), the attention layers: found from the model's structure."""
    from posenc.interop.families.structure import find

    original = getattr(model, "_posenc_original", None)
    parts = original["parts"] if original is not None else find(model)  # patched: as patch found them
    return parts.family, parts.decoder, parts.rotary, parts.attentions


def _module(pe: Any, config: Any, family: Family, layer: int = 0) -> nn.Module:
    """One entry: a built module as it is; a SPEC or spec dict built with the sizes of the model's
    decoder layer ``layer``."""
    if isinstance(pe, nn.Module):
        if not hasattr(pe, "kind"):
            raise TypeError(f"pe must be a posenc module (with a kind), a SPEC or a spec dict, got {type(pe).__name__}")
        return pe
    import posenc
    from posenc.spec import fill_sizes

    sizes = _sizes(config, family, layer)
    spec = fill_sizes(pe, dim=sizes["d_model"], num_heads=sizes["num_heads"], head_dim=sizes["head_dim"],
                      length=getattr(_text(config), "max_position_embeddings", None))
    return posenc.build(spec)


def _entries(pe: Any, n: int) -> list[Any]:
    """``pe`` as one entry per layer: a pattern (a list, or ``{"scheme": "layers", "pattern": [...]}``)
    repeats over the layers (their number a multiple of its length); anything else is every layer's."""
    if isinstance(pe, Mapping) and pe.get("scheme") == PATTERN:
        extra = sorted(set(pe) - {"scheme", "pattern"})
        if extra or not isinstance(pe.get("pattern"), Sequence):
            raise ValueError(f"a per-layer pattern is {{'scheme': 'layers', 'pattern': [spec, ...]}}; got keys {sorted(pe)}")
        pe = list(pe["pattern"])
    if isinstance(pe, (list, tuple)):
        if not pe or n % len(pe):
            raise ValueError(f"a per-layer pattern of {len(pe)} entries must divide the model's {n} layers")
        return [pe[i % len(pe)] for i in range(n)]
    return [pe] * n


def _on_attention_layers(pe: Any, layers: Sequence[int] | None, parts: Any) -> tuple[Any, Sequence[int] | None]:
    """A hybrid (attention layers among state-space or linear-attention ones: Qwen 3.5, Jamba): a
    per-layer list as long as the decoder's layers (``hf_layer_specs``) keeps its attention layers'
    entries, and ``layers`` (the decoder's layer indices) become indices among the attention layers;
    a layer without attention in ``layers`` is refused."""
    if parts.num_layers == len(parts.attentions):
        return pe, layers
    if isinstance(pe, (list, tuple)) and len(pe) == parts.num_layers:
        pe = [pe[i] for i in parts.layer_indices]
    if layers is not None:
        others = [i for i in layers if i not in parts.layer_indices]
        if others:
            raise ValueError(f"layers {others} of {parts.name} have no attention (it has attention in layers "
                             f"{parts.layer_indices} only); posenc's schemes go on attention layers")
        layers = [parts.layer_indices.index(i) for i in layers]
    return pe, layers


def _build_modules(pe: Any, model: nn.Module, family: Family, n: int, layers: Sequence[int] | None,
                   layer_indices: Sequence[int] | None = None) -> list:
    """One module per layer: ``pe``'s (shared where the entry is shared and the layers' sizes are
    equal, or an additive spec repeated), None for a layer not in ``layers``; ``layer_indices``: the
    decoder layer of each attention layer (a hybrid's), whose sizes a spec takes."""
    chosen = list(range(n)) if layers is None else list(layers)
    for i in chosen:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
            raise ValueError(f"layers must hold layer indices in 0..{n - 1}, got {i!r}")
    entries = _entries(pe, n) if layers is None else _entries(pe, len(chosen))
    modules: list[nn.Module | None] = [None] * n
    built: dict[tuple, nn.Module] = {}  # one module per distinct entry object and sizes: a shared spec shares it
    for i, entry in zip(chosen, entries):
        layer = i if layer_indices is None else layer_indices[i]
        key = (id(entry), *(() if isinstance(entry, nn.Module) else _sizes(model.config, family, layer).values()))
        if key not in built:
            built[key] = _module(entry, model.config, family, layer)
        modules[i] = built[key]
    if all(getattr(m, "kind", None) == "additive" for m in modules) and len({json.dumps(m.spec, sort_keys=True)
                                                                           for m in modules}) == 1:
        modules = [modules[0]] * n  # one table on the embeddings: hf_layer_specs' n equal learned specs
    return modules


def _with_own_encodings(model: nn.Module, parts: Any, modules: list) -> list[dict[str, Any]] | None:
    """The model's own encoding's specs per attention layer (``_own_specs``; a hybrid's for its
    attention layers only), and each layer of ``modules`` that keeps it (None) given it, in place:
    one module per distinct spec (Gemma 3's two bases)."""
    n = len(parts.attentions)
    own = _own_specs(model, parts, needed=any(m is None for m in modules))
    if own is not None and len(own) == parts.num_layers != n:  # a hybrid: its attention layers' specs
        own = [own[i] for i in parts.layer_indices]
    if any(m is None for m in modules):  # the model's own encoding, layer by layer (Gemma 3's two bases)
        import posenc

        built_own: dict[str, nn.Module] = {}
        for i, spec in enumerate(own):
            if modules[i] is None:
                modules[i] = built_own.setdefault(json.dumps(spec, sort_keys=True), posenc.build(spec))
    return own


def patch(model: nn.Module, pe: Any, *, layers: Sequence[int] | None = None,
          context_parallel: str | None = None) -> nn.Module:
    """Puts ``pe`` into the transformers causal LM (or bidirectional encoder) ``model`` (in place) and
    returns it.

    Args:
        model: a transformers causal LM whose decoder posenc finds from its structure
            (``posenc.interop.families``: Llama, Qwen2/3, Mistral, Phi-3, Gemma 1-3, GPT-NeoX, Falcon,
            GPT-OSS, Llama 4, DeepSeek-V3 and the MLA families, Qwen2-VL, Cohere 2, GLM, the hybrids
            Qwen 3.5 and Qwen3-Next (on their attention layers), GPT-2, GPT-BigCode, OPT, BioGPT,
            BLOOM, MPT and the other families built like them; GPT-OSS, whose sinks need a softmax,
            takes every scheme but stick-breaking); another is refused with its class named and
            what was not found.
        pe: a SPEC (``"alibi"``, ``"t5:num_buckets=64"``: sizes ``num_heads``, ``head_dim``,
            ``d_model`` from the model's config), a spec dict, a built module, or a per-layer
            pattern (a list of those, or ``{"scheme": "layers", "pattern": [...]}``) that repeats
            over the layers, as the benchmark's ``--scheme`` takes it.
        layers: the indices of the layers that get ``pe`` (default: every layer); the others keep
            the model's own rotary, as ``posenc.from_hf(model.config)``. In a hybrid they are the
            decoder's layer indices, and each must hold an attention module.
        context_parallel: None, or a method of ``posenc.context_parallel_attention`` (``"allgather"``,
            ``"ring"``, ``"ulysses"``): under ``torch.distributed`` each rank calls the model on its
            shard of every sequence, ``input_ids[:, p]`` with ``position_ids=p[None]`` for ``p =
            posenc.shard_positions(L, world_size, rank)``, and every layer's attention spans the whole
            sequence across the ranks of the default group. A 2D key padding ``attention_mask`` of
            the shard's tokens (``mask[:, p]``) is taken, and a family's logit cap, sinks and sliding
            window (ring and ulysses); no 4D mask and no cache. The loss is the caller's, over the
            shard's tokens (``labels`` the next token of each global position), and the ranks'
            parameter gradients sum to one process's on the whole sequence
            (docs/guide/context_parallel.md).

    Returns:
        ``model``, patched; ``unpatch(model)`` restores it. A patched model is patched again
        from its original state.

    Raises:
        ValueError: the model's own rotary (or table, or ALiBi slopes) differs from posenc's reading
            of its config (checked at a few positions before anything is replaced), naming the family
            and the difference; a family posenc cannot find the parts of.
    """
    from posenc.interop.families.structure import find

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a transformers model (torch.nn.Module), got {type(model).__name__}")
    if context_parallel is not None:
        from posenc._validate import check_choice
        from posenc.parallel import METHODS

        check_choice("context_parallel", context_parallel, METHODS)
    if getattr(model, "_posenc_original", None) is not None:
        unpatch(model)  # first: a neutralised rotary is found as the model's own only once it is back
    stacks = stacks_of(model)  # an encoder–decoder: each stack patched as a model of its own
    if stacks is not None:
        return patch_stacks(model, stacks, pe, layers, context_parallel, patch, unpatch)
    parts = find(model)
    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    n = len(attentions)
    pe, layers = _on_attention_layers(pe, layers, parts)
    modules = _build_modules(pe, model, family, n, layers, parts.layer_indices)
    _check_terms(model, family, modules)
    _check_heads(model, family, modules, parts.layer_indices)
    if parts.table_holder is not None:  # BERT's table in the embeddings: an additive scheme as wide as it
        from posenc.interop.families.bert import check_width

        check_width(parts.name, getattr(parts.table_holder, family.table_attr), modules)
    own = _with_own_encodings(model, parts, modules)
    original = {"rotary": None if rotary is None else getattr(base, rotary), "attn": _implementations(model.config),
                "hooks": [], "parts": parts}
    first = modules[0]
    additive = [m for m in modules if getattr(m, "kind", None) == "additive"]
    if additive and (len(additive) != n or any(m is not first for m in modules)):
        raise ValueError("an additive scheme (sinusoidal, learned) goes on the token embeddings: give it for every "
                         "layer, alone (not in a per-layer pattern or with layers=)")
    if additive and parts.stack_of is not None:
        raise ValueError(f"an additive scheme (sinusoidal, learned) goes on the token embeddings, but {parts.name} "
                         "has an encoder and a decoder, each embedding its own tokens: give a scheme in attention")
    if additive and family.attention_only is not None:  # speech encoders: attention only
        raise ValueError(f"posenc.interop.patch: {parts.name} takes no additive scheme: {family.attention_only}")
    if family.positions == "learned":
        _start_from_own_table(modules, parts, model.config)
    if family.start is not None:  # posenc's modules that compute the model's own encoding start from its weights
        family.start(modules, parts)
    original["shared"] = _own_config(model)
    _install(model, parts, modules, own, original, additive, context_parallel)
    model._posenc_original = original
    record(model, modules)
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Restores a model that ``patch`` changed (its rotary or learned table, attention implementation
    and layers)."""
    original = getattr(model, "_posenc_original", None)
    if original is None:
        raise ValueError(f"{type(model).__name__} is not patched by posenc.interop.patch")
    model._posenc_original = None
    forget(model)  # from the model's own copy of its config, before the shared one is back
    if "stacks" in original:  # an encoder–decoder's (patching/stacks.py)
        unpatch_stacks(model, original, unpatch)
        return model
    uninstall(model, original)
    return model


def from_pretrained(path: str | Path, model_class: Any = None, **kwargs) -> nn.Module:
    """A model saved (``save_pretrained``) after ``patch``, loaded, patched again as its config records,
    with its posenc parameters loaded from the checkpoint's safetensors files.

    ``model_class`` defaults to ``transformers.AutoModelForCausalLM``; ``kwargs`` go to its
    ``from_pretrained`` (``local_files_only``, ``dtype``, ...)."""
    if model_class is None:
        from transformers import AutoModelForCausalLM as model_class
    path = Path(path)
    found = read_record(path)
    import posenc

    model = model_class.from_pretrained(path, **kwargs)
    built = [posenc.build(spec) for spec in found["modules"]]
    patch(model, [built[i] for i in found["layers"]])
    load_parameters(model, path)
    return model
