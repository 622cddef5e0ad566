"""``patch`` on an encoder–decoder (BART, mBART, PLBart): each stack, the encoder and the decoder, is a
model of its own to ``patch`` (its layers, its position table, its attention modules: the encoder's
bidirectional, the decoder's causal self-attention, as each module says; the decoder's
cross-attention, ``encoder_attn``, left to transformers' SDPA). A stack is a module of the model
that holds the family's table itself (``Family.table_attr``: ``embed_positions``), and which one it
is comes from its class name (``Family.stacks``: ``("Encoder", "encoder_layers",
"encoder_attention_heads")``, then the decoder's).

``pe`` goes to every stack as it is (a SPEC, a module, a pattern that repeats over each stack's
layers), or, a list as long as all the family's layers (``hf_layer_specs``: the encoder's, then the
decoder's), split between them. Each stack sees the model's config (a copy of its own) with its
layer count and head count as ``num_hidden_layers`` and ``num_attention_heads``, so a scheme's
sizes are the stack's. ``layers=`` and ``context_parallel=`` are refused on an encoder–decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from posenc.interop.families import family_row


def stacks_of(model: nn.Module) -> list[tuple[str, nn.Module, tuple[str, str, str]]] | None:
    """The stacks of an encoder–decoder (path, module, its ``Family.stacks`` entry), in the model's
    order; None for a model whose row has no stacks, or for a stack itself (it holds the table)."""
    row = family_row(getattr(getattr(model, "config", None), "model_type", None))
    if row is None or not row.stacks or isinstance(getattr(model, row.table_attr, None), nn.Module):
        return None
    found = []
    for path, module in model.named_modules():
        if module is model or not isinstance(getattr(module, row.table_attr, None), nn.Module):
            continue
        kinds = [s for s in row.stacks if s[0] in type(module).__name__]
        if len(kinds) != 1:
            raise ValueError(f"posenc.interop.patch: {type(model).__name__}'s {path} ({type(module).__name__}) holds "
                             f"{row.table_attr!r} but its class names none of the stacks "
                             f"{[s[0] for s in row.stacks]} (one expected)")
        found.append((path, module, kinds[0]))
    if not found:
        raise ValueError(f"posenc.interop.patch: {type(model).__name__} (model_type {model.config.model_type!r}) holds "
                         f"no stack with a position table {row.table_attr!r}")
    return found


def _split(pe: Any, stacks: list, config: Any) -> list[Any]:
    """``pe`` per stack: a list as long as every stack's layers of the family split in the family's
    order (the stacks the model has taken), anything else given to each stack."""
    row = family_row(config.model_type)
    counts = [(s, int(getattr(config, s[1]))) for s in row.stacks]
    if isinstance(pe, (list, tuple)) and len(pe) == sum(n for _, n in counts):
        parts, start = {}, 0
        for s, n in counts:
            parts[s] = list(pe[start:start + n])
            start += n
        return [parts[kind] for _, _, kind in stacks]
    return [pe] * len(stacks)


def patch_stacks(model: nn.Module, stacks: list, pe: Any, layers: Sequence[int] | None,
                 context_parallel: str | None, patch: Callable, unpatch: Callable) -> nn.Module:
    """Each stack of ``model`` patched (``patch``: ``posenc.interop.patch``) with its part of ``pe``
    (see the module docstring); ``unpatch`` undoes a stack's on failure."""
    from posenc.interop.patching.install import _own_config
    from posenc.interop.patching.persistence import RECORD

    name = f"{type(model).__name__} (model_type {model.config.model_type!r})"
    if layers is not None:
        raise ValueError(f"posenc.interop.patch: {name} is an encoder–decoder; layers= is not taken there: give a "
                         "list of one entry per layer, the encoder's then the decoder's (as hf_layer_specs)")
    if context_parallel is not None:
        raise ValueError(f"posenc.interop.patch: {name} is an encoder–decoder; context_parallel= runs causal decoders")
    entries = _split(pe, stacks, model.config)
    shared = _own_config(model)  # this model's own config: what patch writes changes no other model
    done: list[tuple[nn.Module, list]] = []
    try:
        for (_, stack, (_, layers_key, heads_key, *_)), entry in zip(stacks, entries):
            kept = _own_config(stack)  # the stack's view: its layers and heads as the model's
            stack.config.num_hidden_layers = int(getattr(model.config, layers_key))
            stack.config.num_attention_heads = int(getattr(model.config, heads_key))
            done.append((stack, kept))
            patch(stack, entry)
    except Exception:
        _restore(done, shared, unpatch)
        raise
    modules: list[dict[str, Any]] = []
    indices: list[int] = []
    for stack, _ in done:  # each stack's own modules (their parameters are the stack's: never shared across)
        found = getattr(stack.config, RECORD)
        indices += [len(modules) + i for i in found["layers"]]
        modules += found["modules"]
    setattr(model.config, RECORD, {"modules": modules, "layers": indices})
    model._posenc_original = {"stacks": done, "shared": shared}
    return model


def _restore(done: list, shared: list, unpatch: Any) -> None:
    for stack, kept in reversed(done):
        if getattr(stack, "_posenc_original", None) is not None:
            unpatch(stack)
        for module, config in kept:
            module.__dict__["config"] = config
    for module, config in shared:
        module.__dict__["config"] = config


def unpatch_stacks(model: nn.Module, original: dict, unpatch: Callable) -> None:
    """Restores what :func:`patch_stacks` changed (``unpatch``: ``posenc.interop.unpatch``)."""
    _restore(original["stacks"], original["shared"], unpatch)
