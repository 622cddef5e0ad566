"""Beyond text: train small, test large for images (resolution), and positions in time (frame rate).

**Images** (``--part image``; Heo et al. 2024, "Rotary Position Embedding for Vision Transformer",
arXiv:2403.13298). A small vision transformer — the benchmark's own transformer blocks,
bidirectional, mean pooling — reads scikit-learn's handwritten digits (8×8 pixels, shipped
inside scikit-learn: nothing is downloaded), one token per pixel, on the training grid. The same
held-out test images are resampled (bilinear) to larger grids and classified again. The
positional variants:

- ``none``: no position (a bag of pixels);
- ``learned grid (resized)``: a ViT table on the training grid, resized at test time with
  ``posenc.interop.resize_grid`` (bicubic, as ViT's ``interpolate_pos_encoding``);
- ``2D sinusoidal``: factorized sin-cos (MAE), integer positions past the training range;
- ``2D sinusoidal (rescaled)``: the same model, test positions rescaled into the training range,
  ``p' = p·(g−1)/(s−1)`` (real-valued, NaViT-style);
- ``axial RoPE`` (FLUX/EVA) and ``RoPE-Mixed`` (Heo et al.'s learned 2D frequency directions),
  integer positions past the training range.

**Time** (``--part time``). Synthetic audio-like frames (noise vectors) carry two marked events
at random times; the label says which came first and whether they were more than
``gap_seconds`` apart. A model is trained at one frame rate and duration and evaluated at other
rates and longer durations, with positions given as **frame indices** or as **time** (seconds ×
the training frame rate: the same numbers at the training rate, so one trained model is
evaluated both ways). Time positions should carry over across frame rates where indices cannot:
at twice the frame rate a one-second gap is twice as many frames.

Every example is scored right or wrong; accuracy has a binomial standard error over examples
and, with several seeds, a standard error over seeds.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc import registry
from posenc.extrapolate.model import Block, GPTConfig
from posenc.extrapolate.profiles import ImageSettings, TimeSettings, TrainConfig
from posenc.extrapolate.stack import Stack, train_stack
from posenc.extrapolate.train import learning_rate
from posenc.spec import fill_sizes

NUM_CLASSES = 10


# -- settings ------------------------------------------------------------------------------------

IMAGE_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "none": ({"scheme": "nope"}, "grid"),
    # init_std 0.5, near the sinusoidal table's rms (1/√2): at the default 0.02 the table had barely
    # grown after 300 steps (46% at 8×8, measured) where the other variants reached ~90%; at 0.5, 88% in 200
    "learned grid (resized)": ({"scheme": "learned", "init_std": 0.5}, "resize"),
    "2D sinusoidal": ({"scheme": "sinusoidal", "axes": 2}, "grid"),
    "2D sinusoidal (rescaled)": ({"scheme": "sinusoidal", "axes": 2}, "rescaled"),
    "axial RoPE": ({"scheme": "rope", "axes": 2}, "grid"),
    "RoPE-Mixed": ({"scheme": "rope_mixed", "axes": 2}, "grid"),
}
"""label -> (spec without sizes, how test positions are made: ``grid`` integers, ``rescaled``
into the training range, ``resize`` the learned table)."""


def image_spec(label: str, s: ImageSettings) -> tuple[dict[str, Any], str]:
    """The full spec of an image variant, sized for the model, and its test-position mode."""
    if label not in IMAGE_VARIANTS:
        raise ValueError(f"image variant must be one of {', '.join(map(repr, IMAGE_VARIANTS))}; got {label!r}")
    base, mode = IMAGE_VARIANTS[label]
    spec = dict(base)
    sizes = {"d_model": s.model.n_embd, "head_dim": s.model.head_dim, "num_heads": s.model.n_head,
             "grid": [s.grid, s.grid]}
    params = registry.get(spec["scheme"]).params
    spec.update({k: v for k, v in sizes.items() if k in params and k not in spec})
    return registry.normalize_spec(spec), mode


def image_items(settings: ImageSettings, schemes: list[Any] | None) -> list[tuple[str, dict[str, Any], str]]:
    """``(label, spec, positions mode)`` of the image runs: the profile's variants, or the user's
    schemes made two-axis where they can be (``axes=2``; a learned table becomes a grid). A scheme
    that cannot take grid positions keeps its spec and gets the mode ``cannot: REASON``, recorded
    as "cannot run" (never a crash)."""
    if not schemes:
        return [(label, *image_spec(label, settings)) for label in settings.variants]
    from posenc.spec import as_spec, label as spec_label

    out = []
    for text in schemes:
        given = as_spec(text)
        name = given["scheme"]
        label = name if isinstance(text, str) and text.strip() == name else str(text).strip()
        params = registry.get(name).params
        extra = {}
        if name == "learned" and "grid" not in given:
            extra = {"grid": [settings.grid, settings.grid], "max_positions": None}
        elif "axes" in params and "axes" not in given:
            extra = {"axes": 2}
        try:
            spec = fill_sizes({**given, **extra}, dim=settings.model.n_embd, num_heads=settings.model.n_head,
                              head_dim=settings.model.head_dim, length=settings.grid ** 2)
            spec = registry.normalize_spec(spec)
            pe = posenc.build(spec)
        except (ValueError, TypeError) as e:
            out.append((label, dict(given), f"cannot: {str(e).splitlines()[0]}"))
            continue
        if label != name:
            label = spec_label({**given, **{k: spec[k] for k in spec if k not in given}})
        if pe.kind != "none" and getattr(pe, "axes", 1) != 2:
            out.append((label, spec, f"cannot: {name!r} takes one-axis positions; image patches need two "
                                     "(row, col)"))
            continue
        out.append((label, spec, "resize" if name == "learned" else "grid"))
    return out


# -- data ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def digits(test_fraction: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 8×8 digits in [0, 1]: ``(train_x [N, 8, 8], train_y, test_x, test_y)``,
    split once by a fixed permutation (the same for every seed and scheme)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - scikit-learn is in the bench extra
        raise ValueError("--part image needs scikit-learn (its bundled digits): pip install 'posenc[bench]'") from None
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    n_test = int(round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def resample(images: torch.Tensor, size: int) -> torch.Tensor:
    """``[N, h, w]`` -> ``[N, size, size]`` by bilinear interpolation (identity at the same size)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    return F.interpolate(images[:, None], size=(size, size), mode="bilinear", align_corners=False)[:, 0]


def image_positions(size: int, grid: int, mode: str) -> torch.Tensor:
    """``[size², 2]`` (row, col) positions: integers, or rescaled into ``0 .. grid-1`` (float64)."""
    pos = posenc.grid_positions((size, size))
    if mode == "rescaled" and size != grid:
        return pos.double() * ((grid - 1) / (size - 1))
    return pos


def time_batch(n: int, *, rate: float, seconds: float, s: TimeSettings, g: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(frames [n, T, F], labels [n], frame_times [T])`` for clips of ``seconds`` at ``rate``.

    Two events A and B, ``Δ = |t_A − t_B|`` uniform in [0.1, 2·gap] seconds (so about half are
    over the gap), placed at random in the clip; label ``2·[A first] + [Δ > gap]``.
    """
    frames = max(2, int(round(seconds * rate)))
    dim = s.frame_dim
    markers = torch.zeros(2, dim)
    markers[0, 0] = markers[1, 1] = 3.0  # event A, event B: one channel each, well above the noise
    x = 0.5 * torch.randn(n, frames, dim, generator=g)
    gap = 0.1 + (2 * s.gap_seconds - 0.1) * torch.rand(n, generator=g)  # (n,) seconds
    gap = torch.minimum(gap, torch.tensor(seconds - 1.0 / rate))
    start = torch.rand(n, generator=g) * (seconds - gap - 0.5 / rate).clamp(min=0)
    a_first = torch.rand(n, generator=g) < 0.5
    t_a = torch.where(a_first, start, start + gap)
    t_b = torch.where(a_first, start + gap, start)
    i_a = (t_a * rate).round().long().clamp(max=frames - 1)
    i_b = (t_b * rate).round().long().clamp(max=frames - 1)
    rows = torch.arange(n)
    x[rows, i_a] += markers[0]
    x[rows, i_b] += markers[1]
    # the label from the frames as sampled (rounding to frames can move an event by half a frame)
    dt = (i_b - i_a).double() / rate
    labels = 2 * (dt > 0).long() + (dt.abs() > s.gap_seconds).long()
    return x, labels, torch.arange(frames, dtype=torch.float64) / rate


# -- the model -----------------------------------------------------------------------------------

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
        if pe.kind == "additive":
            h = h + pe(positions).to(h.dtype)
        for block in self.blocks:
            h = block(h, positions, pe)
        return self.head(self.ln_f(h).mean(dim=1))  # (B, classes)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _fit(model: nn.Module, cfg: TrainConfig, next_batch) -> list[float]:
    """AdamW with warm-up and cosine decay (the benchmark's schedule) on cross-entropy;
    ``next_batch(step)`` gives ``(x, positions, labels)``."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    losses = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg, cfg.lr)
        x, positions, labels = next_batch(step)
        loss = F.cross_entropy(model(x, positions), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"training diverged at step {step}: loss {value}")
        losses.append(value)
    model.eval()
    return losses


def _fit_seeds(models: list[nn.Module], cfg: TrainConfig, next_batches: list) -> list[list[float]]:
    """``_fit`` for the models of several seeds as one stacked model (``posenc.extrapolate.stack``):
    each seed takes the steps it takes alone on its own batches; the positions are shared."""
    if len(models) == 1:
        return [_fit(models[0], cfg, next_batches[0])]
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
def _correct(model: SetTransformer, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor,
             pe: nn.Module | None = None, batch: int = 128) -> list[int]:
    out = []
    for i in range(0, len(y), batch):
        out += (model(x[i:i + batch], positions, pe).argmax(-1) == y[i:i + batch]).long().tolist()
    return out


def _row(correct: list[int], **where: Any) -> dict[str, Any]:
    n, k = len(correct), sum(correct)
    p = k / n
    return {**where, "accuracy": round(p, 6), "correct": k, "count": n,
            "se": round(math.sqrt(p * (1 - p) / n), 6),
            "bits": "".join(map(str, correct))}  # per example, for paired tests across schemes


# -- the runs ------------------------------------------------------------------------------------

def run_image(settings: ImageSettings, spec: dict[str, Any], mode: str, seed: int) -> dict[str, Any]:
    return run_image_seeds(settings, spec, mode, [seed])[0]


def run_image_seeds(settings: ImageSettings, spec: dict[str, Any], mode: str, seeds: list[int]) -> list[dict[str, Any]]:
    """The records of one image variant for each of ``seeds``, trained as one stacked model."""
    s = settings
    if mode.startswith("cannot: "):
        return [{"cannot_run": mode[len("cannot: "):], "train_size": s.grid, "eval": []} for _ in seeds]
    train_x, train_y, test_x, test_y = digits(s.test_fraction)
    pos = image_positions(s.grid, s.grid, "grid")
    x_train = resample(train_x, s.grid).flatten(1)[..., None]  # (N, g², 1)
    models, batches = [], []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        models.append(SetTransformer(s.model, spec, in_dim=1, classes=NUM_CLASSES))

        def next_batch(step: int, g: torch.Generator = g):
            idx = torch.randint(len(train_y), (s.train.batch_size,), generator=g)
            return x_train[idx], pos, train_y[idx]
        batches.append(next_batch)

    t0 = time.perf_counter()
    curves = _fit_seeds(models, s.train, batches)
    seconds = (time.perf_counter() - t0) / len(seeds)  # each seed's share of the stacked training
    out = []
    for model, losses in zip(models, curves):
        rows = []
        for size in s.test_grids:
            x = resample(test_x, size).flatten(1)[..., None]  # (N, size², 1)
            pe = model.pe.resized([size, size]) if mode == "resize" and size != s.grid else None
            rows.append(_row(_correct(model, x, test_y, image_positions(size, s.grid, mode), pe),
                             size=size, tokens=size * size))
        out.append({"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                    "train_seconds": round(seconds, 2), "params": model.num_params(), "train_size": s.grid,
                    "positions": mode, "eval": rows})
    return out


def time_items(settings: TimeSettings, schemes: list[Any] | None) -> list[tuple[str, dict[str, Any], str]]:
    """``(label, spec, "" or "cannot: REASON")`` of the time runs: the profile's schemes or the user's."""
    from posenc.spec import as_spec, label as spec_label

    out = []
    for text in schemes or settings.schemes:
        given = as_spec(text)
        plain = isinstance(text, str) and text.strip() == given["scheme"]
        label = given["scheme"] if plain else str(text).strip()
        try:
            spec = time_spec(given, settings)
            pe = posenc.build(spec)
        except (ValueError, TypeError) as e:
            out.append((label, dict(given), f"cannot: {str(e).splitlines()[0]}"))
            continue
        if not plain:
            label = spec_label(spec)
        if getattr(pe, "axes", 1) != 1:
            out.append((label, spec, f"cannot: {given['scheme']!r} has {pe.axes} axes; frames have one (time)"))
            continue
        out.append((label, spec, ""))
    return out


def run_time(settings: TimeSettings, spec: dict[str, Any], seed: int, mode: str = "") -> dict[str, Any]:
    return run_time_seeds(settings, spec, [seed], mode)[0]


def run_time_seeds(settings: TimeSettings, spec: dict[str, Any], seeds: list[int], mode: str = ""
                   ) -> list[dict[str, Any]]:
    """The records of one time scheme for each of ``seeds``, trained as one stacked model."""
    s = settings
    if mode.startswith("cannot: "):
        return [{"cannot_run": mode[len("cannot: "):], "train_rate": s.train_rate, "eval": []} for _ in seeds]
    frames = int(round(s.train_seconds * s.train_rate))
    pos = torch.arange(frames)  # at the training rate, frame indices = seconds × train_rate
    models, batches = [], []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        models.append(SetTransformer(s.model, spec, in_dim=s.frame_dim, classes=4))

        def next_batch(step: int, g: torch.Generator = g):
            x, y, _ = time_batch(s.train.batch_size, rate=s.train_rate, seconds=s.train_seconds, s=s, g=g)
            return x, pos, y
        batches.append(next_batch)

    t0 = time.perf_counter()
    curves = _fit_seeds(models, s.train, batches)
    seconds = (time.perf_counter() - t0) / len(seeds)  # each seed's share of the stacked training
    out = []
    for model, losses in zip(models, curves):
        real = model.pe.kind != "none" and getattr(model.pe, "real_positions", False)
        rows = []
        for rate, duration in s.test:
            ge = torch.Generator().manual_seed(100_000 + int(rate * 1000) + int(duration * 10))  # same for every run
            x, y, times = time_batch(s.eval_examples, rate=rate, seconds=duration, s=s, g=ge)
            for kind in ("index", "time"):
                if kind == "time" and not real:
                    continue  # nope has no positions; table schemes take only integers
                p = torch.arange(x.shape[1]) if kind == "index" else times * s.train_rate  # (T,)
                rows.append(_row(_correct(model, x, y, p), rate=rate, seconds=duration, frames=x.shape[1],
                                 positions=kind))
        out.append({"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                    "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "train_rate": s.train_rate, "train_duration": s.train_seconds, "eval": rows})
    return out


def time_spec(name: Any, s: TimeSettings) -> dict[str, Any]:
    spec = fill_sizes(name, dim=s.model.n_embd, num_heads=s.model.n_head, length=int(
        max(r * d for r, d in (*s.test, (s.train_rate, s.train_seconds)))), head_dim=s.model.head_dim)
    return registry.normalize_spec(spec)


def accuracy_table(records: list[dict[str, Any]], key: str) -> tuple[list[str], list[Any], dict]:
    """``(labels, columns, {(label, column): (mean accuracy, se, seeds)})`` over seeds.

    The standard error is over seeds when there are several (t-based in the report's verdicts),
    else the binomial one over examples.
    """
    by: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    labels: list[str] = []
    columns: list[Any] = []
    for rec in records:
        if rec["label"] not in labels:
            labels.append(rec["label"])
        for row in rec["eval"]:
            col = row[key] if key != "rate" else (row["rate"], row["seconds"], row["positions"])
            if col not in columns:
                columns.append(col)
            by.setdefault((rec["label"], col), []).append(row)
    cells = {}
    for k, rows in by.items():
        accs = [r["accuracy"] for r in rows]
        mean = float(np.mean(accs))
        se = float(np.std(accs, ddof=1) / math.sqrt(len(accs))) if len(accs) > 1 else rows[0]["se"]
        cells[k] = (mean, se, len(accs))
    return labels, columns, cells


__all__ = ["IMAGE_VARIANTS", "image_spec", "image_items", "time_spec", "time_items", "digits", "resample",
           "image_positions", "time_batch", "SetTransformer", "run_image", "run_image_seeds", "run_time",
           "run_time_seeds", "accuracy_table"]
