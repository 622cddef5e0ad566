"""Vision transformers with a learned table of a patch grid: ViT (Dosovitskiy et al. 2021,
arXiv:2010.11929), DeiT (Touvron et al. 2021, arXiv:2012.12877: a class and a distillation token),
DINOv2 (Oquab et al. 2023, arXiv:2304.07193) and DINOv2 with registers (Darcet et al. 2024,
arXiv:2309.16588), SigLIP's vision tower (Zhai et al. 2023, arXiv:2303.15343: no class token).
BEiT (and Data2Vec-Vision, built like it) and Swin (V1, V2, Donut's) are refused by name
(``Family.refused``: their relative position bias tables reach attention inside the mask).

**Their own encoding.** The table is the model's: ``embeddings.position_embeddings [1, P + H·W, C]``
(``P`` = 1 class row, DeiT 2; SigLIP's ``position_embedding`` an ``nn.Embedding [H·W, C]``, P = 0),
added to ``[prefix tokens, patches]`` before the embeddings' dropout; DINOv2's register tokens are
inserted after it (they carry no position). ``hf_layer_specs`` reads it as posenc's ``learned`` of the
patch grid, ``{"scheme": "learned", "d_model": C, "grid": [H, W]}`` (``H = image_size / patch_size``);
``patch`` starts that module from the table's patch rows, and the ``P`` prefix rows stay the model's
own parameter, where the model keeps it (trained through it). So ``patch(model,
hf_layer_specs(model.config))`` leaves the outputs unchanged.

**How, while patched.** The table stays registered in the embeddings (``state_dict``, optimisers and
``.to()`` see it), but for the length of the embeddings' forward it reads as zeros, so the model's own
code (mask tokens, registers, its ``interpolate_pos_encoding``) runs as it is and adds nothing; the
scheme's vectors are then added where the table was, at the input of the embeddings' dropout (SigLIP,
which has none: at the embeddings' output). Attention schemes get the tokens' positions, recorded for
the attention function (``posenc.interop.patching.attention_function``); attention runs
bidirectionally, as the model's ``is_causal = False`` says.

**Positions of the patch grid.** Patch ``(r, c)`` of an ``H × W`` grid (row-major, as the model
flattens its patches) takes the scheme's own placement: ``(r, c)`` itself (``posenc.grid_positions``:
axial ``rope:axes=2``, ``rope_mixed``, ``sinusoidal:axes=2``, ``learned:grid=[H,W]``), or a scheme's
``grid_positions(grid)`` (``dinov3``: the patch centres in ``[−1, 1]``). Only 2D schemes are taken
(``axes`` 2, or a 2D ``learned`` grid, or ``nope``); a one-axis scheme is refused by name.

**Prefix tokens** (class, distillation, registers) sit at position ``(0, 0)`` on both axes. For every
rotary scheme posenc has for images the angle is linear in the position, so that is *no rotation*:
RoPE-ViT's convention (Heo et al. 2024, naver-ai/rope-vit: only ``q[:, :, 1:]``, ``k[:, :, 1:]`` are
rotated) and DINOv3's (transformers' ``dinov3_vit`` and timm rotate the patch tokens only). An
additive scheme gives them a zero vector, as MAE's 2D sin-cos table does for its class token
(He et al. 2022, ``get_2d_sincos_pos_embed(..., cls_token=True)`` prepends a row of zeros), except
``learned``, whose prefix rows are the model's own (the class row; DeiT's distillation row).
Registers always get zeros: the model gives them none.

**Another image size** (``interpolate_pos_encoding=True``, which ViT, DeiT and SigLIP need for it;
DINOv2 always interpolates): the model's own rule for its own table, ``posenc.interop.resize_grid``
of the patch rows (bicubic, ``align_corners=False``; DINOv2 with registers with ``antialias=True``),
which is exactly what the model's ``interpolate_pos_encoding`` does to its table; every other scheme
by its own rule: the new grid's ``(r, c)`` (a rotary or sinusoidal scheme extrapolates), ``dinov3``'s
coordinates of the new grid (its centres stay in ``[−1, 1]``), a ``learned`` grid resized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc.interop.configs import get as _get


@dataclass(frozen=True)
class GridTable:
    """Where a vision family keeps its table and what it holds: the attribute of its embeddings
    (``position_embeddings``: an ``nn.Parameter [1, P + H·W, C]``; SigLIP's ``position_embedding``: an
    ``nn.Embedding [H·W, C]``), the table's prefix rows ``P`` (class, distillation), and whether its
    ``interpolate_pos_encoding`` resizes with ``antialias`` (DINOv2 with registers)."""

    attr: str = "position_embeddings"
    prefix: int = 1
    antialias: bool = False

    def install(self, model: nn.Module, parts: Any, first: nn.Module, additive: list, original: dict) -> Any:
        """``patch``'s step for this family (:func:`install`); DINOv3's rotary has its own (``families/dinov3.py``)."""
        return install(model, parts, first, additive, original)


BEIT = ("BEiT's relative position bias (a learned table per (Δrow, Δcol) of its patch window plus three rows for the "
        "class token, per layer or shared: use_relative_position_bias, use_shared_relative_position_bias, with an "
        "optional absolute table) reaches its attention as part of the attention mask; posenc has no reading of "
        "it and would take it for the model's mask")
SWIN = ("Swin's windowed attention (window_size, shifted windows, patch merging between stages) with a relative "
        "position bias table per window (Swin V2: a continuous position bias MLP over log-spaced coordinates) "
        "reaches its attention as part of the attention mask; posenc has no reading of it")


def vision_config(config: Any) -> Any:
    """A composite config's ``vision_config`` (SigLIP's), else the config."""
    sub = _get(config, "vision_config")
    return config if sub is None else sub


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) else (int(value), int(value))


def grid_of(config: Any) -> list[int]:
    """The patch grid ``[H, W]`` the table is made for: ``image_size / patch_size`` on each axis."""
    config = vision_config(config)
    (ih, iw), (ph, pw) = _pair(_get(config, "image_size")), _pair(_get(config, "patch_size"))
    return [ih // ph, iw // pw]


def own_spec(config: Any) -> dict[str, Any]:
    """The table as posenc's ``learned`` of the patch grid (its prefix rows stay the model's)."""
    return {"scheme": "learned", "d_model": int(_get(vision_config(config), "hidden_size")), "grid": grid_of(config)}


def _refused(reason: str):
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="none", refused=reason)


def _family(prefix: int = 1, *, antialias: bool = False, attr: str = "position_embeddings", layers: str | None = None,
            sub_config: str | None = None):
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="grid", table_holder="embeddings", table_attr=attr, own_spec=own_spec,
                  grid_table=GridTable(attr, prefix, antialias), layers=layers, sub_config=sub_config)


def _table(holder: nn.Module, row: GridTable) -> tuple[nn.Module, str]:
    """The module and name of the table's parameter: ``(embeddings, "position_embeddings")`` or
    ``(embeddings.position_embedding, "weight")``."""
    table = getattr(holder, row.attr)
    return (table, "weight") if isinstance(table, nn.Embedding) else (holder, row.attr)


def _check_scheme(name: str, pe: nn.Module | None) -> None:
    """A 2D scheme, or none; anything else refused naming it."""
    if pe is None or getattr(pe, "name", None) == "nope":
        return
    grid = getattr(pe, "grid", None)
    axes = len(grid) if getattr(pe, "name", None) == "learned" and grid else getattr(pe, "axes", 1)
    if axes != 2:
        raise ValueError(f"posenc.interop.patch: {name} is a vision transformer whose tokens are a patch grid; it "
                         f"takes 2D schemes (rope:axes=2, rope_mixed, dinov3, sinusoidal:axes=2, learned with "
                         f"grid=[H, W], or nope), got {getattr(pe, 'name', type(pe).__name__)!r} with {axes} "
                         "position axis(es)")


def _patch_positions(pe: nn.Module | None, grid: tuple[int, int], device: torch.device) -> torch.Tensor:
    """The patches' positions ``[H·W, 2]`` as the scheme places them (its ``grid_positions``, or ``(r, c)``)."""
    from posenc.positions import grid_positions

    own = getattr(pe, "grid_positions", None)
    pos = own(grid) if callable(own) else grid_positions(grid)
    return pos.to(device)


class GridPositions:
    """While patched: the embeddings' forward (its table read as zeros), the scheme's vectors added at
    the dropout's input, and the tokens' positions recorded for the attention function
    (``position_ids``: rows ``[2, B, L]``, as multimodal RoPE's, or None for an additive scheme or
    none; ``step``: the forward calls so far)."""

    def __init__(self, holder: nn.Module, row: GridTable, pe: nn.Module | None, additive: bool, name: str) -> None:
        self.holder, self.row, self.pe, self.additive, self.name = holder, row, pe, additive, name
        self.owner, self.key = _table(holder, row)
        self.table = self.owner._parameters[self.key]  # the model's parameter, kept registered
        self.forward = holder.forward  # the embeddings' own forward (a bound method)
        patch = getattr(holder, "patch_size", None)
        if patch is None:
            patch = getattr(getattr(holder, "patch_embeddings", None), "patch_size", None)
        self.patch = _pair(patch)
        self.grid: tuple[int, int] | None = None
        self.position_ids: torch.Tensor | None = None
        self.step = 0

    def __call__(self, pixel_values: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.grid = (pixel_values.shape[-2] // self.patch[0], pixel_values.shape[-1] // self.patch[1])
        self.step += 1
        self.owner._parameters[self.key] = torch.zeros_like(self.table, requires_grad=False)
        try:
            out = self.forward(pixel_values, *args, **kwargs)  # the model's own code, adding zeros
        finally:
            self.owner._parameters[self.key] = self.table
        if not isinstance(getattr(self.holder, "dropout", None), nn.Dropout):
            out = self.add(out)  # SigLIP: no dropout after its table
        return out

    def dropout_hook(self, module: nn.Module, args: tuple) -> tuple:
        return (self.add(args[0]), *args[1:])

    def add(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, L, C]`` (prefix tokens then the patch grid) plus the scheme's vectors; the positions
        recorded."""
        h, w = self.grid
        n = h * w
        extra = x.shape[1] - n
        if extra < 0:
            raise ValueError(f"posenc.interop: {self.name}'s embeddings give {x.shape[1]} tokens for a {h}×{w} patch "
                             "grid")
        patches = _patch_positions(self.pe, (h, w), x.device)  # (N, 2)
        rows = torch.cat([patches.new_zeros(extra, 2), patches])  # (L, 2): prefix tokens at (0, 0)
        b = x.shape[0]
        self.position_ids = None if self.additive else rows.T[:, None].expand(2, b, -1)  # (2, B, L)
        if not self.additive:
            return x
        return x + self.vectors(rows, extra, (h, w)).to(x.dtype)  # (B, L, C) + (L, C)

    def vectors(self, rows: torch.Tensor, extra: int, grid: tuple[int, int]) -> torch.Tensor:
        """The additive scheme's ``[L, C]``: prefix rows (the model's own for ``learned``, else zeros),
        then the patches'."""
        pe, c = self.pe, self.table.shape[-1]
        if getattr(pe, "name", None) == "learned":
            from posenc.interop.grid import resize_grid

            weight = pe.weight  # (H0·W0, C)
            if tuple(pe.grid) != grid:  # the model's own interpolate_pos_encoding of its table (or learned's resize)
                weight = resize_grid(weight, pe.grid, list(grid), mode="bicubic", antialias=self.row.antialias)
            own = self.table.reshape(-1, c)[: min(self.row.prefix, extra)]  # (P, C): the model's class row(s)
            prefix = torch.cat([own, own.new_zeros(extra - own.shape[0], c)])
            return torch.cat([prefix.to(weight.dtype), weight])
        patches = pe(rows[extra:])  # (N, C)
        return torch.cat([patches.new_zeros(extra, c), patches])


def install(model: nn.Module, parts: Any, first: nn.Module, additive: list, original: dict) -> GridPositions:
    """The embeddings' forward replaced by a :class:`GridPositions` (undone by ``uninstall``), the
    table checked against the config, a ``learned`` module of the table's grid started from it."""
    family, holder = parts.family, parts.table_holder
    row = family.grid_table
    _check_scheme(parts.name, first)
    owner, key = _table(holder, row)
    table = owner._parameters[key]
    grid = grid_of(model.config)
    c = table.shape[-1]
    if table.numel() != (row.prefix + math.prod(grid)) * c:
        raise ValueError(f"posenc.interop: {parts.name}'s position table {row.attr} is {list(table.shape)}, not "
                         f"{row.prefix} prefix row(s) and a {grid[0]}×{grid[1]} patch grid of width {c}")
    if getattr(first, "name", None) == "learned" and list(first.grid or ()) == grid and first.weight.shape[-1] == c:
        with torch.no_grad():
            first.weight.copy_(table.reshape(-1, c)[row.prefix:])
    pe = None if getattr(first, "name", None) == "nope" else first
    state = GridPositions(holder, row, pe, bool(additive), parts.name)
    holder.forward = state  # an instance attribute: nn.Module.__call__ (and its hooks) call it
    if isinstance(getattr(holder, "dropout", None), nn.Dropout):
        original["hooks"].append(holder.dropout.register_forward_pre_hook(state.dropout_hook))
    original["undo"] = [lambda: holder.__dict__.pop("forward", None)]
    return state
