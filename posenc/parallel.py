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

**Attention across ranks** (``context_parallel_attention``): keys and values are all-gathered
(with their positions) and put back in sequence order, then each maximal run of consecutive
query positions ``[s, e)`` attends through ``posenc.attention`` to keys ``[0, e)`` when causal
(its bottom-right aligned causal mask then equals ``key position <= query position``), or to all
keys. The all-gather is differentiable (its backward sums the key/value gradients of every rank's
queries and hands each rank its own rows), so training works; memory per rank is ``O(L·D)`` for
the gathered keys and values plus what ``posenc.attention`` needs for the rank's queries. A ring
(keys passed rank to rank) would bound the gathered memory to two shards; it is not written.

Notation used for tensor shapes: B batch, H heads, L whole length, Ll = L / world_size local
length, D head dim.
"""

from __future__ import annotations

import math

import torch

from posenc._validate import check_choice, check_int
from posenc.encodings._base import check_tensor
from posenc.limits import check_memory
from posenc.reference.positions import INT64_MAX

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


def context_parallel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe=None, *,
                               positions: torch.Tensor, causal: bool = False, scale: float | None = None,
                               backend: str = "auto", group=None) -> torch.Tensor:
    """``posenc.attention`` of one sequence sharded over the ranks of ``group`` (default: the world).

    Args:
        q, k, v: this rank's ``[B, H, Ll, D]`` shards, token ``i`` at global position ``positions[i]``.
        pe: as for ``posenc.attention`` (rotary, bias, relative, none), with one position per
            token (a scheme of several axes is refused).
        positions: ``[Ll]`` integer global positions of this rank's tokens (``shard_positions``); the
            ranks' positions together must be ``0..L−1``, each once, and every rank has the same ``Ll``.
        causal: query at position ``m`` sees keys at positions ``<= m``.
        scale, backend: as for ``posenc.attention``.

    Returns:
        ``[B, H, Ll, D]``: the rows at ``positions`` of the unsharded attention.
    """
    import torch.distributed as dist

    from posenc.attn import attention

    q = check_tensor("q", q, ndim=4)
    if q.shape[-1] == 0:
        raise ValueError(f"q and k must have a head dimension D >= 1, got q of shape {list(q.shape)}")
    k = check_tensor("k", k, ndim=4, last_dim=q.shape[-1])
    v = check_tensor("v", v, ndim=4)
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.dtype.is_floating_point:
        raise TypeError(f"positions must be an integer torch.Tensor [Ll], got "
                        f"{positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__}"
                        f"{' of shape ' + str(list(positions.shape)) if isinstance(positions, torch.Tensor) else ''}")
    if not (q.shape[2] == k.shape[2] == v.shape[2] == positions.shape[0]):
        raise ValueError(f"q, k, v and positions must share the local length Ll; got q {list(q.shape)}, "
                         f"k {list(k.shape)}, v {list(v.shape)}, positions {list(positions.shape)}")
    if getattr(pe, "axes", 1) != 1:
        raise ValueError(f"context_parallel_attention takes schemes with one position per token; {pe.name!r} "
                         f"has {pe.axes} axes (shard its [L, A] positions' rows and use posenc.attention per rank "
                         "with all-gathered keys instead)")
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("context_parallel_attention needs an initialized torch.distributed process group "
                         "(torch.distributed.init_process_group)")
    positions = positions.to(q.device, torch.int64)
    all_positions = _gather_positions(positions, group)  # (L,)
    length = all_positions.shape[0]
    order = torch.argsort(all_positions)
    if not torch.equal(all_positions[order], torch.arange(length, device=q.device)):
        raise ValueError(f"positions of all ranks together must be 0..{length - 1}, each once "
                         "(use posenc.shard_positions)")
    k_all = _GatherSequence.apply(k, group)[:, :, order]  # (B, H, L, D), in sequence order
    v_all = _GatherSequence.apply(v, group)[:, :, order]
    k_positions = torch.arange(length, device=q.device)
    if getattr(pe, "kind", None) == "rotary":  # keys first, at the whole length, as posenc.attention does
        if scale is None:  # 1/√D of the head given, as posenc.attention (PoPE's rotated q, k are wider)
            scale = pe.default_scale or 1.0 / math.sqrt(q.shape[-1])
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
