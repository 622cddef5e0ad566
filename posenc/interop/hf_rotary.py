"""The posenc rotary module of a transformers config, and back into the model:
:func:`from_hf` (``posenc.from_hf``; the spec it builds is ``posenc.interop.rope_spec.hf_rope_spec``,
the module checked against the family's own rotary class) and :class:`HFRotaryEmbedding` (posenc
``rope``/``mrope`` modules with the interface of transformers' ``*RotaryEmbedding``, returning the
table the family's attention reads: ``HF_TABLES``). ``posenc.interop.hf``'s docstring says what each
family's config and rotary hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from posenc._validate import check_choice
from posenc.interop.configs import get as _get, text_config_and_type as _text_config
from posenc.interop.families.record import HF_TABLES
from posenc.interop.rope_spec import _read_rope, rope_layer_types
from posenc.positions import text_positions
from posenc.rotary import DIRECTIONS


def from_hf(config: Any, *, layer_type: str | None = None, layout: str | None = None):
    """The posenc ``rope`` module (``mrope`` for Qwen2-VL/Qwen3-VL) that reproduces a
    transformers model's rotary embedding.

    ``module.cos_sin(positions)`` times ``module.attention_factor`` equals the model's
    ``rotary_emb(x, position_ids)`` (first ``rotary_dim/2`` columns), with the angles computed
    in float64 instead of float32. See :func:`hf_rope_spec` for the arguments; a config with one
    RoPE per layer type (Gemma 3) needs ``layer_type=`` (or :meth:`HFRotaryEmbedding.from_config`).

    ``partial_rotary_factor`` is honoured as transformers' scaled rope types and partial-rotary
    models (GPT-NeoX, Phi, StableLM) honour it (frequencies over the rotated width); Llama's own
    default RoPE ignores it. Rope type ``proportional`` honours it as p-RoPE does (frequencies
    over the whole head, zero past the factor: ``partial_rotary="proportional"``).

    The module's ``hf_table`` names the table the family's rotary module returns (one of
    ``HF_TABLES``; None for a model type not in ``HF_FAMILIES``): ``HFRotaryEmbedding`` returns it.
    Its ``hf_apply_direction`` is the way the family's ``apply_rotary_pos_emb`` turns pairs by that
    table's angles (``Family.direction``): NanoChat's turns them clockwise, so its rope is
    ``direction="clockwise"`` and ``HFRotaryEmbedding`` hands NanoChat's apply the table its own
    rotary returns.

    A transformers config object (not a dict) is checked: the rotary class of its own modeling
    module, built from it, is compared at a few positions with ``HFRotaryEmbedding(module)``
    (``posenc.interop.families.check``); a difference (Cohere-style interleaved pairs read as
    ``"half"``, another base or scaling) is a ValueError naming the family, never a silently
    different model.
    """
    module = _read_rope(config, layer_type, layout)  # bases that differ between layers: refused there, by name
    if _get(_text_config(config)[0], "layer_rope_theta") is not None:
        raise ValueError("config key 'layer_rope_theta' (Granite SWA): the model runs one rotary per base of its "
                         "layers (rotary_embs) and leaves its rotary_emb unused, so HFRotaryEmbedding(from_hf(config)) "
                         "placed there would have no effect; use posenc.interop.patch(model, pe), which puts pe "
                         "into each layer, and hf_layer_specs(config) for the model's own bases")
    if layout is None:  # the family's own reading: checked against its modeling module's rotary
        from posenc.interop.families.check import check_from_hf

        check_from_hf(config, module, layer_type, HFRotaryEmbedding)
    return module


def _length_rule(rope: nn.Module) -> tuple[str, int] | None:
    """``(scaling type, original length)`` of a rope whose frequencies depend on the length."""
    scaling = rope.spec.get("scaling") or {}
    if scaling.get("type") in ("longrope", "dynamic"):
        return scaling["type"], int(scaling["original_max_positions"])
    return None


class HFRotaryEmbedding(nn.Module):
    """posenc ``rope``/``mrope`` modules with the interface of transformers' ``*RotaryEmbedding``.

    ``forward(x, position_ids, layer_type=None)`` returns the family's table (``table``, one of
    ``HF_TABLES``) with the attention factor applied, in ``x``'s dtype (complex64, or complex128
    for a float64 ``x``, for ``"complex"``): ``cos, sin [B, L, rotary_dim]`` with each half-table
    repeated as ``rotate_half`` expects (``"rotate_half"``, the default for a ``"half"`` module;
    ``"interleaved"``, the default for an interleaved one), ``[B, L, rotary_dim/2]`` for
    ``"half_width"`` (GPT-OSS), ``sin, cos [B, L, rotary_dim/2]`` (that order) for
    ``"sin_cos_half_width"`` (GPT-J, CodeGen), one complex ``freqs_cis [B, L, rotary_dim/2]`` for ``"complex"``
    (Llama 4). A module from :func:`from_hf` carries its family's table (``rope.hf_table``), so
    ``HFRotaryEmbedding(from_hf(config))`` fits that family's model.

    ``apply_direction``: the way the model's ``apply_rotary_pos_emb`` turns each pair by the table's
    angles (``posenc.rotary.DIRECTIONS``): ``"counterclockwise"`` (transformers' ``rotate_half``)
    or ``"clockwise"`` (NanoChat's), so the table holds the rope's angles, negated for a clockwise
    apply, and the model turns each pair by the rope's own angle (its ``direction=`` included).
    Default: the module's family's (``rope.hf_apply_direction`` from :func:`from_hf`), else
    counterclockwise.

    ``rope`` is one module, or a mapping layer type -> module (Gemma 3): then ``forward`` needs
    ``layer_type``, as transformers' ``Gemma3RotaryEmbedding.forward(x, position_ids, layer_type)``.
    :meth:`from_config` builds either from a config.

    ``position_ids`` is ``[B, L]`` for ``rope``; for ``mrope`` it is transformers' ``[3, B, L]``
    (time, height, width: what Qwen2-VL's ``get_rope_index`` returns) or ``[B, L]`` (text: three
    equal positions, as transformers expands it).

    **Length-dependent scalings follow transformers**, call by call: LongRoPE (Phi-3) uses the long
    factors when the call's ``max(position_ids) + 1`` exceeds the original length and the short ones
    otherwise (so a short call after a long one is back on the short factors, without
    ``reset_length()``); dynamic NTK grows with the longest call and goes back to the original
    frequencies when a call is shorter than the original length.

    Assign it where the model keeps its rotary (``HF_FAMILIES[model_type].rotary``)::

        model.model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))      # Llama, GPT-OSS, Llama 4
        model.gpt_neox.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))   # GPT-NeoX / Pythia
        model.transformer.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))  # Falcon
        model.model.rotary_emb = HFRotaryEmbedding.from_config(model.config)           # Gemma 3: per layer type
        model.model.language_model.rotary_emb = HFRotaryEmbedding(posenc.from_hf(model.config))  # Qwen2-VL
    """

    def __init__(self, rope: nn.Module | Mapping[str, nn.Module], *, table: str | None = None,
                 apply_direction: str | None = None) -> None:
        super().__init__()
        ropes = dict(rope) if isinstance(rope, Mapping) else {None: rope}
        if not ropes:
            raise ValueError("HFRotaryEmbedding needs a rope module or a non-empty mapping layer type -> rope")
        for name, module in ropes.items():
            if getattr(module, "name", None) not in ("rope", "mrope"):
                raise TypeError(f"HFRotaryEmbedding needs a posenc 'rope' module (or 'mrope'), got "
                                f"{type(module).__name__}" + (f" for layer type {name!r}" if name else ""))
            if module.scaling.decay is not None:
                raise ValueError("xpos scales queries and keys differently; transformers' rotary interface "
                                 "(one cos/sin for both) cannot express it")
            if getattr(module, "query_temperature", None) is not None:
                raise ValueError("a rope with a query_temperature scales the queries only; transformers' rotary "
                                 "interface (one cos/sin for q and k) cannot express it (Ministral 3's attention "
                                 "applies its own: from_hf(config) gives its rotary alone)")
        first = next(iter(ropes.values()))
        if table is None:
            table = getattr(first, "hf_table", None) or ("rotate_half" if first.layout == "half" else "interleaved")
        if table not in HF_TABLES:
            raise ValueError(f"table must be one of {', '.join(map(repr, HF_TABLES))}; got {table!r}")
        if table == "complex" and any(m.name != "rope" for m in ropes.values()):
            raise ValueError("table 'complex' (Llama 4's freqs_cis) takes a 1D 'rope' module")
        if apply_direction is None:
            apply_direction = getattr(first, "hf_apply_direction", None) or "counterclockwise"
        self.table = table
        self.apply_direction = check_choice("apply_direction", apply_direction, DIRECTIONS)
        if None in ropes:
            self.rope = first
            self.layer_types: list[str] = []
        else:
            self.rope = None
            self.ropes = nn.ModuleDict({str(k): m for k, m in ropes.items()})
            self.layer_types = sorted(self.ropes)

    @classmethod
    def from_config(cls, config: Any, *, layout: str | None = None, table: str | None = None) -> HFRotaryEmbedding:
        """The rotary of a transformers config: one rope (:func:`from_hf`), or one per layer type
        (:func:`rope_layer_types`, Gemma 3), with the family's table."""
        types = rope_layer_types(config)
        if types:
            return cls({t: from_hf(config, layer_type=t, layout=layout) for t in types}, table=table)
        return cls(from_hf(config, layout=layout), table=table)

    def _rope(self, layer_type: str | None) -> nn.Module:
        if self.rope is not None:
            if layer_type is not None:
                raise ValueError(f"layer_type={layer_type!r} given, but this HFRotaryEmbedding has one rope for "
                                 "every layer (build it from a mapping layer type -> rope)")
            return self.rope
        if layer_type is None:
            raise ValueError(f"this HFRotaryEmbedding has one rope per layer type ({', '.join(self.layer_types)}); "
                             "pass layer_type")
        if layer_type not in self.ropes:
            raise ValueError(f"layer_type must be one of {', '.join(map(repr, self.layer_types))}; got {layer_type!r}")
        return self.ropes[layer_type]

    @property
    def attention_scaling(self) -> float:
        if self.rope is None:
            raise ValueError("this HFRotaryEmbedding has one rope per layer type; read "
                             "module.ropes[layer_type].attention_factor")
        return self.rope.attention_factor

    def _positions(self, rope: nn.Module, position_ids: torch.Tensor) -> torch.Tensor:
        """transformers' position ids as the posenc module's positions (``[B, L, 3]`` for mrope)."""
        if not isinstance(position_ids, torch.Tensor):
            raise TypeError(f"position_ids must be a torch.Tensor, got {type(position_ids).__name__}")
        if rope.name == "rope":
            if position_ids.dim() == 3:  # (3, B, L): text has three equal rows (Qwen 3.5's text model)
                if position_ids.shape[0] == 3 and all(torch.equal(position_ids[0], r) for r in position_ids[1:]):
                    return position_ids[0]
                raise ValueError(f"position_ids of shape {list(position_ids.shape)} are multimodal ([3, B, L]) with "
                                 "rows that differ (image or video tokens); this module is a 1D 'rope': build an "
                                 "'mrope' one (from_hf of a Qwen2-VL/Qwen3-VL config) or pass [B, L]")
            return position_ids
        if position_ids.dim() == 2:  # text: (B, L) -> (B, L, 3), as transformers expands it
            return text_positions(position_ids, rope.axes)
        if position_ids.dim() == 3 and position_ids.shape[0] == 3:
            return position_ids.permute(1, 2, 0)  # (3, B, L) -> (B, L, 3)
        raise ValueError(f"position_ids must have shape [3, B, L] (time, height, width) or [B, L] (text) for an "
                         f"mrope module, got shape {list(position_ids.shape)}")

    @staticmethod
    def _follow_length(rope: nn.Module, position_ids: torch.Tensor) -> None:
        """transformers' ``dynamic_rope_update``: the frequencies of this call's length."""
        rule = _length_rule(rope)
        if rule is None or position_ids.numel() == 0:
            return
        rope_type, original = rule
        if rope_type == "longrope" or int(position_ids.max()) + 1 < original:
            rope.reset_length()  # the call's own length decides (longrope); dynamic: back to L0's frequencies

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
        rope = self._rope(layer_type)
        positions = self._positions(rope, position_ids)
        self._follow_length(rope, position_ids)
        cos, sin = rope.cos_sin(positions, torch.float64)  # (B, L, R/2) float64
        factor = rope.attention_factor
        cos, sin = cos * factor, sin * factor
        if self.apply_direction == "clockwise":  # the model's apply turns by minus the table's angles
            sin = -sin
        if self.table == "complex":
            dtype = torch.complex128 if x.dtype == torch.float64 else torch.complex64
            return torch.complex(cos, sin).to(device=x.device, dtype=dtype)  # (B, L, R/2) freqs_cis
        if self.table == "rotate_half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (B, L, R)
        elif self.table == "interleaved":
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)  # (B, L, R)
        elif self.table == "sin_cos_half_width":  # GPT-J, CodeGen: (sin, cos), each (B, L, R/2)
            return sin.to(device=x.device, dtype=x.dtype), cos.to(device=x.device, dtype=x.dtype)
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)
