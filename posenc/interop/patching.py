"""``posenc.interop.patch(model, pe)``: any posenc scheme inside a transformers causal LM.

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
  scheme as ``posenc_pe`` (the decoder holds each distinct module once, in ``posenc_modules``:
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
- Layers not named in ``layers`` keep the model's own encoding (``hf_layer_specs(model.config)``).
- An additive scheme (sinusoidal, learned) is added to the token embeddings before the first
  layer (a pre-hook of the decoder, positions from ``position_ids``); attention then has none.

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

import torch
from torch import nn

ATTENTION = "posenc"  # the name registered with transformers' AttentionInterface and AttentionMaskInterface
RECORD = "posenc"  # the config attribute that records a patch: {"layers": [spec, ...]}
PATTERN = "layers"  # {"scheme": "layers", "pattern": [...]}: a per-layer pattern, as the benchmark writes it


from posenc.interop.configs import text_config as _text  # noqa: E402  (the decoder's config)
from posenc.interop.families import FAMILIES, Family  # noqa: E402,F401  (the one table; Family: public here too)


def family_of(model: nn.Module) -> tuple[str, Family]:
    """``model``'s model type and :class:`Family` record, found from its structure (its row of
    ``FAMILIES`` says what differs from the common pattern); ValueError naming its class and what
    was not found when it fits neither."""
    from posenc.interop.families.structure import find

    return getattr(model.config, "model_type", None), find(model).family


def _parts(model: nn.Module) -> tuple[Family, nn.Module, str | None, list[nn.Module]]:
    """The family, the module that holds the rotary (the decoder), the rotary's attribute name (None:
    the family has no RoPE), the attention layers: found from the model's structure."""
    from posenc.interop.families.structure import find

    original = getattr(model, "_posenc_original", None)
    parts = original["parts"] if original is not None else find(model)  # patched: as patch found them
    return parts.family, parts.decoder, parts.rotary, parts.attentions




def _sizes(config: Any, family: Family, layer: int = 0) -> dict[str, int]:
    """The sizes of decoder layer ``layer``: a heterogeneous config's (Gemma 4, dots3: sizes per layer
    in ``per_layer_config``, whose global read transformers refuses) from that layer's view."""
    config = _text(config)
    if getattr(config, "is_heterogeneous", False):
        config = config.per_layer_config[layer]
    heads = config.num_attention_heads
    if family.head_dim:  # DeepSeek-V3: q/k heads of qk_nope_head_dim + qk_rope_head_dim
        head_dim = sum(getattr(config, key) for key in family.head_dim)
    else:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"num_heads": heads, "head_dim": head_dim, "d_model": config.hidden_size}


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


class _ConfigView:
    """An attention layer's config while patched: the model's (read live: its attention
    implementation), with the given attributes replaced (Ministral 3's ``rope_parameters`` with
    ``llama_4_scaling_beta`` 0, so its own query temperature is 1 and the layer's scheme gives it)."""

    def __init__(self, config: Any, **replaced: Any) -> None:
        self.__dict__["_config"] = config
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_config"], name)

    def __setattr__(self, name: str, value: Any) -> None:  # set_attn_implementation while patched: the model's
        setattr(self.__dict__["_config"], name, value)


class _NeutralRotary(nn.Module):
    """The model's rotary with cos 1 and sin 0 (``apply_rotary_pos_emb`` becomes the identity), or
    for a complex table (Llama 4's ``freqs_cis``) 1 + 0i: positions are posenc's, applied in the
    attention function. ``record``: the neutral rotary that keeps the call's positions, when this
    one is one more of the decoder's (Granite SWA's ``rotary_embs``, one per base)."""

    def __init__(self, original: nn.Module, record: nn.Module | None = None) -> None:
        super().__init__()
        self.original = original
        self.__dict__["record"] = self if record is None else record

    def __getattr__(self, name: str) -> Any:  # the original's attributes (Granite SWA reads .config)
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("original"), name)

    def forward(self, x, position_ids, *args, **kwargs):
        self.record.__dict__["position_ids"] = position_ids  # this call's, for a family whose layers do not pass them on
        self.record.__dict__["step"] = self.record.__dict__.get("step", 0) + 1  # a new forward: _grow appends again
        table = self.original(x, position_ids, *args, **kwargs)
        if isinstance(table, torch.Tensor):  # freqs_cis = cos + i·sin
            return torch.ones_like(table)
        cos, sin = table
        return torch.ones_like(cos), torch.zeros_like(sin)


def _fits_rotary_module(pe: nn.Module | None, own_specs: list[dict[str, Any]]) -> bool:
    """Whether the model's own attention computes ``pe`` when its rotary module returns ``pe``'s table:
    a ``rope``/``mrope`` rotating the pairs the model rotates (its layout, ``own_specs``: the
    model's own encoding, checked against its rotary) over its rotary width. Another rotary
    (``"rope"`` with ``layout="half"`` on Llama 4, which rotates pairs (2i, 2i+1)) runs through the
    attention function, where posenc applies it."""
    if getattr(pe, "kind", None) != "rotary" or getattr(pe, "name", None) not in ("rope", "mrope"):
        return False
    if getattr(pe, "query_temperature", None) is not None:  # the queries' own scale: posenc's attention applies it
        return False
    own = next((s for s in own_specs if s["scheme"] in ("rope", "mrope")), None)
    if own is None or pe.spec.get("axes", 1) != 1:
        return False
    width = pe.spec.get("rotary_dim") or pe.spec["head_dim"]
    if pe.spec["scheme"] != own["scheme"] or pe.spec["layout"] != own["layout"]:
        return False
    if pe.spec["scheme"] == "mrope" and any(pe.spec.get(k) != own.get(k) for k in ("sections", "sections_layout")):
        return False  # the model's own apply picks its mrope_section of each table
    return width == (own.get("rotary_dim") or own["head_dim"])


def _interleaved(config: Any) -> bool:
    """Whether the model rotates pairs (2i, 2i+1) (its family's layout and interleave key)."""
    from posenc.interop.families import family_of_config

    row = family_of_config(config.model_type, config)
    if row is None:
        return False
    if row.interleave_key is not None:
        return bool(getattr(config, row.interleave_key, True))
    return row.layout == "interleaved"


def _implementations(config: Any) -> dict[str, str]:
    """The attention implementation of the model (key ``""``) and of each sub-config (``text_config``,
    ``vision_config``), as ``set_attn_implementation`` takes them."""
    subs = {key: getattr(config, key) for key in getattr(config, "sub_configs", {})}
    return {"": config._attn_implementation, **{k: c._attn_implementation for k, c in subs.items() if c is not None}}


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, posenc_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def _grow(module: nn.Module, name: str, new: torch.Tensor, lq: int, lk: int) -> torch.Tensor:
    """The per-layer record ``name`` of every key so far (``[B, Lk, ...]``): ``new`` (the queries')
    appended to what earlier calls kept (its newest ``Lk − Lq`` entries: a sliding-window layer's
    cache drops the oldest keys), restarted when this call has no past keys; a second call of the
    layer in one forward (DiffLlama calls the attention function twice; the neutral rotary counts the
    forwards, ``step``) finds its keys already there."""
    if lk == lq:
        whole = new
    else:
        past = module.__dict__.get(name)
        step = getattr(module.__dict__.get("_posenc_rotary"), "step", None)  # the decoder's forward calls so far
        if step is not None and module.__dict__.get(name + "_step") == step and past is not None:
            return past  # the layer's second call this step (DiffLlama's two attention maps): already appended
        if past is not None and past.shape[1] > lk - lq:  # a sliding-window cache keeps only the newest keys
            past = past[:, past.shape[1] - (lk - lq):]
        if past is None or past.shape[1] != lk - lq or past.shape[0] != new.shape[0]:
            raise RuntimeError(f"posenc.interop: the cache holds {lk - lq} past keys but this layer kept "
                               f"{None if past is None else past.shape[1]} of them; patched models decode with "
                               "transformers' DynamicCache in order (no beam search, no static cache)")
        whole = torch.cat([past, new], dim=1)
    module.__dict__[name] = whole
    module.__dict__[name + "_step"] = getattr(module.__dict__.get("_posenc_rotary"), "step", None)
    return whole


def _one_row(p: torch.Tensor, pe: Any) -> torch.Tensor:
    """Multimodal RoPE's rows ``[A, B, L]`` as one position per token ``[B, L]``: the rows must be
    equal (text); image or video tokens, whose rows differ, are refused."""
    if p.shape[0] > 1 and not bool((p == p[:1]).all()):
        raise ValueError(f"posenc.interop: the model's position_ids have {p.shape[0]} rows that differ (image or "
                         f"video tokens: time, height, width), but pe {getattr(pe, 'name', None)!r} takes one "
                         "position per token; patch this model with mrope, or give it text-only inputs")
    return p[0]


def _query_positions(module: nn.Module, pe: Any, position_ids: torch.Tensor | None, b: int, lq: int, lk: int,
                     device: torch.device) -> torch.Tensor:
    """The queries' positions: those the model's rotary was called with this forward (what its own
    RoPE would have used; Llama 4's layers do not pass them on), else the layer's ``position_ids``,
    else the last ``Lq`` of ``0..Lk-1``. ``[B, Lq]``, or ``[B, Lq, A]`` for a scheme of ``A`` axes.

    Multimodal RoPE's ``[A, B, L]`` rows (Qwen2-VL: time, height, width; ``[1, B, L]`` when
    decoding) go to an ``A``-axis scheme (``mrope``) as they are; a one-axis scheme takes them
    where the rows are equal (text), and image or video tokens, whose rows differ, are refused."""
    seen = getattr(module.__dict__.get("_posenc_rotary"), "position_ids", None)
    p = seen if seen is not None else position_ids
    if p is None:
        p = torch.arange(lk - lq, lk, device=device).unsqueeze(0)
    p = p.to(device).long().clamp(min=0)  # OPT's padding tokens at -1 (masked keys: any position does)
    if p.shape[-1] > lq:  # the rotary called with every key's position (Qwen4-Exp's, for its indexer): the last Lq
        p = p[..., p.shape[-1] - lq:]
    axes = getattr(pe, "axes", 1)
    if p.dim() == 3:  # (A, B, L): multimodal RoPE's rows
        if axes > 1:
            if p.shape[0] not in (1, axes):
                raise ValueError(f"pe {pe.name!r} takes {axes} position axes but the model's position_ids have "
                                 f"{p.shape[0]} rows (shape {list(p.shape)})")
            return p.expand(axes, -1, -1).permute(1, 2, 0).expand(b, lq, axes)  # (B, Lq, A)
        p = _one_row(p, pe)
    if axes > 1:  # text: the same position on every axis
        return p.unsqueeze(-1).expand(b, lq, axes)
    return p.expand(b, lq)  # (B, Lq)


def _rope_part_first(x: torch.Tensor, width: int, interleaved: bool) -> torch.Tensor:
    """An MLA head ``[nope part, rope part]`` (``x [B, H, L, D]``, the rope part its last ``width``
    dims) as ``[rope part, nope part]``, the rope part in the model's own pair order: the model's
    interleaved apply with cos 1, sin 0 left it de-interleaved (``x[0::2], x[1::2]``), which is
    undone. The same permutation of q and k leaves every ``q·k`` as it was."""
    nope, rope = x[..., : x.shape[-1] - width], x[..., x.shape[-1] - width:]
    if interleaved:  # (a_0 .. a_{w/2-1}, b_0 .. b_{w/2-1}) -> (a_0, b_0, a_1, b_1, ...)
        rope = torch.stack((rope[..., : width // 2], rope[..., width // 2:]), dim=-1).flatten(-2)
    return torch.cat([rope, nope], dim=-1)  # (B, H, L, D)


def posenc_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention function ``"posenc"``: ``query [B, H, Lq, D]``, ``key, value [B, H_kv,
    Lk, D]`` (grouped heads as they are) -> ``([B, Lq, H, D], None)`` through ``posenc.attention``
    with the layer's ``posenc_pe``, causal, the model's mask and scale, the keys' positions, and
    the family's softmax terms: Gemma 2's ``softcap`` and GPT-OSS's ``s_aux`` (its sinks) as
    ``posenc.attention``'s ``softcap=`` and ``sinks=``. A sliding-window layer's ``sliding_window``
    (Mistral, Gemma 2/3, Qwen 2, GPT-OSS, Cohere 2, ...) is ``posenc.attention``'s ``window=``, and
    the model's 4D mask is dropped when it says nothing more (no padding): every backend then
    skips the keys outside the window (``_window``, ``_beyond_window``)."""
    import posenc

    if kwargs.get("is_causal", getattr(module, "is_causal", True)) is False:  # the call's own word, as SDPA reads it
        raise ValueError(f"posenc.interop: {type(module).__name__} calls the attention function with is_causal=False "
                         "(bidirectional attention), which is not supported yet: posenc's attention function runs "
                         "causal self-attention")
    # Gemma 2's logit cap (its scaling is query_pre_attn_scalar^-1/2, passed as scaling) and
    # GPT-OSS's sinks (the layer's sinks parameter [H], passed as s_aux): posenc.attention's own
    terms = {"softcap": kwargs["softcap"]} if kwargs.get("softcap") is not None else {}
    if dropout:  # the model's own rate, which transformers passes in training only (0 in eval)
        terms["dropout_p"] = float(dropout)
    if kwargs.get("s_aux") is not None:
        terms["sinks"] = kwargs["s_aux"]
    pe = module.posenc_pe  # None: no position in attention (NoPE, or an additive scheme on the embeddings)
    b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
    kind = "none" if pe is None else pe.kind
    extra: dict[str, Any] = {}
    if kind != "content":
        q_pos = _query_positions(module, pe, kwargs.get("position_ids"), b, lq, lk, query.device)  # (B, Lq[, A])
        k_pos = _grow(module, "_posenc_key_positions", q_pos, lq, lk)  # (B, Lk[, A])
        extra = {"q_positions": q_pos, "k_positions": k_pos}
    if pe is not None and pe.reads_hidden:
        extra["hidden"] = _grow(module, "_posenc_hidden", module.__dict__["_posenc_input"], lq, lk)
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-1] != lk:  # a static cache's padded keys
        raise ValueError(f"posenc.interop: the attention mask covers {mask.shape[-1]} keys but the layer has {lk}; "
                         "static caches are not supported (use DynamicCache)")
    window = _window(pe, kwargs.get("sliding_window"))
    if window is not None:
        terms["window"] = window
        mask = _beyond_window(mask, lq, lk, window)
    pe_arg = None if getattr(pe, "name", None) == "nope" else pe
    part = module.__dict__.get("_posenc_rope_part")  # MLA (DeepSeek-V3): (rope width, interleaved)
    if part is not None:
        width = part[0]
        query, key = _rope_part_first(query, *part), _rope_part_first(key, *part)
        if kind == "rotary" and pe.head_dim == width < query.shape[-1]:  # the rope part only
            # posenc.attention's own rotation step (RotaryEncoding.rotate: observe, keys, queries)
            q_rope, k_rope = pe.rotate(query[..., :width], key[..., :width], extra["q_positions"], extra["k_positions"])
            key = torch.cat([k_rope, key[..., width:]], dim=-1)
            query = torch.cat([q_rope, query[..., width:]], dim=-1)
            pe_arg = None
    method = module.__dict__.get("_posenc_context_parallel")
    if method is not None and "dropout_p" in terms:
        raise ValueError(f"posenc.interop: context_parallel={method!r} has no attention dropout; set the model's "
                         f"attention dropout to 0 (got {terms['dropout_p']}) or call model.eval()")
    if method is not None:  # each rank holds its shard of the sequence (patch(..., context_parallel=))
        out = _sharded(module, pe, pe_arg, query, key, value, extra, kwargs.get("position_ids"), scaling, terms,
                       method)
        return out.transpose(1, 2).contiguous(), None
    out = posenc.attention(query, key, value, pe_arg, causal=True, scale=scaling, attention_mask=mask, **extra, **terms)
    return out.transpose(1, 2).contiguous(), None


class _ShardPadding:
    """The ``attention_mask`` the decoder was called with under ``patch(..., context_parallel=)``: a 2D
    key padding mask ``[B, Ll]`` of the rank's tokens, or None. The model's own 4D mask is made for
    the shard alone (causality by local index; transformers reads a packing into the shard's jumping
    position_ids), so ``_sharded`` takes the padding from here instead of from that mask."""

    mask: torch.Tensor | None = None

    def hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dim() != 2):
            raise ValueError("patch(..., context_parallel=) takes a key padding attention_mask [B, Ll] of the shard's "
                             f"tokens (1: a token, 0: padding), got "
                             f"{list(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__}; "
                             "a 4D mask (another visibility) is not taken: pack documents instead")
        self.mask = mask


def _sharded(module, pe, pe_arg, query, key, value, extra, position_ids, scaling, terms, method):
    """``posenc.context_parallel_attention`` of a rank's shard (``patch(..., context_parallel=method)``):
    the shard's global positions are the ``position_ids`` the model was called with (one row for
    the batch; ``posenc.shard_positions``), causal over the whole sequence, with the family's logit
    cap, sinks and sliding window (``terms``) and the model's 2D key padding mask of the shard's
    tokens (``_ShardPadding``); the model's own 4D mask, made for the shard alone, is not used."""
    import posenc

    b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
    if lq != lk:
        raise ValueError(f"context_parallel={method!r} runs whole sequences without a cache (training, prefill); "
                         f"got {lq} queries over {lk} keys")
    positions = _query_positions(module, pe, position_ids, b, lq, lk, query.device)  # (B, Lq)
    if positions.dim() != 2 or not bool((positions == positions[:1]).all()):
        raise ValueError(f"context_parallel={method!r} takes position_ids [1, Ll] (one row for the batch): "
                         "this rank's global positions, posenc.shard_positions(L, world_size, rank)")
    padding = module.__dict__.get("_posenc_shard_padding")
    pad = None if padding is None else padding.mask
    if pad is not None and tuple(pad.shape) != (b, lq):
        raise ValueError(f"context_parallel={method!r}: the attention_mask must be [B, Ll] = [{b}, {lq}], the shard's "
                         f"tokens' padding, got {list(pad.shape)}")
    return posenc.context_parallel_attention(query, key, value, pe_arg, positions=positions[0], causal=True,
                                             scale=scaling, method=method, hidden=extra.get("hidden"),
                                             attention_mask=pad, **terms)


def _window(pe: Any, sliding_window: Any) -> int | None:
    """The layer's sliding window for ``posenc.attention``'s ``window=`` (transformers passes a
    sliding layer's ``sliding_window`` to the attention function: query ``i`` sees keys ``j`` with
    ``j > i - W``, posenc's ``window=W``); None for a full layer, or for a content scheme whose rows
    take no window (stick-breaking), which keeps the window of the model's 4D mask alone."""
    if sliding_window is None or isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
        return None
    if getattr(pe, "kind", None) == "content" and not getattr(pe, "takes_window", True):
        return None
    return sliding_window


def _beyond_window(mask: torch.Tensor | None, lq: int, lk: int, window: int) -> torch.Tensor | None:
    """The model's 4D bool mask ``[B, 1, Lq, Lk]`` (True: attend), or None when it says no more than
    causality and the window (no padding): posenc's ``causal=True, window=W`` then decide alone and
    its backends skip the key blocks outside the window. A mask that differs from them (padding, a
    window of another size) is kept and combined with them."""
    if mask is None or mask.dtype != torch.bool or mask.dim() != 4:
        return mask
    d = torch.arange(lk, device=mask.device) - torch.arange(lq, device=mask.device).unsqueeze(1) - (lk - lq)  # (Lq, Lk)
    if torch.equal(mask, ((d <= 0) & (d > -window)).expand_as(mask)):
        return None
    return mask


def _add_to_embeddings(pe: nn.Module, embeddings: str, from_mask: bool = False):
    """A forward pre-hook of the decoder: ``inputs_embeds = embed(input_ids) + pe(position_ids)`` (an
    additive scheme, on the token embeddings before the first layer; positions continue the cache).
    ``from_mask`` (OPT, BioGPT): without ``position_ids``, positions are counted from the attention
    mask (``cumsum - 1``, padding at 0), as the family's own table counts them."""

    def hook(decoder: nn.Module, args: tuple, kwargs: dict):
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        if embeds is None:
            embeds = getattr(decoder, embeddings)(ids)  # (B, L, C)
        positions = kwargs.get("position_ids")
        if positions is None:
            cache = kwargs.get("past_key_values", kwargs.get("cache"))
            past = 0 if cache is None else cache.get_seq_length()
            positions = torch.arange(past, past + embeds.shape[1], device=embeds.device).unsqueeze(0)
            mask = kwargs.get("attention_mask")
            if from_mask and isinstance(mask, torch.Tensor) and mask.dim() == 2:  # (B, past + L)
                positions = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        if positions.dim() == 3:  # Qwen2-VL's [3, B, L] rows, or [4, B, L] with the text positions first
            positions = _one_row(positions[1:] if positions.shape[0] == 4 else positions, pe)
        kwargs = {**kwargs, "input_ids": None, "inputs_embeds": embeds + pe(positions.long()).to(embeds.dtype)}
        return (), kwargs

    return hook


def _keep_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """A forward pre-hook: the layer's input (``hidden_states``), for schemes that read it."""
    module.__dict__["_posenc_input"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


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


def _check_heads(model: nn.Module, family: Family, modules: list, layer_indices: Sequence[int]) -> None:
    """A rotary scheme with frequencies per head (``num_heads``: RoPE-Mixed, FoPE) rotates the model's
    queries (``num_attention_heads``) and its grouped keys (``num_key_value_heads``) as they are (never
    repeated): tried on a zero query and key of those heads before anything is replaced, and refused
    naming why when it cannot take them."""
    text = _text(model.config)
    for i, m in enumerate(modules):
        if getattr(m, "kind", None) != "rotary" or getattr(m, "num_heads", None) is None:
            continue
        layer = layer_indices[i] if layer_indices else i
        config = text.per_layer_config[layer] if getattr(text, "is_heterogeneous", False) else text
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        axes = getattr(m, "axes", 1)
        positions = torch.zeros((1, 2) if axes == 1 else (1, 2, axes), dtype=torch.long)
        try:
            with torch.no_grad():
                for role, n in (("query", heads), ("key", kv_heads)):
                    m(torch.zeros(1, n, 2, m.head_dim), positions, role=role)
        except (ValueError, RuntimeError) as err:
            raise ValueError(f"pe {m.name!r} has frequencies per head (num_heads={m.num_heads}), but "
                             f"{type(model).__name__} has {heads} query heads and {kv_heads} key/value heads, which "
                             f"posenc's attention takes as they are (grouped, never repeated): {err}") from None


def _check_terms(model: nn.Module, family: Family, modules: list) -> None:
    """A softmax term the family's attention has (Gemma 2's cap, GPT-OSS's sinks) that a content scheme
    cannot take, and value embeddings of another size than MLA's values, refused."""
    unique = list({id(m): m for m in modules if m is not None}.values())
    v_head_dim = getattr(model.config, "v_head_dim", None)  # MLA: values of another size than q/k
    term = family.softmax_term
    if term is not None and (term[0] is None or getattr(model.config, term[0], None) is not None):
        from posenc.rowwise import check_takes

        for m in unique:
            if getattr(m, "kind", None) == "content":
                try:
                    check_takes(m, **{term[2]: True})
                except ValueError as err:
                    raise ValueError(f"{type(model).__name__}'s attention {term[1]}, but {err}: a content scheme "
                                     "owns its attention; use another scheme") from None
    for m in unique:
        if getattr(m, "value_term", None) is not None and v_head_dim is not None and v_head_dim != m.head_dim:
            raise ValueError(f"pe {m.name!r} adds value embeddings of head_dim={m.head_dim} to the output, but "
                             f"{type(model).__name__}'s values have v_head_dim={v_head_dim}: give a scheme without a "
                             "value term (transformer_xl, deberta, a bias scheme)")


def _own_specs(model: nn.Module, parts: Any, needed: bool) -> list[dict[str, Any]] | None:
    """The model's own encoding as posenc specs, one per layer (``hf_layer_specs``), checked against
    the model's own rotary (or table, or slopes) first; None when posenc cannot read the config and
    no layer needs it (every layer takes ``pe``; the rotary is neutralised, checked by ``check_neutral``)."""
    from posenc.interop.families import check
    from posenc.interop.hf import hf_layer_specs

    try:
        specs = hf_layer_specs(model.config)
    except ValueError:
        if needed:
            raise
        return None
    if parts.rotary is not None:
        from posenc.interop.hf import HFRotaryEmbedding, _read_rope, rope_layer_types

        check.check_rotary(parts.name, getattr(parts.decoder, parts.rotary), model.config, _read_rope, rope_layer_types,
                           HFRotaryEmbedding)
    elif parts.family.own_spec is not None:
        check.check_own(parts.name, parts.family, parts.decoder, parts.attentions, model.config)
    if parts.family.query_temperature is not None:  # Ministral 3's: the model's τ against posenc's reading
        check.check_temperature(parts.name, parts.family, parts.attentions[0], specs)
    return specs


def _probe_table(rotary: nn.Module, config: Any) -> Any:
    """The model's rotary output at positions ``0..PROBE-1`` (its first layer type's, if it takes one)."""
    import inspect

    from posenc.interop.families.check import PROBE

    text = _text(config)
    layer_type = None
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        layer_type = (getattr(text, "layer_types", None) or [None])[0]
    head_dim = _sizes(config, Family(), 0)["head_dim"]  # the first layer's (of the first layer type)
    x = torch.zeros(1, 1, PROBE, head_dim)
    with torch.no_grad():
        args = (x, torch.arange(PROBE).unsqueeze(0)) + ((layer_type,) if layer_type is not None else ())
        try:
            return rotary(*args)
        except KeyError as err:  # DeepSeek-V4: its rotary keys its tables by rope kind, not by layer type
            raise ValueError(f"posenc.interop: {type(rotary).__name__} takes no layer type {layer_type!r} (the first "
                             f"of the config's layer_types: KeyError {err}); posenc cannot probe its rotary to check "
                             "that cos 1, sin 0 switches it off") from None


def _start_from_own_table(modules: list, parts: Any) -> None:
    """A ``learned`` module (built from a spec) of the size of the model's own table starts from it."""
    table = getattr(parts.decoder, parts.family.table_attr).weight[parts.family.table_offset:]  # (N, C)
    for m in {id(m): m for m in modules}.values():
        if getattr(m, "name", None) == "learned" and tuple(m.weight.shape) == tuple(table.shape):
            with torch.no_grad():
                m.weight.copy_(table)


def patch(model: nn.Module, pe: Any, *, layers: Sequence[int] | None = None,
          context_parallel: str | None = None) -> nn.Module:
    """Puts ``pe`` into the transformers causal LM ``model`` (in place) and returns it.

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
    parts = find(model)
    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    n = len(attentions)
    pe, layers = _on_attention_layers(pe, layers, parts)
    modules = _build_modules(pe, model, family, n, layers, parts.layer_indices)
    _check_terms(model, family, modules)
    _check_heads(model, family, modules, parts.layer_indices)
    own = _with_own_encodings(model, parts, modules)
    original = {"rotary": None if rotary is None else getattr(base, rotary), "attn": _implementations(model.config),
                "hooks": [], "parts": parts}
    first = modules[0]
    additive = [m for m in modules if getattr(m, "kind", None) == "additive"]
    if additive and (len(additive) != n or any(m is not first for m in modules)):
        raise ValueError("an additive scheme (sinusoidal, learned) goes on the token embeddings: give it for every "
                         "layer, alone (not in a per-layer pattern or with layers=)")
    if family.positions == "learned":
        _start_from_own_table(modules, parts)
    original["shared"] = _own_config(model)
    _install(model, parts, modules, own, original, additive, context_parallel)
    model._posenc_original = original
    unique = list({id(m): m for m in modules}.values())
    setattr(model.config, RECORD, {"modules": [m.spec for m in unique],
                                   "layers": [next(i for i, u in enumerate(unique) if u is m) for m in modules]})
    return model


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


def _own_config(model: nn.Module) -> list[tuple[nn.Module, Any]]:
    """The model's config (and its sub-configs: ``text_config``, ``vision_config``) replaced, in every
    module that holds it, by a copy of its own, so that what ``patch`` writes (the attention
    implementation, the record) changes this model alone: models built from one config object share
    it (a baseline and its patched twin). Returns each module and the config it held, which
    ``unpatch`` puts back."""
    import copy

    old = model.config
    new = copy.copy(old)
    swap = {id(old): new}
    for key in getattr(old, "sub_configs", None) or {}:
        sub = getattr(old, key, None)
        if sub is not None and not isinstance(sub, (str, dict)):
            mine = copy.copy(sub)
            new.__dict__[key] = mine
            swap[id(sub)] = mine
    kept = []
    for module in model.modules():
        held = module.__dict__.get("config")
        if held is not None and id(held) in swap:
            kept.append((module, held))
            module.__dict__["config"] = swap[id(held)]
    return kept


def _install(model: nn.Module, parts: Any, modules: list, own: list[dict[str, Any]] | None, original: dict,
             additive: list, context_parallel: str | None) -> None:
    """Puts ``modules`` (one per attention layer) into the model: as its rotary module (an
    ``HFRotaryEmbedding``) where one scheme that fits it replaces the model's own rotary on every
    layer, or else through the attention function (``_through_attention``), with ``context_parallel``
    and the shard's key padding hook recorded on each attention module."""
    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    first = modules[0]
    own_on = any(getattr(base, name) for name in family.decoder_positions)  # Falcon's ALiBi: no rotary to replace
    if (rotary is not None and own is not None and all(m is first for m in modules) and not own_on
            and context_parallel is None and not _more_rotaries(base) and _fits_rotary_module(first, own)):
        from posenc.interop.hf import HFRotaryEmbedding

        # the table the family's apply reads (a family found from its modeling module: rotate_half's, even where
        # it rotates pairs (2i, 2i+1)); NanoChat's apply: clockwise
        import inspect

        kinds = list(dict.fromkeys(getattr(_text(model.config), "layer_types", None) or ()))
        takes_kind = "layer_type" in inspect.signature(getattr(base, rotary).forward).parameters
        ropes = {kind: first for kind in kinds} if takes_kind and kinds else first  # OLMo 3: called per layer type
        setattr(base, rotary, HFRotaryEmbedding(ropes, table=family.table, apply_direction=family.direction))
    else:
        _through_attention(model, parts, modules, original, additive)
        if own is not None and rotary is not None:
            _refuse_where_the_model_gives_no_rotary(parts, modules, own, original["hooks"])
        padding = _ShardPadding() if context_parallel is not None else None
        if padding is not None:  # the model's 2D key padding mask of the shard, read by _sharded
            original["hooks"].append(base.register_forward_pre_hook(padding.hook, with_kwargs=True))
        for attention in attentions:
            attention.__dict__["_posenc_context_parallel"] = context_parallel
            attention.__dict__["_posenc_shard_padding"] = padding


def _refuse_where_the_model_gives_no_rotary(parts: Any, modules: list, own: list[dict[str, Any]], hooks: list) -> None:
    """A layer that runs posenc's reading of the model's own rotary (``hf_layer_specs``), to which the
    model passes no rotary output (``position_embeddings=None``: Lara-mini's full-attention layers
    run without positions, which its config does not say), refused at its first call, naming it:
    posenc would add positions the model does not have there."""
    import posenc

    specs: dict[str, dict] = {}
    for attention, module, spec, i in zip(parts.attentions, modules, own, parts.layer_indices):
        if getattr(module, "kind", None) != "rotary" or spec.get("scheme") not in ("rope", "mrope"):
            continue
        key = json.dumps(spec, sort_keys=True)
        if key not in specs:
            specs[key] = posenc.build(spec).spec
        if module.spec != specs[key]:
            continue

        def hook(layer: nn.Module, args: tuple, kwargs: dict, i: int = i) -> None:
            if "position_embeddings" in kwargs and kwargs["position_embeddings"] is None:
                raise ValueError(f"posenc.interop: {parts.name}'s layer {i} ({type(layer).__name__}) is given no rotary "
                                 "output by its model (position_embeddings=None: it runs without positions), but its "
                                 "scheme is posenc's reading of the model's own rotary; refused rather than add "
                                 "positions the model does not have (give that layer 'nope')")

        hooks.append(attention.register_forward_pre_hook(hook, with_kwargs=True))


class _Positions:
    """The ``position_ids`` of the decoder's current call (a family without a rotary module to
    record them: GPT-2, BLOOM), read by the attention function as a neutral rotary's."""

    position_ids: torch.Tensor | None = None
    step: int = 0  # the decoder's forward calls so far (``_grow``)

    def hook(self, decoder: nn.Module, args: tuple, kwargs: dict) -> None:
        self.position_ids = kwargs.get("position_ids")
        self.step += 1


def _more_rotaries(decoder: nn.Module) -> list[tuple[nn.ModuleList, int]]:
    """The decoder's rotaries beyond the one ``patch`` found, in ModuleLists of its own (Granite
    SWA's ``rotary_embs``: one per base, the layer's chosen by its ``layer_rope_theta``)."""
    return [(child, i) for child in decoder.children() if isinstance(child, nn.ModuleList)
            for i, m in enumerate(child) if type(m).__name__.endswith("RotaryEmbedding")]


def _neutralise_more_rotaries(decoder: nn.Module, neutral: nn.Module) -> list[tuple[nn.ModuleList, int, nn.Module]]:
    """Every rotary of ``_more_rotaries`` neutralised (recording positions in ``neutral``); the originals."""
    kept = []
    for holder, i in _more_rotaries(decoder):
        kept.append((holder, i, holder[i]))
        holder[i] = _NeutralRotary(holder[i], record=neutral)
    return kept


def _through_attention(model: nn.Module, parts: Any, modules: list, original: dict, additive: list) -> None:
    """Every layer's scheme through the attention function: the model's rotary neutralised (its
    learned table zeroed), each attention layer holding its scheme."""
    from posenc.interop.families import check
    from posenc.interop.families.structure import apply_function

    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    first = modules[0]
    if family.rotary_only:
        raise ValueError(f"{type(model).__name__} takes only one rotary scheme on every layer (through its rotary "
                         f"module): {family.rotary_only}")
    hooks = original["hooks"]
    if rotary is not None and parts.rotary_readers:
        raise ValueError(f"posenc.interop.patch: {parts.name}'s rotary output is read by "
                         f"{', '.join(parts.rotary_readers[:2])}{' and others' if len(parts.rotary_readers) > 2 else ''}"
                         " besides the attention layers patch replaces (DeepSeek Sparse Attention's indexer chooses "
                         "each query's keys from queries and keys it rotates); patch would neutralise the rotary for "
                         "them too, so it is refused: only a rope that replaces the model's rotary module (posenc's "
                         "rope or mrope of its layout and width, one for every layer) fits this model")
    if rotary is not None:
        if model.config.model_type not in FAMILIES:  # found from structure alone (a row's apply is its tests')
            sizes = _sizes(model.config, family, parts.layer_indices[0])
            check.check_neutral(parts.name, apply_function(attentions[0]), _probe_table(original["rotary"], model.config),
                                sizes["num_heads"], sizes["head_dim"])
        _register()
        neutral = _NeutralRotary(original["rotary"])
        setattr(base, rotary, neutral)
        original["more_rotaries"] = _neutralise_more_rotaries(base, neutral)
    else:
        _register()
        neutral = _Positions()
        hooks.append(base.register_forward_pre_hook(neutral.hook, with_kwargs=True))
    if family.table_attr is not None:  # GPT-2's learned table: adds zeros while patched
        from posenc.interop.families.gpt2 import ZeroTable

        original["table"] = getattr(base, family.table_attr)
        setattr(base, family.table_attr, ZeroTable(original["table"]))
    if additive:
        hooks.append(base.register_forward_pre_hook(_add_to_embeddings(first, parts.embeddings, family.mask_positions),
                                                    with_kwargs=True))
    unique = list({id(m): m for m in modules}.values())
    base.posenc_modules = nn.ModuleList(unique)  # each module's parameters once (a shared T5 table)
    original["own"] = [{name: getattr(attention, name) for name in family.own_positions} for attention in attentions]
    if family.query_temperature is not None:  # Ministral 3's temperature off (its key 0), the layer's scheme's instead
        original["configs"] = [attention.config for attention in attentions]
        for attention in attentions:
            rp = {**attention.config.rope_parameters, family.query_temperature.key: 0.0}
            attention.config = _ConfigView(attention.config, rope_parameters=rp)
    original["decoder"] = {name: getattr(base, name) for name in family.decoder_positions}
    for name in family.decoder_positions:
        setattr(base, name, False)
    for attention, module in zip(attentions, modules):
        attention.__dict__["posenc_pe"] = None if additive else module  # a reference, not a submodule
        attention.__dict__["_posenc_rotary"] = neutral
        attention.__dict__["_posenc_attention"] = posenc_attention  # a family's forward calls it (Falcon, BLOOM)
        if family.rope_part is not None:
            # an interleaved apply with cos 1, sin 0 leaves the rope part de-interleaved (DeepSeek-V3's), a
            # complex one with 1 + 0i leaves it as it was (DeepSeek-V2's view_as_complex pairs)
            attention.__dict__["_posenc_rope_part"] = (getattr(model.config, family.rope_part),
                                                       _interleaved(model.config) and family.table != "complex")
        for name in family.own_positions:
            setattr(attention, name, False)
        if family.forward is not None:  # an instance attribute: nn.Module.__call__ (and its hooks) call it
            attention.forward = family.forward.__get__(attention)
        if getattr(module, "reads_hidden", False):
            hooks.append(attention.register_forward_pre_hook(_keep_input, with_kwargs=True))
    text = "text_config" in original["attn"]  # a vision-language model: its text model only (not its vision tower)
    if family.forward is None:  # else the model's attention implementation stays (it builds the mask)
        model.set_attn_implementation({**original["attn"], "": ATTENTION, "text_config": ATTENTION} if text
                                      else ATTENTION)


def unpatch(model: nn.Module) -> nn.Module:
    """Restores a model that ``patch`` changed (its rotary or learned table, attention implementation
    and layers)."""
    original = getattr(model, "_posenc_original", None)
    if original is None:
        raise ValueError(f"{type(model).__name__} is not patched by posenc.interop.patch")
    parts = original["parts"]  # as patch found them (the rotary it replaced is no longer there to find)
    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    if rotary is not None:
        setattr(base, rotary, original["rotary"])
    for holder, i, module in original.get("more_rotaries", ()):
        holder[i] = module
    if "table" in original:
        setattr(base, family.table_attr, original["table"])
    for hook in original.get("hooks", ()):
        hook.remove()
    base._modules.pop("posenc_modules", None)
    for attention, own in zip(attentions, original.get("own") or [{}] * len(attentions)):
        for name in ("posenc_pe", "_posenc_key_positions", "_posenc_hidden", "_posenc_key_positions_step",
                     "_posenc_hidden_step", "_posenc_input", "_posenc_rotary", "_posenc_rope_part", "_posenc_attention",
                     "_posenc_context_parallel", "_posenc_shard_padding", "forward"):  # forward: the family's
            attention.__dict__.pop(name, None)
        for name, value in own.items():
            setattr(attention, name, value)
    for name, value in original.get("decoder", {}).items():
        setattr(base, name, value)
    for attention, config in zip(attentions, original.get("configs", ())):
        attention.config = config
    if _implementations(model.config) != original["attn"]:
        attn = original["attn"]
        model.set_attn_implementation(attn if len(attn) > 1 else attn[""])
    model._posenc_original = None
    if hasattr(model.config, RECORD):
        delattr(model.config, RECORD)
    for module, config in original.get("shared", ()):  # the config objects it held before (shared, untouched)
        module.__dict__["config"] = config
    return model


def from_pretrained(path: str | Path, model_class: Any = None, **kwargs) -> nn.Module:
    """A model saved (``save_pretrained``) after ``patch``, loaded, patched again as its config records,
    with its posenc parameters loaded from the checkpoint's safetensors files.

    ``model_class`` defaults to ``transformers.AutoModelForCausalLM``; ``kwargs`` go to its
    ``from_pretrained`` (``local_files_only``, ``dtype``, ...)."""
    from safetensors.torch import load_file

    if model_class is None:
        from transformers import AutoModelForCausalLM as model_class
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    record = config.get(RECORD)
    if (not isinstance(record, Mapping) or not isinstance(record.get("modules"), list)
            or not isinstance(record.get("layers"), list)):
        raise ValueError(f"{path / 'config.json'} records no posenc patch (no '{RECORD}': "
                         "{'modules': [spec, ...], 'layers': [index, ...]})")
    import posenc

    model = model_class.from_pretrained(path, **kwargs)
    built = [posenc.build(spec) for spec in record["modules"]]
    patch(model, [built[i] for i in record["layers"]])
    ours = {}
    for file in sorted(path.glob("*.safetensors")):
        ours.update({k: v for k, v in load_file(str(file)).items() if ".posenc_modules." in k})
    missing = [k for k, _ in model.named_parameters() if ".posenc_modules." in k and k not in ours]
    if missing:
        raise ValueError(f"{path} lacks the posenc parameters {missing[:4]} of the patch its config records")
    model.load_state_dict(ours, strict=False)
    return model
