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
  the current tile). A tile (a run of query positions × a run of key positions) is scored with
  ``posenc.blockwise`` at its global positions and its visibility (causality: skipped when its keys
  all follow its queries, index-causal on the diagonal, a ``key <= query`` mask where runs
  overlap; documents and key padding as a mask), giving ``(o, lse)``; tiles merge by log-sum-exp,
  the online softmax ``blockwise`` uses. Backward (``_RingAttention``): the shards travel again,
  now with their key/value gradients; each tile runs ``blockwise``'s backward given the global
  ``o`` and ``lse``, so its ``p = e^{s − lse}`` and ``δ = rowsum(dO ∘ O)`` are the whole softmax's,
  and after ``P`` steps each shard's gradients are back with their owner. Two changes make
  ``blockwise``'s tiles mergeable (``_TileBias``): no Toeplitz table (it removes a per-head constant
  that depends on the tile), and each row's far-key peak taken at the query's own position (one
  constant per row on every tile). Per-rank memory for keys and values: ``O(L·D / P)`` (the own
  shard, the one in use, the one arriving). Rotary schemes rotate q and k at their global
  positions before the keys travel; FoX carries ``c_j`` (its cumulative log forget gate, summed in
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
ulysses passes them to ``posenc.attention`` (a rank its heads' sinks). The scheme sees the sequence indices as positions (with documents too:
translation-invariant schemes are unaffected by where a document starts).

Notation used for tensor shapes: B batch, H heads, L whole length, Ll = L / world_size local
length, D head dim.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch

from posenc._validate import check_choice, check_int
from posenc.blockwise import BLOCK_K, BLOCK_Q, _Bias, _BlockwiseAttention, _forward
from posenc.encodings._base import BiasEncoding, check_tensor
from posenc.masking import Visibility
from posenc.limits import check_memory
from posenc.reference.positions import INT64_MAX
from posenc.scores import check_cap_and_sinks, merge_sinks, sinks_grad

BALANCES = ("head_tail", "contiguous")
METHODS = ("allgather", "ring", "ulysses")


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


def _runs(positions: torch.Tensor) -> list[tuple[int, int]]:
    """``[(i, j), ...]``: index ranges of ``positions`` whose values are consecutive integers."""
    p = positions.tolist()
    runs, start = [], 0
    for i in range(1, len(p) + 1):
        if i == len(p) or p[i] != p[i - 1] + 1:
            runs.append((start, i))
            start = i
    return runs


class _GatherSequence(torch.autograd.Function):
    """Every rank's ``[B, H, Ll, D]`` shard concatenated along the length, in rank order.

    Backward: the gradient of the whole ``[B, H, L, D]`` is summed over the ranks (each rank's
    queries contribute to every key) and each rank keeps its own shard's rows. An all-reduce
    rather than a reduce-scatter, which gloo lacks.
    """

    @staticmethod
    def forward(ctx, t, group):  # noqa: D102
        import torch.distributed as dist

        ctx.group, ctx.rank, ctx.local = group, dist.get_rank(group), t.shape[2]
        parts = [torch.empty_like(t, memory_format=torch.contiguous_format)
                 for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, t.contiguous(), group=group)
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad.narrow(2, ctx.rank * ctx.local, ctx.local), None


def _gather_positions(positions: torch.Tensor, group) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(positions) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, positions.contiguous(), group=group)
    return torch.cat(parts)


def _gather_rows(t: torch.Tensor, group) -> torch.Tensor:
    """Every rank's ``[..., Ll]`` concatenated along the last axis, in rank order (no gradient)."""
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=-1)


def _peer(group, index: int) -> int:
    """The global rank of the ``index``-th rank of ``group`` (point-to-point operations take global ranks)."""
    import torch.distributed as dist

    return index if group is None else dist.get_global_rank(group, index)


class _Passing:
    """Tensors sent to the next rank of the ring while the previous rank's arrive (started at
    construction, ``wait()`` returns what arrived): the transfer overlaps the current tile."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], group, rank: int, world: int) -> None:
        import torch.distributed as dist

        send_to, receive_from = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)
        self.received = tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors)
        ops = [dist.P2POp(dist.isend, t.contiguous(), send_to, group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, r, receive_from, group) for r in self.received]
        self.requests = dist.batch_isend_irecv(ops)

    def wait(self) -> tuple[torch.Tensor, ...]:
        for request in self.requests:
            request.wait()
        return self.received


# -- what runs where --------------------------------------------------------------------------

def _unsupported(pe, method: str) -> str | None:
    """Why ``method`` cannot run ``pe`` exactly, or None when it can (the table of the module docstring)."""
    from posenc.encodings.fox import FoX

    kind = "none" if pe is None else pe.kind
    per_head = getattr(pe, "num_heads", None) is not None
    if method == "allgather" and kind == "content":
        return "a content scheme counts its positions from the tokens, and all-gather attention passes positions"
    if method == "ring" and kind == "content" and not isinstance(pe, FoX):
        return ("its weight of key j depends on the tokens between j and the query, not only on q_i, k_j and "
                "per-token values, so a key shard cannot be scored away from the others")
    if method == "ulysses" and per_head and kind in ("rotary", "relative", "content") and not isinstance(pe, FoX):
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
    kind = "none" if pe is None else pe.kind
    if cached and kind == "content":
        raise ValueError(f"k_positions (keys of a cache) cannot run {pe.name!r} ({kind}): a content scheme counts its "
                         "positions over the tokens of its queries and keys as one sequence; give the whole "
                         "sequence's shards (k_positions=None), or posenc.attention with the cache on one device")
    if cached and document_ids is not None:
        raise ValueError("document_ids with k_positions: documents are given per token, and the keys of a cache are "
                         "other tokens than the queries; mask the keys of other documents with attention_mask, or "
                         "pass k_positions=None")
    if kind == "content" and pe.name == "fox" and (softcap is not None or sinks is not None):
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


# -- ring -------------------------------------------------------------------------------------

class _TileBias(_Bias):
    """``posenc.blockwise``'s bias of one ring tile, made mergeable: a tile's log-sum-exp must be that
    of the true scores, or differ from it by one constant per row on every tile.

    - Toeplitz tiles (a translation-invariant scheme at contiguous positions, nothing to train):
      the table has a per-head constant removed that depends on the tile's keys; ``shift``
      ``[1, H, 1]`` is that constant (the scheme at the table's largest entry, in float64, minus the
      entry), added to the tile's ``lse`` and taken off the global one for its backward. With a
      parameter to train the tile uses the per-block path instead (the constant's gradient would
      not cancel within a tile).
    - Otherwise each row's far-key peak (``BiasEncoding.nearest_keys``) is taken at the query's own
      position, one constant per row on every tile."""

    def __init__(self, *args, trainable: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.toeplitz = self.toeplitz and not trainable
        self.shift = None

    def prepare(self) -> None:
        super().prepare()
        if self.toeplitz:
            e = self.table.argmax(-1)  # (H,): an entry at offset j − i = e − (Lq − 1)
            offset = e - (self.lq - 1)
            with torch.no_grad():
                b = self.fn(self.heads.view(-1), self.qpos[(-offset).clamp(min=0)], self.kpos[offset.clamp(min=0)])
            self.shift = (b - self.table.gather(-1, e[:, None]).squeeze(-1).double()).view(1, -1, 1)  # (1, H, 1)
        elif self.near is not None:
            self.near = self.qpos  # (c,): a query's own key is its nearest key of the whole sequence

    def lse_shift(self, dtype: torch.dtype) -> torch.Tensor | float:
        return 0.0 if self.shift is None else self.shift.to(dtype)


@dataclass
class _RingPlan:
    """What every ring step reads: the scheme after its step (a bias or relative module, or None),
    this rank's query positions and documents, every rank's key positions, documents and padding
    (rank order, ``[..., P·Ll]``), and the tiles (query run × key run) that see something."""

    pe: object
    positions: torch.Tensor
    key_positions: torch.Tensor
    docs: torch.Tensor | None
    pad: torch.Tensor | None
    causal: bool
    scale: float
    group: object
    rank: int
    world: int
    local: int  # keys per rank
    trainable: bool = False  # the scheme has parameters to train (no per-tile Toeplitz table)
    softcap: float | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        self.tiles = [_tiles(self.positions, self.keys(src, self.key_positions), self.causal, self.window)
                      for src in range(self.world)]

    def keys(self, src: int, t: torch.Tensor | None) -> torch.Tensor | None:
        """Rank ``src``'s part of a rank-ordered ``[..., P·Ll]``."""
        return None if t is None else t[..., src * self.local:(src + 1) * self.local]


def _tiles(q_positions: torch.Tensor, k_positions: torch.Tensor, causal: bool,
           window: int | None = None) -> list[tuple[int, int, int, int, str]]:
    """``(qa, qb, ka, kb, mode)`` for each query run × key run that sees something: ``"all"`` (every
    pair visible), ``"causal"`` (the same positions: the index-causal mask), ``"mask"`` (the rest:
    ``key <= query`` and the window ``key > query − W`` (and ``key < query + W`` without causality)
    as a mask). Tiles whose keys all follow their queries (causal), or all lie outside every query's
    window, are skipped."""
    tiles = []
    for qa, qb in _runs(q_positions):
        q0, q1 = int(q_positions[qa]), int(q_positions[qb - 1])
        for ka, kb in _runs(k_positions):
            k0, k1 = int(k_positions[ka]), int(k_positions[kb - 1])
            if (causal and k0 > q1) or (window is not None and (k1 <= q0 - window or (not causal and k0 >= q1 + window))):
                continue
            inside = window is None or (k0 > q1 - window and (causal or k1 < q0 + window))
            mode = ("all" if inside and (not causal or k1 <= q0) else
                    "causal" if window is None and (k0, k1) == (q0, q1) else "mask")
            tiles.append((qa, qb, ka, kb, mode))
    return tiles


def _tile_bias(plan: _RingPlan, src: int, tile, b: int, h: int, work) -> _TileBias:
    """The tile's ``_TileBias``: its global positions and its ``Visibility`` (causality by index for a
    diagonal tile, else documents, padding and overlapping causality as one mask)."""
    qa, qb, ka, kb, mode = tile
    qpos, kpos = plan.positions[qa:qb], plan.keys(src, plan.key_positions)[ka:kb]
    allowed = None
    if mode == "mask":  # causality and the window by global position
        gap = qpos[:, None] - kpos[None, :]  # (c, n): query − key
        allowed = gap >= 0 if plan.causal else torch.ones_like(gap, dtype=torch.bool)
        if plan.window is not None:
            allowed &= (gap < plan.window) if plan.causal else (gap.abs() < plan.window)
    if plan.docs is not None:
        same = plan.keys(plan.rank, plan.docs)[..., qa:qb, None] == plan.keys(src, plan.docs)[..., None, ka:kb]
        allowed = same if allowed is None else same & allowed  # (1 or B, c, n)
    mask = None
    pad = None if plan.pad is None else plan.keys(src, plan.pad)[:, ka:kb]  # (1 or B, n)
    if allowed is None:
        mask = pad
    else:
        allowed = allowed if pad is None else allowed & pad[:, None, :]
        mask = allowed.view(-1, 1, qb - qa, kb - ka)  # (1 or B, 1, c, n)
    vis = Visibility.build(b=b, h=h, lq=qb - qa, lk=kb - ka, device=qpos.device, causal=mode == "causal",
                           attention_mask=mask)
    return _TileBias(plan.pe, qpos, kpos, work, vis=vis, trainable=plan.trainable, softcap=plan.softcap)


def _plain(plan: _RingPlan, tile, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether a tile is plain attention that SDPA's fused CPU kernel runs whole, with its log-sum-exp
    (and its backward given the global ones): no scheme left (none, rotary after its rotation, FoX
    after its key column), no mask beyond index causality, one head count and one head size."""
    return (plan.pe is None and tile[4] != "mask" and plan.docs is None and plan.pad is None
            and plan.softcap is None and q.device.type == "cpu" and k.shape[1] == q.shape[1] and k.shape[-1] == v.shape[-1] == q.shape[-1])


def _merge(out: torch.Tensor, lse: torch.Tensor, rows: tuple[int, int], o_t: torch.Tensor, lse_t: torch.Tensor) -> None:
    """Rows ``rows`` of ``(out, lse)`` merged in place with a tile's ``(o_t, lse_t)`` (the online
    softmax of ``posenc.blockwise``, one tile at a time): ``lse ← log(e^{lse} + e^{lse_t})``,
    ``out ← out·e^{lse_old − lse} + o_t·e^{lse_t − lse}``; ``−∞`` is a row with no key yet."""
    a, b = rows
    old = lse[:, :, a:b]
    new = torch.logaddexp(old, lse_t)
    safe = new.masked_fill(torch.isneginf(new), 0.0)
    out[:, :, a:b] = out[:, :, a:b] * (old - safe).exp().unsqueeze(-1) + o_t * (lse_t - safe).exp().unsqueeze(-1)
    lse[:, :, a:b] = new


class _RingAttention(torch.autograd.Function):
    """Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers",
    arXiv:2310.01889): each rank keeps its queries; key/value shards travel rank to rank, each
    scored against the queries as ``posenc.blockwise`` tiles and merged by log-sum-exp (``_merge``).
    Saves q, k, v (this rank's shard), out and lse. Backward: the shards travel again with their
    key/value gradients; each tile runs ``posenc.blockwise``'s backward given the global ``out`` and
    ``lse`` (so its ``p`` and ``δ`` are the whole softmax's, exactly), and after ``P`` steps every
    shard's gradients are back with their owner."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, plan: _RingPlan, *params):  # noqa: D102
        b, h, ll = q.shape[:3]
        out = q.new_zeros(b, h, ll, v.shape[-1])  # (B, H, Ll, Dv)
        lse = q.new_full((b, h, ll), float("-inf"))  # (B, H, Ll)
        shard = (k, v)
        for step in range(plan.world):
            src = (plan.rank - step) % plan.world
            passing = _Passing(shard, plan.group, plan.rank, plan.world) if step + 1 < plan.world else None
            for tile in plan.tiles[src]:
                qa, qb, ka, kb, mode = tile
                qt, kt, vt = q[:, :, qa:qb], shard[0][:, :, ka:kb], shard[1][:, :, ka:kb]
                if _plain(plan, tile, q, kt, vt):  # SDPA's fused CPU kernel, which returns the log-sum-exp
                    o_t, lse_t = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                        qt, kt, vt, 0.0, mode == "causal", scale=plan.scale)
                else:
                    bias = _tile_bias(plan, src, tile, b, h, q.dtype)
                    bias.prepare()
                    o_t, lse_t = _forward(qt, kt, vt, bias, scale=plan.scale, block_q=BLOCK_Q, block_k=BLOCK_K)
                    lse_t = lse_t + bias.lse_shift(lse_t.dtype)
                _merge(out, lse, (qa, qb), o_t, lse_t.masked_fill(torch.isposinf(lse_t), float("-inf")))
            if passing is not None:
                shard = passing.wait()
        if sinks is not None:  # one more key of score sinks[h] and value 0, merged last (as posenc.blockwise)
            out, lse = merge_sinks(out, lse, sinks)
        lse.masked_fill_(torch.isneginf(lse), float("inf"))  # a query that sees no key: p = 0 in the backward
        ctx.save_for_backward(q, k, v, out, lse, sinks, *params)
        ctx.plan = plan
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):  # noqa: D102
        q, k, v, out, lse, sinks, *params = ctx.saved_tensors
        plan: _RingPlan = ctx.plan
        b, h = q.shape[:2]
        dout = dout.contiguous()
        dsinks = None if sinks is None else sinks_grad(sinks, lse, (dout * out).sum(-1))  # this rank's rows' part
        dq, dparams = torch.zeros_like(q), [torch.zeros_like(p) for p in params]
        shard, grads = (k, v), (torch.zeros_like(k), torch.zeros_like(v))
        for step in range(plan.world):
            src = (plan.rank - step) % plan.world
            last = step + 1 == plan.world
            passing = None if last else _Passing(shard, plan.group, plan.rank, plan.world)
            for tile in plan.tiles[src]:
                qa, qb, ka, kb, mode = tile
                saved = (q[:, :, qa:qb], shard[0][:, :, ka:kb], shard[1][:, :, ka:kb], out[:, :, qa:qb],
                         lse[:, :, qa:qb], None, *params)
                if _plain(plan, tile, q, saved[1], saved[2]):  # the fused backward, given the global o and lse
                    gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                        dout[:, :, qa:qb], *saved[:5], 0.0, mode == "causal", scale=plan.scale)
                    gp = []
                else:
                    bias = _tile_bias(plan, src, tile, b, h, q.dtype)
                    with torch.no_grad():
                        bias.prepare()
                    saved = (*saved[:4], saved[4] - bias.lse_shift(q.dtype), *saved[5:])  # the tile's frame
                    tile_ctx = types.SimpleNamespace(
                        saved_tensors=saved, needs_input_grad=(True, True, True, False, False, *(True,) * len(params)),
                        args={"bias": bias, "scale": plan.scale, "block_q": BLOCK_Q, "block_k": BLOCK_K})
                    gq, gk, gv, _, _, *gp = _BlockwiseAttention.backward(tile_ctx, dout[:, :, qa:qb])
                dq[:, :, qa:qb] += gq
                grads[0][:, :, ka:kb] += gk
                grads[1][:, :, ka:kb] += gv
                for acc, g in zip(dparams, gp):
                    if g is not None:
                        acc += g
            if plan.world > 1:  # the gradients follow their shard; after the last step they reach its owner
                grads = _Passing(grads, plan.group, plan.rank, plan.world).wait()
            if passing is not None:
                shard = passing.wait()
        return dq, grads[0], grads[1], dsinks, None, *dparams


def _fox_state(pe, hidden: torch.Tensor | None, positions: torch.Tensor, all_positions: torch.Tensor,
               group) -> torch.Tensor:
    """FoX's ``c = cumsum(log f)`` at this rank's global positions, ``[B or 1, H, Ll]`` float64: a
    constant gate at its closed form ``log f·(t + 1)``; a full gate's ``log f`` of every rank
    all-gathered (``[B, H, L]``, differentiable: each rank's gates reach every later query), put in
    sequence order and summed."""
    if not pe.reads_hidden:
        return pe.log_gates(None) * (positions + 1).to(torch.float64)  # (1, H, Ll)
    log_f = pe.log_gates(hidden)  # (B, H, Ll)
    every = _GatherSequence.apply(log_f.unsqueeze(-1), group).squeeze(-1)  # (B, H, L), rank order
    return torch.cumsum(every[..., torch.argsort(all_positions)], dim=-1)[..., positions]


def _fox_augmented(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, scale: float):
    """FoX's score ``q_i·k_j·scale + c_i − c_j`` as a plain dot product: ``c_i`` is one constant per
    row, which softmax ignores, and ``−c_j`` is one more key column against a query column of 1:
    ``[q_i, 1]·[k_j, −c_j/scale]·scale = q_i·k_j·scale − c_j``. ``q [B, H, L, D]``, ``k`` with the
    same heads, ``c [B or 1, H, L]`` float64; returns ``q, k`` of head size ``D + 1``."""
    column = (-c / scale).to(k.dtype).unsqueeze(-1).expand(k.shape[0], -1, -1, -1)  # (B, H, L, 1)
    return torch.cat((q, torch.ones_like(q[..., :1])), -1), torch.cat((k, column), -1)


@dataclass(frozen=True)
class _Extras:
    """What a call adds to the scores beyond the scheme: a logit cap, sinks ``[H]``, a window."""

    softcap: float | None = None
    sinks: torch.Tensor | None = None
    window: int | None = None


def _ring(q, k, v, pe, *, positions, all_positions, docs, pad, hidden, causal, scale, group,
          k_positions=None, all_k=None, extras: _Extras = _Extras()) -> torch.Tensor:
    """``method="ring"``: the scheme's step on this rank's shard (rotary: q and k rotated at their global
    positions before they travel; FoX: ``c`` carried as a key column; relative: keys per query head),
    then ``_RingAttention``. ``k_positions``, ``all_k``: the keys' own (a cache), else the queries'."""
    import torch.distributed as dist

    from posenc.scores import repeat_kv

    kind = "none" if pe is None else pe.kind
    h = q.shape[1]
    k_positions = positions if k_positions is None else k_positions
    all_k = all_positions if all_k is None else all_k
    if kind == "bias" and pe.num_heads != h:
        raise ValueError(f"pe has num_heads={pe.num_heads} but q has {h} heads")
    if kind == "none":  # nope; nope_temperature's temperature per query position
        q, pe = q if pe is None else pe.temper_queries(q, positions), None
    elif kind == "rotary":  # one length for every rank (a length-dependent scaling), then keys first
        pe.observe(torch.arange(all_k.shape[0], device=q.device))
        q, k = pe.rotate(q, k, positions, k_positions)
        pe = None
    elif kind == "content":  # FoX (the others are refused)
        if not causal:
            raise ValueError(f"scheme {pe.name!r} counts positions from each query backwards: it needs causal=True")
        k, v = repeat_kv(k, v, h)
        q, k = _fox_augmented(q, k, _fox_state(pe, hidden, positions, all_positions, group), scale)
        dv = v.shape[-1]  # values padded to the head size D + 1 (the fused kernel wants one), cut after
        return _ring(q, k, torch.nn.functional.pad(v, (0, 1)), None, positions=positions, all_positions=all_positions,
                     docs=docs, pad=pad, hidden=None, causal=causal, scale=scale, group=group,
                     extras=extras)[..., :dv]
    elif kind == "relative":
        k, v = repeat_kv(k, v, h)
    params = [p for p in pe.parameters() if p.requires_grad] if pe is not None and torch.is_grad_enabled() else []
    work = torch.promote_types(q.dtype, torch.float32)
    plan = _RingPlan(pe, positions, all_k, docs, pad, causal, scale, group, dist.get_rank(group),
                     dist.get_world_size(group), k.shape[2], trainable=bool(params), softcap=extras.softcap,
                     window=extras.window)
    sinks = None if extras.sinks is None else extras.sinks.to(work)
    return _RingAttention.apply(q.to(work), k.to(work), v.to(work), sinks, plan, *params).to(q.dtype)


# -- ulysses ----------------------------------------------------------------------------------

class _SwapShards(torch.autograd.Function):
    """All-to-all between a sequence shard of every head ``[B, H, Ll, D]`` and the whole sequence of
    ``H / P`` heads ``[B, H / P, P·Ll, D]`` (rank order along the length): ``to_heads`` sends head
    group ``j`` to rank ``j``; the other way sends length part ``j`` back. Each direction's backward
    is the other direction."""

    @staticmethod
    def forward(ctx, x, group, to_heads: bool):  # noqa: D102
        ctx.group, ctx.to_heads = group, to_heads
        return _swap(x, group, to_heads)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return _swap(grad, ctx.group, not ctx.to_heads), None, None


def _swap(x: torch.Tensor, group, to_heads: bool) -> torch.Tensor:
    import torch.distributed as dist

    world = dist.get_world_size(group)
    parts = [t.contiguous() for t in x.chunk(world, dim=1 if to_heads else 2)]
    received = [torch.empty_like(t) for t in parts]
    dist.all_to_all(received, parts, group=group)
    return torch.cat(received, dim=2 if to_heads else 1)


class _HeadSlice(BiasEncoding):
    """Heads ``start … start + n − 1`` of a bias scheme: its ``score_fn`` at head ``h + start`` (the
    scheme's own function, so its parameters' gradients reach it through the slice)."""

    kind = "bias"

    def __init__(self, inner: BiasEncoding, start: int, n: int) -> None:
        super().__init__()
        self.inner, self.start, self.num_heads, self.name = inner, start, n, inner.name
        for flag in ("real_positions", "peak_at_nearest_key", "translation_invariant", "flex_ok",
                     "flex_compiles_fast"):
            setattr(self, flag, getattr(inner, flag))

    def score_fn(self):
        fn, start = self.inner.score_fn(), self.start

        def bias(h, q_pos, k_pos):
            return fn(h + start, q_pos, k_pos)

        return bias


def _ulysses(q, k, v, pe, *, all_positions, docs, pad, hidden, causal, scale, backend, group, all_k=None,
             extras: _Extras = _Extras()) -> torch.Tensor:
    """``method="ulysses"``: sequence shards to head shards (``_SwapShards``), ``posenc.attention`` on
    the whole sequence for this rank's ``H / P`` heads (its sinks' entries), and back. ``all_k``: the
    keys' positions (a cache: the queries are the last ``Lq`` of ``0..Lk−1``), else the queries'."""
    import torch.distributed as dist

    from posenc.attn import attention
    from posenc.scores import repeat_kv

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    h, h_kv = q.shape[1], k.shape[1]
    if h % world or h_kv % world:
        raise ValueError(f"method='ulysses' splits the heads over the {world} ranks: q's H={h} and k/v's H_kv={h_kv} "
                         f"must both be multiples of {world}; use method='ring' (any number of heads)")
    kind, dv = "none" if pe is None else pe.kind, v.shape[-1]
    if kind == "bias" and pe.num_heads != h:
        raise ValueError(f"pe has num_heads={pe.num_heads} but q has {h} heads")
    all_k = all_positions if all_k is None else all_k
    order, k_order = torch.argsort(all_positions), torch.argsort(all_k)  # rank order -> sequence order
    q = _SwapShards.apply(q, group, True)[:, :, order]  # (B, H/P, Lq, D)
    k, v = (_SwapShards.apply(t, group, True)[:, :, k_order] for t in (k, v))  # (B, H_kv/P, Lk, ·)
    n, length = h // world, all_k.shape[0]
    first = length - all_positions.shape[0]  # the queries' first position (0 without a cache)
    docs = None if docs is None else docs[..., order]
    pad = None if pad is None else pad[..., k_order]
    if hidden is not None:  # (B, L, d_model) in sequence order, its gradient summed back to each rank's rows
        hidden = _GatherSequence.apply(hidden.unsqueeze(1), group)[:, 0, order]
    everywhere = torch.arange(length, device=q.device)
    where = {"q_positions": everywhere[first:], "k_positions": everywhere}
    if kind == "content" and pe.name == "fox":
        k, v = repeat_kv(k, v, n)
        c = pe.state(k, hidden, docs)[:, rank * n:(rank + 1) * n]  # (B or 1, H/P, L)
        q, k = _fox_augmented(q, k, c, scale)
        v = torch.nn.functional.pad(v, (0, 1))  # one head size D + 1 for SDPA's fused kernel; cut after
        pe = None
    elif kind == "content":
        where = {"hidden": hidden}
    elif kind == "bias" and n != h:
        pe = _HeadSlice(pe, rank * n, n)
    sinks = None if extras.sinks is None else extras.sinks[rank * n:(rank + 1) * n]  # this rank's heads'
    out = attention(q, k, v, pe, causal=causal, scale=scale, backend=backend, document_ids=docs,
                    attention_mask=pad, softcap=extras.softcap, sinks=sinks, window=extras.window,
                    **where)[..., :dv]  # (B, H/P, Lq, Dv)
    return _SwapShards.apply(out[:, :, all_positions - first], group, False)  # (B, H, Ll, Dv), this rank's rows


# -- the entry point --------------------------------------------------------------------------

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
            sequences; a query sees only keys of its own document); ring and ulysses.
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
    if scale is None:  # 1/√D of the head given, as posenc.attention (PoPE's rotated q, k are wider)
        scale = (None if pe is None else pe.default_scale) or 1.0 / math.sqrt(q.shape[-1])
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


def _allgather(q, k, v, pe, *, positions, all_positions, causal, scale, backend, group) -> torch.Tensor:
    """``method="allgather"``: keys and values all-gathered and put in sequence order, then each run of
    consecutive query positions ``[s, e)`` attends to keys ``[0, e)`` when causal (``posenc.attention``'s
    bottom-right aligned causal mask is then ``key position <= query position``), or to all keys."""
    from posenc.attn import attention

    length = all_positions.shape[0]
    order = torch.argsort(all_positions)
    k_all = _GatherSequence.apply(k, group)[:, :, order]  # (B, H, L, D), in sequence order
    v_all = _GatherSequence.apply(v, group)[:, :, order]
    k_positions = torch.arange(length, device=q.device)
    if getattr(pe, "kind", None) == "rotary":  # keys first, at the whole length, as posenc.attention does
        q, k_all = pe.rotate(q, k_all, positions, k_positions)
        pe = None
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
