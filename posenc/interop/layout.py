"""Permute q/k projection weights between the two RoPE layouts.

Meta's Llama checkpoints rotate interleaved pairs ``(2i, 2i+1)`` of each head; transformers'
Llama rotates ``(i, i + rotary_dim/2)`` ("half"). Rotary attention gives the same output when the
rows of ``W_q`` and ``W_k`` (and their biases) are permuted within each head, which is what
transformers' ``convert_llama_weights_to_hf.py`` does:

    W_half = interleaved_to_half(W_meta, num_heads, head_dim)     # Meta -> transformers
    W_meta = half_to_interleaved(W_half, num_heads, head_dim)     # transformers -> Meta

``weight`` is ``[num_heads * head_dim, in_features]`` (an ``nn.Linear`` weight) or a bias
``[num_heads * head_dim]``; for grouped-query attention pass ``num_key_value_heads`` for ``W_k``.
With partial rotation (``rotary_dim < head_dim``) only the first ``rotary_dim`` rows of each
head move. ``v`` and ``o`` projections are not touched.
"""

from __future__ import annotations

import torch

from posenc._validate import check_even, check_int


def _permute(weight: torch.Tensor, num_heads: int, head_dim: int, rotary_dim: int | None, *,
             to_half: bool) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    num_heads = check_int("num_heads", num_heads, min=1)
    head_dim = check_int("head_dim", head_dim, min=2)
    rd = head_dim if rotary_dim is None else check_int("rotary_dim", rotary_dim, min=2, max=head_dim)
    check_even("rotary_dim", rd)
    if weight.dim() not in (1, 2) or weight.shape[0] != num_heads * head_dim:
        raise ValueError(f"weight must be [num_heads * head_dim, in_features] or [num_heads * head_dim] with "
                         f"num_heads * head_dim = {num_heads * head_dim}; got shape {list(weight.shape)}")
    rest = weight.shape[1:]
    w = weight.reshape(num_heads, head_dim, *rest)  # (H, D, ...)
    rot, tail = w[:, :rd], w[:, rd:]
    if to_half:  # rows 2i, 2i+1 -> i, i + rd/2
        rot = rot.reshape(num_heads, rd // 2, 2, *rest).transpose(1, 2)
    else:  # rows i, i + rd/2 -> 2i, 2i+1
        rot = rot.reshape(num_heads, 2, rd // 2, *rest).transpose(1, 2)
    rot = rot.reshape(num_heads, rd, *rest)
    return torch.cat((rot, tail), dim=1).reshape(weight.shape)


def interleaved_to_half(weight: torch.Tensor, num_heads: int, head_dim: int, rotary_dim: int | None = None) -> torch.Tensor:
    """Rows of a q/k projection from the interleaved layout (Meta) to the half layout (transformers)."""
    return _permute(weight, num_heads, head_dim, rotary_dim, to_half=True)


def half_to_interleaved(weight: torch.Tensor, num_heads: int, head_dim: int, rotary_dim: int | None = None) -> torch.Tensor:
    """Rows of a q/k projection from the half layout (transformers) to the interleaved layout (Meta)."""
    return _permute(weight, num_heads, head_dim, rotary_dim, to_half=False)
