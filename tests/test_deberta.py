"""DeBERTa's disentangled attention: the log buckets against transformers and against the exact
formula (mpmath), the module against its float64 reference (offsets, batches, KV cache,
gradients), and posenc.attention against transformers' DebertaV2 attention layer."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.interop import deberta_from_hf
from conftest import assert_close, assert_directional_gradients, tolerance

pytest.importorskip("transformers")
from transformers import DebertaV2Config  # noqa: E402
from transformers.models.deberta_v2.modeling_deberta_v2 import (  # noqa: E402
    DisentangledSelfAttention, build_relative_position, make_log_bucket_position)


def _configs(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """(position_buckets, max_relative_positions) drawn at random, DeBERTa-v3's (256, 512) first."""
    rng = np.random.default_rng(seed)
    out = [(256, 512)]
    while len(out) < n:
        buckets = int(rng.integers(2, 300))
        out.append((buckets, int(rng.integers(buckets // 2 + 2, 5000))))
    return out


# -- buckets ------------------------------------------------------------------------------------

def test_buckets_equal_transformers_wherever_a_row_is_read():
    """The row δ = clip(bucket(r) + s, 0, 2s − 1) equals transformers' (whose logs are float32) for
    every distance |r| < 20000 at DeBERTa-v3's setting and at random ones."""
    r = np.arange(-20000, 20001)
    for buckets, max_rel in _configs(12):
        ours = np.clip(ref.deberta_bucket(r, buckets, max_rel) + buckets, 0, 2 * buckets - 1)
        theirs = make_log_bucket_position(torch.from_numpy(r), buckets, max_rel).long().numpy()
        theirs = np.clip(theirs + buckets, 0, 2 * buckets - 1)
        assert np.array_equal(ours, theirs), (buckets, max_rel, r[ours != theirs][:5])


def test_buckets_equal_the_exact_formula():
    """bucket(r) = sign(r)·(m + ⌈log(|r|/m)/log((max − 1)/m)·(m − 1)⌉) for |r| > m, computed at 50 digits."""
    mpmath.mp.dps = 50
    rng = np.random.default_rng(1)
    for buckets, max_rel in _configs(6, seed=1):
        m = buckets // 2
        r = np.concatenate([np.arange(-3 * max_rel, 3 * max_rel + 1, max(1, max_rel // 97)),
                            rng.integers(-10**6, 10**6, 200)])
        exact = [x if abs(x) <= m else int(np.sign(x)) * (m + int(mpmath.ceil(
            mpmath.log(mpmath.mpf(abs(int(x))) / m) / mpmath.log(mpmath.mpf(max_rel - 1) / m) * (m - 1))))
            for x in r]
        assert np.array_equal(ref.deberta_bucket(r, buckets, max_rel), exact), (buckets, max_rel)


def test_no_buckets_clips_the_distance():
    r = np.arange(-9, 10)
    assert np.array_equal(ref.deberta_index(np.array([10]), 10 - r, 0, 4)[0], np.clip(r + 4, 0, 7))


# -- the module against its reference -----------------------------------------------------------

def _module(seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    spec = {"scheme": "deberta", "num_heads": 3, "head_dim": 4, "d_model": 10, "position_buckets": 8,
            "max_relative_positions": 20, **kw}
    return posenc.build(spec).to(dtype)


def _qk(b, h, lq, lk, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, lq, d, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(b, h, lk, d, generator=g, dtype=torch.float64).to(dtype))


@pytest.mark.parametrize("kw", [{}, {"pos_att_type": "c2p"}, {"pos_att_type": ["p2c"]},
                                {"share_att_key": True}, {"position_buckets": 0, "max_relative_positions": 6}],
                         ids=["both", "c2p", "p2c", "shared", "no-buckets"])
def test_term_matches_reference_at_offsets_and_batched_positions(kw):
    pe = _module(**kw)
    q, k = _qk(2, 3, 5, 13, 4)
    kpos = torch.stack([torch.arange(13) + 10**9, torch.arange(13) * 7 + 3])  # (2, 13): far and spread
    qpos = kpos[:, -5:] + torch.tensor([[0], [3]])
    out = pe(q, k, qpos, kpos)
    assert_close(out, pe.reference(q, k, qpos, kpos), magnitude=10.0, what=str(kw))
    assert_close(pe(q.float(), k.float(), qpos, kpos), pe.reference(q, k, qpos, kpos), dtype=torch.float32,
                 magnitude=10.0, what=f"{kw} float32")


def test_attention_uses_debertas_scale_and_matches_reference():
    """posenc.attention(q, k, v, pe) is softmax((q·k + c2p + p2c)/√(3D)) v; a given scale replaces
    the content term's only."""
    pe = _module()
    q, k = _qk(2, 3, 6, 9, 4, seed=1)
    v = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    assert pe.default_scale == 1 / math.sqrt(3 * 4)
    for backend in ("materialize", "chunked", "blockwise"):
        for scale in (None, 0.3):
            out = posenc.attention(q, k, v, pe, causal=True, backend=backend, scale=scale)
            expected = pe.reference_attention(q, k, v, np.arange(3, 9), np.arange(9), causal=True, scale=scale)
            assert_close(out, expected, magnitude=1e4, what=f"{backend} scale={scale}")


def test_gradients_match_the_reference():
    """d(Σ w·out)/d(q, k, v, E, projections) against central differences of the float64 reference."""
    pe = _module(seed=2)
    q, k = _qk(1, 3, 7, 7, 4, seed=2)
    v = torch.randn(1, 3, 7, 4, dtype=torch.float64)
    w = torch.randn(1, 3, 7, 4, dtype=torch.float64)
    pos = torch.arange(7) * 3 + 5
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    (posenc.attention(q, k, v, pe, q_positions=pos, k_positions=pos, causal=True) * w).sum().backward()
    leaves = {"q": q, "k": k, "v": v, **dict(pe.named_parameters())}

    def loss() -> float:
        out = pe.reference_attention(q, k, v, pos.numpy(), pos.numpy(), causal=True)
        return float((out * w.numpy()).sum())

    assert_directional_gradients(leaves, loss, seed=3)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="pos_att_type must name"):
        _module(pos_att_type="c2p|c2q")
    with pytest.raises(ValueError, match="pos_att_type must name"):
        _module(pos_att_type=[])
    with pytest.raises(TypeError, match="pos_att_type must be"):
        _module(pos_att_type=3)
    with pytest.raises(ValueError, match="position_buckets must be 0 .* or >= 2, got 1"):
        _module(position_buckets=1)
    with pytest.raises(ValueError, match=r"max_relative_positions must be >= position_buckets // 2 \+ 2 = 6"):
        _module(max_relative_positions=5)
    with pytest.raises(ValueError, match="tie\\(\\) is for share_att_key=True"):
        _module().tie(torch.nn.Linear(10, 12), torch.nn.Linear(10, 12))
    with pytest.raises(ValueError, match="key_proj must map d_model=10"):
        _module(share_att_key=True).tie(torch.nn.Linear(10, 12), torch.nn.Linear(10, 13))


# -- parity with transformers -------------------------------------------------------------------

def _hf_layer(h, d, buckets, max_rel, pat, share, seed):
    torch.manual_seed(seed)
    cfg = DebertaV2Config(hidden_size=h * d, num_attention_heads=h, relative_attention=True,
                          position_buckets=buckets, max_relative_positions=max_rel, pos_att_type=pat,
                          share_att_key=share, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    layer = DisentangledSelfAttention(cfg).double().eval()
    rows = 2 * (buckets if buckets > 0 else max_rel)
    return layer, torch.randn(rows, h * d, dtype=torch.float64)


@pytest.mark.parametrize("share", [False, True], ids=["separate", "shared"])
@pytest.mark.parametrize("h, d, length, buckets, max_rel, pat", [
    (2, 8, 37, 16, 64, ["p2c", "c2p"]),
    (4, 4, 70, 8, 30, ["c2p", "p2c"]),
    (3, 6, 21, -1, 8, ["p2c", "c2p"]),
    (1, 5, 50, 6, 200, ["c2p"]),
    (2, 3, 19, 10, 12, ["p2c"]),
])
def test_attention_equals_transformers_debertav2_layer(share, h, d, length, buckets, max_rel, pat):
    """The layer's context output from posenc.attention on its q, k, v projections and
    deberta_from_hf(layer, rel_embeddings): random weights, both share_att_key settings. transformers
    takes √(D·f) in float32 (scaled_size_sqrt), so scores agree to float32's rounding."""
    layer, table = _hf_layer(h, d, buckets, max_rel, pat, share, seed=length)
    x = torch.randn(2, length, h * d, dtype=torch.float64)
    mask = torch.ones(2, 1, length, length, dtype=torch.bool)
    rel = build_relative_position(x, x, bucket_size=buckets, max_position=max_rel)
    with torch.no_grad():
        expected, _ = layer(x, mask, relative_pos=rel, rel_embeddings=table)
        pe = deberta_from_hf(layer, table)
        split = lambda t: t.view(2, length, h, d).transpose(1, 2)  # noqa: E731  (B, H, L, D)
        q, k, v = split(layer.query_proj(x)), split(layer.key_proj(x)), split(layer.value_proj(x))
        out = posenc.attention(q, k, v, pe).transpose(1, 2).reshape(2, length, h * d)
    err = float((out - expected).abs().max())
    assert err <= tolerance(torch.float32, float(expected.abs().max())), err
    if share:
        assert pe.query_proj is layer.query_proj and pe.key_proj is layer.key_proj  # shared, not copied


def test_from_hf_refuses_a_layer_without_relative_attention():
    cfg = DebertaV2Config(hidden_size=8, num_attention_heads=2, relative_attention=False)
    with pytest.raises(ValueError, match="relative_attention=False"):
        deberta_from_hf(DisentangledSelfAttention(cfg), torch.zeros(4, 8))
    layer, _ = _hf_layer(2, 4, 8, 20, ["c2p"], False, seed=0)
    with pytest.raises(ValueError, match="at least 2s = 16 rows of d_model = 8"):
        deberta_from_hf(layer, torch.zeros(10, 8, dtype=torch.float64))
