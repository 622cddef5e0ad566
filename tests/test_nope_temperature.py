"""Llama 4's NoPE attention temperature: τ(p) against the formula at 40 digits, posenc.attention
against the float64 reference (offsets, batches, KV cache, gradients) and against transformers'
Llama4TextAttention in a NoPE layer, with and without a cache."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from conftest import assert_close, assert_directional_gradients, tolerance


def _exact(p: int, attn_scale: float, floor_scale: float) -> float:
    mpmath.mp.dps = 40
    steps = mpmath.floor(mpmath.mpf(p + 1) / mpmath.mpf(floor_scale))
    return float(1 + mpmath.mpf(attn_scale) * mpmath.log1p(steps))


@pytest.mark.parametrize("attn_scale, floor_scale", [(0.1, 8192), (0.37, 5), (0.05, 12.5)])
def test_scale_equals_the_formula_at_every_step(attn_scale, floor_scale):
    """τ at the positions around each step ⌊(p + 1)/floor_scale⌋ (up to 2^52), exact to float64."""
    steps = np.array([0, 1, 2, 3, 10, 1000, 2**20, 2**33])
    p = np.unique(np.clip(np.concatenate([np.floor(steps * floor_scale).astype(np.int64) + d
                                          for d in (-2, -1, 0, 1)]), 0, None))
    exact = np.array([_exact(int(x), attn_scale, floor_scale) for x in p])
    pe = posenc.build({"scheme": "nope_temperature", "attn_scale": attn_scale, "floor_scale": floor_scale})
    assert_close(pe.query_scale(torch.from_numpy(p)), exact, magnitude=4.0, what="module")
    assert_close(ref.nope_temperature_scale(p, attn_scale=attn_scale, floor_scale=floor_scale), exact,
                 magnitude=4.0, what="reference")
    assert float(pe.query_scale(torch.tensor([int(floor_scale) - 2]))) == 1.0 or floor_scale % 1


def _qkv(b=2, h=3, lq=7, lk=12, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dtype) for n in (lq, lk, lk))


def test_attention_scales_queries_at_their_positions():
    """KV-cache default positions, explicit batched ones, float32 and bfloat16 (τ taken in float32)."""
    pe = posenc.build({"scheme": "nope_temperature", "attn_scale": 0.3, "floor_scale": 3})
    q, k, v = _qkv()
    out = posenc.attention(q, k, v, pe, causal=True)
    scaled = ref.nope_temperature(q, np.arange(5, 12), attn_scale=0.3, floor_scale=3)
    assert_close(out, ref.attention(scaled, k, v, causal=True), magnitude=1e4)
    kpos = torch.stack([torch.arange(12) + 10**6, torch.arange(12) * 5])
    qpos = kpos[:, 5:]
    for dtype in (torch.float32, torch.bfloat16):
        out = posenc.attention(q.to(dtype), k.to(dtype), v.to(dtype), pe, q_positions=qpos, k_positions=kpos)
        scaled = ref.nope_temperature(q.to(dtype).double(), qpos.numpy(), attn_scale=0.3, floor_scale=3)
        expected = ref.attention(scaled, k.to(dtype).double(), v.to(dtype).double())
        assert_close(out, expected, magnitude=8.0, what=str(dtype))
    plain = posenc.build({"scheme": "nope_temperature", "attn_scale": 0.0})
    assert torch.equal(posenc.attention(q, k, v, plain), posenc.attention(q, k, v, None))


def test_gradients_match_the_reference():
    pe = posenc.build({"scheme": "nope_temperature", "attn_scale": 0.5, "floor_scale": 2})
    q, k, v = (t.requires_grad_(True) for t in _qkv(seed=1))
    w = torch.randn(2, 3, 7, 4, dtype=torch.float64)
    (posenc.attention(q, k, v, pe, causal=True) * w).sum().backward()

    def loss() -> float:
        scaled = ref.nope_temperature(q.detach(), np.arange(5, 12), attn_scale=0.5, floor_scale=2)
        return float((ref.attention(scaled, k.detach(), v.detach(), causal=True) * w.numpy()).sum())

    assert_directional_gradients({"q": q, "k": k, "v": v}, loss, seed=2)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="attn_scale must be >= 0.0"):
        posenc.build({"scheme": "nope_temperature", "attn_scale": -0.1})
    with pytest.raises(ValueError, match="floor_scale must be > 0.0"):
        posenc.build({"scheme": "nope_temperature", "floor_scale": 0})
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        posenc.build("nope_temperature").query_scale(torch.tensor([0.5]))


# -- parity with transformers' Llama 4 ----------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_equals_transformers_llama4_nope_layer(seed):
    """A NoPE layer of Llama4TextAttention (random sizes, attn_scale, floor_scale and weights) equals
    o_proj(posenc.attention(q, k, v, nope_temperature, causal=True)) over a whole sequence, and over
    the next tokens with a KV cache. transformers takes τ in float32: results agree to its rounding."""
    pytest.importorskip("transformers")
    from transformers import Llama4TextConfig
    from transformers.cache_utils import DynamicCache
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    rng = np.random.default_rng(seed)
    kv, groups, d = int(rng.integers(1, 3)), int(rng.integers(1, 3)), 2 * int(rng.integers(2, 5))
    h, width, length = kv * groups, 8 * int(rng.integers(2, 5)), int(rng.integers(20, 40))
    attn_scale, floor_scale = float(rng.uniform(0.05, 1.0)), int(rng.integers(2, 7))
    cfg = Llama4TextConfig(hidden_size=width, num_attention_heads=h, num_key_value_heads=kv, head_dim=d,
                           num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0], floor_scale=floor_scale,
                           attn_scale=attn_scale, attention_bias=True, attn_temperature_tuning=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    layer = Llama4TextAttention(cfg, layer_idx=3).double().eval()
    assert not layer.use_rope
    x = torch.randn(2, length, width, dtype=torch.float64)
    mask = torch.full((length, length), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    pe = posenc.build({"scheme": "nope_temperature", "attn_scale": attn_scale, "floor_scale": floor_scale})

    def heads(t, n):  # (B, L, n·D) -> (B, h, L, D), kv heads repeated for their query groups
        return t.view(2, -1, n, d).transpose(1, 2).repeat_interleave(h // n, dim=1)

    def ours(queries):
        q, k, v = heads(layer.q_proj(queries), h), heads(layer.k_proj(x), kv), heads(layer.v_proj(x), kv)
        y = posenc.attention(q, k, v, pe, causal=True)  # queries: the last of the keys
        return layer.o_proj(y.transpose(1, 2).reshape(2, -1, h * d))

    split = length // 2
    with torch.no_grad():
        whole, _ = layer(x, None, mask)
        cache = DynamicCache(config=cfg)
        layer(x[:, :split], None, mask[..., :split, :split], cache=cache)
        rest, _ = layer(x[:, split:], None, mask[..., split:, :], cache=cache)
        for theirs, mine in ((whole, ours(x)), (rest, ours(x[:, split:]))):
            err = float((mine - theirs).abs().max())
            assert err <= tolerance(torch.float32, float(theirs.abs().max())), err
