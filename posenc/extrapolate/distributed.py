"""Running under ``torchrun --nproc-per-node N``: DistributedDataParallel on gloo (CPU) or nccl (GPU).

Every rank draws the same global batch from the same seeded generator and keeps its slice
``batch[rank::world]``; the loss is normalised by the token count of the *global* batch, so the
gradients DDP averages equal those of one process on the whole batch. Evaluation windows are
split across ranks and their sums all-reduced. Rank 0 alone reads, repairs and appends the
results file. Without torchrun (``WORLD_SIZE`` unset) all of this reduces to one process.
With ``context_parallel`` (``--context-parallel ring|ulysses``) the ranks hold sequence shards of
the whole batch instead (``posenc.extrapolate.context_parallel``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from posenc._validate import check_choice


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_world: int = 1
    device: torch.device = torch.device("cpu")
    context_parallel: str | None = None  # "ring" or "ulysses": ranks hold sequence shards (extrapolate.context_parallel)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def setup(device: str | None = None, context_parallel: str | None = None) -> Dist:
    """Joins the process group torchrun describes in the environment (or runs alone).
    ``context_parallel`` (``"ring"``, ``"ulysses"``) needs a world of 2 or more."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if context_parallel is not None:
        check_choice("context_parallel", context_parallel, ("ring", "ulysses"))
    if context_parallel is not None and world < 2:
        raise ValueError(f"--context-parallel {context_parallel} splits each sequence over the processes of torchrun "
                         f"(WORLD_SIZE={world}): run it under torchrun --nproc-per-node 2 or more, or leave the "
                         "flag out")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device; use --device cpu")
    if world <= 1:
        return Dist(device=torch.device(device))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    return Dist(rank=rank, world=world, local_world=local_world, device=dev, context_parallel=context_parallel)


def teardown(dist: Dist) -> None:
    if dist.active and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def all_sum(t: torch.Tensor, dist: Dist) -> torch.Tensor:
    """The sum of ``t`` over ranks (``t`` itself on one process)."""
    if dist.active:
        out = t.detach().to(dist.device, copy=True)  # nccl reduces GPU tensors only
        torch_dist.all_reduce(out, op=torch_dist.ReduceOp.SUM)
        t = out.to(t.device)
    return t


def broadcast(obj: Any, dist: Dist) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not dist.active:
        return obj
    box = [obj]
    torch_dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(dist: Dist) -> None:
    if dist.active:
        torch_dist.barrier()


def wrap(model: torch.nn.Module, dist: Dist) -> torch.nn.Module:
    """The model under DistributedDataParallel when there is more than one rank."""
    if not dist.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [dist.device.index] if dist.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)
