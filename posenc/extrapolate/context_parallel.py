"""``posenc extrapolate --context-parallel ring|ulysses`` under ``torchrun``: each rank holds its
shard of every training sequence instead of a slice of the batch.

Every rank draws the same global batch (as under DDP) and keeps, of each sequence, the tokens at
``posenc.shard_positions(T, world, rank)`` (``head_tail``: chunks ``rank`` and ``2·world − 1 −
rank`` of ``2·world``); the model runs on those tokens at their global positions, and each
attention block spans the whole sequence across the ranks through
``posenc.context_parallel_attention(..., method=)``. The loss is the sum of the shard's scored
tokens' NLL over the global batch's scored-token count, so the ranks' losses add up to one
process's, and their parameter gradients are summed (one all-reduce of every gradient after the
backward; no DDP, whose own all-reduces would interleave with the attention's): one process on the
whole batch takes the same steps, within float rounding. A training length that does not divide by
``2·world`` is padded at the end with unscored tokens (the model is causal: no earlier token sees
them). Evaluation runs as under DDP (windows split over the ranks, each whole).

What is sharded: the benchmark's own decoder (``--arch transformer``) on positions ``0..T−1``. The
rows a profile adds beside it whose sequences cannot be split (the hybrid's ssm blocks read their
sequence in order; structured positions are made from the whole sequence's tokens) train as under
``torchrun`` without the flag, as do the image and time parts (their own bidirectional models and
training loop), and their records say so (``env.context_parallel`` is None); a
scheme the method does not run exactly, an ``--arch`` other than ``transformer``, or heads that do
not divide over the ranks (``ulysses``) are refused before any work, naming the alternative.
"""

from __future__ import annotations

from typing import Any

import torch

from posenc.extrapolate.distributed import Dist, all_sum
from posenc.extrapolate.model import TinyGPT, layer_pattern
from posenc.extrapolate.plan import Run
from posenc.extrapolate.profiles import Profile

METHODS = ("ring", "ulysses")  # the flag's choices (posenc.parallel.METHODS less the all-gather)
SHARDED_PARTS = ("lm", "scaling", "tasks")  # the parts trained by posenc.extrapolate.train (image, time: their own loop)


def sharded(model: torch.nn.Module, dist: Dist) -> bool:
    """Whether ``model`` trains on sequence shards: ``--context-parallel`` is on and the model is the
    benchmark's decoder with every block attention and its positions ``0..T−1``."""
    return (dist.context_parallel is not None and isinstance(model, TinyGPT) and model.arch == "transformer"
            and model.positions_fn is None)


def run_is_sharded(run: Run) -> bool:
    """``sharded`` of ``run``'s model, read from the run before it is built (the hybrid rows and the
    runs whose positions come from the tokens are not)."""
    from posenc.extrapolate import structured_positions as structured

    return (run.part in SHARDED_PARTS and run.arch == "transformer" and "positions" not in run.variant
            and structured.for_spec(run.spec) is None)


def check_runs(profile: Profile, runs: list[Run], method: str, world: int) -> list[Run]:
    """Refuses (ValueError naming the run's scheme, the reason and the alternative) what ``method``
    cannot shard among ``runs``, the profile's planned runs; returns the runs that train on shards."""
    import posenc
    from posenc.parallel import _unsupported

    heads = {"lm": profile.lm.model.n_head, "scaling": profile.lm.model.n_head, "tasks": profile.tasks.model.n_head}
    shards = [r for r in runs if run_is_sharded(r)]
    for run in shards:
        pattern = layer_pattern(run.spec)
        for spec in [run.spec] if pattern is None else pattern:
            pe = posenc.build(spec)
            reason = _unsupported(pe, method)
            if reason is not None:
                other = [m for m in METHODS if m != method and _unsupported(pe, m) is None]
                instead = f"--context-parallel {other[0]}" if other else "torchrun without --context-parallel"
                raise ValueError(f"--context-parallel {method} cannot run {run.part} {run.label!r} ({pe.name}, "
                                 f"{pe.kind}): {reason}; use {instead}, or leave the scheme out with --scheme")
        h = heads.get(run.part)
        if method == "ulysses" and h is not None and h % world:
            raise ValueError(f"--context-parallel ulysses splits the {h} heads of the {run.part} model over {world} "
                             f"processes: {h} is not a multiple of {world}; use --context-parallel ring")
    return shards


def shard_batch(tokens: torch.Tensor, mask: torch.Tensor, dist: Dist
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's shard of a global batch: ``(inputs [B, Tl], targets [B, Tl], scored [B, Tl],
    positions [Tl])`` from ``tokens [B, T+1]`` and ``mask [B, T]``, ``T`` padded at the end to a
    multiple of ``2·world`` with unscored tokens."""
    from posenc.parallel import shard_positions

    extra = -(tokens.shape[1] - 1) % (2 * dist.world)
    tokens = torch.nn.functional.pad(tokens, (0, extra))  # (B, T' + 1)
    mask = torch.nn.functional.pad(mask, (0, extra), value=False)  # (B, T')
    positions = shard_positions(mask.shape[1], dist.world, dist.rank)  # (Tl,)
    inputs, targets = tokens[:, :-1][:, positions], tokens[:, 1:][:, positions]
    return (inputs.to(dist.device), targets.to(dist.device), mask[:, positions].to(dist.device),
            positions.to(dist.device))


def sum_gradients(params: list[torch.nn.Parameter], dist: Dist) -> None:
    """Each parameter's gradient summed over the ranks (one all-reduce of them all, flattened)."""
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
    total = all_sum(torch.cat([g.reshape(-1) for g in grads]), dist)
    for p, g in zip(params, total.split([g.numel() for g in grads])):
        p.grad = g.view_as(p).to(p.dtype)


def env_field(dist: Dist, run: Run) -> dict[str, Any]:
    """The record's ``env.context_parallel`` when the flag is on: the method, or None where the run
    trained as under DDP (``run_is_sharded``)."""
    if dist.context_parallel is None:
        return {}
    return {"context_parallel": dist.context_parallel if run_is_sharded(run) else None}
