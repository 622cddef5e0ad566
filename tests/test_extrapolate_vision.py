"""``posenc extrapolate --part image|time`` on the smoke profile, their report sections, bad input,
and the paired statistics of the verdicts against a closed form."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from posenc.cli import main
from posenc.extrapolate import accuracy
from posenc.extrapolate.parts import image
from posenc.extrapolate.parts import time as time_part
from posenc.extrapolate.page import Page
from posenc.extrapolate.profiles import PROFILES
from posenc.extrapolate.results import load

SMOKE = PROFILES["smoke"]
ARGS = ["--profile", "smoke", "--threads", "1", "--no-progress", "--jobs", "1"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("vision") / "results.jsonl"
    assert main(["extrapolate", *ARGS, "--part", "image", "--part", "time", "--out", str(path)]) == 0
    return list(load(path).values())


def test_image_and_time_records(records):
    image = [r for r in records if r["part"] == "image"]
    time = [r for r in records if r["part"] == "time"]
    assert [r["label"] for r in image] == list(SMOKE.image.variants)
    assert [r["label"] for r in time] == list(SMOKE.time.schemes)
    for r in image:
        assert r["spec"]["scheme"] and [row["size"] for row in r["eval"]] == list(SMOKE.image.test_grids)
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
    rec, two = load(path).values()
    assert rec["part"] == "image" and rec["label"] == "t5" and rec["spec"]["scheme"] == "t5"
    assert "one-axis" in rec["cannot_run"] and "(row, col)" in rec["cannot_run"] and rec["eval"] == []
    # a two-axis spec that is no LM scheme runs in the image part alone (it is not resolved for lm or tasks)
    assert two["label"] == "sinusoidal (axes=2)" and two["spec"]["axes"] == 2 and len(two["eval"]) == 2


def test_unknown_part_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["extrapolate", "--profile", "smoke", "--part", "video"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'video'" in err and "image" in err and err.count("\n") == 1, err


def test_report_sections_from_smoke_records(records):
    page = Page()
    verdicts = image.image_section(page, [r for r in records if r["part"] == "image"])
    verdicts += time_part.time_section(page, [r for r in records if r["part"] == "time"])
    text = "".join(page.parts)
    assert "Images: train small, test large (resolution)" in text and "Time: frame indices or seconds" in text
    assert set(page.figures) == {"image_accuracy.png", "time_accuracy.png"} and not page.errors
    for label in (*SMOKE.image.variants, "sinusoidal, time", "rope, index"):
        assert f"<td>{label}</td>" in text, label
    assert {v.source for v in verdicts} == {image.HEO, time_part.CONTINUOUS}
    assert all(v.status in ("agrees", "disagrees", "no clear difference", "not measured") for v in verdicts)
    empty = Page()
    assert image.image_section(empty, []) == [] and "Not run in this profile" in "".join(empty.parts)


def test_paired_difference_matches_its_closed_form():
    """One seed: mean and SE of the per-example difference; several: the seed spread is added."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, (3, 50)), rng.integers(0, 2, (3, 50))
    bits = [["".join(map(str, row)) for row in x] for x in (a, b)]
    d = accuracy.paired(bits[0][:1], bits[1][:1])
    diff = (a[0] - b[0]).astype(float)
    assert math.isclose(d.mean, diff.mean()) and math.isclose(d.se, diff.std(ddof=1) / math.sqrt(50))
    d3 = accuracy.paired(*bits)
    per = (a - b).mean(axis=0)
    seeds = (a - b).mean(axis=1)
    se = math.sqrt(per.var(ddof=1) / 50 + seeds.var(ddof=1) / 3)
    assert math.isclose(d3.mean, per.mean()) and math.isclose(d3.se, se) and d3.seeds == 3
    assert accuracy.paired(bits[0][:1], bits[1][:2]) is None and accuracy.paired(["01"], ["011"]) is None


def test_verdicts_call_a_difference_only_beyond_two_standard_errors():
    def rec(label: str, accs: dict[int, str]) -> dict:
        return {"label": label, "seed": 0, "part": "image", "train_size": 8,
                "eval": [{"size": s, "accuracy": bits.count("1") / len(bits), "count": len(bits),
                          "correct": bits.count("1"), "bits": bits} for s, bits in accs.items()]}

    good, bad = "1" * 90 + "0" * 10, "1" * 20 + "0" * 80
    recs = [rec(image.MIXED, {8: good, 16: good}), rec(image.AXIAL, {8: good, 16: bad}),
            rec(image.LEARNED, {8: good, 16: good})]
    t = accuracy.AccuracyTable(recs, lambda row: row["size"])
    got = {v.claim: v.status for v in image.image_verdicts(t, 8)}
    status = {(k.split(", ")[-1] if "beats" in k else k.split(" holds")[0]): v for k, v in got.items()}
    assert status["RoPE-Mixed beats learned grid (resized)"] == "no clear difference"  # identical answers
    assert status["axial RoPE beats learned grid (resized)"] == "disagrees"  # 0.2 vs 0.9 on the same images
    assert status["RoPE-Mixed beats axial RoPE"] == "agrees"
    assert status["RoPE-Mixed"] == "agrees" and status["axial RoPE"] == "disagrees"
    json.dumps([v.__dict__ for v in image.image_verdicts(t, 8)])  # plain data, as the summary table needs
