"""Packed documents: several documents in one row, positions restarting in each.

    pack = posenc.packing([3, 2, 4])            # or posenc.packing(cu_seqlens=[0, 3, 5, 9])
    pack.positions      # [0 1 2 0 1 0 1 2 3]   position inside its document
    pack.document_ids   # [0 0 0 1 1 2 2 2 2]   document of each token
    pack.cu_seqlens     # [0 3 5 9] int32       document boundaries, as flash-attn's varlen calls take them
    posenc.attention(q, k, v, pe, q_positions=pack.positions, k_positions=pack.positions,
                     document_ids=pack.document_ids, causal=True)

A query attends only to keys of its own document (on every backend of ``posenc.attention``), and
every scheme sees the per-document positions, so a packed row gives what running each document
alone gives. Document ids are non-decreasing along the row (documents are contiguous).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import torch

from posenc.encodings._base import INDEX_DTYPES
from posenc.limits import check_memory
from posenc.positions import check_document_ids  # noqa: F401  (defined with the positions model)


@dataclass(frozen=True)
class Packing:
    """The layout of documents packed into one row of ``L`` tokens.

    Attributes:
        positions: ``[L]`` int64, the position of each token inside its document (0 at its start).
        document_ids: ``[L]`` int64, the index of each token's document (0, 1, ...).
        cu_seqlens: ``[N + 1]`` int32, cumulative document lengths starting at 0 (flash-attn's
            ``cu_seqlens``: document ``n`` is tokens ``cu_seqlens[n]:cu_seqlens[n + 1]``).
        max_seqlen: the longest document (flash-attn's ``max_seqlen``).
    """

    positions: torch.Tensor
    document_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int

    @property
    def lengths(self) -> list[int]:
        """The length of each document."""
        return self.cu_seqlens.diff().tolist()


def _as_int_list(name: str, values: Any) -> list[int]:
    if isinstance(values, torch.Tensor):
        if values.dtype not in INDEX_DTYPES or values.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor or a list of integers, "
                            f"got a {values.dtype} tensor of shape {list(values.shape)}")
        return values.tolist()
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of integers, got {type(values).__name__}")
    out = list(values)
    for i, x in enumerate(out):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise TypeError(f"{name}[{i}] must be an integer, got {x!r} ({type(x).__name__})")
    return [int(x) for x in out]


def packing(doc_lengths: Any = None, *, cu_seqlens: Any = None, device: Any = None) -> Packing:
    """The positions, document ids and ``cu_seqlens`` of documents packed into one row.

    Args:
        doc_lengths: the length of each document, in order (positive integers).
        cu_seqlens: instead of ``doc_lengths``: ``[0, l0, l0 + l1, ...]``, strictly increasing.
        device: where the tensors are made (default: the CPU).
    """
    if (doc_lengths is None) == (cu_seqlens is None):
        raise TypeError("packing takes doc_lengths or cu_seqlens=..., exactly one of them")
    if cu_seqlens is not None:
        cu = _as_int_list("cu_seqlens", cu_seqlens)
        if len(cu) < 2 or cu[0] != 0:
            raise ValueError(f"cu_seqlens must start at 0 and have at least two entries (one document), got {cu}")
        lengths = [b - a for a, b in zip(cu, cu[1:])]
        for i, n in enumerate(lengths):
            if n <= 0:
                raise ValueError(f"cu_seqlens must be strictly increasing (no empty documents), got "
                                 f"cu_seqlens[{i}]={cu[i]} and cu_seqlens[{i + 1}]={cu[i + 1]}")
    else:
        lengths = _as_int_list("doc_lengths", doc_lengths)
        if not lengths:
            raise ValueError("doc_lengths must name at least one document, got []")
        for i, n in enumerate(lengths):
            if n <= 0:
                raise ValueError(f"doc_lengths[{i}] must be >= 1 (documents cannot be empty), got {n}")
    total = sum(lengths)  # Python integers: exact at any size, before anything is allocated
    if total >= 2 ** 31:
        given = "cu_seqlens" if cu_seqlens is not None else "doc_lengths"
        raise ValueError(f"{given} packs {total} tokens in one row; cu_seqlens (int32) holds at most 2**31 - 1")
    check_memory("doc_lengths" if cu_seqlens is None else "cu_seqlens", f"<{len(lengths)} documents, {total} tokens>",
                 total * 4 + len(lengths), bytes_per=8, what="the row's positions and document ids (int64)")
    counts = torch.tensor(lengths, dtype=torch.int64, device=device)  # (N,)
    document_ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), counts)  # (L,)
    cu = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (N + 1,)
    positions = torch.arange(int(cu[-1]), device=device) - cu[:-1][document_ids]  # (L,)
    return Packing(positions=positions, document_ids=document_ids, cu_seqlens=cu.to(torch.int32),
                   max_seqlen=max(lengths))


def positions_in_documents(document_ids: torch.Tensor) -> torch.Tensor:
    """``[..., L]`` non-decreasing ids -> the position of each token in its document, ``[..., L]``."""
    ids = document_ids.long()
    index = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)  # (..., L)
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[..., 1:] = ids[..., 1:] != ids[..., :-1]  # a document starts here
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values  # start of each token's document
    return index - first


def cumsum_in_documents(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The running sum of ``x [..., L]`` along ``L``, restarting at each document's first token:
    ``out_t = Σ_{l = t − p_t .. t} x_l`` with ``p_t`` the position of token ``t`` in its document
    (``positions``, from ``positions_in_documents``, broadcastable against ``x``).

    A scan of ⌈log₂ L⌉ steps (Hillis & Steele 1986): after step ``k`` each token holds the sum of
    the last ``min(p_t + 1, 2^k)`` tokens of its document, so no value of one document ever enters
    another's sums (a non-finite value stays in its document) and the additions each token sees are
    the same, in the same order, as its document alone in the row gives."""
    length = x.shape[-1]
    out = x
    span = 1
    while span < length:
        before = torch.nn.functional.pad(out[..., :-span], (span, 0))  # out_{t − span}
        out = out + torch.where(positions >= span, before, torch.zeros((), dtype=x.dtype, device=x.device))
        span *= 2
    return out
