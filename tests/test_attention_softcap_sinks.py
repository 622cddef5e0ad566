"""``posenc.attention(..., softcap=, sinks=)``: Gemma 2's logit cap and GPT-OSS's attention sinks,
on every backend that computes them (materialize, chunked, and ``auto``, which picks one), with
rotary, bias and relative kinds, causal with a KV cache, key padding, grouped heads, float32 and
float64, against the float64 reference (``posenc.reference.attention``) and, for where the cap and
the sink sit, against transformers' own eager attention of both families."""

from __future__ import annotations

import math
import re
import types

import numpy as np
import pytest
import torch

import posenc
import posenc.scores
import posenc.attn
import posenc.blockwise as bw
from conftest import assert_directional_gradients, small_module
from posenc.reference.attention import attention as reference_attention

H, D = 4, 8  # conftest's SMALL sizes
NAMES = [None, "rope", "alibi", "t5", "kerple", "fire", "transformer_xl"]
CASES = {"softcap": (2.5, False), "sinks": (None, True), "both": (1.5, True)}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few query rows and blocks of 5 queries x 7 keys (4 queries per fused call), so
    that every path crosses several blocks, ragged last ones and rows a padding mask hides whole."""
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * H * 23 * 3)
    monkeypatch.setattr(bw, "BLOCK_Q", 5)
    monkeypatch.setattr(bw, "BLOCK_K", 7)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 4)


def _inputs(b, h_kv, lq, lk, dtype, *, seed, grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, n_h, n, D, generator=g, dtype=torch.float64) * 2.0
               for n_h, n in ((H, lq), (h_kv, lk), (h_kv, lk)))  # scores of several units: the cap bites
    sinks = torch.randn(H, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_(grad) for t in (q, k, v, sinks)]


def _padding(b, lk, pads):
    mask = torch.ones(b, lk, dtype=torch.bool)
    for i, n in enumerate(pads):
        mask[i, :n] = False
    return mask


def _reference(q, k, v, pe, *, q_positions, k_positions, mask, softcap, sinks, scale):
    """The float64 reference: rotary rotates q and k, bias and relative kinds add their term after the cap."""
    qn, kn, vn = (t.detach().double().numpy() for t in (q, k, v))
    qp, kp = q_positions.numpy(), k_positions.numpy()
    kind = "none" if pe is None else pe.kind
    bias = None
    if kind == "rotary":
        qn, kn = pe.reference(qn, qp, role="query"), pe.reference(kn, kp, role="key")
    elif kind == "bias":
        bias = pe.reference(qp, kp)
    elif kind == "relative":
        bias = pe.reference(qn, np.repeat(kn, qn.shape[1] // kn.shape[1], axis=1), qp, kp)
    allowed = None if mask is None else mask.numpy()[:, None, None, :]
    return reference_attention(qn, kn, vn, bias=bias, causal=True, scale=scale, allowed=allowed, softcap=softcap,
                               sinks=None if sinks is None else sinks.detach().double().numpy())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("padded", [False, True], ids=["no mask", "key padding"])
@pytest.mark.parametrize("h_kv", [4, 2], ids=["MHA", "GQA"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES, ids=[str(n) for n in NAMES])
def test_softcap_and_sinks_equal_the_reference(name, case, h_kv, padded, dtype, small_chunks):
    """Causal over a KV cache (Lq = 17 < Lk = 23, positions from 5), left padding with a row that
    sees no key: every backend that takes them, against the float64 reference."""
    softcap, with_sinks = CASES[case]
    b, lq, lk = 2, 17, 23
    pe = None if name is None else small_module(name).to(dtype)
    q, k, v, sinks = _inputs(b, h_kv, lq, lk, dtype, seed=1)
    sinks = sinks if with_sinks else None
    mask = _padding(b, lk, [lk - lq + 3, 0]) if padded else None
    kp = torch.arange(lk) + 5
    qp = kp[lk - lq:]
    want = _reference(q, k, v, pe, q_positions=qp, k_positions=kp, mask=mask, softcap=softcap, sinks=sinks,
                      scale=0.4)
    atol = 1e-12 if dtype == torch.float64 else 2e-5
    backends = ["materialize", "chunked", "auto"] + (["blockwise"] if pe is not None and pe.kind != "rotary" else [])
    for backend in backends:
        got = posenc.attention(q, k, v, pe, causal=True, q_positions=qp, k_positions=kp, scale=0.4,
                               attention_mask=mask, softcap=softcap, sinks=sinks, backend=backend)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.detach().double().numpy(), want, rtol=0, atol=atol,
                                   err_msg=f"{name} {case} {backend}")


def test_auto_picks_a_backend_that_computes_them_for_a_large_map(monkeypatch):
    """Past the materialize threshold, where ``auto`` takes flex off the CPU, with sinks it takes
    blockwise for a bias (chunked for none), and stays exact; a cap alone keeps flex (its score_mod)."""
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 0)
    monkeypatch.setattr(posenc.attn, "_flex_first", lambda q: True)  # as on a GPU
    q, k, v, _ = _inputs(1, 2, 13, 13, torch.float32, seed=2)
    alibi = small_module("alibi")
    with torch.no_grad():
        assert posenc.attn._choose_backend("auto", q, k, v, alibi) == "flex"
        assert posenc.attn._choose_backend("auto", q, k, v, alibi, sinks=True) == "blockwise"
        assert posenc.attn._choose_backend("auto", q, k, v, None, sinks=True) == "chunked"
    monkeypatch.setattr(posenc.attn, "_flex_first", lambda q: False)
    pe = small_module("alibi").double()
    q, k, v, sinks = _inputs(1, 2, 13, 13, torch.float64, seed=2)
    pos = torch.arange(13)
    want = _reference(q, k, v, pe, q_positions=pos, k_positions=pos, mask=None, softcap=3.0, sinks=sinks,
                      scale=1 / math.sqrt(D))
    got = posenc.attention(q, k, v, pe, causal=True, softcap=3.0, sinks=sinks)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", [None, "rope", "alibi", "transformer_xl"])
def test_gradients_in_q_k_v_and_sinks_match_the_reference(name, case, small_chunks):
    """Autograd's gradients of q, k, v and the sinks (GQA, key padding, odd lengths) along random
    directions equal central differences of the float64 reference."""
    softcap, with_sinks = CASES[case]
    b, lq, lk = 2, 9, 11
    pe = None if name is None else small_module(name).double()
    q, k, v, sinks = _inputs(b, 2, lq, lk, torch.float64, seed=3, grad=True)
    sinks_arg = sinks if with_sinks else None
    mask = _padding(b, lk, [4, 0])
    kp = torch.arange(lk)
    qp = kp[lk - lq:]
    w = torch.randn(b, H, lq, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    leaves = {"q": q, "k": k, "v": v, **({"sinks": sinks} if with_sinks else {})}
    for backend in ["materialize", "chunked"] + (["blockwise"] if name in ("alibi", "transformer_xl") else []):
        for leaf in leaves.values():
            leaf.grad = None
        out = posenc.attention(q, k, v, pe, causal=True, q_positions=qp, k_positions=kp, attention_mask=mask,
                               softcap=softcap, sinks=sinks_arg, backend=backend)
        (out * w).sum().backward()

        def loss():
            ref = _reference(q, k, v, pe, q_positions=qp, k_positions=kp, mask=mask, softcap=softcap,
                             sinks=sinks_arg, scale=1 / math.sqrt(D))
            return float((ref * w.numpy()).sum())

        assert_directional_gradients(leaves, loss, seed=5, rtol=1e-6)


@pytest.mark.parametrize("padded", [False, True], ids=["no mask", "key padding"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire", "transformer_xl"])
def test_blockwise_gradients_equal_the_materialized_path(name, case, padded, small_chunks):
    """Blockwise's own backward (the cap's 1 − tanh², the sinks' −Σ e^{σ − lse} δ) against autograd
    through the materialized path, into q, k, v, the sinks and the scheme's parameters (T5's table,
    KERPLE's r1/r2, FIRE's MLP, Transformer-XL's projections), GQA and Lq < Lk at odd lengths."""
    softcap, with_sinks = CASES[case]
    b, lq, lk = 2, 17, 23
    pe = small_module(name).double()
    q, k, v, sinks = _inputs(b, 2, lq, lk, torch.float64, seed=10, grad=True)
    sinks_arg = sinks if with_sinks else None
    mask = _padding(b, lk, [lk - lq + 3, 0]) if padded else None
    w = torch.randn(b, H, lq, D, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    inputs = [q, k, v, *([sinks] if with_sinks else []), *[p for p in pe.parameters() if p.requires_grad]]
    results = []
    for backend in ["materialize", "blockwise"]:
        out = posenc.attention(q, k, v, pe, causal=True, attention_mask=mask, softcap=softcap, sinks=sinks_arg,
                               backend=backend)
        results.append([out, *torch.autograd.grad((out * w).sum(), inputs, allow_unused=True)])
    for i, (want, got) in enumerate(zip(*results)):
        if want is None:
            assert got is None or not bool(got.any()), i
            continue
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10, msg=lambda m: f"{name} {case} input {i}: {m}")


def test_the_cap_and_the_sinks_sit_where_transformers_puts_them():
    """Gemma 2's and GPT-OSS's own eager attention (transformers) with an additive causal mask:
    ``posenc.attention`` with ``softcap=`` / ``sinks=`` gives the same output (float64)."""
    gemma2 = pytest.importorskip("transformers.models.gemma2.modeling_gemma2")
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    b, lq, lk = 2, 7, 7
    q, k, v, sinks = _inputs(b, 2, lq, lk, torch.float64, seed=6)
    additive = torch.zeros(b, 1, lq, lk, dtype=torch.float64).masked_fill(
        torch.ones(lq, lk, dtype=torch.bool).triu(1), torch.finfo(torch.float64).min)
    module = types.SimpleNamespace(num_key_value_groups=H // 2, head_dim=D, training=False, sinks=sinks)
    want, _ = gemma2.eager_attention_forward(module, q, k, v, additive, scaling=0.3, softcap=1.7)
    got = posenc.attention(q, k, v, None, causal=True, scale=0.3, softcap=1.7)
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=0, atol=1e-6)  # Gemma 2's softmax runs in float32
    want, _ = gpt_oss.eager_attention_forward(module, q, k, v, additive, scaling=0.3)
    got = posenc.attention(q, k, v, None, causal=True, scale=0.3, sinks=sinks)
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"softcap": 0.0}, ValueError, "softcap must be finite and > 0"),
    ({"softcap": -1.0}, ValueError, "got -1.0"),
    ({"softcap": float("inf")}, ValueError, "softcap must be finite"),
    ({"softcap": float("nan")}, ValueError, "softcap must be finite"),
    ({"softcap": "50"}, TypeError, "softcap must be a float"),
    ({"softcap": True}, TypeError, "softcap must be a float"),
    ({"sinks": torch.zeros(3)}, ValueError, "sinks must have shape [H=4]"),
    ({"sinks": torch.zeros(1, 4)}, ValueError, "got [1, 4]"),
    ({"sinks": torch.zeros(4, dtype=torch.long)}, TypeError, "sinks must be floating point"),
    ({"sinks": [0.0] * 4}, TypeError, "sinks must be a floating torch.Tensor"),
])
def test_bad_softcap_and_sinks_are_refused_naming_them(kwargs, error, words):
    q, k, v, _ = _inputs(1, 4, 5, 5, torch.float32, seed=7)
    with pytest.raises(error, match=re.escape(words)):
        posenc.attention(q, k, v, causal=True, **kwargs)


def test_flex_refuses_sinks():
    q, k, v, _ = _inputs(1, 4, 5, 5, torch.float32, seed=8)
    with pytest.raises(ValueError, match="backend='flex' does not compute sinks="):
        posenc.attention(q, k, v, small_module("alibi"), causal=True, backend="flex", sinks=torch.zeros(H))


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # on the worker that has paid inductor's start (imports, ISA probes)
@pytest.mark.filterwarnings("error::posenc.attn.FlexFallbackWarning")
@pytest.mark.parametrize("padded", [False, True], ids=["no mask", "key padding"])
def test_flex_caps_in_its_score_mod(padded):
    """FlexAttention (compiled, forward: CPU flex has no backward) with the cap in its ``score_mod``
    before ALiBi's bias, grouped heads, past one 128-key block: the float64 reference."""
    b, lq, lk = 2, 131, 150
    pe = small_module("alibi")
    q, k, v, _ = _inputs(b, 2, lq, lk, torch.float32, seed=12)
    mask = _padding(b, lk, [30, 0]) if padded else None
    kp = torch.arange(lk)
    qp = kp[lk - lq:]
    want = _reference(q, k, v, pe.double(), q_positions=qp, k_positions=kp, mask=mask, softcap=2.0, sinks=None,
                      scale=1 / math.sqrt(D))
    with torch.no_grad():
        got = posenc.attention(q, k, v, pe.float(), causal=True, attention_mask=mask, softcap=2.0, backend="flex")
    np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=2e-5)
