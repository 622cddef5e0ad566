"""DINOv3's vision transformer (Siméoni et al. 2025, arXiv:2508.10104; transformers ``dinov3_vit``):
RoPE on patch coordinates in ``[−1, 1]``, base ``rope_theta`` (100), with training-time augmentations
of the coordinates (``pos_embed_shift``, ``pos_embed_jitter``, ``pos_embed_rescale``), and no table.

**Its own encoding** is posenc's ``dinov3`` scheme: ``hf_layer_specs`` gives ``{"scheme": "dinov3",
"head_dim": hidden_size / num_attention_heads, "base": rope_theta, "shift": ..., "jitter": ...,
"rescale": ...}`` on every layer. The model's ``rope_embeddings(pixel_values)`` returns ``cos, sin
[H·W, D]`` (``angles = 2π·c[:, :, None]·inv_freq``, flattened ``(y …, x …)`` and tiled: the pairs
``(k, k + D/2)``, posenc's ``layout="half"``), which its ``apply_rotary_pos_emb`` applies to the
patch tokens only: the class and register tokens are not rotated.

**While patched** the model's ``rope_embeddings`` is a :class:`NeutralGridRope`: ``cos`` 1 and ``sin``
0 (the model's apply is then the identity), and the tokens' positions recorded for the attention
function: the scheme's placement of the patch grid (``dinov3``: the patch centres; axial rope,
RoPE-Mixed: ``(r, c)``), prefix tokens at ``(0, 0)`` (no rotation: the model's own convention). In
training the ``dinov3`` scheme draws its augmentations once per forward (``DINOv3RoPE.augment``), as
the model does. Before anything is replaced the model's own ``cos, sin`` at its image size are
compared with posenc's reading of its config, and a mismatch is refused by name. An additive 2D
scheme (``sinusoidal:axes=2``) is added to the embeddings' output (prefix tokens zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc.interop.configs import get as _get
from posenc.interop.families import vit


def own_spec(config: Any) -> dict[str, Any]:
    """DINOv3's RoPE as posenc's ``dinov3`` (its augmentations included)."""
    head_dim = int(_get(config, "hidden_size")) // int(_get(config, "num_attention_heads"))
    spec = {"scheme": "dinov3", "head_dim": head_dim, "base": float(_get(config, "rope_theta", 100.0))}
    for ours, theirs in (("shift", "pos_embed_shift"), ("jitter", "pos_embed_jitter"), ("rescale", "pos_embed_rescale")):
        if _get(config, theirs) is not None:
            spec[ours] = float(_get(config, theirs))
    return spec


class NeutralGridRope(nn.Module):
    """In place of the model's ``rope_embeddings`` while patched: ``forward(pixel_values) -> (cos 1,
    sin 0)`` of ``[H·W, D]``, and the tokens' positions recorded (``position_ids``: rows ``[2, B, L]``;
    ``step``: the forward calls so far). Holds the original and ``pe`` as references."""

    def __init__(self, original: nn.Module, pe: nn.Module | None, prefix: int, patch: tuple[int, int]) -> None:
        super().__init__()
        self.__dict__["original"] = original
        self.__dict__["pe"] = pe
        self.prefix, self.patch = prefix, patch
        self.position_ids: torch.Tensor | None = None
        self.rows: torch.Tensor | None = None
        self.step = 0

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, w = pixel_values.shape[-2] // self.patch[0], pixel_values.shape[-1] // self.patch[1]
        self.step += 1
        coords = vit._patch_positions(self.pe, (h, w), pixel_values.device)  # (N, 2)
        if self.training and self.pe is not None and callable(getattr(self.pe, "augment", None)):
            coords = self.pe.augment(coords)  # training: DINOv3's one draw per forward (eval: unchanged)
        self.rows = torch.cat([coords.new_zeros(self.prefix, 2), coords])  # (L, 2): prefix tokens at (0, 0)
        if self.pe is not None:  # none in attention (an additive scheme, nope): no positions there
            self.position_ids = self.rows.T[:, None].expand(2, pixel_values.shape[0], -1)  # (2, B, L)
        d = self.original.head_dim
        ones = torch.ones(h * w, d, dtype=pixel_values.dtype, device=pixel_values.device)  # (N, D)
        return ones, torch.zeros_like(ones)


@dataclass(frozen=True)
class GridRope:
    """Where DINOv3 keeps its rotary: the attribute of the model (``rope_embeddings``)."""

    attr: str = "rope_embeddings"

    def install(self, model: nn.Module, parts: Any, first: nn.Module, additive: list, original: dict) -> NeutralGridRope:
        """The model's rotary replaced by a :class:`NeutralGridRope` (checked first against posenc's
        reading of the config), an additive scheme added to the embeddings' output."""
        vit._check_scheme(parts.name, first)
        holder = _holder(model, self.attr, parts.name)
        rope, config = getattr(holder, self.attr), model.config
        _check_rope(parts.name, rope, config)
        patch = vit._pair(_get(config, "patch_size"))
        prefix = 1 + int(_get(config, "num_register_tokens", 0))
        pe = None if getattr(first, "name", None) == "nope" else first
        neutral = NeutralGridRope(rope, None if additive else pe, prefix, patch)
        setattr(holder, self.attr, neutral)
        original["undo"] = [lambda: setattr(holder, self.attr, rope)]
        if additive:  # no table: the vectors added to the embeddings' output, prefix tokens zero

            def add(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
                pixels = kwargs["pixel_values"] if "pixel_values" in kwargs else args[0]
                grid = (pixels.shape[-2] // patch[0], pixels.shape[-1] // patch[1])
                vectors = pe(vit._patch_positions(pe, grid, out.device))  # (N, C)
                return out + torch.cat([vectors.new_zeros(out.shape[1] - vectors.shape[0], vectors.shape[-1]),
                                        vectors]).to(out.dtype)

            original["hooks"].append(holder.embeddings.register_forward_hook(add, with_kwargs=True))
        return neutral


def _holder(model: nn.Module, attr: str, name: str) -> nn.Module:
    found = [m for m in model.modules() if isinstance(getattr(m, attr, None), nn.Module) and hasattr(m, "embeddings")]
    if len(found) != 1:
        raise ValueError(f"posenc.interop.patch cannot find the rotary of {name}: {len(found)} modules hold "
                         f"{attr!r} beside 'embeddings' (one expected)")
    return found[0]


def _check_rope(name: str, rope: nn.Module, config: Any) -> None:
    """The model's own ``cos, sin`` at its image size (eval: no augmentation) against posenc's
    ``dinov3`` of its config; ValueError naming the family if they differ beyond float32 rounding."""
    from posenc.registry import build

    spec = own_spec(config)
    ours = build({k: v for k, v in spec.items() if k not in ("shift", "jitter", "rescale")})
    (ih, iw), (ph, pw) = vit._pair(_get(config, "image_size")), vit._pair(_get(config, "patch_size"))
    probe = torch.zeros(1, int(_get(config, "num_channels", 3)), ih, iw)
    training = rope.training
    rope.eval()
    try:
        with torch.no_grad():
            cos, sin = rope(probe)  # (N, D)
    finally:
        rope.train(training)
    c, s = ours.cos_sin(ours.coordinates(ih // ph, iw // pw))  # (N, D/2)
    want = torch.cat([c, c], -1), torch.cat([s, s], -1)
    if cos.shape != want[0].shape or not all(torch.allclose(a.float(), b, rtol=0, atol=1e-5)
                                             for a, b in zip((cos, sin), want)):
        raise ValueError(f"posenc.interop: {name}'s rotary ({type(rope).__name__}) differs from posenc's dinov3 of its "
                         f"config ({spec}); refused rather than run a different model")


def _family():
    from posenc.interop.families.record import Family

    return Family(rotary=None, positions="grid", own_spec=own_spec, grid_table=GridRope())
