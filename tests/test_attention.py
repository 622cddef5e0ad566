"""posenc.attention against the float64 reference for every kind, causal or not, with a KV cache
(Lq < Lk), batched positions and every backend; permutation equivariance without position and
its loss with each scheme; gradients through learned tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.scores
import posenc.attn
from posenc import reference as ref
from posenc import registry
from conftest import (SMALL, assert_close, attention_parameters, attention_reference, heads_dim, on_axes, positions, schemes_of_kind,
                      small_module)

ALL = registry.schemes()
APPLIED = schemes_of_kind("none", "rotary", "bias", "relative")  # what attention() takes


LEARNED = [n for n in APPLIED if attention_parameters(small_module(n))]


def _qkv(pe=None, *, lq=9, lk=9, batch=2, dtype=torch.float64, seed=0):
    h, d = heads_dim(pe) if pe is not None else (SMALL["num_heads"], SMALL["head_dim"])
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, h, lq, d, generator=g, dtype=torch.float64)
    k = torch.randn(batch, h, lk, d, generator=g, dtype=torch.float64)
    v = torch.randn(batch, h, lk, d, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _check(pe, q, k, v, **kw):
    """posenc.attention equals the float64 reference (module and tensors in their dtype)."""
    out = posenc.attention(q, k, v, pe, **kw)
    assert out.shape == q.shape[:3] + v.shape[-1:] and out.dtype == q.dtype
    expected = attention_reference(q, k, v, pe, causal=kw.get("causal", False), scale=kw.get("scale"),
                                   q_positions=kw.get("q_positions"), k_positions=kw.get("k_positions"))
    # float64 scores carry a few ulp of their size (angles of positions ~1e3 for rotary).
    assert_close(out, expected, magnitude=1e4 if q.dtype == torch.float64 else None, what=str(kw))
    return out


def _pe(name, dtype=torch.float64):
    return None if name is None else small_module(name).to(dtype)


# -- against the reference ----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lq, lk", [(9, 9), (4, 11)], ids=["Lq=Lk", "kv-cache"])
@pytest.mark.parametrize("name", APPLIED)
def test_attention_matches_reference_with_default_positions(name, causal, lq, lk):
    """Default positions: keys at 0..Lk-1, queries the last Lq of them; causal is bottom-right."""
    pe = _pe(name)
    _check(pe, *_qkv(pe, lq=lq, lk=lk), causal=causal)


@pytest.mark.parametrize("name", APPLIED)
def test_attention_matches_reference_with_batched_positions(name):
    pe = _pe(name)
    q, k, v = _qkv(pe, lq=5, lk=12)
    kpos = on_axes(pe, torch.stack([torch.arange(12) + 40, torch.arange(12) * 3]))  # [B, Lk], different per row
    qpos = kpos[:, -5:]
    out = _check(pe, q, k, v, q_positions=qpos, k_positions=kpos, causal=True)
    if name != "nope":  # the second row's positions matter
        other = posenc.attention(q, k, v, pe, q_positions=qpos[0], k_positions=kpos[0], causal=True)
        assert not torch.allclose(out[1], other[1])


@pytest.mark.parametrize("name", schemes_of_kind("none", "rotary"))
def test_sdpa_kinds_match_reference_in_float32(name):
    pe = _pe(name, torch.float32)
    q, k, v = _qkv(pe, lq=6, lk=17, dtype=torch.float32)
    # Scores are |q||k|/sqrt(D) at most: their size sets the error of the softmax weights.
    magnitude = float(q.norm(dim=-1).max() * k.norm(dim=-1).max()) / math.sqrt(q.shape[-1])
    qpos, kpos = on_axes(pe, torch.arange(300, 306)), on_axes(pe, torch.arange(289, 306))
    out = posenc.attention(q, k, v, pe, causal=True, q_positions=qpos, k_positions=kpos)
    expected = attention_reference(q, k, v, pe, causal=True, q_positions=qpos, k_positions=kpos)
    assert_close(out, expected, magnitude=magnitude * float(v.abs().max()))


def test_scale_is_passed_through():
    pe = _pe("alibi")
    q, k, v = _qkv(pe)
    _check(pe, q, k, v, scale=0.3)
    _check(None, q, k, v, scale=2.0, causal=True)


@pytest.mark.parametrize("backend", ["materialize", "chunked", "auto"])
@pytest.mark.parametrize("name", schemes_of_kind("bias", "relative"))
def test_backends_match_reference(name, backend, monkeypatch):
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * 4 * 23 * 3)  # chunks of 3 queries
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 100)  # auto: choose another path
    pe = _pe(name)
    q, k, v = _qkv(pe, lq=10, lk=23)
    q.requires_grad_(backend == "auto")  # auto then takes blockwise (as it does without grad on the CPU)
    for causal in (False, True):
        _check(pe, q, k, v, causal=causal, backend=backend, q_positions=on_axes(pe, torch.arange(13, 23) + 5),
               k_positions=on_axes(pe, torch.arange(23) + 5))  # several axes (bipe_bias): spread over them


@pytest.mark.parametrize("backend", ["materialize", "chunked"])
def test_a_half_precision_bias_module_does_not_round_the_float32_scores(backend, monkeypatch):
    """ALiBi has no parameters: in bfloat16 it must give the float32 result, as the flex path does
    (a bfloat16 map would make -m*300 and -m*300.5 equal, and move the weights by ~1e-3)."""
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 4 * 4 * 600 * 64)  # chunks of 64 queries
    pe = small_module("alibi")
    q, k, v = _qkv(pe, lq=200, lk=600, batch=1, dtype=torch.float32)
    want = posenc.attention(q, k, v, pe, causal=True, backend=backend)
    got = posenc.attention(q, k, v, pe.to(torch.bfloat16), causal=True, backend=backend)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_flex_on_cuda_keeps_the_callers_no_grad():
    pe = small_module("alibi").cuda()
    q, k, v = (t.cuda().requires_grad_() for t in _qkv(pe, lq=5, lk=9, dtype=torch.float32))
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, backend="flex", causal=True)
    assert not out.requires_grad


@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_flex_matches_reference(name):
    """One small shape (FlexAttention compiles, ~10-30 s each on 2 cores): causal, Lq < Lk, batched.
    Kerple's and FIRE's flex paths are tested in test_relative_schemes.py (FIRE's compile time
    grows with its hidden units)."""
    pe = _pe(name, torch.float32)
    q, k, v = _qkv(pe, lq=5, lk=9, dtype=torch.float32)
    kpos = positions(9, offset=3, batch=2)
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, backend="flex", causal=True, q_positions=kpos[:, -5:], k_positions=kpos)
        same = posenc.attention(q, k, v, pe, backend="materialize", causal=True, q_positions=kpos[:, -5:],
                                k_positions=kpos)
    expected = attention_reference(q, k, v, pe, causal=True, q_positions=kpos[:, -5:], k_positions=kpos)
    assert_close(same, expected, magnitude=16)
    assert_close(out, expected, magnitude=16)


# -- permutation equivariance -------------------------------------------------------------------

PERM = torch.tensor([3, 0, 6, 1, 5, 2, 4])  # neither the identity nor the reversal (ALiBi keeps |i-j|)


def _self_attention(name, x):
    """Self-attention of ``x [1, H, L, D]`` at positions 0..L-1 with the scheme applied by kind."""
    pe = _pe(name)
    p = torch.arange(x.shape[2])
    if pe is not None and pe.kind == "additive":  # added to the token embeddings, then split in heads
        b, h, length, d = x.shape
        x = (x.transpose(1, 2).reshape(b, length, h * d) + pe(p)).reshape(b, length, h, d).transpose(1, 2)
        pe = None
    torch_out = posenc.attention(x, x, x, pe)
    ref_out = attention_reference(x, x, x, pe)
    assert_close(torch_out, ref_out, magnitude=1e3)
    return ref_out


def test_attention_without_position_is_permutation_equivariant():
    x = torch.randn(1, SMALL["num_heads"], 7, SMALL["head_dim"], dtype=torch.float64)
    for name in [None, "nope"]:
        np.testing.assert_allclose(_self_attention(name, x[:, :, PERM]), _self_attention(name, x)[:, :, PERM],
                                   rtol=0, atol=1e-12)
    # Llama 4's temperature (kind none) scales each query by its position: no longer equivariant.
    temperature = _self_attention("nope_temperature", x[:, :, PERM]) - _self_attention("nope_temperature", x)[:, :, PERM]
    assert np.abs(temperature).max() > 1e-3
    # Causal masking alone breaks it (how NoPE decoders learn position).
    causal = ref.attention(x[:, :, PERM], x[:, :, PERM], x[:, :, PERM], causal=True)
    assert np.abs(causal - ref.attention(x, x, x, causal=True)[:, :, PERM]).max() > 1e-2


@pytest.mark.parametrize("name", schemes_of_kind("additive", "rotary", "bias", "relative"))
def test_attention_with_position_is_not_permutation_equivariant(name):
    x = torch.randn(1, SMALL["num_heads"], 7, SMALL["head_dim"], dtype=torch.float64)
    permuted_first = _self_attention(name, x[:, :, PERM])
    permuted_after = _self_attention(name, x)[:, :, PERM]
    # float64 noise is ~1e-15: a difference this large is position at work, not rounding.
    assert np.abs(permuted_first - permuted_after).max() > 1e-4, f"{name} leaves attention equivariant"


# -- gradients ----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["materialize", "chunked"])
@pytest.mark.parametrize("name", LEARNED)
def test_gradients_reach_learned_tables(name, backend, monkeypatch):
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * 4 * 11 * 2)  # chunks of 2 queries
    pe = _pe(name)
    q, k, v = _qkv(pe, lq=7, lk=11)
    w = torch.randn(2, q.shape[1], 7, v.shape[-1], dtype=torch.float64)

    def loss():
        return (posenc.attention(q, k, v, pe, causal=True, backend=backend) * w).sum()

    pe.zero_grad()
    loss().backward()
    grads = {n: p.grad for n, p in attention_parameters(pe).items()}
    assert all(g is not None for g in grads.values()), f"no gradient for {[n for n, g in grads.items() if g is None]}"
    assert any(g.abs().sum() > 0 for g in grads.values())
    # The gradient is the true one: a central difference on the entry with the largest gradient.
    n, g = max(grads.items(), key=lambda item: float(item[1].abs().max()))
    p = attention_parameters(pe)[n]
    i = int(g.abs().argmax())
    h = 1e-6
    with torch.no_grad():
        p.view(-1)[i] += h
        up = loss()
        p.view(-1)[i] -= 2 * h
        down = loss()
        p.view(-1)[i] += h
    assert float(g.view(-1)[i]) == pytest.approx(float(up - down) / (2 * h), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("name", LEARNED)
def test_materialize_and_chunked_gradients_agree(name, monkeypatch):
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * 4 * 11 * 3)
    pe = _pe(name)
    q, k, v = (t.requires_grad_() for t in _qkv(pe, lq=7, lk=11))
    grads = []
    for backend in ("materialize", "chunked"):
        pe.zero_grad()
        q.grad = None
        posenc.attention(q, k, v, pe, backend=backend, causal=True).square().sum().backward()
        grads.append([q.grad.clone(), *(p.grad.clone() for p in attention_parameters(pe).values())])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_causal_with_more_queries_than_keys_raises():
    """Bottom-right causal alignment would leave the first Lq - Lk queries with no key at all."""
    q = torch.randn(1, 2, 5, 8)
    k = v = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="Lq <= Lk"):
        posenc.attention(q, k, v, causal=True)
    assert posenc.attention(q, k, v, causal=False).shape == (1, 2, 5, 8)
