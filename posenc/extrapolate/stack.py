"""Several seeds of one configuration trained as one model: parameters stacked on a seed axis.

The benchmark's models are small (the quick profile's: width 64, 2 layers, 16 × 32 tokens a
step), so a training step on a CPU is mostly per-operation overhead, not arithmetic. ``S`` seeds
of one configuration run as one model whose every parameter has a leading seed axis ``S``:
``torch.func.functional_call`` over ``torch.func.vmap`` turns each layer into one batched
operation (a linear layer into one ``bmm``), so ``S`` seeds cost about one seed's operations.

Each seed stays what training it alone is:

- the same initial weights: each model is built as a single model would be (``torch.manual_seed``)
  and only then stacked;
- the same data: each seed's batches come from its own generator, in its own order;
- the same loss: the seeds' losses are summed before ``backward``, and no parameter is shared, so
  each seed's gradient is its own loss's gradient;
- the same clipping: the gradient norm is each seed's own (over its parameters, not across seeds),
  as ``torch.nn.utils.clip_grad_norm_`` computes it: the norm of the per-parameter norms;
- the same AdamW: its update is elementwise, so stacked parameters take each seed's update
  exactly; weight decay goes to the parameters that are matrices or embeddings in one seed
  (``dim >= 2`` before stacking), as ``posenc.extrapolate.train`` decides.

``tests/test_extrapolate_stack.py`` checks every step's loss and the trained weights against
seeds trained one by one, in float32.

Where it pays (``STACK_DEVICES``): not on this project's CPU. ``docs/bench_seeds.py`` (three
seeds of the quick profile's models, 20 steps, interleaved one by one / stacked, median of three
rounds, one torch thread, on the shared 2-core machine under a load average of 9–13) measured
stacked at 0.96–1.03× the speed of one by one for language modelling (nope, rope, alibi, t5),
0.97× and 1.77× (one noisy round; 1.05–1.08 in the others) for the tasks (rope, alibi), 1.09× for
the learned image grid, 0.54× for RoPE-Mixed (its learned frequencies become per-seed rotation
tables under ``vmap``), 0.86× for time (rope). A step of these models is already arithmetic, not
per-operation overhead (the tasks step: 56% in matrix products, 25% in elementwise kernels), so
putting three seeds in one operation saves little and ``vmap``'s batching rules cost about as
much. On a GPU, where a small model's step is launch overhead, batching the seeds is the known
win; it is not measured here (no GPU), so ``STACK_DEVICES`` names ``cuda`` as a default to be
checked there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from posenc.extrapolate.profiles import TrainConfig


STACK_DEVICES: tuple[str, ...] = ("cuda",)
"""Device types on which the seeds of a configuration train as one stacked model by default;
elsewhere one by one (the same steps; see the module docstring for the measurements)."""


def stacks(models: Sequence[nn.Module], stacked: bool | None = None) -> bool:
    """Whether to train ``models`` as one stack: ``stacked`` if given, else by their device (``STACK_DEVICES``)."""
    if len(models) < 2 or not all(getattr(m, "stackable", True) for m in models):  # a transformers model: one by one
        return False
    if stacked is not None:
        return stacked
    device = next((p.device for p in models[0].parameters()), torch.device("cpu"))
    return device.type in STACK_DEVICES


class Stack:
    """``models`` (one architecture, one per seed) as one: ``stack(*args, in_dims=...)`` runs every
    seed at once on its own inputs and returns outputs with a leading seed axis.

    The models' parameters are copied into ``params`` (``[S, ...]`` each); buffers equal in every
    model are shared, others stacked. ``write_back()`` copies the trained weights into the models.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        if not models:
            raise ValueError("models must hold one model per seed, got none")
        self.models = list(models)
        first = self.models[0]
        names = [n for n, _ in first.named_parameters()]
        for m in self.models[1:]:
            if [n for n, _ in m.named_parameters()] != names:
                raise ValueError("every model of a stack must have the same parameters (one architecture)")
        per_model = [dict(m.named_parameters()) for m in self.models]
        self.params = {n: torch.stack([p[n].detach() for p in per_model]).requires_grad_(per_model[0][n].requires_grad)
                       for n in names}  # name -> (S, ...)
        self.shared: dict[str, torch.Tensor] = {}
        self.stacked_buffers: dict[str, torch.Tensor] = {}
        per_buffers = [dict(m.named_buffers()) for m in self.models]
        for n, b in per_buffers[0].items():
            if all(torch.equal(b, other[n]) for other in per_buffers[1:]):
                self.shared[n] = b
            else:
                self.stacked_buffers[n] = torch.stack([other[n] for other in per_buffers])
        self.template = first

    @property
    def seeds(self) -> int:
        return len(self.models)

    def __call__(self, *args: Any, in_dims: tuple[int | None, ...]) -> Any:
        """Every seed's ``model(*args)``; an argument with in_dim 0 has one slice per seed, None is shared."""
        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *a: Any) -> Any:
            return functional_call(self.template, ({**params, **buffers, **self.shared}), a)

        with warnings.catch_warnings():  # vmap loops over the seeds in SDPA's CPU kernel (no batching rule)
            warnings.filterwarnings("ignore", message=".*batching rule for aten::_scaled_dot_product", category=UserWarning)
            return vmap(one, in_dims=(0, 0, *in_dims))(self.params, self.stacked_buffers, *args)

    def write_back(self) -> None:
        with torch.no_grad():
            for i, model in enumerate(self.models):
                for n, p in model.named_parameters():
                    p.copy_(self.params[n][i])


def _clip_per_seed(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` for each seed alone: ``grads`` are ``[S, ...]``; seed s's norm is the
    2-norm of its per-parameter 2-norms, and its gradients are scaled by ``min(1, max/(norm+1e-6))``."""
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads], dim=1)  # (S, P)
    total = torch.linalg.vector_norm(norms, dim=1)  # (S,)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # (S,)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))


def train_stack(stack: Stack, cfg: TrainConfig, step_loss: Callable[[int], tuple[torch.Tensor, list[float]]], *,
                lr: float, steps: int, schedule: Callable[[int], float],
                on_step: Callable[[int, list[float]], None] | None = None) -> list[list[float]]:
    """Trains every seed of ``stack``; returns each seed's loss at every step (``[S][steps]``).

    ``step_loss(step)`` returns the ``(S,)`` losses to minimise (each seed's own) and the values to
    record; ``schedule(step)`` the learning rate. AdamW, clipping and weight decay as in
    ``posenc.extrapolate.train.train`` (see the module docstring).
    """
    params = [p for p in stack.params.values() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() - 1 >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() - 1 < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), foreach=False)
    out: list[list[float]] = [[] for _ in range(stack.seeds)]
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        loss, values = step_loss(step)  # (S,)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # no parameter is shared: seed s's gradient is its own loss's
        _clip_per_seed([p.grad for p in params if p.grad is not None], cfg.grad_clip)
        opt.step()
        for s, v in enumerate(values):
            if not math.isfinite(v):
                raise FloatingPointError(f"training diverged at step {step} (seed slot {s}): loss {v}")
            out[s].append(v)
        if on_step is not None:
            on_step(step, values)
    stack.write_back()
    for model in stack.models:
        model.eval()
    return out
