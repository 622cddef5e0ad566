"""The image part (``--part image``; Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer", arXiv:2403.13298): train small, test large.

A small vision transformer — the benchmark's own transformer blocks, bidirectional, mean pooling
(``posenc.extrapolate.vision``) — reads scikit-learn's handwritten digits (8×8 pixels, shipped
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

Accuracy has a binomial standard error over examples and, with several seeds, a standard error
over seeds (``posenc.extrapolate.accuracy``).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
import torch.nn.functional as F

import posenc
from posenc import registry
from posenc.extrapolate.accuracy import ACCURACY_MARGIN, AccuracyTable, accuracy_cell, paired_claim
from posenc.extrapolate.findings import Verdict, tested
from posenc.extrapolate.model import layer_pattern
from posenc.extrapolate.page import Page, e, status
from posenc.extrapolate.page import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run
from posenc.extrapolate.profiles import ImageSettings, Profile, settings_hash
from posenc.extrapolate.runs import Context
from posenc.spec import fill_sizes
from posenc.extrapolate.vision import SetTransformer, accuracy_row, fit_classifiers, pattern_cannot, right_or_wrong

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
        if layer_pattern(text) is not None:
            out.append(pattern_cannot(text, "image"))
            continue
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


# -- the runs ------------------------------------------------------------------------------------

def run_image(settings: ImageSettings, spec: dict[str, Any], mode: str, seeds: list[int]) -> list[dict[str, Any]]:
    """The bodies of one variant's ``seeds``, trained as one stacked model."""
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
    curves = fit_classifiers(models, s.train, batches)
    seconds = (time.perf_counter() - t0) / len(seeds)  # each seed's share
    out = []
    for model, losses in zip(models, curves):
        rows = []
        for size in s.test_grids:
            x = resample(test_x, size).flatten(1)[..., None]  # (N, size², 1)
            pe = model.pe.resized([size, size]) if mode == "resize" and size != s.grid else None
            rows.append(accuracy_row(right_or_wrong(model, x, test_y, image_positions(size, s.grid, mode), pe),
                                     size=size, tokens=size * size))
        out.append({"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                    "train_seconds": round(seconds, 2), "params": model.num_params(), "train_size": s.grid,
                    "positions": mode, "eval": rows})
    return out


# -- claims and section ----------------------------------------------------------------------

HEO = "Heo et al. 2024 (RoPE for ViT)"


HEO_SETTING = ("ImageNet-1k, ViT-S/B/L and Swin trained at 224 px (14×14 patches), evaluated at 64–512 px; "
               "learned absolute positions interpolated (bicubic) at other sizes")


CHANCE_IMAGE = 0.1  # ten digits


LEARNED, SIN, SIN_RESCALED, AXIAL, MIXED = ("learned grid (resized)", "2D sinusoidal", "2D sinusoidal (rescaled)",
                                            "axial RoPE", "RoPE-Mixed")  # IMAGE_VARIANTS


def _probe(sizes: list[int], train: int) -> int | None:
    """The test grid the claims are checked at: the one nearest 2× the training grid (Heo et al.
    went from 224 to 448 px at most in their main tables), among the grids larger than training."""
    larger = [s for s in sizes if s > train]
    return min(larger, key=lambda s: (abs(s - 2 * train), s)) if larger else None


def image_verdicts(t: AccuracyTable, train: int) -> list[Verdict]:
    at = _probe(t.columns, train)
    if at is None:
        return [Verdict(HEO, "RoPE holds accuracy at larger grids", "not measured (no grid larger than training)",
                        "not measured")]
    out = []
    for better, worse in ((MIXED, LEARNED), (AXIAL, LEARNED), (MIXED, AXIAL)):
        claim = f"at higher resolution ({at}×{at} tokens, trained at {train}×{train}), {better} beats {worse}"
        out.append(paired_claim(HEO, claim, t.diff((better, at), (worse, at)), f"{better} − {worse} at {at}"))
    for label in (MIXED, AXIAL):
        claim = (f"{label} holds its accuracy from {train}×{train} to {at}×{at} (non-inferiority: drops by less "
                 f"than {ACCURACY_MARGIN} accuracy)")
        d, base = t.diff((label, at), (label, train)), t.get(label, train)
        if d is None or base is None:
            out.append(Verdict(HEO, claim, f"not measured ({label} missing)", "not measured"))
            continue
        if base.accuracy - CHANCE_IMAGE <= 2 * base.se:  # nothing learned: nothing to hold
            out.append(Verdict(HEO, claim, f"not measured ({label} is at chance on the training grid: "
                                           f"{base.accuracy:.3f} ± {base.se:.3f})", "not measured"))
            continue
        measured = (f"{label} at {at} − at {train}: Δaccuracy {d.mean:+.3f} ± {d.se:.3f} "
                    f"(paired over {d.n} images, {d.seeds} seed(s))")
        out.append(tested(HEO, claim, measured + f"; margin {ACCURACY_MARGIN}", d, expect_negative=False,
                          null=-ACCURACY_MARGIN))
    return out


def image_figure(t: AccuracyTable, train: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.8), layout="constrained")
    ax = fig.subplots()
    for i, label in enumerate(t.labels):
        pts = [(s, t.get(label, s)) for s in t.columns]
        pts = [(s, c) for s, c in pts if c is not None]
        if pts:
            ax.errorbar([s for s, _ in pts], [c.accuracy for _, c in pts], yerr=[1.96 * c.se for _, c in pts],
                        marker="o", ms=3, lw=1.3, capsize=2, label=label, color=f"C{i % 10}")
    ax.axvline(train, color="0.6", ls="--", lw=0.8)
    ax.axhline(CHANCE_IMAGE, color="0.6", ls=":", lw=0.8)
    ax.set_xticks(t.columns)
    ax.set_xlabel("test grid (tokens per side); dashed: training grid, dotted: chance")
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the data
    return fig


def image_section(page: Page, records: list[dict[str, Any]]) -> list[Verdict]:
    """The "Images: train small, test large (resolution)" section; its verdicts."""
    page.add("<h2 id=images>Images: train small, test large (resolution)</h2>")
    if not records:
        page.add("<p>Not run in this profile (<code>posenc extrapolate --part image</code>).</p>")
        return []
    t = AccuracyTable(records, lambda row: row["size"])
    t.columns.sort()
    train = next((r["train_size"] for r in records if "train_size" in r), min(t.columns, default=0))
    n = next((row["count"] for r in records for row in r.get("eval", [])), 0)
    page.add(f"<p>A small bidirectional transformer (the benchmark's blocks, mean pooling) classifies scikit-learn's "
             f"handwritten digits, one token per pixel, trained on the {train}×{train} grid; the same {n} held-out "
             "images are resampled (bilinear) to larger grids and classified again. The learned grid is resized "
             "(bicubic, <code>posenc.interop.resize_grid</code>) to each test grid; “2D sinusoidal” and the RoPEs "
             "get integer positions past the training range; “2D sinusoidal (rescaled)” is the same trained model "
             f"with positions rescaled into 0…{train - 1} (real-valued). Cells: accuracy ± standard error (binomial "
             f"over images{', plus the seed spread' if len({r['seed'] for r in records}) > 1 else ''}); "
             f"chance is {CHANCE_IMAGE:.1f}. {e(HEO)}: {e(HEO_SETTING)}.</p>")
    page.figure("image_accuracy", lambda: image_figure(t, train),
                "Digit accuracy against the test grid (the same images, resampled); dashed: the training grid.")
    rows = [[e(lab)] + [accuracy_cell(t.get(lab, s), t.cannot.get(lab)) for s in t.columns] for lab in t.labels]
    page.add(html_table(["variant"] + [f"{s}×{s}" + (" (train)" if s == train else "") for s in t.columns], rows))
    verdicts = image_verdicts(t, train)
    page.add("<p>Heo et al.'s claims, checked on the same images (paired, image by image):</p>"
             + html_table(["the paper found", "measured here", "verdict"],
                          [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    bad = [v for v in verdicts if v.status == "disagrees"]
    if bad:
        page.add("<p><b>Where this run disagrees with Heo et al.:</b> "
                 + "; ".join(e(v.claim) for v in bad) + ".</p>")
    return verdicts


class Image(Part):
    name = "image"

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        if profile.arch != "transformer":
            log(f"note: --arch {profile.arch} applies to lm, scaling and tasks; the image part uses its own "
                "bidirectional transformer")
        items = image_items(profile.image, schemes if custom else None)  # the profile's, or the user's made two-axis
        settings = settings_hash({"image": profile.image})
        return [Run(self.name, seed, lab, sp, settings, {"positions": mode}, profile.name)
                for seed in profile.seeds_for(self.name) for lab, sp, mode in items]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_image(ctx.profile.image, runs[0].spec, runs[0].variant["positions"], [r.seed for r in runs])

    def summary(self, record: dict[str, Any]) -> str:
        rows = record.get("eval", [])
        first, last = rows[0], rows[-1]
        return (f"accuracy {first['accuracy']:.2f} at size {first['size']:g} -> "
                f"{last['accuracy']:.2f} at size {last['size']:g}")

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        return Section(image_section(page, records))


PART = Image()
