"""Installing a scheme into a model and taking it out again: the model's rotary module replaced by
``HFRotaryEmbedding`` where one fitting rope serves every layer, or else every layer through the
attention function (the rotary neutralised, each attention layer given its
:class:`~posenc.interop.state.LayerState`, transformers' attention implementation set to
``"posenc"``); the model's own position effects switched off while patched; the model's config
copied so that nothing but this model changes. :func:`uninstall` restores what was there.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import nn

from posenc.interop.configs import layer_sizes as _sizes, text_config as _text
from posenc.interop.families import FAMILIES
from posenc.interop.patching.attention_function import _keep_input, _one_row, _ShardPadding, posenc_attention
from posenc.interop.patching.checks import _fits_rotary_module, _probe_table
from posenc.interop.state import STATE, LayerState

ATTENTION = "posenc"  # the name registered with transformers' AttentionInterface and AttentionMaskInterface


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


class _Positions:
    """The ``position_ids`` of the decoder's current call (a family without a rotary module to
    record them: GPT-2, BLOOM), read by the attention function as a neutral rotary's."""

    position_ids: torch.Tensor | None = None
    step: int = 0  # the decoder's forward calls so far (``_grow``)

    def hook(self, decoder: nn.Module, args: tuple, kwargs: dict) -> None:
        self.position_ids = kwargs.get("position_ids")
        self.step += 1


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


def _start_from_own_table(modules: list, parts: Any, config: Any = None) -> None:
    """A ``learned`` module (built from a spec) of the size of the model's own table starts from it
    (its rows from the family's offset on: OPT's 2, RoBERTa's ``pad_token_id + 1``)."""
    from posenc.interop.families.record import table_offset

    holder = parts.decoder if parts.table_holder is None else parts.table_holder
    table = getattr(holder, parts.family.table_attr).weight[table_offset(parts.family, _text(config)):]  # (N, C)
    for m in {id(m): m for m in modules}.values():
        if getattr(m, "name", None) == "learned" and tuple(m.weight.shape) == tuple(table.shape):
            with torch.no_grad():
                m.weight.copy_(table)


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
            attention.__dict__[STATE].context_parallel = context_parallel
            attention.__dict__[STATE].shard_padding = padding


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
    elif family.positions == "grid":  # ViT: its patch grid's table, read as zeros; the scheme's 2D positions
        _register()
        neutral = family.grid_table.install(model, parts, first, additive, original)  # families/vit.py, dinov3.py
    elif parts.table_holder is not None:  # BERT: the table in the embeddings takes the scheme, records positions
        from posenc.interop.families.bert import PositionTable

        _register()
        original["table"] = getattr(parts.table_holder, family.table_attr)
        from posenc.interop.families.record import table_offset

        neutral = PositionTable(original["table"], first if additive else None, table_offset(family, _text(model.config)))
        setattr(parts.table_holder, family.table_attr, neutral)
    else:
        _register()
        neutral = _Positions()
        hooks.append(base.register_forward_pre_hook(neutral.hook, with_kwargs=True))
    recorders = {id(base): neutral}  # an encoder-decoder's stacks (T5): one recorder each, its own passes counted
    for stack in parts.stack_of or ():
        if id(stack) not in recorders:
            recorders[id(stack)] = _Positions()
            hooks.append(stack.register_forward_pre_hook(recorders[id(stack)].hook, with_kwargs=True))
    if family.table_attr is not None and parts.table_holder is None:  # GPT-2's learned table: adds zeros while patched
        from posenc.interop.families.gpt2 import ZeroTable

        original["table"] = getattr(base, family.table_attr)
        setattr(base, family.table_attr, ZeroTable(original["table"]))
    if additive and parts.table_holder is None and family.positions != "grid":  # a grid family adds its own
        hooks.append(base.register_forward_pre_hook(_add_to_embeddings(first, parts.embeddings, family.mask_positions),
                                                    with_kwargs=True))
    unique = list({id(m): m for m in modules}.values())
    base.posenc_modules = nn.ModuleList(unique)  # each module's parameters once (a shared T5 table)
    base.posenc_modules.train(base.training)  # in the model's mode (eval: no training-time draws, DINOv3's)
    original["own"] = [{name: getattr(attention, name) for name in family.own_positions} for attention in attentions]
    if family.query_temperature is not None:  # Ministral 3's temperature off (its key 0), the layer's scheme's instead
        original["configs"] = [attention.config for attention in attentions]
        for attention in attentions:
            rp = {**attention.config.rope_parameters, family.query_temperature.key: 0.0}
            attention.config = _ConfigView(attention.config, rope_parameters=rp)
    original["decoder"] = {name: getattr(base, name) for name in family.decoder_positions}
    for name in family.decoder_positions:
        setattr(base, name, False)
    for attention, module, stack in zip(attentions, modules, parts.stack_of or [base] * len(attentions)):
        attention.__dict__["posenc_pe"] = None if additive else module  # a reference, not a submodule
        # posenc_attention: a family's own forward calls it (Falcon, BLOOM); MLA's rope part: an interleaved apply
        # with cos 1, sin 0 leaves it de-interleaved (DeepSeek-V3's), a complex one with 1 + 0i leaves it as it
        # was (DeepSeek-V2's view_as_complex pairs)
        part = None if family.rope_part is None else (getattr(model.config, family.rope_part),
                                                      _interleaved(model.config) and family.table != "complex")
        attention.__dict__[STATE] = LayerState(positions=recorders[id(stack)], attention=posenc_attention,
                                               rope_part=part)
        for name in family.own_positions:
            setattr(attention, name, False)
        if family.forward is not None:  # an instance attribute: nn.Module.__call__ (and its hooks) call it
            attention.forward = family.forward.__get__(attention)
        if getattr(module, "reads_hidden", False):
            hooks.append(attention.register_forward_pre_hook(_keep_input, with_kwargs=True))
    text = "text_config" in original["attn"]  # a vision-language model: its text model only (not its vision tower)
    sub = family.sub_config  # SigLIP: its vision tower's (the sub-config its layers read)
    if family.forward is None and sub is not None:
        model.set_attn_implementation({sub: ATTENTION})
    elif family.forward is None:  # else the model's attention implementation stays (it builds the mask)
        model.set_attn_implementation({**original["attn"], "": ATTENTION, "text_config": ATTENTION} if text
                                      else ATTENTION)


def uninstall(model: nn.Module, original: dict) -> None:
    """Restores what :func:`_install` changed in ``model`` (``original``: what ``patch`` kept): its
    rotary or learned table, its attention implementation and layers, the config objects its modules
    held."""
    parts = original["parts"]  # as patch found them (the rotary it replaced is no longer there to find)
    family, base, rotary, attentions = parts.family, parts.decoder, parts.rotary, parts.attentions
    if rotary is not None:
        setattr(base, rotary, original["rotary"])
    for holder, i, module in original.get("more_rotaries", ()):
        holder[i] = module
    if "table" in original:
        setattr(base if parts.table_holder is None else parts.table_holder, family.table_attr, original["table"])
    for hook in original.get("hooks", ()):
        hook.remove()
    for undo in original.get("undo", ()):  # ViT: the embeddings' own forward
        undo()
    base._modules.pop("posenc_modules", None)
    for attention, own in zip(attentions, original.get("own") or [{}] * len(attentions)):
        for name in ("posenc_pe", STATE, "forward"):  # forward: the family's
            attention.__dict__.pop(name, None)
        for name, value in own.items():
            setattr(attention, name, value)
    for name, value in original.get("decoder", {}).items():
        setattr(base, name, value)
    for attention, config in zip(attentions, original.get("configs", ())):
        attention.config = config
    if _implementations(model.config) != original["attn"]:
        attn = {k: v for k, v in original["attn"].items() if v is not None}  # a sub-config without a model: unset
        model.set_attn_implementation(attn if len(attn) > 1 else attn[""])
    for module, config in original.get("shared", ()):  # the config objects it held before (shared, untouched)
        module.__dict__["config"] = config
