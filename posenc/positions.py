"""The positions model: what a position is, checked in one place for every kind of scheme.

    positions                 one axis (text)         several axes (A = the spec's ``axes``)
    unbatched                 [L]                     [L, A]     e.g. (row, col) of image patches
    batched                   [B, L]                  [B, L, A]  e.g. (time, row, col) of video patches

- A module knows ``A`` from its spec (``module.axes``: ``axes`` for sinusoidal/rope/rope_mixed,
  ``len(grid)`` for a learned grid), never from the tensor: for a module with ``axes=3`` a
  ``[L, 3]`` tensor is L tokens, never a batch of L three-token sequences.
- Values are non-negative integers, or real numbers (any floating dtype) for the schemes that are
  functions of position (``module.real_positions``; ``posenc.registry.real_schemes()``): time in seconds,
  fractional NaViT coordinates, interpolated resolutions. An integer-valued float gives exactly
  the integer's result. Table schemes (learned, t5, shaw, transformer_xl) raise TypeError naming
  the schemes that accept real positions.
- ``grid_positions(shape, *, offset=0)`` builds row-major grids: ``[prod(shape), len(shape)]``;
  ``text_positions(positions, axes)`` puts text tokens at the same position on every axis.
- Angles for every rotary form come from one function, ``posenc.rotary.angles(positions,
  inv_freq, axis_of_pair)``: pair ``i`` turns by ``positions[..., axis_of_pair[i]] · inv_freq[i]``
  (one axis: ``axis_of_pair=None``), exactly at any position (see its docstring).

The NumPy twin of this module (torch-free, for the reference) is ``posenc.reference.positions``.
"""

from __future__ import annotations

from typing import Any

import torch

from posenc.reference.positions import REAL_SCHEMES
from posenc.reference.positions import grid_positions as _grid_positions_np

INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def shape_text(axes: int) -> str:
    return "[L] or [B, L]" if axes == 1 else f"[L, {axes}] or [B, L, {axes}] (axes={axes})"


def check_positions(name: str, positions: Any, *, axes: int = 1, real: bool = False, scheme: str = "",
                    max_value: int | None = None, why: str = "") -> torch.Tensor:
    """Positions of a module with ``axes`` axes: an integer (or, when ``real``, floating-point)
    tensor ``[L]``/``[B, L]`` (one axis) or ``[L, A]``/``[B, L, A]``, non-negative (and finite).

    ``scheme`` names the module in the TypeError a table scheme raises for real positions;
    ``max_value`` (with ``why``) bounds every value.
    """
    if not isinstance(positions, torch.Tensor):
        kind = "an integer or floating-point" if real else "an integer"
        raise TypeError(f"{name} must be {kind} torch.Tensor of shape {shape_text(axes)}, "
                        f"got {type(positions).__name__}")
    floating = positions.is_floating_point()
    if floating and not real:
        who = f"scheme {scheme!r}" if scheme else "this call"
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long): {who} takes integer positions only, "
                        f"got {positions.dtype}; real-valued positions are accepted by: {', '.join(REAL_SCHEMES)}")
    if not floating and positions.dtype not in INDEX_DTYPES:
        allowed = "an integer or floating-point dtype" if real else "an integer dtype (e.g. torch.long)"
        raise TypeError(f"{name} must have {allowed}, got {positions.dtype}")
    rank = (1, 2) if axes == 1 else (2, 3)
    if positions.dim() not in rank or (axes > 1 and positions.shape[-1] != axes):
        raise ValueError(f"{name} must have shape {shape_text(axes)}, got shape {list(positions.shape)}")
    if not torch.compiler.is_compiling() and positions.numel():
        if floating and not bool(torch.isfinite(positions).all()):
            raise ValueError(f"{name} must be finite, got {positions[~torch.isfinite(positions)].flatten()[0].item()}")
        low = positions.item() if positions.numel() == 1 else positions.min().item()  # one token: no reduction
        if low < 0:
            raise ValueError(f"{name} must be non-negative, got minimum {low}")
        if max_value is not None:
            high = positions.max().item()
            if high > max_value:
                raise ValueError(f"{name} must be <= {max_value}{' (' + why + ')' if why else ''}, got {high}")
    return positions


def length_of(positions: torch.Tensor, axes: int = 1) -> int:
    """``L`` of checked positions."""
    return positions.shape[-1] if axes == 1 else positions.shape[-2]


def batch_of(positions: torch.Tensor, axes: int = 1) -> int | None:
    """``B`` of checked positions, None when unbatched."""
    batched = positions.dim() == (2 if axes == 1 else 3)
    return positions.shape[0] if batched else None


def check_batch(name: str, positions: torch.Tensor, batch: int, length: int, *, axes: int = 1,
                heads: int | None = None) -> None:
    """Checked positions agree with a tensor of batch ``batch`` and length ``length``.

    ``heads``: the size of the heads dimension of a ``[B, H, L, D]`` tensor; when the positions'
    length is that size instead, the error says that the layout is ``[B, H, L, D]`` (a ``[B, L, H, D]``
    tensor, the layout of a projection's ``view(B, L, H, D)``, needs ``.transpose(1, 2)``)."""
    n = length_of(positions, axes)
    if n != length:
        hint = ""
        if heads is not None and heads == n:
            hint = (f"; the tensor is read as [B, H, L, D] (heads before length) and its dim 1 has the positions' "
                    f"size {n}: for a [B, L, H, D] tensor pass x.transpose(1, 2) (and transpose the result back)")
        raise ValueError(f"{name} has length {n} but the tensor has length {length}{hint}")
    b = batch_of(positions, axes)
    if b is not None and b not in (1, batch):
        raise ValueError(f"{name} has batch {b} but the tensor has batch {batch}")


def check_position_batches(q_positions: torch.Tensor, k_positions: torch.Tensor, *, axes: int = 1) -> None:
    """Query and key positions broadcast: equal batches, or one of them 1 (or unbatched)."""
    bq = batch_of(q_positions, axes) or 1
    bk = batch_of(k_positions, axes) or 1
    if bq != bk and 1 not in (bq, bk):
        raise ValueError(f"q_positions has batch {bq} but k_positions has batch {bk}; "
                         "they must be equal, or one of them 1 or unbatched")


def as_working(positions: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Integer positions as int64, real ones as float64 (the dtypes the schemes compute with)."""
    dtype = torch.float64 if positions.is_floating_point() else torch.int64
    return positions.to(device=device, dtype=dtype)


def relative_distance(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``k - q`` for every pair of one-axis positions: ``[Lq, Lk]`` (``[B, Lq, Lk]`` if batched);
    int64, or float64 if either is real."""
    return as_working(k_positions).unsqueeze(-2) - as_working(q_positions).unsqueeze(-1)


def text_positions(positions: torch.Tensor, axes: int) -> torch.Tensor:
    """One-axis positions ``[..., L]`` as text tokens of a module with ``axes`` axes: the same
    position on every axis, ``[..., L, axes]`` (a view; unchanged for one axis). This is how
    multimodal RoPE places text, and what ``posenc.attention`` uses by default for several axes."""
    return positions if axes == 1 else positions.unsqueeze(-1).expand(*positions.shape, axes)


def grid_positions(shape, *, offset: int = 0, device: torch.device | str | None = None) -> torch.Tensor:
    """Row-major grid positions ``[prod(shape), len(shape)]`` (int64): for an image ``(H, W)`` the
    rows are ``(r, c)``, r = 0..H-1 outer, c = 0..W-1 inner (the order of flattened patches); for a
    video ``(T, H, W)``, ``(t, r, c)``. ``offset`` is added to every axis.

        >>> posenc.grid_positions((2, 3))
        tensor([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])
    """
    return torch.from_numpy(_grid_positions_np(shape, offset=offset)).to(device)
