"""The training loop shared by language modelling, the tasks and the RoPE-scaling fine-tune.

AdamW (betas 0.9/0.95, weight decay on matrices and embeddings, as nanoGPT), linear warm-up then
cosine decay to lr/10, global gradient-norm clipping. The optimizer is torch's fused AdamW (one
kernel over every parameter instead of a dozen operations per tensor) and the clipping its
``foreach`` form: the same arithmetic (parameters within 2e-5 of the per-tensor loop after 20
steps), at less per-step cost on models this small (about 19 → 15 ms a quick LM step, measured
under load, so read it as a ratio). The loss is the sum of the scored tokens'
NLL divided by the scored-token count of the whole global batch, times the world size (DDP
averages gradients over ranks), so 1 process and N processes take the same steps. Under
``--context-parallel`` each rank holds a shard of every sequence and the gradients are summed
(``posenc.extrapolate.context_parallel``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from posenc.extrapolate.context_parallel import shard_batch, sharded, sum_gradients
from posenc.extrapolate.distributed import Dist, all_sum, wrap
from posenc.extrapolate.model import token_nll
from posenc.extrapolate.profiles import TrainConfig
from posenc.extrapolate.stack import Stack, stacks, train_stack

# A step's global batch: tokens (B, T+1) and the mask (B, T) of scored targets (None: all).
BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor | None]]


def learning_rate(step: int, cfg: TrainConfig, peak: float) -> float:
    if step < cfg.warmup:
        return peak * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def adamw(params: list[torch.nn.Parameter], cfg: TrainConfig, lr: float) -> torch.optim.AdamW:
    """nanoGPT's AdamW over ``params``: weight decay on matrices and embeddings, none on biases and
    norms; fused (``torch.optim.AdamW(fused=True)``: CPU and CUDA)."""
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=fused or None)


def clip_gradients(params: list[torch.nn.Parameter], max_norm: float) -> None:
    """``clip_grad_norm_`` of the global gradient norm, in its ``foreach`` form (one call per dtype)."""
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


def train(model: torch.nn.Module, cfg: TrainConfig, next_batch: BatchFn, *, dist: Dist,
          lr: float | None = None, steps: int | None = None,
          on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Trains ``model`` in place; returns the loss (mean NLL of the global batch) of every step."""
    steps = cfg.steps if steps is None else steps
    peak = cfg.lr if lr is None else lr
    shards = sharded(model, dist)  # --context-parallel: sequence shards of the whole batch, no DDP
    if cfg.batch_size < dist.world and not shards:
        raise ValueError(f"batch_size={cfg.batch_size} must be >= the number of processes ({dist.world})")
    model.train()
    net = model if shards else wrap(model, dist)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, cfg, peak)
    schedule = TrainConfig(steps=steps, warmup=min(cfg.warmup, steps), batch_size=cfg.batch_size)
    losses: list[float] = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, schedule, peak)
        tokens, mask = next_batch(step)  # the global batch, identical on every rank
        if mask is None:
            mask = torch.ones(tokens.shape[0], tokens.shape[1] - 1, dtype=torch.bool)
        count = int(mask.sum())
        if shards:  # every sequence of the batch, this rank's positions of it
            inputs, targets, local_mask, positions = shard_batch(tokens, mask, dist)  # (B, Tl) x 3, (Tl,)
            nll = token_nll(net(inputs, positions, context_parallel=dist.context_parallel), targets)  # (B, Tl)
        else:
            local = tokens[dist.rank::dist.world].to(dist.device)  # (b, T+1)
            local_mask = mask[dist.rank::dist.world].to(dist.device)  # (b, T)
            nll = token_nll(net(local[:, :-1]), local[:, 1:])  # (b, T)
        loss_sum = (nll * local_mask).sum()
        opt.zero_grad(set_to_none=True)
        (loss_sum * ((1 if shards else dist.world) / count)).backward()
        if shards:
            sum_gradients(params, dist)
        clip_gradients(params, cfg.grad_clip)
        opt.step()
        loss = float(all_sum(loss_sum.detach(), dist)) / count
        if not math.isfinite(loss):
            raise FloatingPointError(f"training diverged at step {step}: loss {loss}")
        losses.append(loss)
        if on_step is not None:
            on_step(step, loss)
    model.eval()
    return losses


def train_seeds(models: list[torch.nn.Module], cfg: TrainConfig, next_batches: list[BatchFn], *, dist: Dist,
                lr: float | None = None, steps: int | None = None,
                on_step: Callable[[int, float], None] | None = None, stacked: bool | None = None
                ) -> list[list[float]]:
    """``train`` for the models of several seeds of one configuration: as one stacked model
    (``posenc.extrapolate.stack``) where that pays (``stacked=None``: by device, ``STACK_DEVICES``),
    else one by one; each seed takes the steps it takes alone, on its own ``next_batches[s]``.
    Returns each seed's losses. Under DDP the seeds train one by one."""
    if len(models) != len(next_batches):
        raise ValueError(f"one batch function per model: {len(models)} models, {len(next_batches)} batch functions")
    if dist.active or not stacks(models, stacked):
        return [train(m, cfg, nb, dist=dist, lr=lr, steps=steps, on_step=on_step) for m, nb in zip(models, next_batches)]

    steps = cfg.steps if steps is None else steps
    peak = cfg.lr if lr is None else lr
    schedule = TrainConfig(steps=steps, warmup=min(cfg.warmup, steps), batch_size=cfg.batch_size)
    for m in models:
        m.train()
    stack = Stack(models)

    def step_loss(step: int) -> tuple[torch.Tensor, list[float]]:
        tokens, mask = _common_batch([nb(step) for nb in next_batches])  # (S, B, T+1), (S, B, T)
        tokens, mask = tokens.to(dist.device), mask.to(dist.device)
        nll = token_nll(stack(tokens[..., :-1], in_dims=(0,)).flatten(0, 1), tokens[..., 1:].flatten(0, 1))
        counts = mask.flatten(1).sum(1)  # (S,)
        sums = (nll.view(mask.shape) * mask).flatten(1).sum(1)  # (S,)
        return sums / counts, [float(s) / int(c) for s, c in zip(sums.detach(), counts)]

    return train_stack(stack, cfg, step_loss, lr=peak, steps=steps,
                       schedule=lambda step: learning_rate(step, schedule, peak),
                       on_step=None if on_step is None else lambda step, values: on_step(step, values[0]))


def _common_batch(batches: list[tuple[torch.Tensor, torch.Tensor | None]], pad: int = 0
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeds' batches as one ``(S, B, T+1)`` tokens and ``(S, B, T)`` mask: a shorter batch is
    padded at the end with unscored ``pad`` tokens (the model is causal: no earlier token sees them)."""
    width = max(t.shape[1] for t, _ in batches)
    tokens, masks = [], []
    for t, m in batches:
        if m is None:
            m = torch.ones(t.shape[0], t.shape[1] - 1, dtype=torch.bool)
        extra = width - t.shape[1]
        tokens.append(torch.nn.functional.pad(t, (0, extra), value=pad))
        masks.append(torch.nn.functional.pad(m, (0, extra), value=False))
    return torch.stack(tokens), torch.stack(masks)
