"""PoPE (``pope``): the module against its float64 reference (dtypes, odd lengths, offsets, partial
features, both layouts), the reference against the paper's score formula, parity with PoPE-pytorch
and x-transformers' ``polar_pos_emb`` with parameters drawn at random, ``posenc.attention`` with
grouped heads, documents and cached decoding equal to recomputing, gradients, ``out=``, bad input.
(The generic checks over every scheme are in test_schemes.py and test_attention.py.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from conftest import DTYPES, assert_close, assert_directional_gradients
from _patched_llama import check_patched_llama


def _build(head_dim=12, num_heads=3, seed=0, **kw):
    torch.manual_seed(seed)
    return posenc.build({"scheme": "pope", "head_dim": head_dim, "num_heads": num_heads, "bias_init": "uniform", **kw})


def _scores(pe, q, k, qp, kp):
    """``q̃·k̃`` through the module: ``[B, H, Lq, Lk]``."""
    return pe(q, qp, role="query") @ pe(k, kp, role="key").transpose(-1, -2)


# -- the reference and the module ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout,rotary_dim", [("interleaved", 12), ("half", 7)])
@pytest.mark.parametrize("role", ["query", "key"])
def test_module_matches_its_reference(dtype, layout, rotary_dim, role):
    pe = _build(layout=layout, rotary_dim=rotary_dim).to(dtype)
    x = torch.randn(2, 3, 37, 12).to(dtype)
    p = torch.arange(37) + 4093  # odd length, an offset
    out = pe(x, p, role=role)
    assert out.shape == (2, 3, 37, 12 + rotary_dim) and out.dtype == dtype
    assert_close(out, pe.reference(x.double().numpy(), p.numpy(), role=role), what=f"{dtype} {layout} {role}")


def test_reference_is_the_papers_score_relative_in_position():
    """``q̃·k̃`` of the reference's polar forms is ``Σ μ(q) μ(k) cos((t − s)θ − δ)`` (plus the plain product of
    the features past rotary_dim), computed from positions, ``base`` and δ alone; real positions too."""
    g = np.random.default_rng(0)
    theta, delta = ref.pope_inv_freq(5, 300.0), g.uniform(-2 * np.pi, 0, (2, 5))
    q, k = g.normal(size=(1, 2, 6, 8)), g.normal(size=(1, 2, 9, 8))
    qp, kp = g.uniform(0, 50, 6), np.arange(9) + 0.5
    polar = np.einsum("bhqc,bhkc->bhqk", ref.pope(q, qp, theta, delta, role="query", layout="half"),
                      ref.pope(k, kp, theta, delta, role="key", layout="half"))
    np.testing.assert_allclose(polar, ref.pope_scores(q, k, qp, kp, theta, delta), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ref.pope_scores(q, k, qp + 1000.25, kp + 1000.25, theta, delta), polar, rtol=0, atol=1e-9)
    assert np.allclose(theta, 300.0 ** (-np.arange(5) / 5), rtol=1e-15, atol=0)


def test_the_phase_bias_is_clamped_and_enters_the_query_only():
    pe = _build().double()
    x, p = torch.randn(1, 3, 5, 12, dtype=torch.float64), torch.arange(5)
    with torch.no_grad():
        pe.bias.fill_(3.0)  # above the range: clamped to 0, so the query's map is the key's
    torch.testing.assert_close(pe(x, p, role="query"), pe(x, p, role="key"), rtol=0, atol=0)
    torch.testing.assert_close(pe(x, p), pe(x, p, role="key"), rtol=0, atol=0)
    with torch.no_grad():
        pe.bias.fill_(-100.0)  # below: clamped to −2π, one full turn
    torch.testing.assert_close(pe(x, p, role="query"), pe(x, p, role="key"), rtol=0, atol=1e-12)


# -- the code people run -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_and_attention_equal_pope_pytorchs(seed):
    """PoPE-pytorch 0.2 (``PoPE``, ``apply_pope_to_qk``, ``flash_attn_with_pope`` on its non-fused path):
    random sizes, ``theta``, a uniform bias and partial features; the same scores at a KV cache's
    positions, and the same causal attention over grouped key/value heads, a full pass and a decoding step.
    It repeats grouped heads as ``(g h)`` (query head i reads key head ``i mod H_kv``, where posenc and
    transformers read ``i // G``), so posenc is given its repeated keys."""
    pytorch_pope = pytest.importorskip("PoPE_pytorch")
    g = torch.Generator().manual_seed(seed)
    heads, groups, d = 4, (1, 2, 4)[seed], (32, 48, 64)[seed]
    rot = d if seed == 0 else d // 2 + 3
    base = float(torch.randint(50, 20000, (1,), generator=g))
    torch.manual_seed(seed)
    # bias_uniform_init=True fails in PoPE-pytorch 0.2.1 (an in-place uniform_ on a leaf that requires grad):
    # posenc draws δ ~ U(−2π, 0) and theirs takes it
    theirs = pytorch_pope.PoPE(rot, heads=heads, theta=base).double()
    pe = posenc.build({"scheme": "pope", "head_dim": d, "num_heads": heads, "base": base, "rotary_dim": rot,
                       "bias_init": "uniform"}).double()
    with torch.no_grad():
        theirs.bias.copy_(pe.bias)
        theirs.inv_freqs.copy_(pe.inv_freq)  # theirs is float32 θ; ours float64 from base (compared below)
    np.testing.assert_allclose(pe.inv_freq.numpy(), base ** -(torch.arange(rot).double() / rot).numpy(), rtol=1e-15)
    n = 23
    q = torch.randn(2, heads, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, heads // groups, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(2, heads // groups, n, d, generator=g, dtype=torch.float64)
    emb = theirs(n)  # (freqs [L, R], bias [H, R]); queries take the last Lq rows
    kk, vv = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)  # their (g h) order
    tq, tk = pytorch_pope.apply_pope_to_qk(emb, q[:, :, -5:], kk)
    p = torch.arange(n)
    torch.testing.assert_close(_scores(pe, q[:, :, -5:], kk, p[-5:], p), tq @ tk.transpose(-1, -2), rtol=0, atol=1e-10)
    for lq in (n, 1):  # their causal SDPA call aligns Lq < Lk rows top-left (is_causal) but for Lq = 1 (unmasked)
        out = pytorch_pope.flash_attn_with_pope(q[:, :, -lq:], k, v, pos_emb=emb, causal=True, fused=False)
        torch.testing.assert_close(posenc.attention(q[:, :, -lq:], kk, vv, pe, causal=True), out, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_equals_x_transformers_polar_pos_emb(seed):
    """x-transformers' ``PolarEmbedding`` + ``apply_polar_pos_emb`` (the "half" layout): its key map is
    posenc's key map, its query with the key's bias moved to the query (``freqs − bias``) is posenc's
    query map, and its scores are posenc's."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    g = torch.Generator().manual_seed(seed)
    heads, d, n = 2 + seed, 16 * (seed + 1), 19
    base = float(torch.randint(100, 50000, (1,), generator=g))
    torch.manual_seed(seed)
    theirs = xt.PolarEmbedding(d, heads, base=base)  # its bias_uniform_init=True fails as PoPE-pytorch's does
    pe = posenc.build({"scheme": "pope", "head_dim": d, "num_heads": heads, "base": base, "layout": "half",
                       "bias_init": "uniform"})
    with torch.no_grad():
        theirs.learned_bias.copy_(pe.bias[:, None])  # (H, D) -> (H, 1, D)
        theirs.inv_freq.copy_(pe.inv_freq.float())
    pos = torch.arange(n) + 7
    freqs, bias = theirs(pos)  # (1, L, D), (H, 1, D)
    q, k = torch.randn(2, heads, n, d, generator=g), torch.randn(2, heads, n, d, generator=g)
    atol = 4 * torch.finfo(torch.float32).eps * 40  # their float32 angles at positions < 30
    torch.testing.assert_close(pe(k, pos, role="key"), xt.apply_polar_pos_emb(k, freqs), rtol=0, atol=atol)
    torch.testing.assert_close(pe(q, pos, role="query"), xt.apply_polar_pos_emb(q, freqs - bias), rtol=0, atol=atol)
    theirs_scores = xt.apply_polar_pos_emb(q, freqs) @ xt.apply_polar_pos_emb(k, freqs + bias).transpose(-1, -2)
    torch.testing.assert_close(_scores(pe, q, k, pos, pos), theirs_scores, rtol=0, atol=1e-4)


# -- attention ---------------------------------------------------------------------------------------

def test_cached_decoding_and_documents_equal_recomputing():
    """Grouped key/value heads (no repeat), one query at a time against the cached raw keys equals the full
    causal pass; packed documents equal each document on its own (positions restarting at 0)."""
    pe = _build(head_dim=8, num_heads=4).double()
    q = torch.randn(1, 4, 13, 8, dtype=torch.float64)
    k, v = torch.randn(1, 2, 13, 8, dtype=torch.float64), torch.randn(1, 2, 13, 8, dtype=torch.float64)
    full = posenc.attention(q, k, v, pe, causal=True)
    for t in (0, 6, 12):
        step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], pe, causal=True,
                                q_positions=torch.tensor([t]), k_positions=torch.arange(t + 1))
        torch.testing.assert_close(step, full[:, :, t:t + 1], rtol=0, atol=1e-12)
    docs = torch.tensor([0] * 5 + [1] * 8)
    packed = posenc.attention(q, k, v, pe, causal=True, document_ids=docs)
    second = posenc.attention(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], pe, causal=True)
    torch.testing.assert_close(packed[:, :, 5:], second, rtol=0, atol=1e-12)
    expected = torch.from_numpy(ref.attention(pe.reference(q.numpy(), np.arange(13), role="query"),
                                              pe.reference(k.numpy(), np.arange(13), role="key"), v.numpy(),
                                              causal=True, scale=1 / math.sqrt(8)))
    torch.testing.assert_close(full, expected, rtol=0, atol=1e-12)


def test_gradients_reach_the_features_and_the_phase_bias():
    pe = _build(rotary_dim=9).double()
    q = torch.randn(2, 3, 7, 12, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 3, 7, 12, dtype=torch.float64), torch.randn(2, 3, 7, 12, dtype=torch.float64)
    w = torch.randn(2, 3, 7, 12, dtype=torch.float64)

    def loss():
        return (posenc.attention(q, k, v, pe, causal=True) * w).sum()

    loss().backward()
    assert pe.bias.grad.abs().min() > 0
    assert_directional_gradients({"bias": pe.bias, "q": q}, loss, seed=3)


# -- out= and bad input ------------------------------------------------------------------------------

def test_out_takes_the_wider_result_and_refuses_x():
    pe = _build(rotary_dim=5)
    x, p = torch.randn(1, 3, 4, 12), torch.arange(4)
    out = torch.full((1, 3, 4, 17), float("nan"))
    assert pe(x, p, role="query", out=out) is out
    torch.testing.assert_close(out, pe(x, p, role="query"), rtol=0, atol=0)
    assert pe.out_dim == 17 and pe.widens
    with pytest.raises(ValueError, match=r"out must be a new tensor of shape \[1, 3, 4, 17\].*got x itself"):
        pe(x, p, out=x)


@pytest.mark.parametrize("spec, error, text", [
    ({"rotary_dim": 13}, ValueError, "rotary_dim must be <= 12, got 13"),
    ({"rotary_dim": 0}, ValueError, "rotary_dim must be >= 1, got 0"),
    ({"base": 0}, ValueError, "base must be > 0.0"),
    ({"base": float("nan")}, ValueError, "base must be finite"),
    ({"layout": "neox"}, ValueError, "layout must be one of 'half', 'interleaved'"),
    ({"bias_init": "normal"}, ValueError, "bias_init must be one of 'zeros', 'uniform'"),
    ({"num_heads": 0}, ValueError, "num_heads must be >= 1, got 0"),
    ({"head_dim": 2.5}, TypeError, "head_dim must be an integer"),
])
def test_bad_specs_are_refused_naming_the_parameter(spec, error, text):
    with pytest.raises(error, match=text):
        posenc.build({"scheme": "pope", "head_dim": 12, "num_heads": 3, **spec})


def test_queries_need_one_bias_per_head_and_roles_are_checked():
    pe = _build()
    with pytest.raises(ValueError, match=r"queries must have num_heads=3 heads"):
        pe(torch.randn(1, 2, 4, 12), torch.arange(4), role="query")
    assert pe(torch.randn(1, 1, 4, 12), torch.arange(4), role="key").shape == (1, 1, 4, 24)  # a grouped key head
    with pytest.raises(ValueError, match="role must be one of"):
        pe(torch.randn(1, 3, 4, 12), torch.arange(4), role="value")


# -- inside a transformers model -----------------------------------------------------------------------

def test_patched_into_a_llama_it_trains_and_decodes_through_the_cache():
    """``posenc.interop.patch`` (the attention-function path, grouped key/value heads): the logits change,
    one step trains δ, and greedy ``generate()`` with the cache equals recomputing (``tests/_patched_llama.py``)."""
    check_patched_llama({"scheme": "pope", "bias_init": "uniform"}, trained="bias", hidden_size=32, min_change=1e-3)
