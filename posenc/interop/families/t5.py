"""T5, mT5 and UMT5: a learned bias of bucketed relative distance added to unscaled attention logits
(Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", arXiv:1910.10683, §2.1), an encoder stack and a decoder stack (``encoder.block``,
``decoder.block``), each layer's self-attention at ``layer.0.SelfAttention`` calling transformers'
attention interface with ``scaling=1.0`` and the bias as ``position_bias``.

    logits[h, i, j] = q_i · k_j + W[bucket(j − i), h]          (no 1/√D: T5 folds it into its init)

**Where the bias lives.** T5 and mT5 compute it in the first layer of each stack
(``has_relative_attention_bias``, its ``relative_attention_bias [num_buckets, H]``) and pass it to
the stack's other layers; UMT5 has a table in every layer. ``hf_layer_specs(model)`` gives one
``t5`` spec per self-attention layer, the encoder's then the decoder's; one dict object per stack for
T5 and mT5 (``patch`` builds one module for the stack: a table shared as T5 shares it), one per layer
for UMT5. ``patch`` starts each such module from the model's own table (:func:`start`), so
``patch(model, hf_layer_specs(model))`` leaves the logits unchanged; while patched the model's own
bias is off (``has_relative_attention_bias`` False: it passes zeros) and the layer's posenc scheme
runs in its place. Cross-attention (``EncDecAttention``) has no positions and is left as it was.

**Conventions, each against its source** (transformers 5.24 ``T5Attention._relative_position_bucket``,
adapted from Mesh TensorFlow's ``_relative_position_bucket``; posenc's ``posenc.reference.t5_bucket``):

- relative distance ``r = j − i`` (memory position minus query position): the same;
- the encoder's buckets are bidirectional (``bidirectional = not is_decoder``: half the buckets for
  ``r > 0``, the upper half), the decoder's causal (only ``max(−r, 0)``, the past): posenc's
  ``bidirectional`` True on the encoder's layers, False on the decoder's; a scheme placed by
  ``patch`` runs bidirectionally on the encoder and causally on the decoder (the module's
  ``is_causal``);
- ``num_buckets``/``max_distance`` are the config's ``relative_attention_num_buckets`` and
  ``relative_attention_max_distance``; half of a side's buckets are exact, the rest logarithmic up to
  ``max_distance``, truncated toward zero: the same;
- the logarithm: T5 computes it in float32 (``torch.log(n.float() / max_exact)``), posenc in
  float64. They differ only where the real value is a whole number (e.g. 9 buckets, causal,
  ``max_distance`` 128: distance 64 is bucket 8 in T5, 7 in posenc): 79 of the 70 150 settings
  (num_buckets 4-129, max_distance 2-299, 512, 1000, 1024, 4096) we compared, never T5's own
  32/128 (tests/test_interop_t5.py draws 300 at random): ``patch`` calls the model's own bucket function over ``−4M..4M`` and refuses a model whose buckets differ, naming
  the distance and both buckets (:func:`check`);
- posenc refuses ``max_distance`` below ``side // 2 + 1`` (no logarithmic bucket), which T5 accepts.

**LongT5** (``longt5``): its encoder runs local or transient-global attention
(``LongT5LocalAttention``, ``LongT5TransientGlobalAttention``: blocks of ``local_radius + 1`` keys and
side tokens, outside transformers' attention interface), refused by name.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)
    return default if value is None else value


def _spec(config: Any, bidirectional: bool) -> dict[str, Any]:
    return {"scheme": "t5", "num_heads": int(_get(config, "num_heads")),
            "num_buckets": int(_get(config, "relative_attention_num_buckets", 32)),
            "max_distance": int(_get(config, "relative_attention_max_distance", 128)),
            "bidirectional": bidirectional}


def layer_specs(config: Any, model: nn.Module | None = None) -> list[dict[str, Any]]:
    """T5's own bias as one ``t5`` spec per self-attention layer: the encoder's stack
    (``bidirectional`` True), then the decoder's (False). Given a model, its stacks as it has them
    (``T5EncoderModel``: the encoder only); given a config, the decoder's when ``is_encoder_decoder``.
    The layers of one stack that share T5's table share one dict (UMT5: one dict per layer)."""
    encoder = int(_get(config, "num_layers"))
    decoder = int(_get(config, "num_decoder_layers", encoder)) if _get(config, "is_encoder_decoder", True) else 0
    if model is not None:  # its self-attention layers (each block's layer.0.SelfAttention), causal or not
        kinds = [not m.is_causal for n, m in model.named_modules() if n.endswith(".layer.0.SelfAttention")]
        encoder, decoder = kinds.count(True), kinds.count(False)
    per_layer = _get(config, "model_type") == "umt5"
    specs = []
    for n, bidirectional in ((encoder, True), (decoder, False)):
        shared = _spec(config, bidirectional)
        specs += [_spec(config, bidirectional) if per_layer else shared for _ in range(n)]
    return specs


def _table_of(parts: Any, i: int) -> nn.Embedding | None:
    """The bias table layer ``i`` runs: its own (UMT5, a stack's first layer), else its stack's first."""
    own = parts.attentions[i]
    if getattr(own, "has_relative_attention_bias", False):
        return own.relative_attention_bias
    stack = parts.stack_of[i]
    for attention, other in zip(parts.attentions, parts.stack_of):
        if other is stack and getattr(attention, "has_relative_attention_bias", False):
            return attention.relative_attention_bias
    return None


def _buckets(attention: nn.Module, relative: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """The model's own buckets of ``relative`` (T5's static function, or UMT5's method of the layer)."""
    import inspect

    bucket = attention._relative_position_bucket
    if "bidirectional" in inspect.signature(bucket).parameters:
        return bucket(relative, bidirectional=spec["bidirectional"], num_buckets=spec["num_buckets"],
                      max_distance=spec["max_distance"])
    return bucket(relative)


def check(name: str, parts: Any, config: Any) -> None:
    """Before anything is replaced: LongT5's local attention refused by name; each stack's bias
    table of the config's size; the model's own buckets (its ``_relative_position_bucket``) equal to
    posenc's over ``−4M..4M``, else ValueError naming the distance and both buckets."""
    from posenc.reference import t5_bucket

    if any(hasattr(a, "local_radius") for a in parts.attentions):
        refuse_local(name, parts, config)
    specs = layer_specs(config, None)
    if len(specs) != len(parts.attentions):
        specs = ([_spec(config, True)] * sum(not a.is_causal for a in parts.attentions)
                 + [_spec(config, False)] * sum(bool(a.is_causal) for a in parts.attentions))
    seen = set()
    for i, (attention, spec) in enumerate(zip(parts.attentions, specs)):
        if spec["bidirectional"] != (not attention.is_causal):
            kind = "causal" if attention.is_causal else "bidirectional"
            raise ValueError(f"posenc.interop.patch: {name}'s layer {i} is {kind} but its stack's buckets are not (T5's encoder is bidirectional, its decoder causal)")
        table = _table_of(parts, i)
        if table is None or tuple(table.weight.shape) != (spec["num_buckets"], spec["num_heads"]):
            raise ValueError(f"posenc.interop.patch: {name}'s layer {i} has no relative_attention_bias table of "
                             f"[num_buckets, num_heads] = [{spec['num_buckets']}, {spec['num_heads']}] in its stack")
        key = (spec["num_buckets"], spec["max_distance"], spec["bidirectional"], type(attention))
        if key in seen:
            continue
        seen.add(key)
        m = spec["max_distance"]
        relative = torch.arange(-4 * m, 4 * m + 1)
        with torch.no_grad():
            theirs = _buckets(attention, relative, spec).cpu().numpy()
        ours = t5_bucket(relative.numpy(), num_buckets=spec["num_buckets"], max_distance=m,
                         bidirectional=spec["bidirectional"])
        if (theirs != ours).any():
            j = int((theirs != ours).nonzero()[0][0])
            raise ValueError(f"posenc.interop.patch: {name}'s relative position buckets (num_buckets="
                             f"{spec['num_buckets']}, max_distance={m}, bidirectional={spec['bidirectional']}) put "
                             f"distance {int(relative[j])} in bucket {int(theirs[j])}, posenc's t5 in "
                             f"{int(ours[j])} (T5 takes the log in float32, posenc in float64); refused rather than "
                             "run a different model")


def start(modules: list, parts: Any) -> None:
    """Each ``t5`` module that computes a layer's own bias (its spec the layer's own: the same heads,
    buckets, distance and direction) starts from the table that layer runs (its stack's first
    layer's, UMT5's own); a module shared by layers of different tables is refused by name."""
    own = layer_specs(parts.decoder.config, None)
    if len(own) != len(parts.attentions):
        own = [_spec(parts.decoder.config, not a.is_causal) for a in parts.attentions]
    tables: dict[int, tuple[nn.Module, list[nn.Embedding]]] = {}
    for i, module in enumerate(modules):
        if module is None or getattr(module, "name", None) != "t5":
            continue
        if any(module.spec.get(k) != own[i][k] for k in ("num_heads", "num_buckets", "max_distance", "bidirectional")):
            continue
        tables.setdefault(id(module), (module, []))[1].append(_table_of(parts, i))
    for module, found in tables.values():
        if any(t is not found[0] for t in found):
            raise ValueError(f"posenc.interop.patch: one t5 module is given to layers of {parts.name} that run "
                             "different bias tables (UMT5: one per layer); give each layer its own spec "
                             "(hf_layer_specs(model))")
        with torch.no_grad():
            module.weight.copy_(found[0].weight)


def refuse_local(name: str, parts: Any, config: Any) -> None:
    """LongT5: its encoder's local or transient-global attention named, and refused."""
    local = sorted({type(m).__name__ for a in parts.attentions for m in a.modules() if hasattr(m, "local_radius")})
    raise ValueError(f"posenc.interop.patch: {name}'s encoder runs {', '.join(local) or 'local attention'} (LongT5's "
                     f"encoder_attention_type={_get(config, 'encoder_attention_type')!r}: blocks of local_radius + 1 "
                     "keys and, transient-global, side tokens, computed outside transformers' attention interface), "
                     "which posenc does not reproduce; refused")


def _longt5_family():
    """LongT5: found as T5 (each block's ``layer.0``, local or not), then refused by :func:`refuse_local`."""
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="relative_bias", stack_lists="block", attention="layer.0", check=refuse_local,
                  layer_specs=lambda config, model=None: refuse_local(f"model_type {_get(config, 'model_type')!r}",
                                                                      _NoParts(), config))


class _NoParts:
    attentions: list = []


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="relative_bias", stack_lists="block", attention="layer.0.SelfAttention",
                  head_dim=("d_kv",), own_positions=("has_relative_attention_bias",), layer_specs=layer_specs,
                  check=check, start=start)
