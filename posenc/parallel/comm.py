"""Context parallelism's communication: runs of positions, the differentiable all-gather and
all-to-all, the ring's point-to-point passing (``torch.distributed``, imported where used).

Notation used for tensor shapes: B batch, H heads, L whole length, Ll local length, D head dim.
"""

from __future__ import annotations

import torch


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
