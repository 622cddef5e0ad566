"""Context parallelism: one sequence split over ``world_size`` ranks along its length.

    positions = posenc.shard_positions(L, world_size, rank)          # this rank's global positions
    q, k, v = (t[:, :, positions] for t in (q_full, k_full, v_full))  # or produced locally
    out = posenc.context_parallel_attention(q, k, v, pe, positions=positions, causal=True)
    # out == posenc.attention(q_full, k_full, v_full, pe, causal=True)[:, :, positions]

**Balance.** Under a causal mask the last query attends to every key and the first to one, so
contiguous shards leave rank 0 with a fraction of the work. ``balance="head_tail"`` cuts the
sequence into ``2W`` equal chunks and gives rank ``r`` chunks ``r`` and ``2W − 1 − r`` (in that
order), as PyTorch's context-parallel load balancer (``_HeadTailLoadBalancer``) does, so each
rank holds the same number of causal (query, key) pairs: chunk ``c`` of size ``n`` sees about
``(c + ½)·n²`` of them, and ``r + (2W − 1 − r) = 2W − 1`` for every rank.

**Positions, not indices.** Every scheme takes explicit positions, so a shard is encoded by
passing its global positions: rotary and bias results at ``shard_positions(...)`` are exactly
the rows of the unsharded result at those positions; nothing else changes.

**Attention across ranks** (``context_parallel_attention(..., method=...)``), three ways, each
equal to the rows of ``posenc.attention`` on the whole sequence, gradients included:

- ``"allgather"`` (the default): keys and values all-gathered (with their positions) and put back
  in sequence order, then each maximal run of consecutive query positions ``[s, e)`` attends
  through ``posenc.attention`` to keys ``[0, e)`` when causal (its bottom-right aligned causal mask
  then equals ``key position <= query position``), or to all keys. The all-gather is
  differentiable (its backward sums the key/value gradients of every rank's queries and hands each
  rank its own rows). Memory per rank ``O(L·D)``: it does not raise the length a rank holds.
- ``"ring"`` (Liu et al. 2023, arXiv:2310.01889): each rank keeps its queries; key/value shards
  travel rank to rank (``torch.distributed`` ``batch_isend_irecv``, the next transfer overlapping
  the current tile). A tile (a run of query positions × a run of key positions) reads its
  visibility from one ``posenc.masking.Visibility`` of the whole sequence (``Visibility.crop``:
  causality, the window, documents, key padding, by sequence index; a tile the whole's
  ``key_range`` misses is skipped) and is scored with ``posenc.blockwise``'s public tile API
  (``tile_forward``) at its global positions, giving ``(o, lse)``; tiles merge by log-sum-exp
  (``posenc.scores.merge_lse``), the online softmax ``blockwise`` uses. Backward
  (``ring._RingAttention``): the shards travel again, now with their key/value gradients; each tile
  runs ``tile_backward`` given the global ``o`` and ``lse``, so its ``p = e^{s − lse}`` and
  ``δ = rowsum(dO ∘ O)`` are the whole softmax's, and after ``P`` steps each shard's gradients are
  back with their owner. Two changes make ``blockwise``'s tiles mergeable (``ring._RingTileBias``):
  no Toeplitz table where a parameter trains (it removes a per-head constant that depends on the
  tile), and each row's far-key peak taken at the query's own position (one
  constant per row on every tile). Per-rank memory for keys and values: ``O(L·D / P)`` (the own
  shard, the one in use, the one arriving). Rotary schemes rotate q and k at their global
  positions before the keys travel (the core's ``posenc.attn.scheme_step``, which all-gather
  runs too); FoX carries ``c_j`` (its cumulative log forget gate, summed in
  sequence order over every rank's gates) as one more key column (``_fox_augmented``).
- ``"ulysses"`` (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv:2309.14509): an all-to-all turns the
  sequence shards of every head into the whole sequence of ``H / P`` heads (grouped key/value heads
  split the same way, so ``H`` and ``H_kv`` must both divide by ``P``), ``posenc.attention`` runs
  there (any backend), and a second all-to-all brings each rank its rows back. Memory per rank
  ``O(L·D·H / P)``, like the ring's; a bias scheme runs at its heads ``[r·H/P, (r+1)·H/P)``
  (``_HeadSlice``: its own ``score_fn`` at shifted head indices).

Which one-axis kinds run where (``_unsupported`` says why not, and every refusal names the
method that runs the scheme)::

    scheme (kind)                                  allgather  ring  ulysses
    nope, nope_temperature (none)                  yes        yes   yes
    rope (rotary)                                  yes        yes   yes
    fope, pope (rotary, per-head parameters)       yes        yes   no
    alibi, t5, kerple, fire (bias)                 yes        yes   yes
    shaw, dual_chunk (relative)                    yes        yes   yes
    transformer_xl, deberta (relative, per head)   yes        yes   no
    fox (content)                                  no         yes   yes
    stick_breaking, cope (content)                 no         no    yes
    path, dape (content, per head)                 no         no    no: posenc.attention on one device

Ring refuses content schemes other than FoX because a key's weight there depends on the tokens
between it and the query (not on ``q_i``, ``k_j`` and per-token values alone); ulysses refuses
schemes with per-head parameters other than bias schemes and FoX, because a rank runs a subset
of the heads, which they cannot select.

``document_ids`` and a key-padding ``attention_mask`` (each rank's tokens') and FoX's ``hidden`` are
taken by ring and ulysses, and so are a KV cache (``k_positions``: keys at ``0..Lk−1``, queries the
last ``Lq``), ``softcap``, ``sinks`` and ``window``: the ring caps each tile's scores, masks (or
skips) what lies outside the window by global position and merges the sinks after the last tile;
ulysses passes them to ``posenc.attention`` (a rank its heads' sinks). The scheme sees the
sequence indices as positions, and with ``document_ids`` each token's position in its document
(restarting at 0, ``posenc.documents.positions_in_documents`` of the whole sequence), as
``posenc.attention``'s default: schemes that read absolute positions (Dual Chunk Attention past its
chunk, NoPE's query temperature, FoPE) equal it on packed documents too.

Modules: this one (``shard_positions``, ``context_parallel_attention``, all-gather), ``checks``
(what each method runs, the local inputs, the gathered positions), ``comm`` (the differentiable
all-gather and all-to-all, the ring's passing), ``ring`` and ``ulysses``.

Notation used for tensor shapes: B batch, H heads, L whole length, Ll = L / world_size local
length, D head dim.
"""

from __future__ import annotations

import torch

from posenc._validate import check_choice, check_int
from posenc.limits import check_memory
from posenc.parallel.checks import (METHODS, _checked_local_inputs, _Extras, _gathered_positions,  # noqa: F401
                                    _unsupported)
from posenc.parallel.comm import _gather_rows, _GatherSequence, _runs
from posenc.parallel.ring import _ring
from posenc.parallel.ulysses import _ulysses
from posenc.reference.positions import INT64_MAX
from posenc.scores import scale_of

BALANCES = ("head_tail", "contiguous")


def shard_positions(length: int, world_size: int, rank: int, *, balance: str = "head_tail") -> torch.Tensor:
    """The global positions ``[length / world_size]`` (int64) of rank ``rank``'s tokens.

    ``balance="head_tail"``: chunks ``rank`` and ``2·world_size − 1 − rank`` of ``2·world_size``
    equal chunks (``length`` must divide by ``2·world_size``); ``"contiguous"``: chunk ``rank``
    of ``world_size`` (``length`` must divide by ``world_size``).
    """
    length = check_int("length", length, min=1, max=INT64_MAX)  # positions are int64
    world_size = check_int("world_size", world_size, min=1)
    rank = check_int("rank", rank, min=0, max=world_size - 1)
    check_choice("balance", balance, BALANCES)
    chunks = 2 * world_size if balance == "head_tail" else world_size
    if length % chunks:
        raise ValueError(f"length must be a multiple of {chunks} ({'2 * ' if balance == 'head_tail' else ''}"
                         f"world_size={world_size}) for balance={balance!r}, got {length}")
    check_memory("length", length, length // world_size, bytes_per=8, what=f"rank {rank}'s int64 positions")
    n = length // chunks
    if balance == "contiguous":
        return torch.arange(rank * n, (rank + 1) * n)
    tail = 2 * world_size - 1 - rank
    return torch.cat((torch.arange(rank * n, (rank + 1) * n), torch.arange(tail * n, (tail + 1) * n)))


def context_parallel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe=None, *,
                               positions: torch.Tensor, causal: bool = False, scale: float | None = None,
                               backend: str = "auto", group=None, method: str = "allgather",
                               document_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                               hidden: torch.Tensor | None = None, k_positions: torch.Tensor | None = None,
                               softcap: float | None = None, sinks: torch.Tensor | None = None,
                               window: int | None = None) -> torch.Tensor:
    """``posenc.attention`` of one sequence sharded over the ranks of ``group`` (default: the world).

    Args:
        q, k, v: this rank's ``[B, H, Ll, D]`` shards (``k, v`` may have ``H_kv`` grouped heads), token
            ``i`` at global position ``positions[i]``.
        pe: as for ``posenc.attention``, with one position per token (a scheme of several axes is
            refused); which kinds run on which ``method``: the module docstring's table.
        positions: ``[Ll]`` integer global positions of this rank's tokens (``shard_positions``); the
            ranks' positions together must be ``0..L−1``, each once, and every rank has the same
            ``Ll``. They are the positions the scheme sees (with documents too: sequence indices).
        causal: query at position ``m`` sees keys at positions ``<= m``.
        scale, backend: as for ``posenc.attention`` (``backend`` for ``allgather`` and ``ulysses``;
            ``ring`` scores its tiles with ``posenc.blockwise``).
        method: ``"allgather"`` (keys and values gathered on every rank), ``"ring"`` (key/value shards
            passed rank to rank, merged by log-sum-exp) or ``"ulysses"`` (all-to-all to ``H / P``
            heads of the whole sequence and back); the module docstring compares them.
        document_ids: ``[Ll]`` or ``[B, Ll]`` integer, this rank's tokens' documents (packed
            sequences; a query sees only keys of its own document, and the scheme reads positions
            restarting at 0 in each document, as ``posenc.attention``'s default); ring and ulysses.
        attention_mask: ``[Ll]`` or ``[B, Ll]`` key padding (bool or 0/1; False/0: padding) of this
            rank's tokens; ring and ulysses. A query that sees no key returns zeros.
        hidden: ``[B, Ll, d_model]``, this rank's rows of the layer's input, for a content scheme that
            reads it (FoX with ``gate="full"``).
        k_positions: ``[Llk]`` integer global positions of this rank's keys and values when they are
            other tokens than its queries (a KV cache: prefill continuing a cached sequence, or
            decoding): the ranks' ``k_positions`` together are ``0..Lk−1`` and their ``positions``
            together the last ``Lq`` of them, each once; every rank has the same ``Llk``; ring and
            ulysses, not content schemes nor ``document_ids`` (``attention_mask`` then pads the keys).
        softcap, sinks, window: as for ``posenc.attention`` (a logit cap on the content score,
            ``[H]`` sink logits, a sliding window by global position); ring and ulysses, and not FoX's
            ``softcap`` or ``sinks`` (its ring/ulysses form drops ``c_i``, one constant per row).

    Returns:
        ``[B, H, Ll, Dv]``: the rows at ``positions`` of the unsharded attention.
    """
    q, k, v, docs, pad, hidden, softcap, sinks, window = _checked_local_inputs(
        q, k, v, pe, positions=positions, k_positions=k_positions, method=method, document_ids=document_ids,
        attention_mask=attention_mask, hidden=hidden, softcap=softcap, sinks=sinks, window=window)
    positions, all_positions, k_positions, all_k = _gathered_positions(positions, k_positions, group, q.device)
    scale = scale_of(scale, pe, q.shape[-1])  # 1/√D of the head given, as posenc.attention (PoPE's q, k are wider)
    if method == "allgather":
        return _allgather(q, k, v, pe, positions=positions, all_positions=all_positions, causal=causal, scale=scale,
                          backend=backend, group=group)
    docs, pad = (None if t is None else _gather_rows(t.to(q.device), group) for t in (docs, pad))
    extras = _Extras(softcap, sinks, window)
    if method == "ring":
        return _ring(q, k, v, pe, positions=positions, all_positions=all_positions, docs=docs, pad=pad,
                     hidden=hidden, causal=causal, scale=scale, group=group, k_positions=k_positions, all_k=all_k,
                     extras=extras)
    return _ulysses(q, k, v, pe, all_positions=all_positions, docs=docs, pad=pad, hidden=hidden, causal=causal,
                    scale=scale, backend=backend, group=group, all_k=all_k, extras=extras)


def _allgather(q, k, v, pe, *, positions, all_positions, causal, scale, backend, group) -> torch.Tensor:
    """``method="allgather"``: keys and values all-gathered and put in sequence order, then each run of
    consecutive query positions ``[s, e)`` attends to keys ``[0, e)`` when causal (``posenc.attention``'s
    bottom-right aligned causal mask is then ``key position <= query position``), or to all keys."""
    from posenc.attn import attention, scheme_step

    length = all_positions.shape[0]
    order = torch.argsort(all_positions)
    k_all = _GatherSequence.apply(k, group)[:, :, order]  # (B, H, L, D), in sequence order
    v_all = _GatherSequence.apply(v, group)[:, :, order]
    k_positions = torch.arange(length, device=q.device)
    # the core's scheme step at the whole length (rotary: keys first; a relative scheme's keys per head)
    pe, q, k_all, v_all, _, _ = scheme_step(pe, q, k_all, v_all, positions, k_positions)
    if not causal:
        return attention(q, k_all, v_all, pe, q_positions=positions, k_positions=k_positions, scale=scale,
                         backend=backend)
    outs = []
    for i, j in _runs(positions):
        end = int(positions[j - 1]) + 1  # keys 0..end-1: the run's queries are the last j - i of them
        outs.append(attention(q[:, :, i:j], k_all[:, :, :end], v_all[:, :, :end], pe,
                              q_positions=positions[i:j], k_positions=k_positions[:end], causal=True,
                              scale=scale, backend=backend))
    return torch.cat(outs, dim=2)
