"""The image part's claims and section: Heo et al. 2024 re-checked under every condition.

Heo et al. (arXiv:2403.13298) train ViTs with RandomResizedCrop at 224 px and test at higher
resolution with the same patch size: RoPE-Mixed and axial RoPE at integer positions beat the
learned table interpolated to the new grid, and hold their accuracy. The protocol closest to
theirs here is scale-augmented training (``augment`` "scale"), the ``zoom`` condition, the RoPEs at
``integer`` positions and the learned table resized; its verdicts join the report's Holm family.
Every other combination (no augmentation, the ``canvas`` condition, the RoPEs at ``rescaled``
positions) is in one table of paired differences, each called at two standard errors (not in
the family), and the section says in words where the paper's result holds and where it does not.

Records written before this protocol (no ``augment``, no ``condition`` and no per-row
``positions``) read as ``augment`` "none", ``condition`` "zoom" and the positions their variant
had (``normalized``): their verdicts are those they had.
"""

from __future__ import annotations

from typing import Any

from posenc.extrapolate.accuracy import (ACCURACY_MARGIN, AccuracyTable, Diff, accuracy_cell, finish_axes,
                                          paired_claim)
from posenc.stats.findings import Verdict, tested
from posenc.stats.page_parts import Page, e, status
from posenc.stats.page_parts import table as html_table

HEO = "Heo et al. 2024 (RoPE for ViT)"
HEO_SETTING = ("ImageNet-1k, ViT-S/B/L and Swin trained at 224 px (14×14 patches) with RandomResizedCrop, evaluated "
               "at 64–512 px; learned absolute positions interpolated (bicubic) at other sizes")
CHANCE_IMAGE = 0.1  # ten digits
LEARNED, SIN, SIN_RESCALED, AXIAL, MIXED = ("learned grid (resized)", "2D sinusoidal", "2D sinusoidal (rescaled)",
                                            "axial RoPE", "RoPE-Mixed")  # runs.IMAGE_VARIANTS
OLD_POSITIONS = {"grid": "integer", "resize": "rescaled", "rescaled": "rescaled"}  # a record's mode before the image protocol
TRAINING = {"none": "trained on the digits as they are", "scale": "trained with scale augmentation"}
CONDITION = {"zoom": "zoom (the image resampled to the grid)",
             "canvas": "canvas (the digit at its trained size on a larger blank grid)"}
COMPARISONS = ((MIXED, LEARNED), (AXIAL, LEARNED), (MIXED, AXIAL))
DINOV3 = "Siméoni et al. 2025 (DINOv3)"
DINOV3_SETTING = ("ViT-7B distilled to ViT-S…H+, patch 16, RoPE on patch centres normalised to [−1, 1] (base 100) "
                  "with the coordinates augmented at training time (the released config: rescaled by a log-uniform "
                  "factor in [1/2, 2]); trained at 256 px then adapted to 512–768 px, evaluated at up to 4096 px")
DINO, DINO_AUG = "DINOv3 RoPE", "DINOv3 RoPE (rescale 2)"  # runs.IMAGE_VARIANTS


def normalized(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with the fields older ones lack: ``augment`` "none"; per row ``condition``
    "zoom" and ``positions`` from the record's mode."""
    out = []
    for rec in records:
        mode = OLD_POSITIONS.get(rec.get("positions"), "integer")
        rows = [{"condition": "zoom", "positions": mode, **row} for row in rec.get("eval", [])]
        out.append({**rec, "augment": rec.get("augment", "none"), "eval": rows})
    return out


def column(row: dict[str, Any]) -> tuple[str, str, int]:
    return row["condition"], row["positions"], row["size"]


def _modes(t: AccuracyTable, condition: str | None = None) -> list[str]:
    """The position modes in ``t``'s columns (of ``condition``), integer first."""
    found = {p for c, p, _ in t.columns if condition is None or c == condition}
    return sorted(found, key=lambda p: (p != "integer", p))


def tables(records: list[dict[str, Any]]) -> dict[str, AccuracyTable]:
    """One accuracy table per training (``augment``), columns ``(condition, positions, size)``."""
    out = {}
    for aug in dict.fromkeys(r["augment"] for r in records):
        out[aug] = AccuracyTable([r for r in records if r["augment"] == aug], column)
    return out


def _probe(sizes: list[int], train: int) -> int | None:
    """The test grid the claims are checked at: the one nearest 2× the training grid (Heo et al.
    went from 224 to 448 px at most in their main tables), among the grids larger than training."""
    larger = [s for s in sizes if s > train]
    return min(larger, key=lambda s: (abs(s - 2 * train), s)) if larger else None


def _at(label: str, condition: str, rope_positions: str, size: int) -> tuple[str, tuple[str, str, int]]:
    """The cell of ``label``: the learned table always resized (``rescaled``), the others at ``rope_positions``."""
    return label, (condition, "rescaled" if label == LEARNED else rope_positions, size)


def protocol(t: dict[str, AccuracyTable]) -> str:
    """The training closest to Heo et al.'s among those run: scale augmentation when it was run."""
    return "scale" if "scale" in t else next(iter(t), "none")


def image_verdicts(t: AccuracyTable, train: int, *, augment: str = "none") -> list[Verdict]:
    """Heo et al.'s claims on ``t`` (one training) under the zoom condition, RoPEs at integer positions."""
    at = _probe(sorted({s for c, _, s in t.columns if c == "zoom"}), train)
    if at is None:
        return [Verdict(HEO, "RoPE holds accuracy at larger grids", "not measured (no grid larger than training)",
                        "not measured")]
    how = ("" if augment == "none" else
           " (scale-augmented training, zoomed test images, RoPE at integer positions, the learned table resized)")
    out = []
    for better, worse in COMPARISONS:
        claim = f"at higher resolution ({at}×{at} tokens, trained at {train}×{train}), {better} beats {worse}{how}"
        d = t.diff(_at(better, "zoom", "integer", at), _at(worse, "zoom", "integer", at))
        out.append(paired_claim(HEO, claim, d, f"{better} − {worse} at {at}"))
    for label in (MIXED, AXIAL):
        out.append(_holds(HEO, t, label, "integer", train, at, how))
    return out


def _holds(source: str, t: AccuracyTable, label: str, mode: str, train: int, at: int, how: str) -> Verdict:
    """``label`` (at ``mode`` positions, zoom) holds its accuracy from ``train`` to ``at``: non-inferiority."""
    claim = (f"{label} holds its accuracy from {train}×{train} to {at}×{at} (non-inferiority: drops by less "
             f"than {ACCURACY_MARGIN} accuracy){how}")
    d = t.diff(_at(label, "zoom", mode, at), _at(label, "zoom", mode, train))
    base = t.get(*_at(label, "zoom", mode, train))
    if d is None or base is None:
        return Verdict(source, claim, f"not measured ({label} missing)", "not measured")
    if base.accuracy - CHANCE_IMAGE <= 2 * base.se:  # nothing learned: nothing to hold
        return Verdict(source, claim, f"not measured ({label} is at chance on the training grid: "
                                      f"{base.accuracy:.3f} ± {base.se:.3f})", "not measured")
    measured = (f"{label} at {at} − at {train}: Δaccuracy {d.mean:+.3f} ± {d.se:.3f} "
                f"(paired over {d.n} images, {d.seeds} seed(s))")
    return tested(source, claim, measured + f"; margin {ACCURACY_MARGIN}", d, expect_negative=False,
                  null=-ACCURACY_MARGIN)


def dinov3_verdicts(t: AccuracyTable, train: int, *, augment: str = "none") -> list[Verdict]:
    """DINOv3's coordinates beside Heo et al.'s variants, under the same protocol (``t``: one training;
    zoom; the grid nearest 2× training): with its coordinate augmentation, at its own coordinates
    (normalised to the test grid, ``rescaled``), DINOv3's RoPE holds its accuracy, beats itself without
    the augmentation, and beats axial RoPE and RoPE-Mixed at integer positions (Heo et al.'s protocol)."""
    at = _probe(sorted({s for c, _, s in t.columns if c == "zoom"}), train)
    if at is None:
        return [Verdict(DINOV3, "DINOv3's RoPE holds accuracy at larger grids",
                        "not measured (no grid larger than training)", "not measured")]
    how = "" if augment == "none" else " (scale-augmented training, zoomed test images)"
    own = f"{DINO_AUG} at its own coordinates (normalised to the grid)"
    out = [_holds(DINOV3, t, DINO_AUG, "rescaled", train, at, how)]
    for worse, mode, what in ((DINO, "rescaled", f"{DINO} (no coordinate augmentation)"),
                              (AXIAL, "integer", f"{AXIAL} at integer positions"),
                              (MIXED, "integer", f"{MIXED} at integer positions")):
        claim = f"at higher resolution ({at}×{at} tokens, trained at {train}×{train}), {own} beats {what}{how}"
        d = t.diff((DINO_AUG, ("zoom", "rescaled", at)), (worse, ("zoom", mode, at)))
        out.append(paired_claim(DINOV3, claim, d, f"{DINO_AUG} − {worse} at {at}"))
    return out


def _call(d: Diff | None) -> str:
    """A paired difference called at two standard errors (no correction: the table is descriptive)."""
    if d is None:
        return "—"
    word = "holds" if d.mean > 2 * d.se else "does not hold" if d.mean < -2 * d.se else "unclear"
    return f"{d.mean:+.3f} ± {d.se:.3f} " + status({"holds": "agrees", "does not hold": "disagrees"}.get(word, word))


def conditions(t: dict[str, AccuracyTable], train: int) -> list[tuple[str, str, str, int, list[Diff | None]]]:
    """Every (training, condition, RoPE positions) with its probe grid and the paired differences of
    ``COMPARISONS`` there (better − worse)."""
    out = []
    for aug, table in t.items():
        for cond in sorted({c for c, _, _ in table.columns}, key=lambda c: (c != "zoom", c)):
            at = _probe(sorted({s for c, _, s in table.columns if c == cond}), train)
            if at is None:
                continue
            for mode in _modes(table, cond):
                diffs = [table.diff(_at(a, cond, mode, at), _at(b, cond, mode, at)) for a, b in COMPARISONS]
                if any(d is not None for d in diffs):
                    out.append((aug, cond, mode, at, diffs))
    return out


def _where(rows: list[tuple[str, str, str, int, list[Diff | None]]], index: int) -> dict[str, list[str]]:
    """The conditions where comparison ``index`` holds, does not hold or is unclear, in words."""
    out: dict[str, list[str]] = {"holds": [], "does not hold": [], "unclear": []}
    for aug, cond, mode, at, diffs in rows:
        d = diffs[index]
        if d is None:
            continue
        word = "holds" if d.mean > 2 * d.se else "does not hold" if d.mean < -2 * d.se else "unclear"
        out[word].append(f"{TRAINING.get(aug, aug)}, {cond}, RoPE at {mode} positions ({at}×{at})")
    return out


def image_figure(t: AccuracyTable, train: int):
    """Accuracy against the test grid: solid zoom, dashed canvas (the next marker) in the variant's
    colour (``figures.styles``); each variant at its first mode; bands: 95% intervals."""
    from matplotlib.figure import Figure

    from posenc.extrapolate.figures import line, look, styles, variant

    conds = ("zoom", "canvas")
    keys = [(label, cond) for label in t.labels for cond in conds]
    st = styles(keys, lambda k: None if look(k[0]) is None else variant(look(k[0]), conds.index(k[1])))
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    ax = fig.subplots()
    sizes = sorted({s for _, _, s in t.columns})
    for label, cond in keys:
        modes = [p for _, p, _ in t.columns if t.get(label, ("zoom", p, train)) is not None]
        pts = [(s, t.get(label, (cond if s != train else "zoom", modes[0], s))) for s in sizes] if modes else []
        pts = [(s, c) for s, c in pts if c is not None]
        if pts and (cond == "zoom" or len(pts) > 1):
            line(ax, [s for s, _ in pts], [c.accuracy for _, c in pts], st[(label, cond)],
                 f"{label}, {modes[0]}" + (f", {cond}" if cond != "zoom" else ""), ms=3.5, lw=1.3,
                 lo=[max(c.accuracy - 1.96 * c.se, 0.0) for _, c in pts],
                 hi=[min(c.accuracy + 1.96 * c.se, 1.0) for _, c in pts])
    ax.axvline(train, color="0.6", ls="--", lw=0.8)
    ax.set_xticks(sizes)
    finish_axes(ax, CHANCE_IMAGE, "test grid (tokens per side); dashed grey line: training grid, dotted: chance")
    return fig


def _accuracy_table(t: AccuracyTable, train: int) -> str:
    """Rows (variant, positions), columns (condition, grid)."""
    cols = sorted(dict.fromkeys((c, s) for c, _, s in t.columns), key=lambda cs: (cs[0] != "zoom", cs[0], cs[1]))
    rows = []
    for lab in t.labels:
        for mode in _modes(t):
            cells = [t.get(lab, (c, mode, s)) for c, s in cols]
            if all(c is None for c in cells) and not (lab in t.cannot and mode == "integer"):
                continue
            rows.append([e(f"{lab}, {mode}")] + [accuracy_cell(c, t.cannot.get(lab)) for c in cells])
    head = ["variant, positions"] + [f"{c} {s}×{s}" + (" (train)" if s == train else "") for c, s in cols]
    return html_table(head, rows)


def image_section(page: Page, records: list[dict[str, Any]]) -> list[Verdict]:
    """The "Images: train small, test large (resolution)" section; its verdicts."""
    page.add("<h2 id=images>Images: train small, test large (resolution)</h2>")
    if not records:
        page.add("<p>Not run in this profile (<code>posenc extrapolate --part image</code>).</p>")
        return []
    records = normalized(records)
    t = tables(records)
    train = next((r["train_size"] for r in records if "train_size" in r), 0)
    n = next((row["count"] for r in records for row in r.get("eval", [])), 0)
    aug = protocol(t)
    page.add(f"<p>A small bidirectional transformer (the benchmark's blocks, mean pooling) classifies scikit-learn's "
             f"handwritten digits, one token per pixel, trained on the {train}×{train} grid, on the digits as they "
             "are or with <b>scale augmentation</b> (each training image drawn at a random scale and offset on the "
             "grid, the analogue of RandomResizedCrop). The same "
             f"{n} held-out images are tested under two conditions: <b>zoom</b>, resampled (bilinear) to a larger "
             "grid, so the digit spans more tokens, as in Heo et al.; <b>canvas</b>, the digit at its trained size on "
             "a larger blank grid at a random offset, so only the positions grow. Positions are <b>integer</b> (past "
             f"the training range: extrapolation) or <b>rescaled</b> into 0…{train - 1} (interpolation, as EVA-02 "
             "and timm's <code>ref_feat_shape</code>); the learned grid is always resized (bicubic, "
             "<code>posenc.interop.resize_grid</code>), its form of rescaling. Cells: accuracy ± standard error "
             f"(binomial over images{', plus the seed spread' if len({r['seed'] for r in records}) > 1 else ''}); "
             f"chance is {CHANCE_IMAGE:.1f}. {e(HEO)}: {e(HEO_SETTING)}.</p>")
    page.figure("image_accuracy", lambda: image_figure(t[aug], train),
                f"Digit accuracy against the test grid, {e(TRAINING.get(aug, aug))} (bands: 95% intervals); solid: "
                "zoom, dashed: canvas, in the variant's colour; dashed grey line: the training grid.")
    for a, table in t.items():
        page.add(f"<h3>{e(TRAINING.get(a, a).capitalize())}</h3>" + _accuracy_table(table, train))
    verdicts = image_verdicts(t[aug], train, augment=aug)
    page.add(f"<p>Heo et al.'s claims under the protocol closest to theirs here ({e(TRAINING.get(aug, aug))}, zoom, "
             "RoPE at integer positions, the learned table resized), checked on the same images (paired, image by "
             "image; these verdicts join the summary's Holm family):</p>"
             + html_table(["the paper found", "measured here", "verdict"],
                          [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    page.add(_conditions_section(t, train))
    bad = [v for v in verdicts if v.status == "disagrees"]
    if bad:
        page.add("<p><b>Where this run disagrees with Heo et al.:</b> "
                 + "; ".join(e(v.claim) for v in bad) + ".</p>")
    return verdicts + _dinov3_section(page, t[aug], train, aug)


def _dinov3_section(page: Page, t: AccuracyTable, train: int, aug: str) -> list[Verdict]:
    """DINOv3's coordinates against Heo et al.'s variants (``#image-dinov3``); its verdicts (none without its rows)."""
    page.add('<div id="image-dinov3"><h3>DINOv3\'s coordinates against Heo et al.\'s variants</h3>')
    if not any(lab in t.labels for lab in (DINO, DINO_AUG)):
        page.add("<p>No DINOv3 rows here: <code>posenc report --profile full --part image</code> runs them (the "
                 "smoke and full profiles' variants; two more models do not fit the quick profile's time).</p></div>")
        return []
    verdicts = dinov3_verdicts(t, train, augment=aug)
    page.add("<p>DINOv3's RoPE (base 100) rotates by patch centres normalised to [−1, 1]: at its own coordinates "
             "(<b>rescaled</b> here) a larger grid spans the same range, finer; at <b>integer</b> positions the "
             "training grid's spacing is kept and the coordinates reach past 1. The released model trains with the "
             "coordinates multiplied by a log-uniform factor in [1/2, 2], drawn once per step "
             f"(<code>dinov3:rescale=2</code>). {e(DINOV3)}: {e(DINOV3_SETTING)}.</p>"
             + html_table(["the paper found", "measured here", "verdict"],
                          [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True) + "</div>")
    return verdicts


def _conditions_section(t: dict[str, AccuracyTable], train: int) -> str:
    rows = conditions(t, train)
    if not rows:
        return ""
    body = [[e(TRAINING.get(a, a)), e(c), e(m), f"{at}×{at}"] + [_call(d) for d in diffs]
            for a, c, m, at, diffs in rows]
    text = ('<div id="image-conditions"><h3>Heo et al.\'s comparisons under every condition</h3>'
            "<p>Paired accuracy differences (better − worse, as the paper has it) at the grid nearest twice the "
            "training grid, called at two standard errors without correction (descriptive; only the protocol "
            "above is in the summary's family). The learned table is resized in every row; the RoPEs take the "
            "row's positions.</p>"
            + html_table(["training", "condition", "RoPE positions", "grid"]
                         + [f"{e(a)} − {e(b)}" for a, b in COMPARISONS], body))
    for i, (a, b) in enumerate(COMPARISONS):
        where = _where(rows, i)
        parts = [f"holds ({a} better by more than 2 SE) in: {'; '.join(where['holds'])}" if where["holds"] else
                 "holds in no condition",
                 f"does not hold ({b} better by more than 2 SE) in: {'; '.join(where['does not hold'])}"
                 if where["does not hold"] else "is reversed in no condition"]
        if where["unclear"]:
            parts.append(f"is unclear in: {'; '.join(where['unclear'])}")
        text += f"<p><b>{e(a)} beats {e(b)}</b>: {e(', '.join(parts))}.</p>"
    return text + "</div>"


__all__ = ["HEO", "LEARNED", "AXIAL", "MIXED", "DINOV3", "DINO", "DINO_AUG", "normalized", "tables", "image_verdicts",
           "dinov3_verdicts", "conditions", "image_section"]
