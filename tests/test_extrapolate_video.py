"""The time part's video protocol (issue 38): M-RoPE and VideoRoPE read clips as frames of patches,
each at its own positions, and VideoRoPE's claim against M-RoPE is decided from known results."""

from __future__ import annotations

import torch

from posenc.extrapolate.accuracy import AccuracyTable
from posenc.extrapolate.parts import plan
from posenc.extrapolate.parts import time as T
from posenc.extrapolate.profiles import PROFILES, VIDEO, VIDEO_SCHEMES, settings_hash, with_overrides

QUIET = {"corpus_sha": "0", "log": lambda msg: None}
SMOKE = PROFILES["smoke"].time


def test_a_video_flashes_each_frame_on_every_patch_with_the_clip_labels():
    x, y, times = T.time_batch(6, rate=10.0, seconds=2.0, s=SMOKE, g=torch.Generator().manual_seed(3))
    v, vy, vt = T.video_batch(6, rate=10.0, seconds=2.0, s=SMOKE, v=VIDEO, g=torch.Generator().manual_seed(3))
    patches = VIDEO.grid[0] * VIDEO.grid[1]
    assert v.shape == (6, len(times) * patches, SMOKE.frame_dim) and torch.equal(vy, y) and torch.equal(vt, times)
    noise = v.view(6, len(times), patches, SMOKE.frame_dim) - x[:, :, None]  # (n, T, P, F): the patches' own noise
    # only noise of sd 0.5 is left: the frame's vector and its events' markers (3.0) are on every patch
    assert 0.45 < float(noise.std()) < 0.55 and float(noise.abs().max()) < 2.5
    assert not torch.equal(noise[:, :, 0], noise[:, :, 1])  # each patch's noise is its own


def test_video_positions_are_each_schemes_layout_and_time_scales_the_frame_step():
    spacing = VIDEO.temporal_spacing
    m = T.video_positions("mrope", 3, VIDEO)  # Qwen2-VL: (i, r, c)
    assert m.dtype == torch.long and m.tolist()[4:8] == [[1, 0, 0], [1, 0, 1], [1, 1, 0], [1, 1, 1]]
    v = T.video_positions("videorope", 3, VIDEO, 0.5)  # the diagonal: t = δ·step·i, row and column around t
    t = torch.arange(3, dtype=torch.float64).repeat_interleave(4) * spacing * 0.5
    assert torch.equal(v[:, 0], t) and torch.equal(v[:, 1] - t, torch.tensor([0., 0, 1, 1] * 3))
    assert torch.equal(v[:, 2] - t, torch.tensor([0., 1, 0, 1] * 3))
    half = T.video_positions("mrope", 3, VIDEO, 0.5)
    assert torch.equal(half[:, 0], m[:, 0] * 0.5) and torch.equal(half[:, 1:], m[:, 1:].double())


def test_three_axis_schemes_run_the_video_protocol_and_the_other_rows_keep_their_keys():
    smoke = with_overrides(PROFILES["smoke"], parts=("time",))
    runs = plan(smoke, list(smoke.schemes), **QUIET)
    video = [r for r in runs if r.variant == {"protocol": "video"}]
    assert [r.label for r in video] == list(VIDEO_SCHEMES) * len(smoke.seeds)
    # the video model has the protocol's heads: M-RoPE's time takes Qwen2-VL's share of a wider head
    assert {r.spec["head_dim"] for r in video} == {smoke.time.model.n_embd // VIDEO.n_head}
    axial3 = '{"scheme": "rope", "axes": 3, "axes_dims": [2, 2, 4]}'  # a three-axis scheme found from its structure
    user = plan(smoke, [axial3, "rope:axes=2", "rope"], **QUIET)
    assert [r.variant for r in user] == [{"protocol": "video"}, {"cannot": user[1].variant["cannot"]}, {}]
    assert "video patches three" in user[1].variant["cannot"]
    # the one-axis rows' settings are the time settings alone, so their keys do not move with the video's
    assert {r.settings for r in runs if not r.variant} == {settings_hash({"time": smoke.time})}
    assert {r.settings for r in video} == {settings_hash({"time": smoke.time, "video": VIDEO})}
    assert not [r for r in plan(PROFILES["quick"], list(PROFILES["quick"].schemes), **QUIET)
                if r.spec.get("scheme") in VIDEO_SCHEMES]


def _records(accuracy: dict[str, float], n: int = 400) -> list[dict]:
    """Three seeds of each label, at the training condition and a longer one, correct on a fraction of clips."""
    rng = torch.Generator().manual_seed(0)
    out = []
    for label, p in accuracy.items():
        for seed in range(3):
            rows = []
            for rate, seconds in ((10.0, 4.0), (10.0, 8.0)):
                bits = "".join("1" if u < p else "0" for u in torch.rand(n, generator=rng).tolist())
                rows.append({"rate": rate, "seconds": seconds, "positions": "time", "accuracy": bits.count("1") / n,
                             "count": n, "bits": bits})
            out.append({"label": label, "seed": seed, "eval": rows})
    return out


def test_videorope_claim_is_not_measured_without_runs_and_decided_with_them():
    col = lambda row: (row["rate"], row["seconds"], row["positions"])  # noqa: E731
    missing = T.video_verdicts(AccuracyTable(_records({"mrope": 0.6}), col), 10.0, 4.0)
    assert [v.status for v in missing] == ["not measured"] and "8 s" in missing[0].claim
    better = T.video_verdicts(AccuracyTable(_records({"mrope": 0.5, "videorope": 0.8}), col), 10.0, 4.0)
    worse = T.video_verdicts(AccuracyTable(_records({"mrope": 0.8, "videorope": 0.5}), col), 10.0, 4.0)
    assert [v.status for v in better] == ["agrees"] and [v.status for v in worse] == ["disagrees"]
    assert better[0].source == T.VIDEOROPE and "videorope − mrope" in better[0].measured
    flat = T.video_verdicts(AccuracyTable(_records({"mrope": 0.25, "videorope": 0.8}), col), 10.0, 4.0)
    assert [v.status for v in flat] == ["not measured"] and "mrope" in flat[0].measured  # at chance as trained
