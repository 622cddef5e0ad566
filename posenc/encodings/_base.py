"""What every scheme module shares: its spec, float64 tables that follow ``.to(device)`` but never
``.to(dtype)``, and the checks on positions and tensors.

Notation used for tensor shapes:
    B: batch, H: heads, L: sequence length (Lq queries, Lk keys), D: head dimension.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class PositionalEncoding(nn.Module):
    """Base class of every registered scheme.

    ``name`` and ``kind`` are set by ``@register``. Tables that depend on position are computed in
    float64: they are registered with ``register_float64`` and keep float64 when the module is
    cast with ``.to(dtype)`` (they do follow the device). The module's working dtype, which
    ``.to(dtype)`` does change, is ``self.dtype`` (float32 by default).
    """

    name: str = "?"
    kind: str = "?"
    _spec: dict[str, Any]

    def __init__(self) -> None:
        super().__init__()
        self._float64: list[str] = []
        # An empty buffer that records the dtype and device the module was moved to.
        self.register_buffer("_probe", torch.empty(0), persistent=False)

    # -- spec -------------------------------------------------------------------------------
    @property
    def spec(self) -> dict[str, Any]:
        """The dict ``posenc.build`` takes to make an equivalent module."""
        return copy.deepcopy(self._spec)

    def extra_repr(self) -> str:
        spec = getattr(self, "_spec", {})
        return ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "scheme")

    # -- dtype and device -------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self._probe.dtype

    @property
    def device(self) -> torch.device:
        return self._probe.device

    def register_float64(self, name: str, value: torch.Tensor, persistent: bool = False) -> None:
        """A float64 table that follows the module's device and keeps float64 under ``.to(dtype)``."""
        self.register_buffer(name, value.to(torch.float64), persistent=persistent)
        self._float64.append(name)

    def _apply(self, fn, recurse=True):  # noqa: D401 - torch's hook for .to()/.cuda()/.half()
        kept = {n: getattr(self, n) for n in self._float64}
        out = super()._apply(fn, recurse)
        for n, t in kept.items():
            setattr(self, n, t.to(device=self._probe.device, dtype=torch.float64))
        return out


# -- checks -----------------------------------------------------------------------------------

def check_positions(name: str, positions: Any, *, max_value: int | None = None, why: str = "") -> torch.Tensor:
    """Positions are an integer tensor ``[L]`` or ``[B, L]`` of non-negative values."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be an integer torch.Tensor of shape [L] or [B, L], got {type(positions).__name__}")
    if positions.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long), got {positions.dtype}")
    if positions.dim() not in (1, 2):
        raise ValueError(f"{name} must have shape [L] or [B, L], got shape {list(positions.shape)}")
    if not torch.compiler.is_compiling() and positions.numel():
        low = int(positions.min())
        if low < 0:
            raise ValueError(f"{name} must be non-negative, got minimum {low}")
        if max_value is not None:
            high = int(positions.max())
            if high > max_value:
                raise ValueError(f"{name} must be <= {max_value}{' (' + why + ')' if why else ''}, got {high}")
    return positions


def check_tensor(name: str, x: Any, *, ndim: int, last_dim: int | None = None, floating: bool = True) -> torch.Tensor:
    """A tensor of rank ``ndim`` whose last dimension is ``last_dim``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.dim() != ndim:
        layout = {4: "[B, H, L, D]", 3: "[B, L, D]", 2: "[L, D]"}.get(ndim, f"rank {ndim}")
        raise ValueError(f"{name} must have shape {layout}, got shape {list(x.shape)}")
    if last_dim is not None and x.shape[-1] != last_dim:
        raise ValueError(f"{name} must have last dimension {last_dim}, got {x.shape[-1]} (shape {list(x.shape)})")
    return x


def check_same_batch_and_heads(q: torch.Tensor, k: torch.Tensor) -> None:
    """``q [B, H, Lq, D]`` and ``k [B, H, Lk, D]`` share ``B`` and ``H``."""
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k must have the same batch and heads [B, H, ...], "
                         f"got shapes {list(q.shape)} and {list(k.shape)}")


def check_batch(name: str, positions: torch.Tensor, batch: int, length: int) -> None:
    """Positions ``[L]`` or ``[B, L]`` agree with a tensor of batch ``batch`` and length ``length``."""
    if positions.shape[-1] != length:
        raise ValueError(f"{name} has length {positions.shape[-1]} but the tensor has length {length}")
    if positions.dim() == 2 and positions.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch {positions.shape[0]} but the tensor has batch {batch}")


def check_position_batches(q_positions: torch.Tensor, k_positions: torch.Tensor) -> None:
    """``[Bq, Lq]`` and ``[Bk, Lk]`` positions broadcast: equal batches, or one of them 1 (or ``[L]``)."""
    bq = q_positions.shape[0] if q_positions.dim() == 2 else 1
    bk = k_positions.shape[0] if k_positions.dim() == 2 else 1
    if bq != bk and 1 not in (bq, bk):
        raise ValueError(f"q_positions has batch {bq} but k_positions has batch {bk}; "
                         "they must be equal, or one of them 1 or unbatched [L]")


def to_numpy(x: Any) -> Any:
    """A tensor as a NumPy array for the reference (floating point as float64); anything else as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    x = x.detach().cpu()
    return (x.double() if x.is_floating_point() else x).numpy()


def relative_distance(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``k - q`` for every pair: ``[Lq, Lk]`` from ``[Lq]``, ``[Lk]``; ``[B, Lq, Lk]`` if either is batched."""
    return k_positions.long().unsqueeze(-2) - q_positions.long().unsqueeze(-1)


class BiasEncoding(PositionalEncoding):
    """Base of the ``bias`` kind: a per-head bias on the attention scores.

    Subclasses define ``score_fn()``, which returns an elementwise function
    ``bias(h, q_pos, k_pos)`` of broadcastable integer tensors (head index, query position, key
    position). The same function serves ``forward`` (a whole ``[H, Lq, Lk]`` map) and
    FlexAttention's ``score_mod`` (one score at a time), so the two paths cannot drift. Learned
    tables are gathered once in ``score_fn`` (outside the per-score function).
    """

    num_heads: int
    flex_ok: bool = True  # score_fn() can run inside FlexAttention's score_mod
    # The bias depends on k_pos - q_pos only, so at contiguous positions it is a Toeplitz map of
    # one table over the differences (posenc.blockwise reads blocks as views of it).
    translation_invariant: bool = False

    def score_fn(self) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    def forward(self, q_positions: torch.Tensor, k_positions: torch.Tensor, *,
                dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[Lq]``, ``[Lk]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` if positions are ``[B, L]``).

        The map is computed in float64 and returned in ``dtype`` (default: the module's dtype);
        ``posenc.attention`` asks for its float32 score dtype, so that a bfloat16 module does not
        round away the bias differences between neighbouring keys.
        """
        q_positions = check_positions("q_positions", q_positions).to(self.device).long()
        k_positions = check_positions("k_positions", k_positions).to(self.device).long()
        check_position_batches(q_positions, k_positions)
        h = torch.arange(self.num_heads, device=self.device).view(-1, 1, 1)  # (H, 1, 1)
        q = q_positions.unsqueeze(-1).unsqueeze(-3)  # (..., 1, Lq, 1)
        k = k_positions.unsqueeze(-2).unsqueeze(-3)  # (..., 1, 1, Lk)
        return self.score_fn()(h, q, k).to(self.dtype if dtype is None else dtype)
