"""A transformers causal LM's parts, found from its modules and its modeling module, never from its
name: the decoder layers, their attention modules, the rotary module beside them, the token
embeddings. A family's :class:`~posenc.interop.families.Family` row (``FAMILIES``) says only what
differs from the common pattern; a model that fits neither is refused naming its class and what
was not found (:func:`find`).

The common pattern (transformers' Llama and the families generated from it):

- a ``ModuleList`` of ``num_hidden_layers`` decoder layers (outside any vision tower), each with
  one attention module (a child whose class name ends in ``Attention``), or some of them in a
  hybrid (Qwen 3.5, Qwen3-Next, Jamba: their linear-attention or state-space layers have no
  positions, and keep theirs untouched);
- the attention's ``forward`` calls transformers' attention interface (``ALL_ATTENTION_FUNCTIONS``),
  so posenc's attention function can stand in for it;
- for RoPE, a rotary module beside the layers (a child of their decoder whose class name ends in
  ``RotaryEmbedding``) called with ``position_ids``, and an ``apply_rotary_pos_emb`` in the
  attention's modeling module (checked, with the tables, by ``check``).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any

from torch import nn

from posenc.interop.classify import check_classified
from posenc.interop.classify import classify, is_cross_attention  # noqa: F401  (public here too)
from posenc.interop.configs import text_config as _text
from posenc.interop.families import COMMON, Family, family_of_config

_ATTENTION_NAMES = ("self_attn", "self_attention", "attention", "attn")  # tried first, in this order
_TOWERS = ("vision", "visual", "audio", "image", "speech")  # a module path holding one of these is not the text model


@dataclasses.dataclass
class Parts:
    """Where ``patch`` works on a model: its family record, the decoder (the module holding the
    layers and the rotary), the rotary's attribute on it (None: no rotary module), each layer's
    attention module, the token embeddings' attribute on the decoder."""

    family: Family
    name: str  # the model's class and model type, for messages
    decoder: nn.Module
    rotary: str | None
    attentions: list[nn.Module]
    embeddings: str
    layer_indices: list[int]  # the index of each attention module's layer (a hybrid's other layers have none)
    num_layers: int  # the decoder's layers, attention or not
    rotary_readers: list[str] = dataclasses.field(default_factory=list)  # other modules given the rotary's output
    table_holder: nn.Module | None = None  # the module holding a learned table, when not the decoder (BERT's embeddings)
    # an encoder-decoder's (Family.stack_lists): each attention module's stack, whose forward is one pass over its layers
    stack_of: list[nn.Module] | None = None


ROTARY_OUTPUTS = ("position_embeddings", "freqs_cis")
"""The names transformers' layers pass the rotary module's output by (``(cos, sin)``, Llama 4's
``freqs_cis``)."""


def _reads_rotary(module: nn.Module) -> bool:
    try:
        params = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False
    return any(p in params for p in ROTARY_OUTPUTS)


def rotary_readers(layers: nn.ModuleList, path: str, attentions: list[nn.Module]) -> list[str]:
    """Every module inside the decoder layers, other than the layers themselves (which pass it on)
    and the attention modules ``patch`` replaces, whose ``forward`` takes the rotary's output
    (``position_embeddings``, ``freqs_cis``): DeepSeek Sparse Attention's indexer (DeepSeek-V3.2,
    GLM-MoE-DSA, HY-V4, AXK-2), which chooses each query's keys from queries and keys it rotates
    itself. Neutralising the rotary would change what they compute; ``path.i.name (Class)`` each."""
    ours = {id(a) for a in attentions}
    found = []
    for i, layer in enumerate(layers):
        for name, module in layer.named_modules():
            if module is layer or id(module) in ours:
                continue
            if _reads_rotary(module):
                found.append(f"{path}.{i}.{name} ({type(module).__name__})")
    return found


def _attr(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _attention_of(layer: nn.Module, name: str | None) -> tuple[str, nn.Module] | None:
    """The layer's self-attention (its attribute and module); None when it has none (a hybrid's
    state-space layer, a layer of cross-attention only: Mllama's). Where the attention module found
    makes no attention call itself and one child of it, an attention module too, calls transformers'
    attention interface (BERT's ``attention.self``, a ``BertSelfAttention`` inside ``BertAttention``),
    that inner module is the one ``patch`` works on."""
    if name is not None:  # a path: GPT-Neo's attn.attention
        try:
            child = _attr(layer, name)
        except AttributeError:
            return None
        return (name, child) if isinstance(child, nn.Module) else None
    found = None
    for attr in _ATTENTION_NAMES:
        child = getattr(layer, attr, None)
        if (isinstance(child, nn.Module) and type(child).__name__.endswith("Attention")
                and not is_cross_attention(attr, child)):
            found = attr, child
            break
    if found is None:
        children = [(n, c) for n, c in layer.named_children()
                    if type(c).__name__.endswith("Attention") and not is_cross_attention(n, c)]
        found = children[0] if len(children) == 1 else None
    if found is None or _calls_interface(found[1]):
        return found
    inner = [(n, c) for n, c in found[1].named_children()
             if type(c).__name__.endswith("Attention") and _calls_interface(c)]
    return (f"{found[0]}.{inner[0][0]}", inner[0][1]) if len(inner) == 1 else found


def _table_holder(model: nn.Module, family: Family, name: str) -> nn.Module | None:
    """The module holding a learned table that is not on the decoder (``Family.table_holder``: BERT's
    ``embeddings``): the one module of the model of that name with the table; ValueError if not one."""
    if family.table_holder is None:
        return None
    root = family.layers.split(".")[0] + "." if family.layers and "." in family.layers else ""  # SigLIP: its vision tower's
    tables = (nn.Embedding, nn.Parameter) if family.positions == "grid" else nn.Embedding  # ViT's: a parameter
    found = [m for path, m in model.named_modules() if path.rpartition(".")[2] == family.table_holder
             and path.startswith(root) and isinstance(getattr(m, family.table_attr, None), tables)]
    if len(found) != 1:
        raise ValueError(f"posenc.interop.patch cannot find the position table of {name}: {len(found)} modules named "
                         f"{family.table_holder!r} hold an nn.Embedding {family.table_attr!r} (one expected)")
    return found[0]


def _find_layers(model: nn.Module, family: Family, n: int | None, name: str) -> tuple[str, nn.ModuleList]:
    if family.layers is not None:
        return family.layers, _attr(model, family.layers)
    lists = [(path, m) for path, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) > 0
             and (n is None or len(m) == n) and not any(t in path.lower() for t in _TOWERS)]
    lists = [(p, m) for p, m in lists if any(_attention_of(layer, family.attention) is not None for layer in m)]
    if not lists:
        raise ValueError(f"posenc.interop.patch cannot find the decoder layers of {name}: no ModuleList of "
                         f"num_hidden_layers={n} layers of which one holds an attention module (a child named "
                         f"{'/'.join(_ATTENTION_NAMES)} or a class ending in 'Attention')")
    return lists[0]


def _find_stacks(model: nn.Module, family: Family, name: str) -> list[tuple[str, nn.ModuleList]]:
    """An encoder-decoder's stacks (``Family.stack_lists``: T5's ``block``): every ``ModuleList`` of that
    name of which one layer holds an attention module at ``Family.attention``, in the model's order
    (the encoder's, then the decoder's); ValueError if none."""
    lists = [(path, m) for path, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) > 0
             and path.rpartition(".")[2] == family.stack_lists
             and any(_attention_of(layer, family.attention) is not None for layer in m)]
    if not lists:
        raise ValueError(f"posenc.interop.patch cannot find the layers of {name}: no ModuleList named "
                         f"{family.stack_lists!r} whose layers hold an attention module at {family.attention!r}")
    return lists


def _calls_interface(attention: nn.Module) -> bool:
    try:
        source = inspect.getsource(type(attention).forward)
    except (OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" in source


PER_LAYER = ("head_dim", "sliding_window")
"""Sizes ``patch`` reads per decoder layer from a heterogeneous config (``per_layer_config``:
Gemma 4's full-attention head); another that differs between layers (dots3's per-layer MLA sizes and
head counts) is refused by name."""


def _check_per_layer(config: Any, name: str) -> None:
    spec = getattr(_text(config), "_heterogeneity_spec", None) if config is not None else None
    varying = sorted(set(getattr(spec, "per_layer_attributes", None) or ()) - set(PER_LAYER))
    if varying:
        raise ValueError(f"posenc.interop.patch: {name}'s layers differ in {', '.join(varying)} (transformers' "
                         f"per_layer_config); posenc reads one value of each for the whole model (per layer only "
                         f"{', '.join(PER_LAYER)})")


def find(model: nn.Module) -> Parts:
    """``model``'s :class:`Parts`; ValueError naming its class and what was not found."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    name = f"{type(model).__name__} (model_type {model_type!r})"
    _check_per_layer(config, name)
    family = family_of_config(model_type, config) or COMMON
    if family.refused is not None:
        raise ValueError(f"posenc.interop.patch: {name} is not supported: {family.refused}")
    if (getattr(config, "is_encoder_decoder", False) is True and not family.stacks and family.stack_lists is None
            and family.layers is None):  # one stack's layers found, the other's left as they were
        raise ValueError(f"posenc.interop.patch: {name} is an encoder–decoder whose stacks posenc does not know "
                         "(no row of FAMILIES in posenc/interop/families with Family.stacks or Family.stack_lists): "
                         "it would reach the layers of one stack only")
    text = _text(config) if config is not None else None
    n = getattr(text, "num_hidden_layers", None)
    stacks = (_find_stacks(model, family, name) if family.stack_lists is not None
              else [_find_layers(model, family, n if family.layers is None else None, name)])
    attentions, indices, paths, stack_of = [], [], [], []  # a hybrid's state-space or linear-attention layers hold none
    count = 0
    for path, layers in stacks:
        for i, layer in enumerate(layers):
            found = _attention_of(layer, family.attention)
            if found is not None:
                attentions.append(found[1])
                indices.append(count + i)
                paths.append(f"{path}.{i}.{found[0]}")
                stack_of.append(_attr(model, path.rpartition(".")[0]) if "." in path else model)
        count += len(layers)
    path, layers = stacks[0]
    if family.check is not None:  # the family's own check of its structure and encoding (T5's buckets)
        family.check(name, Parts(family, name, model, None, attentions, "", indices, count, stack_of=stack_of),
                     config)
    check_classified(attentions, paths, family, name)
    if family.forward is not None and all(_calls_interface(a) for a in attentions):
        # the installed transformers moved the family's attention onto the interface (Falcon in 5.25): the
        # common pattern stands in for it, and posenc's own forward (for one that computes itself) is not used
        family = dataclasses.replace(family, forward=None)
    if family.forward is None:
        for attention in {type(a): a for a in attentions}.values():
            if not _calls_interface(attention):
                raise ValueError(f"posenc.interop.patch: {name}'s attention ({type(attention).__name__}.forward) "
                                 "does not call transformers' attention interface (ALL_ATTENTION_FUNCTIONS) and "
                                 "its family has no forward of posenc's (Family.forward)")
    decoder = model if family.stack_lists is not None else _attr(model, path.rpartition(".")[0]) if "." in path else model
    rotary = _find_rotary(model, family, decoder, name)
    if family is COMMON and rotary[1] is not None and apply_function(attentions[0]) is None:
        raise ValueError(f"posenc.interop.patch: {name}'s modeling module ({type(attentions[0]).__module__}) has no "
                         "apply_rotary_pos_emb (the function its attention rotates queries and keys with)")
    if family.rotary is None and rotary[1] is not None and family.rope_part is None:  # no row: its apply probed
        from posenc.interop.families.found import apply_layout

        if apply_layout(apply_function(attentions[0])) == "neither":
            raise ValueError(f"posenc.interop.patch: {name}'s apply_rotary_pos_emb, given transformers' rotate_half "
                             "table cat(c, c), rotates neither pairs (i, i + d/2) nor (2i, 2i+1) by its angles "
                             "or their negatives (its own order); posenc cannot reproduce its rotary")
    readers = rotary_readers(layers, path, attentions) if rotary[1] is not None else []
    return Parts(family, name, *rotary, attentions, _embeddings(model, family, rotary[0], name), indices, count,
                 readers, _table_holder(model, family, name), stack_of if family.stack_lists is not None else None)


def _find_rotary(model: nn.Module, family: Family, decoder: nn.Module, name: str) -> tuple[nn.Module, str | None]:
    """The module holding the rotary and its attribute (the family's path, or a ``*RotaryEmbedding``
    child of the decoder); ``(decoder, None)`` for a family without RoPE."""
    if family.positions != "rope":
        return decoder, None
    if family.rotary is not None and family is not COMMON:
        owner, _, attr = family.rotary.rpartition(".")
        holder = _attr(model, owner)
        if isinstance(getattr(holder, attr, None), nn.Module):
            return holder, attr
    children = [n for n, c in decoder.named_children() if type(c).__name__.endswith("RotaryEmbedding")]
    if len(children) != 1:
        raise ValueError(f"posenc.interop.patch cannot find the rotary module of {name}: "
                         + ("none" if not children else f"{len(children)} ({', '.join(children)})")
                         + f" beside its decoder layers in {type(decoder).__name__} (a child whose class ends in "
                         "'RotaryEmbedding', called with position_ids; a family whose attention computes its own "
                         "rotary, or has none, needs a row of posenc.interop.families.FAMILIES)")
    return decoder, children[0]


def apply_function(attention: nn.Module) -> Any:
    """The ``apply_rotary_pos_emb`` of the attention's modeling module, or None."""
    module = sys.modules.get(type(attention).__module__)
    apply = getattr(module, "apply_rotary_pos_emb", None)
    return apply if callable(apply) else None


def _embeddings(model: nn.Module, family: Family, decoder: nn.Module, name: str) -> str:
    if family.embeddings is not None:
        return family.embeddings
    get = getattr(model, "get_input_embeddings", None)
    try:
        table = get() if callable(get) else None
    except NotImplementedError:  # wav2vec2: no token embeddings (its features come from a convolution)
        table = None
    for attr, child in decoder.named_children():
        if child is table:
            return attr
    return "embed_tokens"  # found only when an additive scheme needs it
