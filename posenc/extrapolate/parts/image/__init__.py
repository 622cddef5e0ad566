"""The image part (``--part image``; Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer", arXiv:2403.13298): train small, test large, under the paper's protocol and beside it.

A small vision transformer — the benchmark's own transformer blocks, bidirectional, mean pooling
(``posenc.extrapolate.vision``) — reads scikit-learn's handwritten digits (8×8 pixels, shipped
inside scikit-learn: nothing is downloaded), one token per pixel, on the training grid. The
positional variants: ``none`` (a bag of pixels); ``learned grid (resized)`` (a ViT table, resized
at test time as ViT's ``interpolate_pos_encoding``); ``2D sinusoidal`` (factorized sin-cos, MAE);
``axial RoPE`` (FLUX/EVA) and ``RoPE-Mixed`` (Heo et al.'s learned 2D frequency directions).

``runs``: training with and without scale augmentation (``augment``), the test conditions
``zoom`` and ``canvas`` (``condition``) and the position modes ``integer`` and ``rescaled``
(``positions``), every one a field of the records. ``claims``: Heo et al.'s claims under the
protocol closest to theirs (the verdicts), every other condition in one table, the section.
"""

from __future__ import annotations

from typing import Any

from posenc.stats.page_parts import Page
from posenc.extrapolate.part import Log, Part, Section
from posenc.extrapolate.parts.image.claims import (AXIAL, DINOV3, DINOV3_SETTING, HEO, LEARNED, MIXED, conditions,
                                                   dinov3_verdicts, image_section, image_verdicts, normalized, tables)
from posenc.extrapolate.parts.image.image_runs import (AUGMENTS, CONDITIONS, IMAGE_VARIANTS, POSITIONS, canvas,
                                                 coordinate_positions, digits, image_items, image_positions,
                                                 image_spec, resample, run_image, scale_augment)
from posenc.extrapolate.plan import Run
from posenc.extrapolate.profiles import Profile, settings_hash
from posenc.extrapolate.runs import Context


class Image(Part):
    name = "image"

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        self.note_own_model(profile, log)
        s = profile.image
        items = image_items(s, schemes if custom else None)  # the profile's, or the user's made two-axis
        settings = settings_hash({"image": s})

        def trained(aug: str, label: str) -> bool:
            return aug == "none" or custom or s.augmented_variants is None or label in s.augmented_variants

        return [Run(self.name, seed, lab, sp, settings, {"positions": how, "augment": aug}, profile.name)
                for seed in profile.seeds_for(self.name) for aug in s.augments for lab, sp, how in items if trained(aug, lab)]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_image(ctx.profile.image, runs[0].spec, runs[0].variant["positions"], [r.seed for r in runs],
                         runs[0].variant.get("augment", "none"))

    def summary(self, record: dict[str, Any]) -> str:
        rows = record.get("eval", [])
        first, last = rows[0], rows[-1]
        return (f"{record.get('augment', 'none')} training: accuracy {first['accuracy']:.2f} at size "
                f"{first['size']:g} -> {last['accuracy']:.2f} at size {last['size']:g} "
                f"({last.get('condition', 'zoom')})")

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts = image_section(page, records)
        cited = any(v.source == DINOV3 for v in verdicts)
        return Section(verdicts, sources={DINOV3: DINOV3_SETTING} if cited else {})


PART = Image()

__all__ = ["PART", "Image", "AUGMENTS", "CONDITIONS", "POSITIONS", "IMAGE_VARIANTS", "HEO", "LEARNED", "AXIAL",
           "MIXED", "DINOV3", "image_spec", "image_items", "digits", "resample", "canvas", "scale_augment",
           "image_positions", "coordinate_positions", "run_image", "normalized", "tables", "image_verdicts",
           "dinov3_verdicts", "conditions", "image_section"]
