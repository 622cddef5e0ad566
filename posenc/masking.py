"""Attention masks as data: ``posenc.attention(..., attention_mask=...)`` read by every backend.

Two forms, the two that real batches carry:

- a **key padding mask** ``[B, Lk]`` (or ``[1, Lk]``), bool or 0/1 integers: ``True``/1 where
  a key is a real token, ``False``/0 where it is padding (the ``attention_mask`` of a
  transformers tokenizer and of ``generate()``, left or right padded);
- a **4D mask** ``[B or 1, H or 1, Lq, Lk]`` as transformers builds it: bool (``True`` where
  query ``i`` may see key ``j``) or floating point and *additive* (added to the scores). In an
  additive mask an entry of ``−inf``, or at or below ``torch.finfo(dtype).min`` (transformers'
  masked value), masks the key; every other value is added to the score as a bias.

The mask is combined with ``causal`` and ``document_ids`` (a key must pass all of them), on every
backend, through this one definition: ``AttentionMask.allowed(qs, qe, ks, ke)`` is the block of
allowed pairs and ``AttentionMask.added(qs, qe, ks, ke)`` the block of additive values.

**A query that sees no key** (a left-padded row under a causal mask, a row a 4D mask masks whole)
has no softmax. Its output is defined as zeros, on every backend and kind, with zero gradients,
as SDPA's CPU and memory-efficient kernels return (transformers' own SDPA path does the same by
unmasking such rows and discarding them).

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, c/n rows/columns of a block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch



@dataclass(frozen=True)
class AttentionMask:
    """A checked ``attention_mask``: ``keys [1 or B, Lk]`` bool (padding), or ``pairs [1 or B, 1 or H,
    Lq, Lk]`` bool (a 4D mask) with ``bias`` of the same shape (its finite additive values) or None."""

    keys: torch.Tensor | None = None
    pairs: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    def allowed(self, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor:
        """``[1 or B, 1 or H, c, n]`` bool: True where query ``qs + r`` may see key ``ks + j`` (this mask only)."""
        if self.keys is not None:
            return self.keys[:, None, None, ks:ke]  # (1 or B, 1, 1, n)
        return self.pairs[:, :, qs:qe, ks:ke]

    def added(self, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor | None:
        """``[1 or B, 1 or H, c, n]``: the additive values of a 4D float mask for the block, or None."""
        return None if self.bias is None else self.bias[:, :, qs:qe, ks:ke]

    def to(self, device) -> "AttentionMask":
        move = (lambda t: None if t is None else t.to(device))
        return AttentionMask(move(self.keys), move(self.pairs), move(self.bias))


def check_attention_mask(attention_mask, *, b: int, h: int, lq: int, lk: int, device) -> AttentionMask | None:
    """``attention_mask`` checked against ``B, H, Lq, Lk`` (before anything is allocated) -> an
    ``AttentionMask`` on ``device``, or None when it is None."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor ([B, Lk] or [B, H, Lq, Lk]) or None, got "
                        f"{type(attention_mask).__name__}")
    mask = attention_mask
    if mask.dim() == 2:
        if mask.shape[0] not in (1, b) or mask.shape[1] != lk:
            raise ValueError(f"attention_mask as a key padding mask must have shape [B={b}, Lk={lk}] (or [1, Lk]); "
                             f"got {list(mask.shape)}")
        if mask.dtype != torch.bool:
            if mask.is_floating_point() or mask.is_complex():
                raise TypeError(f"a key padding attention_mask [B, Lk] must be bool or 0/1 integers, got {mask.dtype} "
                                "(a float mask is additive: pass it as [B, 1, Lq, Lk])")
            if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError("a key padding attention_mask [B, Lk] of integers must hold only 0 (padding) and 1 "
                                 f"(a token); got values {torch.unique(mask)[:8].tolist()}")
            mask = mask != 0
        return AttentionMask(keys=mask.to(device))
    if mask.dim() == 4:
        if (mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h) or mask.shape[2] != lq
                or mask.shape[3] != lk):
            raise ValueError(f"attention_mask as a 4D mask must have shape [B={b} or 1, H={h} or 1, Lq={lq}, Lk={lk}]; "
                             f"got {list(mask.shape)}")
        if mask.dtype == torch.bool:
            return AttentionMask(pairs=mask.to(device))
        if not mask.is_floating_point():
            raise TypeError(f"a 4D attention_mask must be bool (True: may see) or floating point (added to the "
                            f"scores), got {mask.dtype}")
        if bool(torch.isnan(mask).any()) or bool(torch.isposinf(mask).any()):
            raise ValueError("a 4D additive attention_mask must not hold NaN or +inf")
        hidden = mask <= torch.finfo(mask.dtype).min  # transformers' masked value, and −inf
        bias = mask.masked_fill(hidden, 0.0)
        return AttentionMask(pairs=(~hidden).to(device), bias=bias.to(device) if bool(bias.any()) else None)
    raise ValueError(f"attention_mask must be a key padding mask [B, Lk] or a 4D mask [B, H, Lq, Lk]; got shape "
                     f"{list(mask.shape)}")
