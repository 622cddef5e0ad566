"""What context parallelism takes, checked on each rank before any communication: which method
runs which scheme (``unsupported``), the local inputs, and the gathered positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc._validate import check_choice, check_int
from posenc.encodings._base import check_tensor
from posenc.parallel.comm import _gather_positions
from posenc.scores import check_cap_and_sinks

METHODS = ("allgather", "ring", "ulysses")


def _unsupported(pe, method: str) -> str | None:
    """Why ``method`` cannot run ``pe`` exactly, or None when it can (the table of the module docstring)."""
    from posenc.encodings.fox import FoX

    content = pe is not None and pe.counts_positions_from_tokens
    per_head = getattr(pe, "num_heads", None) is not None
    if method == "allgather" and content:
        return "a content scheme counts its positions from the tokens, and all-gather attention passes positions"
    if method == "ring" and content and not isinstance(pe, FoX):
        return ("its weight of key j depends on the tokens between j and the query, not only on q_i, k_j and "
                "per-token values, so a key shard cannot be scored away from the others")
    if method == "ulysses" and per_head and not pe.selects_heads:  # a bias slices its heads, FoX its state's
        return (f"its parameters are per head ({pe.num_heads} heads) and a rank of the head-sharded attention runs a "
                "subset of the heads, which this scheme cannot select")
    return None


def _check_method(pe, method: str, *, document_ids, attention_mask, hidden, cached: bool = False,
                  softcap=None, sinks=None, window=None) -> None:
    """Refuse, before any communication, what ``method`` does not run, with the reason and the alternative
    (``cached``: ``k_positions`` given, keys other than the queries' tokens)."""
    check_choice("method", method, METHODS)
    reason = _unsupported(pe, method)
    if reason is not None:
        others = [m for m in METHODS if m != method and _unsupported(pe, m) is None]
        instead = " or ".join(f"method={m!r}" for m in others) if others else \
            "posenc.attention on one device (no context-parallel method runs it exactly yet)"
        raise ValueError(f"method={method!r} cannot run {pe.name!r} ({pe.kind}): {reason}; use {instead}")
    if method == "allgather":
        given = [n for n, t in (("document_ids", document_ids), ("attention_mask", attention_mask),
                                ("hidden", hidden), ("k_positions", True if cached else None), ("softcap", softcap),
                                ("sinks", sinks), ("window", window)) if t is not None]
        if given:
            raise ValueError(f"method='allgather' takes no {', '.join(given)}; use method='ring' or 'ulysses'")
    from posenc.encodings.fox import FoX

    if cached and pe is not None and pe.counts_positions_from_tokens:
        raise ValueError(f"k_positions (keys of a cache) cannot run {pe.name!r} ({pe.kind}): a content scheme counts its "
                         "positions over the tokens of its queries and keys as one sequence; give the whole "
                         "sequence's shards (k_positions=None), or posenc.attention with the cache on one device")
    if cached and document_ids is not None:
        raise ValueError("document_ids with k_positions: documents are given per token, and the keys of a cache are "
                         "other tokens than the queries; mask the keys of other documents with attention_mask, or "
                         "pass k_positions=None")
    if isinstance(pe, FoX) and (softcap is not None or sinks is not None):
        raise ValueError(f"method={method!r} runs fox as plain attention with its forget-gate term -c_j as one more "
                         "key column and c_i dropped (one constant per row): a logit cap would cap that term and a "
                         "sink would see the row shifted by c_i; softcap and sinks with fox: posenc.attention on one "
                         "device")
    if hidden is not None and (pe is None or not pe.reads_hidden):
        raise ValueError(f"hidden= is read only by content schemes that declare it (fox with gate='full'); pe "
                         f"{None if pe is None else pe.name!r} does not: pass hidden=None")
    if pe is not None and pe.reads_hidden and hidden is None:
        raise ValueError(f"pe {pe.name!r} reads the layer's input: pass hidden=[B, Ll, d_model], this rank's rows")


def _local_rows(name: str, t, b: int, ll: int, *, integer: bool) -> torch.Tensor | None:
    """``document_ids`` (integer) or a key padding ``attention_mask`` (bool or 0/1) of this rank's
    tokens as ``[1 or B, Ll]``; None stays None."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.dim() not in (1, 2) or t.dtype.is_floating_point:
        raise TypeError(f"{name} must be an integer{'' if integer else ' or bool'} torch.Tensor [Ll] or [B, Ll], "
                        f"got {t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}"
                        f"{' of shape ' + str(list(t.shape)) if isinstance(t, torch.Tensor) else ''}")
    t = t if t.dim() == 2 else t.unsqueeze(0)
    if t.shape[-1] != ll or t.shape[0] not in (1, b):
        raise ValueError(f"{name} must be [Ll] or [B, Ll] with Ll={ll}, B={b} (this rank's tokens), got "
                         f"{list(t.shape)}")
    if integer:
        return t.to(torch.int64)
    if t.dtype != torch.bool and not bool(((t == 0) | (t == 1)).all()):
        raise ValueError(f"{name} must be a key padding mask of bool or 0/1 values (1: a real token)")
    return t.to(torch.bool)


@dataclass(frozen=True)
class _Extras:
    """What a call adds to the scores beyond the scheme: a logit cap, sinks ``[H]``, a window."""

    softcap: float | None = None
    sinks: torch.Tensor | None = None
    window: int | None = None


def _checked_local_inputs(q, k, v, pe, *, positions, k_positions, method, document_ids, attention_mask, hidden,
                          softcap, sinks, window) -> tuple:
    """This rank's inputs of ``context_parallel_attention`` checked, before anything is gathered from
    the other ranks: the shards' shapes, the positions' types and lengths, the extras, the scheme's axes,
    what ``method`` runs (``_check_method``), the documents, padding and ``hidden`` rows.

    Returns:
        ``(q, k, v, docs, pad, hidden, softcap, sinks, window)``, checked: ``docs`` ``[B or 1, Ll]``
        and ``pad`` ``[B or 1, Llk]`` (``_local_rows``) or None, ``hidden`` ``[B, Ll, d_model]`` or None.
    """
    q = check_tensor("q", q, ndim=4)
    if q.shape[-1] == 0:
        raise ValueError(f"q and k must have a head dimension D >= 1, got q of shape {list(q.shape)}")
    k = check_tensor("k", k, ndim=4, last_dim=q.shape[-1])
    v = check_tensor("v", v, ndim=4)
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.dtype.is_floating_point:
        raise TypeError(f"positions must be an integer torch.Tensor [Ll], got "
                        f"{positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__}"
                        f"{' of shape ' + str(list(positions.shape)) if isinstance(positions, torch.Tensor) else ''}")
    keys = positions if k_positions is None else k_positions
    if k_positions is not None and (not isinstance(k_positions, torch.Tensor) or k_positions.dim() != 1
                                    or k_positions.dtype.is_floating_point):
        raise TypeError(f"k_positions must be an integer torch.Tensor [Llk] or None, got "
                        f"{k_positions.dtype if isinstance(k_positions, torch.Tensor) else type(k_positions).__name__}"
                        f"{' of shape ' + str(list(k_positions.shape)) if isinstance(k_positions, torch.Tensor) else ''}")
    if not (q.shape[2] == positions.shape[0] and k.shape[2] == v.shape[2] == keys.shape[0]):
        raise ValueError(f"q and positions must share the local length Ll, and k, v and "
                         f"{'positions' if k_positions is None else 'k_positions'} theirs; got q {list(q.shape)}, "
                         f"k {list(k.shape)}, v {list(v.shape)}, positions {list(positions.shape)}"
                         f"{'' if k_positions is None else ', k_positions ' + str(list(k_positions.shape))}")
    softcap, sinks = check_cap_and_sinks(softcap, sinks, q.shape[1])
    if window is not None:
        window = check_int("window", window, min=1)
    if getattr(pe, "axes", 1) != 1:
        raise ValueError(f"context_parallel_attention takes schemes with one position per token; {pe.name!r} "
                         f"has {pe.axes} axes (shard its [L, A] positions' rows and use posenc.attention per rank "
                         "with all-gathered keys instead)")
    _check_method(pe, method, document_ids=document_ids, attention_mask=attention_mask, hidden=hidden,
                  cached=k_positions is not None, softcap=softcap, sinks=sinks, window=window)
    b, ll = q.shape[0], q.shape[2]
    docs = _local_rows("document_ids", document_ids, b, ll, integer=True)
    pad = _local_rows("attention_mask", attention_mask, b, k.shape[2], integer=False)  # the keys'
    if hidden is not None:
        hidden = check_tensor("hidden", hidden, ndim=3)
        if hidden.shape[:2] != (b, ll):
            raise ValueError(f"hidden must be [B, Ll, d_model] with B={b}, Ll={ll}, got {list(hidden.shape)}")
    return q, k, v, docs, pad, hidden, softcap, sinks, window


def _gathered_positions(positions: torch.Tensor, k_positions: torch.Tensor | None, group,
                        device: torch.device) -> tuple:
    """All ranks' query (and key) positions gathered in rank order and checked to be the sequence's
    (queries ``0..L−1``, or with ``k_positions`` keys ``0..Lk−1`` and queries their last ``Lq``).

    Returns:
        ``(positions, all_positions, k_positions, all_k)``: this rank's ``[Ll]`` and all ranks' ``[Lq]``
        query positions, this rank's ``[Llk]`` key positions (or None) and all ranks' ``[Lk]``, int64 on
        ``device``.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("context_parallel_attention needs an initialized torch.distributed process group "
                         "(torch.distributed.init_process_group)")
    positions = positions.to(device, torch.int64)
    all_positions = _gather_positions(positions, group)  # (Lq,), rank order
    k_positions = None if k_positions is None else k_positions.to(device, torch.int64)
    all_k = all_positions if k_positions is None else _gather_positions(k_positions, group)  # (Lk,), rank order
    length, lq = all_k.shape[0], all_positions.shape[0]
    if not torch.equal(torch.sort(all_k).values, torch.arange(length, device=device)):
        raise ValueError(f"{'positions' if k_positions is None else 'k_positions'} of all ranks together must be "
                         f"0..{length - 1}, each once (use posenc.shard_positions)")
    if k_positions is not None and not torch.equal(torch.sort(all_positions).values,
                                                   torch.arange(length - lq, length, device=device)):
        raise ValueError(f"with k_positions, the positions of all ranks' queries together must be the last {lq} of "
                         f"the {length} keys' ({length - lq}..{length - 1}), each once: queries follow their cache")
    return positions, all_positions, k_positions, all_k
