"""DINOv3's coordinates in the image part (issue 38): the positions of each mode, the training-time
rescaling drawn per step from the seed's generator, and its claims beside Heo et al.'s variants
decided from known results."""

from __future__ import annotations

import pytest
import torch

from posenc.encodings.dinov3 import dinov3_coordinates
from posenc.extrapolate.accuracy import AccuracyTable
from posenc.extrapolate.parts.image import claims as C
from posenc.extrapolate.parts.image import image_runs as R
from posenc.extrapolate.profiles import PROFILES

SMOKE = PROFILES["smoke"].image


def test_coordinates_are_dinov3s_on_the_test_grid_or_keep_the_training_spacing():
    g = SMOKE.grid
    for mode in R.POSITIONS:  # on the training grid the two modes are DINOv3's own coordinates
        assert torch.equal(R.coordinate_positions(g, g, mode), dinov3_coordinates(g, g))
    assert torch.equal(R.coordinate_positions(12, g, "rescaled"), dinov3_coordinates(12, 12))
    wide = R.coordinate_positions(12, g, "integer").view(12, 12, 2)
    assert torch.allclose(wide[1:, 0, 0] - wide[:-1, 0, 0], torch.full((11,), 2 / g, dtype=torch.float64))
    assert torch.equal(wide[:g, :g].reshape(-1, 2), dinov3_coordinates(g, g)) and wide.max() > 1


def test_dinov3_specs_run_at_coordinates_and_draw_a_rescale_per_step(monkeypatch):
    items = R.image_items(SMOKE, ["dinov3", "dinov3:rescale=2"])
    assert [how for _, _, how in items] == ["coords", "coords"]
    seen = {}

    def fake_fit(seeds, cfg, make_model, make_batches, *, stacked=None):
        batch = make_batches(torch.Generator().manual_seed(seeds[0]))
        seen["positions"] = [batch(step)[1] for step in range(3)]
        seen["stacked"] = stacked
        raise StopIteration

    monkeypatch.setattr(R, "fit_seeds", fake_fit)
    base = R.coordinate_positions(SMOKE.grid, SMOKE.grid, "integer")
    for (label, spec, how), drawn in zip(items, (False, True)):
        with pytest.raises(StopIteration):
            R.run_image(SMOKE, spec, how, [0])
        p = seen["positions"]
        assert seen["stacked"] is (False if drawn else None), label
        if not drawn:
            assert all(torch.equal(x, base) for x in p)
            continue
        scale = [float(x[0, 0] / base[0, 0]) for x in p]  # one factor per step, log-uniform in [1/2, 2]
        assert all(0.5 <= f <= 2 for f in scale) and len(set(scale)) == 3
        assert all(torch.allclose(x, base * f) for x, f in zip(p, scale))


def _records(accuracy: dict[tuple[str, str], tuple[float, float]], n: int = 300) -> list[dict]:
    """Three seeds per label: correct on a fraction of images at the training grid and at 16 (zoom)."""
    rng = torch.Generator().manual_seed(0)
    out = {}
    for (label, mode), by_size in accuracy.items():
        for seed in range(3):
            rec = out.setdefault((label, seed), {"label": label, "seed": seed, "eval": []})
            for size, p in zip((8, 16), by_size):
                bits = "".join("1" if u < p else "0" for u in torch.rand(n, generator=rng).tolist())
                rec["eval"].append({"condition": "zoom", "positions": mode, "size": size, "count": n,
                                    "accuracy": bits.count("1") / n, "bits": bits})
    return list(out.values())


def test_dinov3_claims_are_not_measured_without_runs_and_decided_with_them():
    table = lambda acc: AccuracyTable(_records(acc), C.column)  # noqa: E731
    heo = {(C.AXIAL, "integer"): (0.9, 0.6), (C.MIXED, "integer"): (0.9, 0.7)}
    missing = C.dinov3_verdicts(table(heo), 8)
    assert [v.status for v in missing] == ["not measured"] * 4 and all(v.source == C.DINOV3 for v in missing)
    dino = {(C.DINO, "rescaled"): (0.9, 0.5), (C.DINO_AUG, "rescaled"): (0.85, 0.95)}
    good = C.dinov3_verdicts(table({**heo, **dino}), 8)
    assert [v.status for v in good] == ["agrees"] * 4
    bad = C.dinov3_verdicts(table({**heo, (C.DINO, "rescaled"): (0.9, 0.85), (C.DINO_AUG, "rescaled"): (0.9, 0.4)}), 8)
    assert [v.status for v in bad] == ["disagrees"] * 4
    assert "16×16" in good[1].claim and "without" not in good[2].claim and C.AXIAL in good[2].claim
