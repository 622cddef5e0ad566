"""The small bidirectional transformer the image and time parts train, its training loop and the
accuracy rows of its evaluation (``posenc.extrapolate.parts.image`` and ``parts.time``).

Every example is scored right or wrong; a row keeps each example's correctness (``bits``) so two
variants on the same examples can be compared example by example (``posenc.extrapolate.accuracy``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc.extrapolate.model import LAYERS, Block, GPTConfig, layer_pattern, pattern_label
from posenc.extrapolate.profiles import TrainConfig
from posenc.extrapolate.stack import Stack, stacks, train_stack
from posenc.extrapolate.train import adamw, clip_gradients, learning_rate


class SetTransformer(nn.Module):
    """A bidirectional transformer over token vectors (pixels, frames): input projection, the
    benchmark's own blocks (``posenc.extrapolate.model.Block``, non-causal), mean pooling, a classifier."""

    def __init__(self, cfg: GPTConfig, pe_spec: dict[str, Any], *, in_dim: int, classes: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(in_dim, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, causal=False) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, classes)
        self.pe = posenc.build(pe_spec)  # built last: every scheme starts from the same weights above

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pe: nn.Module | None = None) -> torch.Tensor:
        """``x [B, L, in_dim]`` at ``positions [L]`` or ``[L, A]`` -> logits ``[B, classes]``."""
        pe = self.pe if pe is None else pe
        h = self.inp(x)  # (B, L, C)
        h = pe.embed(h, positions)  # what the scheme adds to the embeddings (an additive pe's output)
        for block in self.blocks:
            h = block(h, positions, pe)
        return self.head(self.ln_f(h).mean(dim=1))  # (B, classes)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def fit_classifier(model: nn.Module, cfg: TrainConfig, next_batch) -> list[float]:
    """AdamW with warm-up and cosine decay (the benchmark's schedule) on cross-entropy;
    ``next_batch(step)`` gives ``(x, positions, labels)``."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, cfg, cfg.lr)
    model.train()
    losses = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg, cfg.lr)
        x, positions, labels = next_batch(step)
        loss = F.cross_entropy(model(x, positions), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(params, cfg.grad_clip)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"training diverged at step {step}: loss {value}")
        losses.append(value)
    model.eval()
    return losses


def fit_seeds(seeds: list[int], cfg: TrainConfig, make_model, make_batches, *, stacked: bool | None = None):
    """One classifier per seed, trained together (``fit_classifiers``, ``stacked`` as there: False when
    the seeds' positions differ): seed ``s`` draws its initial weights after ``torch.manual_seed(s)``
    (``make_model()``) and its batches from its own generator (``make_batches(g) -> next_batch(step)``).
    Returns the models, their loss curves and each seed's share of the training's wall seconds."""
    models, batches = [], []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        models.append(make_model())
        batches.append(make_batches(g))
    t0 = time.perf_counter()
    curves = fit_classifiers(models, cfg, batches, stacked=stacked)
    return models, curves, (time.perf_counter() - t0) / max(len(seeds), 1)


def fit_classifiers(models: list[nn.Module], cfg: TrainConfig, next_batches: list, *,
                    stacked: bool | None = None) -> list[list[float]]:
    """``fit_classifier`` for the models of several seeds: as one stacked model
    (``posenc.extrapolate.stack``) where that pays (``stacked=None``: by device), else one by one;
    each seed takes the steps it takes alone, on its own batches; the positions (the same for every
    seed) are shared."""
    if len(models) != len(next_batches):
        raise ValueError(f"one batch function per model: {len(models)} models, {len(next_batches)} batch functions")
    if not stacks(models, stacked):
        return [fit_classifier(m, cfg, nb) for m, nb in zip(models, next_batches)]
    for m in models:
        m.train()
    stack = Stack(models)

    def step_loss(step: int) -> tuple[torch.Tensor, list[float]]:
        xs, positions, ys = zip(*(nb(step) for nb in next_batches))
        logits = stack(torch.stack(xs), positions[0], in_dims=(0, None))  # (S, B, classes)
        y = torch.stack(ys)  # (S, B)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)  # (S,)
        return loss, loss.detach().tolist()

    return train_stack(stack, cfg, step_loss, lr=cfg.lr, steps=cfg.steps,
                       schedule=lambda step: learning_rate(step, cfg, cfg.lr))


@torch.no_grad()
def right_or_wrong(model: SetTransformer, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor,
                   pe: nn.Module | None = None, batch: int = 128) -> list[int]:
    out = []
    for i in range(0, len(y), batch):
        out += (model(x[i:i + batch], positions, pe).argmax(-1) == y[i:i + batch]).long().tolist()
    return out


def accuracy_row(correct: list[int], **where: Any) -> dict[str, Any]:
    n, k = len(correct), sum(correct)
    p = k / n
    return {**where, "accuracy": round(p, 6), "correct": k, "count": n,
            "se": round(math.sqrt(p * (1 - p) / n), 6),
            "bits": "".join(map(str, correct))}  # per example, for paired tests across schemes


def pattern_cannot(text: Any, part: str) -> tuple[str, dict[str, Any], str] | None:
    """A per-layer pattern's item in the image and time parts, recorded as "cannot run" (None: ``text``
    is no pattern)."""
    pattern = layer_pattern(text)
    if pattern is None:
        return None
    labels = [p.strip() if isinstance(p, str) else str(p.get("scheme")) for p in pattern]
    return (pattern_label(labels), {"scheme": LAYERS, "pattern": pattern},
            f"cannot: a per-layer pattern runs in the lm, scaling and tasks parts, not {part}")


__all__ = ["SetTransformer", "fit_classifier", "fit_classifiers", "fit_seeds", "right_or_wrong", "accuracy_row", "pattern_cannot"]
