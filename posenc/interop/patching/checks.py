"""Checks before ``patch`` replaces anything: a scheme against the model's shapes (per-head
frequencies on grouped keys, a softmax term a content scheme cannot take, value embeddings of
another size), the model's own encoding against posenc's reading of its config
(``posenc.interop.families.check``), and whether a rotary scheme fits the model's own rotary module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.interop.configs import layer_sizes as _sizes, text_config as _text
from posenc.interop.families import Family


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


def _check_heads(model: nn.Module, family: Family, modules: list, layer_indices: Sequence[int]) -> None:
    """A rotary scheme with frequencies per head (``num_heads``: RoPE-Mixed, FoPE) rotates the model's
    queries (``num_attention_heads``) and its grouped keys (``num_key_value_heads``) as they are (never
    repeated): tried on a zero query and key of those heads before anything is replaced, and refused
    naming why when it cannot take them."""
    text = getattr(model.config, family.sub_config) if family.sub_config else _text(model.config)  # SigLIP's vision
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
        specs = hf_layer_specs(model.config if parts.family.layer_specs is None else model)
    except ValueError:
        if needed:
            raise
        return None
    if parts.rotary is not None:
        from posenc.interop.hf import HFRotaryEmbedding, _read_rope, rope_layer_types

        check.check_rotary(parts.name, getattr(parts.decoder, parts.rotary), model.config, _read_rope, rope_layer_types,
                           HFRotaryEmbedding)
    elif parts.family.own_spec is not None:
        holder = parts.decoder if parts.table_holder is None else parts.table_holder
        check.check_own(parts.name, parts.family, holder, parts.attentions, model.config)
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
