"""``posenc extrapolate --part image|time`` on the smoke profile, their report sections, bad input,
and the paired statistics of the verdicts against a closed form."""

from __future__ import annotations

import dataclasses

import json
import math

import numpy as np
import pytest

from posenc.cli import main
from posenc.extrapolate import accuracy
from posenc.extrapolate.parts import image
from posenc.extrapolate.parts.image import claims as image_claims
from posenc.extrapolate.parts import time as time_part
from posenc.stats.page_parts import Page
from posenc.extrapolate.profiles import PROFILES
from posenc.stats.results import load

SMOKE = PROFILES["smoke"]
ARGS = ["--profile", "smoke", "--threads", "1", "--no-progress", "--jobs", "1"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("vision") / "results.jsonl"
    assert main(["extrapolate", *ARGS, "--part", "image", "--part", "time", "--out", str(path)]) == 0
    return list(load(path).values())


@pytest.mark.xdist_group("vision")  # `records` is built once per worker: one worker
def test_image_and_time_records(records):
    image = [r for r in records if r["part"] == "image"]
    time = [r for r in records if r["part"] == "time"]
    assert [(r["augment"], r["label"]) for r in image] == [(a, v) for a in SMOKE.image.augments
                                                            for v in SMOKE.image.variants]
    assert [r["label"] for r in time] == list(SMOKE.time.schemes)
    for r in image:  # every condition at every grid (canvas only past the training grid), every mode that applies
        modes = {"none": ["integer"], "learned grid (resized)": ["rescaled"]}.get(r["label"],
                                                                                 ["integer", "rescaled"])
        assert r["spec"]["scheme"] and [(row["condition"], row["size"], row["positions"]) for row in r["eval"]] == [
            (c, s, m) for c in SMOKE.image.conditions for s in SMOKE.image.test_grids
            if c == "zoom" or s != SMOKE.image.grid for m in modes]
    for r in image:  # on the training grid the two position modes are the same positions
        rows = {(row["condition"], row["size"], row["positions"]): row["bits"] for row in r["eval"]}
        if ("zoom", 8, "rescaled") in rows and ("zoom", 8, "integer") in rows:
            assert rows[("zoom", 8, "rescaled")] == rows[("zoom", 8, "integer")]
    for r in time:
        conditions = [(row["rate"], row["seconds"]) for row in r["eval"]]
        assert list(dict.fromkeys(conditions)) == list(SMOKE.time.test)
        kinds = {row["positions"] for row in r["eval"]}
        assert kinds == ({"index"} if r["scheme"] == "nope" else {"index", "time"}), r["label"]
    for r in image + time:
        for row in r["eval"]:
            assert 0 <= row["accuracy"] <= 1 and len(row["bits"]) == row["count"]
            assert row["correct"] == row["bits"].count("1") and math.isclose(row["accuracy"],
                                                                             row["correct"] / row["count"], abs_tol=1e-6)
    # at the training rate, time positions are the frame indices: one model, the same answers
    for r in time:
        rows = {(row["rate"], row["seconds"], row["positions"]): row for row in r["eval"]}
        train = (SMOKE.time.train_rate, SMOKE.time.train_seconds)
        if (*train, "time") in rows:
            assert rows[(*train, "time")]["bits"] == rows[(*train, "index")]["bits"]


def test_a_one_axis_scheme_is_recorded_as_cannot_run(tmp_path):
    path = tmp_path / "t5.jsonl"
    assert main(["extrapolate", *ARGS, "--part", "image", "--scheme", "t5", "--scheme", "sinusoidal:axes=2",
                 "--out", str(path)]) == 0
    rec, two = [r for r in load(path).values() if r["augment"] == "none"]
    assert rec["part"] == "image" and rec["label"] == "t5" and rec["spec"]["scheme"] == "t5"
    assert "one-axis" in rec["cannot_run"] and "(row, col)" in rec["cannot_run"] and rec["eval"] == []
    # a two-axis spec that is no LM scheme runs in the image part alone (it is not resolved for lm or tasks)
    assert two["label"] == "sinusoidal (axes=2)" and two["spec"]["axes"] == 2
    assert len(two["eval"]) == 6  # zoom at 8 and 12, canvas at 12; each at integer and rescaled positions


def test_unknown_part_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["extrapolate", "--profile", "smoke", "--part", "video"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'video'" in err and "image" in err and err.count("\n") == 1, err


@pytest.mark.xdist_group("vision")  # `records` is built once per worker: one worker
def test_report_sections_from_smoke_records(records):
    page = Page()
    verdicts = image.image_section(page, [r for r in records if r["part"] == "image"])
    verdicts += time_part.time_section(page, [r for r in records if r["part"] == "time"])
    text = "".join(page.parts)
    assert "Images: train small, test large (resolution)" in text and "Time: frame indices or seconds" in text
    assert set(page.figures) == {"image_accuracy.png", "time_accuracy.png"} and not page.errors
    for label in ("none, integer", "learned grid (resized), rescaled", "RoPE-Mixed, integer", "RoPE-Mixed, rescaled",
                  "sinusoidal, time", "rope, index"):
        assert f"<td>{label}</td>" in text, label
    # issue 38's rows on the smoke profile: DINOv3's coordinates beside Heo et al.'s variants, VideoRoPE against
    # M-RoPE under the time part's video protocol
    assert {v.source for v in verdicts} == {image.HEO, time_part.CONTINUOUS, image.DINOV3, time_part.VIDEOROPE}
    assert 'id="time-video"' in text and "<td>videorope, time</td>" in text
    assert 'id="image-dinov3"' in text and "<td>DINOv3 RoPE (rescale 2), rescaled</td>" in text
    assert all(v.status in ("agrees", "disagrees", "no clear difference", "needs seeds", "not measured")
               for v in verdicts)
    empty = Page()
    assert image.image_section(empty, []) == [] and "Not run in this profile" in "".join(empty.parts)


def test_paired_difference_matches_its_closed_form():
    """One seed: mean and SE of the per-example difference; several: the seed spread is added."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, (3, 50)), rng.integers(0, 2, (3, 50))
    bits = [["".join(map(str, row)) for row in x] for x in (a, b)]
    d = accuracy.paired_examples(bits[0][:1], bits[1][:1])
    diff = (a[0] - b[0]).astype(float)
    assert math.isclose(d.mean, diff.mean()) and math.isclose(d.se, diff.std(ddof=1) / math.sqrt(50))
    d3 = accuracy.paired_examples(*bits)
    per = (a - b).mean(axis=0)
    seeds = (a - b).mean(axis=1)
    se = math.sqrt(per.var(ddof=1) / 50 + seeds.var(ddof=1) / 3)
    assert math.isclose(d3.mean, per.mean()) and math.isclose(d3.se, se) and d3.seeds == 3
    assert accuracy.paired_examples(bits[0][:1], bits[1][:2]) is None and accuracy.paired_examples(["01"], ["011"]) is None


def _flip(bits: str, seed: int) -> str:
    """Seed ``seed``'s answers: the same but one example (the ``seed``-th from the end) flipped."""
    if seed == 0:
        return bits
    i = len(bits) - seed
    return bits[:i] + ("0" if bits[i] == "1" else "1") + bits[i + 1:]


def test_verdicts_call_a_difference_on_three_seeds():
    def rec(label: str, accs: dict[int, str], seed: int = 0) -> dict:  # as written before the image protocol
        accs = {s: _flip(bits, seed) for s, bits in accs.items()}
        return {"label": label, "seed": seed, "part": "image", "train_size": 8,
                "positions": "resize" if label == image.LEARNED else "grid",
                "eval": [{"size": s, "accuracy": bits.count("1") / len(bits), "count": len(bits),
                          "correct": bits.count("1"), "bits": bits} for s, bits in accs.items()]}

    good, bad = "1" * 90 + "0" * 10, "1" * 20 + "0" * 80
    recs = [r for seed in (0, 1, 2) for r in (rec(image.MIXED, {8: good, 16: good}, seed),
                                               rec(image.AXIAL, {8: good, 16: bad}, seed),
                                               rec(image.LEARNED, {8: good, 16: good}, seed))]
    t = image.tables(image.normalized(recs))["none"]
    got = {v.claim: v.status for v in image.image_verdicts(t, 8)}
    status = {(k.split(", ")[-1] if "beats" in k else k.split(" holds")[0]): v for k, v in got.items()}
    assert status["RoPE-Mixed beats learned grid (resized)"] == "no clear difference"  # identical answers
    assert status["axial RoPE beats learned grid (resized)"] == "disagrees"  # 0.2 vs 0.9 on the same images
    assert status["RoPE-Mixed beats axial RoPE"] == "agrees"
    assert status["RoPE-Mixed"] == "agrees" and status["axial RoPE"] == "disagrees"
    json.dumps([dataclasses.asdict(v) for v in image.image_verdicts(t, 8)])  # plain data, as the summary table needs
    one = image.tables(image.normalized(recs[:3]))["none"]  # seed 0 alone: nothing decided
    assert {v.status for v in image.image_verdicts(one, 8)} == {"needs seeds"}


def _image_record(label: str, augment: str, rows: dict[tuple[str, str, int], str], seed: int = 0) -> dict:
    rows = {key: _flip(bits, seed) for key, bits in rows.items()}
    return {"label": label, "seed": seed, "part": "image", "train_size": 8, "augment": augment,
            "eval": [{"condition": c, "positions": p, "size": s, "accuracy": bits.count("1") / len(bits),
                      "count": len(bits), "correct": bits.count("1"), "bits": bits} for (c, p, s), bits in rows.items()]}


def test_heo_claims_use_the_augmented_zoom_integer_protocol_and_every_condition_is_tabled():
    good, bad = "1" * 90 + "0" * 10, "1" * 20 + "0" * 80
    recs = []
    for aug in ("none", "scale"):
        # RoPE-Mixed beats the resized table only with augmentation, zoomed, at integer positions
        mixed = {("zoom", "integer", 8): good, ("zoom", "integer", 16): good if aug == "scale" else bad,
                 ("zoom", "rescaled", 16): bad, ("canvas", "integer", 16): bad, ("canvas", "rescaled", 16): bad}
        learned = {("zoom", "rescaled", 8): good, ("zoom", "rescaled", 16): bad[::-1], ("canvas", "rescaled", 16): good}
        recs += [r for seed in (0, 1, 2) for r in (_image_record(image.MIXED, aug, mixed, seed),
                                                    _image_record(image.AXIAL, aug, mixed, seed),
                                                    _image_record(image.LEARNED, aug, learned, seed))]
    t = image.tables(recs)
    assert image_claims.protocol(t) == "scale"
    got = {v.claim: v.status for v in image.image_verdicts(t["scale"], 8, augment="scale")}
    assert all("scale-augmented" in claim for claim in got)
    mixed_beats = next(s for c, s in got.items() if "RoPE-Mixed beats learned" in c)
    assert mixed_beats == "agrees"  # 0.9 vs 0.2: the augmented zoom integer cells, not the others
    rows = {(a, c, m): diffs for a, c, m, at, diffs in image.conditions(t, 8)}
    assert set(rows) == {(a, c, m) for a in ("none", "scale") for c in ("zoom", "canvas")
                         for m in ("integer", "rescaled")}
    assert rows[("scale", "zoom", "integer")][0].mean > 0.5 and abs(rows[("none", "zoom", "integer")][0].mean) < 0.02
    assert rows[("scale", "canvas", "integer")][0].mean < -0.5  # the learned table better on the canvas
    page = Page()
    image.image_section(page, recs)
    html = "".join(page.parts)
    assert 'id="image-conditions"' in html and "does not hold" in html and "canvas" in html


def test_scale_augmentation_and_canvas_place_the_digit_where_they_say():
    import torch

    digit = torch.zeros(1, 8, 8)
    digit[0, 2:6, 2:6] = 1.0  # a 4×4 square in the middle
    on_canvas = image.canvas(digit.expand(5, 8, 8), 16)  # (5, 16, 16)
    assert on_canvas.shape == (5, 16, 16) and torch.all(on_canvas.sum((1, 2)) == 16)  # the same pixels, moved
    assert len({tuple(torch.nonzero(x)[0].tolist()) for x in on_canvas}) > 1  # at different offsets
    assert torch.equal(image.canvas(digit.expand(5, 8, 8), 16), on_canvas)  # fixed per (image, grid)
    g = torch.Generator().manual_seed(0)
    out = image.scale_augment(digit.expand(400, 8, 8).contiguous(), (0.5, 2.0), g)
    mass = out.sum((1, 2))  # the square's area scales as s²: 16·s² within the grid
    assert out.shape == (400, 8, 8) and mass.min() < 8 and mass.max() > 30
    same = image.scale_augment(digit, (1.0, 1.0), torch.Generator().manual_seed(0))
    assert torch.allclose(same, digit, atol=1e-6)  # scale 1: no room to move, the image itself
