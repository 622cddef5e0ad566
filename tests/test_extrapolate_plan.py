"""Settings that decide an outcome follow the training length: T5's buckets are all trained,
FIRE's threshold is the training length, YaRN's ramp keeps the paper's share of the pairs."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import reference as ref
from posenc.extrapolate.model import GPTConfig
from posenc.extrapolate.parts.scaling import yarn_betas
from posenc.extrapolate.plan import resolve_scheme
from posenc.scaling import yarn_correction_range

CFG = GPTConfig(n_layer=1, n_head=4, n_embd=64)


@pytest.mark.parametrize("length", [16, 22, 32, 38, 64, 512])
def test_t5_buckets_are_all_trained_and_far_distances_share_a_trained_one(length):
    _, spec = resolve_scheme("t5", CFG, max_positions=length)
    kw = {"num_buckets": spec["num_buckets"], "max_distance": spec["max_distance"], "bidirectional": False}
    trained = set(ref.t5_bucket(-np.arange(length), **kw).tolist())  # causal distances seen in training
    assert trained == set(range(spec["num_buckets"]))  # every bucket gets a gradient
    far = set(ref.t5_bucket(-np.arange(length, 16 * length), **kw).tolist())
    assert far <= trained and len(far) == 1  # past L: the (trained) last bucket only
    assert spec["num_buckets"] <= 32


def test_fire_threshold_is_the_training_length_and_a_given_setting_is_kept():
    assert resolve_scheme("fire", CFG, max_positions=32)[1]["L_threshold"] == 32.0
    assert resolve_scheme("fire:L_threshold=100", CFG, max_positions=32)[1]["L_threshold"] == 100.0
    spec = resolve_scheme("t5:max_distance=128", CFG, max_positions=32)[1]
    assert spec["max_distance"] == 128 and spec["num_buckets"] == 32  # the user's T5, not resized


@pytest.mark.parametrize("head_dim, original, expect", [(128, 4096, (20, 46)), (16, 32, (2, 6)), (32, 64, (5, 12))])
def test_yarn_betas_keep_the_papers_share_of_pairs(head_dim, original, expect):
    betas = yarn_betas(head_dim, 10000.0, original)
    assert yarn_correction_range(head_dim, 10000.0, original, betas["beta_fast"], betas["beta_slow"]) == expect
    if head_dim == 128:  # the paper's setting: its own 32 / 1 give the same ramp
        assert yarn_correction_range(128, 10000.0, 4096, 32.0, 1.0) == expect
