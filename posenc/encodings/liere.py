"""LieRE (Ostmeier et al. 2024, "LieRE: Lie Rotational Positional Encodings", arXiv:2406.10322;
official code StanfordMIMI/LieRE): rotations ``R(p) = exp(Σ_a p_a·B_a)`` of learned
skew-symmetric generators ``B_a``, one per axis, dense (``block_dim = head_dim``, the paper's
default) or in blocks of ``block_dim`` dims; see ``posenc.reference.liere`` for the formula.

    x'[k·b:(k+1)·b] = R(p)[k] @ x[k·b:(k+1)·b],   R(p) = exp(Σ_a p_a·(U_a − U_aᵀ))

**Parameters.** ``generators [A, G, n, b, b]`` holds the raw parameters as the official code's
``generator_raw_params`` (its ``[A, layers, G·n, b, b]`` with one layer, reshaped): only the
strict upper triangle is read; initialised ``U[0, 2π)`` as there. ``G = num_heads`` when
``per_head`` (one set per head), else 1.

**Positions** are in patch units, integer or real, ``[L, A]``/``[B, L, A]`` (``[L]``/``[B, L]`` for
one axis), as ``posenc.grid_positions`` gives them; the module divides axis ``a`` by ``grid[a] − 1``
(the training grid, default 14 per axis: ViT-B/16 at 224 pixels), which is the official code's
``linspace(0, 1, g)``. At another resolution the official positions are ``linspace(0, s/g, s)``
for ``s`` patches; ``liere_positions(shape, grid)`` gives them in patch units.

**Exact.** ``Σ p_a·B_a`` and its exponential (``torch.linalg.matrix_exp``) are computed in float64,
then cast to ``x``'s dtype before the product (the official code exponentiates in float32).
No table is cached: the rotation depends on the learned generators. Not relative in general
(``R(p)ᵀR(p') ≠ R(p' − p)`` when the generators do not commute), so cached decoding is exact
(each key is rotated once, at its own position) but scores are not functions of ``p' − p``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validate import check_bool, check_int
from posenc.encodings._base import RotaryEncoding
from posenc.limits import Axes, Dim, Heads, check_memory
from posenc.reference.liere import liere
from posenc.registry import register
from posenc.rotary import check_out


DEFAULT_GRID = 14
"""Patches per axis at training when ``grid`` is not given: ViT-B/16 at 224 pixels (the official code's ImageNet setting)."""


@register("liere", kind="rotary")
class LieRE(RotaryEncoding):
    """LieRE (Ostmeier et al. 2024): rotations as the exponential of learned skew-symmetric generators per axis."""

    real_positions = True

    def __init__(self, *, head_dim: Dim, axes: Axes = 2, grid: list[Dim] | None = None, block_dim: Dim | None = None,
                 per_head: bool = False, num_heads: Heads | None = None) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=2)
        self.axes = check_int("axes", axes, min=1, max=8)
        self.grid = check_grid(grid, self.axes)
        self.block_dim = self.head_dim if block_dim is None else check_int("block_dim", block_dim, min=2,
                                                                              max=self.head_dim)
        self.per_head = check_bool("per_head", per_head)
        if self.per_head and num_heads is None:
            raise ValueError("per_head=True needs num_heads (one set of generators per head), got num_heads=None")
        self.num_heads = None if num_heads is None else check_int("num_heads", num_heads, min=1)
        self.blocks = self.head_dim // self.block_dim
        groups = self.num_heads if self.per_head else 1
        shape = (self.axes, groups, self.blocks, self.block_dim, self.block_dim)
        check_memory("block_dim", self.block_dim, 3 * math.prod(shape), bytes_per=8,
                     what=f"its generators {list(shape)} (float32 parameters and float64 copies)")
        self.generators = nn.Parameter(torch.rand(shape) * (2 * math.pi))  # (A, G, n, b, b), raw

    def skew(self) -> torch.Tensor:
        """``B = U − Uᵀ`` float64 ``[A, G, n, b, b]`` (``U``: the strict upper triangle of ``generators``)."""
        upper = torch.triu(self.generators.to(torch.float64), diagonal=1)
        return upper - upper.transpose(-1, -2)

    def rotations(self, positions: torch.Tensor) -> torch.Tensor:
        """``R(p) = exp(Σ_a p_a·B_a)`` float64: checked positions -> ``[..., L, G, n, b, b]``."""
        pos = positions.to(device=self.generators.device, dtype=torch.float64)
        if self.axes == 1:
            pos = pos[..., None]  # (..., L, 1)
        pos = pos / (pos.new_tensor(self.grid) - 1)  # u_a = p_a / (g_a − 1), as the reference divides
        m = torch.einsum("...la,agnij->...lgnij", pos, self.skew())
        return torch.linalg.matrix_exp(m)

    @property
    def cos_sin(self):  # noqa: D401 - no per-pair angles: hasattr(m, "cos_sin") is False (posenc.analysis)
        """LieRE rotates by dense matrices, not per-pair angles: there is no cos/sin (``rotations`` gives
        the matrices); reading the attribute raises AttributeError."""
        raise AttributeError("liere rotates by dense matrices, not per-pair angles: it has no cos_sin; "
                             "use module(x, positions) or module.rotations(positions)")

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]``; same shape and dtype. ``out``: as in ``posenc.apply_rotary``."""
        x, positions = self.check_call(x, positions, role)
        heads = self.num_heads if self.per_head else None
        if heads is not None and x.shape[1] != heads:
            raise ValueError(f"x must have num_heads={heads} heads (per_head generators), got shape {list(x.shape)}")
        rot = self.rotations(positions).to(device=x.device, dtype=x.dtype)  # (..., L, G, n, b, b)
        rot = rot.movedim(-4, -5)  # (G, L, n, b, b) or (B, G, L, n, b, b)
        nb = self.blocks * self.block_dim
        blocks = x[..., :nb].unflatten(-1, (self.blocks, self.block_dim))  # (B, H, L, n, b)
        turned = (rot @ blocks.unsqueeze(-1)).squeeze(-1).flatten(-2)  # (B, H, L, n·b)
        result = turned if nb == x.shape[-1] else torch.cat([turned, x[..., nb:]], dim=-1)
        return result if out is None else check_out(out, x).copy_(result)

    def reference(self, x, positions, *, role: str | None = None):
        return liere(x, positions, self.generators.detach().double().cpu().numpy(), self.grid)


def check_grid(grid, axes: int) -> list[int]:
    """The training grid: one size >= 2 per axis (default 14 each)."""
    if grid is None:
        return [DEFAULT_GRID] * axes
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (list, tuple)):
        raise TypeError(f"grid must be a list of {axes} sizes (patches per axis at training), got {grid!r}")
    if len(grid) != axes:
        raise ValueError(f"grid must have one size per axis (axes={axes}), got {len(grid)}: {list(grid)}")
    return [check_int(f"grid[{i}]", g, min=2) for i, g in enumerate(grid)]


def liere_positions(shape, grid) -> torch.Tensor:
    """``[prod(shape), A]`` float64 patch-unit positions of an ``s_0 × s_1 × …`` grid placed as the
    official code places it for a model trained on ``grid``: ``linspace(0, s/g, s)·(g − 1)`` per
    axis, row-major (``s = g``: the integers ``0 .. g−1``, ``posenc.grid_positions``)."""
    sizes = [check_int(f"shape[{i}]", s, min=1) for i, s in enumerate(shape)]
    trained = check_grid(grid, len(sizes))
    lines = [torch.linspace(0, s / g, s, dtype=torch.float64) * (g - 1) for s, g in zip(sizes, trained)]
    out = torch.cartesian_prod(*lines).reshape(-1, len(sizes))  # (N, A)
    return out[:, 0] if len(sizes) == 1 else out
