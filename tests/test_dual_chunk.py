"""Dual Chunk Attention (``dual_chunk``) against its float64 reference (module at three dtypes, odd
lengths, offsets, batched positions, both layouts; attention on materialize, chunked and blockwise,
causal and with documents; gradients; decoding with a KV cache), the claim it rests on (no
query–key distance exceeds ``chunk_size``; inside one chunk it is RoPE), its checks, and parity with
the code people run: vLLM's ``DualChunkRotaryEmbedding`` with ``DualChunkFlashAttention``'s dense
prefill, re-stated below (vLLM needs CUDA and is not a test dependency), parameters drawn at random.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from conftest import DTYPES, assert_close, attention_reference

H, D = 2, 8
SPEC = {"scheme": "dual_chunk", "head_dim": D, "chunk_size": 7, "local_size": 2,
        "original_max_position_embeddings": 6}  # chunks of 5: every relation in a few dozen tokens


def build(**overrides):
    return posenc.build({**SPEC, **overrides})


def qkv(lq: int, lk: int, dtype=torch.float32, seed: int = 0, batch: int = 2):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, H, n, D, generator=g).to(dtype) for n in (lq, lk, lk))


# -- the module against the reference ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_module_matches_reference_at_odd_lengths_and_offsets(dtype, layout):
    m = build(layout=layout).to(dtype)
    q, k, _ = qkv(13, 29, dtype)
    kp = torch.stack([torch.arange(29) + 3, torch.arange(29) + 41])  # (2, 29): two offsets
    qp = kp[:, -13:]
    out = m(q, k, qp, kp)
    assert out.shape == (2, H, 13, 29) and out.dtype == dtype
    assert_close(out, m.reference(q, k, qp, kp), what=f"dual_chunk {layout} at {dtype}")


def test_no_distance_exceeds_chunk_size_and_one_chunk_is_rope():
    """The claim: for every causal pair, ``0 <= q_pos − k_pos <= chunk_size`` at any length; and
    with a chunk longer than the sequence the scores are RoPE's."""
    p = np.arange(500)
    for chunk, local in [(7, 2), (16, 4), (9, 0), (5, 4)]:
        qpos = ref.dual_chunk_query_positions(p, p, chunk_size=chunk, local_size=local)
        kpos = ref.dual_chunk_key_positions(p, chunk_size=chunk, local_size=local)
        d = (qpos - kpos[None, :])[np.tril_indices(len(p))]
        assert d.min() >= 0 and d.max() <= chunk, (chunk, local)
    q, k, v = qkv(11, 23)
    rope = posenc.build({"scheme": "rope", "head_dim": D})
    dca = build(chunk_size=40, local_size=3, original_max_position_embeddings=None)
    for backend in ["materialize", "blockwise"]:
        torch.testing.assert_close(posenc.attention(q, k, v, dca, causal=True, backend=backend),
                                   posenc.attention(q, k, v, rope, causal=True), atol=2e-6, rtol=0)


def test_temperature_is_the_log_of_the_length_seen():
    tau = ref.dual_chunk_temperature(np.array([0, 5, 11, 59]), 6)
    np.testing.assert_allclose(tau, [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(10)], rtol=1e-15)
    torch.testing.assert_close(build().temperature(torch.tensor([0, 5, 11, 59])), torch.from_numpy(tau**2))
    np.testing.assert_array_equal(ref.dual_chunk_temperature(np.arange(9)), np.ones(9))


# -- attention: every backend, documents, gradients, the KV cache ------------------------------------

@pytest.mark.parametrize("backend", ["materialize", "chunked", "blockwise"])
def test_attention_matches_reference_on_every_backend(backend):
    m = build()
    q, k, v = qkv(37, 37)
    out = posenc.attention(q, k, v, m, causal=True, backend=backend)
    assert_close(out, attention_reference(q, k, v, m, causal=True), magnitude=3.0, what=backend)


def test_attention_with_documents_restarts_the_chunks():
    """With ``document_ids`` positions restart in each document, so do the chunks: each document's
    rows equal attention over that document alone."""
    m = build()
    q, k, v = qkv(30, 30, batch=1)
    docs = torch.tensor([0] * 12 + [1] * 18)
    for backend in ["materialize", "blockwise"]:
        out = posenc.attention(q, k, v, m, causal=True, document_ids=docs, backend=backend)
        for lo, hi in [(0, 12), (12, 30)]:
            alone = posenc.attention(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], m, causal=True)
            torch.testing.assert_close(out[:, :, lo:hi], alone, atol=2e-6, rtol=0)


def test_gradients_match_the_float64_reference():
    """Blockwise's recomputing backward and materialize's autograd, against central differences of
    the float64 reference attention."""
    m = build()
    q, k, v = (t.double() for t in qkv(19, 19, batch=1))
    for backend in ["materialize", "blockwise"]:
        leaves = {n: t.clone().requires_grad_() for n, t in zip("qkv", (q, k, v))}
        out = posenc.attention(*leaves.values(), m, causal=True, backend=backend)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        (out * w).sum().backward()
        for name, leaf in leaves.items():
            direction = torch.randn(leaf.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
            eps = 1e-6

            def loss(sign):
                moved = {n: (t.detach() + sign * eps * direction if n == name else t.detach())
                         for n, t in leaves.items()}
                return float((attention_reference(*moved.values(), m, causal=True) * w.numpy()).sum())

            numeric = (loss(1) - loss(-1)) / (2 * eps)
            assert abs(float((leaf.grad * direction).sum()) - numeric) < 1e-6 * max(1.0, abs(numeric)), (backend, name)


def test_decoding_with_a_kv_cache_equals_recomputing():
    m = build()
    q, k, v = qkv(26, 26)
    full = posenc.attention(q, k, v, m, causal=True)
    for n in (9, 17, 26):  # one query at a time, over the keys so far (default positions: a KV cache)
        step = posenc.attention(q[:, :, n - 1:n], k[:, :, :n], v[:, :, :n], m, causal=True)
        torch.testing.assert_close(step, full[:, :, n - 1:n], atol=2e-6, rtol=0)


# -- checks ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, error, match", [
    ({"chunk_size": 1}, ValueError, "chunk_size must be >= 2"),
    ({"local_size": 7}, ValueError, "local_size must be below chunk_size=7"),
    ({"local_size": -1}, ValueError, "local_size must be >= 0"),
    ({"head_dim": 7}, ValueError, "head_dim"),
    ({"base": 0.0}, ValueError, "base"),
    ({"original_max_position_embeddings": 0}, ValueError, "original_max_position_embeddings must be >= 1"),
    ({"layout": "neox"}, ValueError, "layout"),
    ({"chunk_size": 7.5}, TypeError, "chunk_size must be an integer"),
])
def test_bad_spec_is_refused_by_name(overrides, error, match):
    with pytest.raises(error, match=match):
        build(**overrides)


def test_real_positions_are_refused():
    q, k, _ = qkv(3, 3)
    with pytest.raises(TypeError, match="q_positions"):
        build()(q, k, torch.arange(3.0), torch.arange(3))


def test_fit_to_training_takes_chunks_of_the_training_length():
    cls = posenc.registry.get("dual_chunk").cls
    assert cls.fit_to_training({"head_dim": 8}, 256) == {"chunk_size": 256, "local_size": 32,
                                                         "original_max_position_embeddings": 256}
    assert cls.fit_to_training({"chunk_size": 64, "local_size": 4}, 256) == {"original_max_position_embeddings": 256}


# -- parity with vLLM ----------------------------------------------------------------------------------

def _vllm_rotate(x, cos_sin):
    """vLLM's ``_apply_rotary_embedding``, neox style: ``cos_sin [L, D]`` = (cos | sin) of ``[L, D/2]``."""
    cos, sin = cos_sin.chunk(2, dim=-1)
    cos, sin = cos.repeat(1, 2)[:, None], sin.repeat(1, 2)[:, None]  # (L, 1, D)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _vllm_dual_chunk(q, k, v, *, base, chunk_size, local_size, original_max_position_embeddings):
    """vLLM's ``DualChunkRotaryEmbedding.forward_native`` then ``DualChunkFlashAttentionImpl``'s dense
    prefill of one sequence (``_dual_chunk_flash_attn_prefill_func`` without sparse attention), in
    float64: ``q, k, v [L, H, D]`` -> ``[L, H, D]``. Re-stated from vLLM (vllm/model_executor/layers/
    rotary_embedding/dual_chunk_rope.py, vllm/attention/backends/dual_chunk_flash_attn.py)."""
    n, _, d = q.shape
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    chunk_len = chunk_size - local_size

    def cache(t):
        f = torch.outer(t.double(), inv_freq)
        return torch.cat((f.cos(), f.sin()), dim=-1)

    q_cache = cache(torch.arange(chunk_len))
    qc_cache = cache((torch.arange(chunk_len) + chunk_len).clamp(max=chunk_size))
    k_cache = cache(torch.arange(n) % chunk_len)
    positions = torch.arange(n)
    key = _vllm_rotate(k, k_cache[positions])
    query = _vllm_rotate(q, q_cache[positions % chunk_len])
    query_succ = _vllm_rotate(q, qc_cache[positions % chunk_len])
    query_inter = _vllm_rotate(q, qc_cache[chunk_len - 1].repeat(n, 1))
    softmax_scale = 1.0 / math.sqrt(d)
    if original_max_position_embeddings > 0:  # the key cache and the softmax scale both take the factor
        factor = max(1.0, 0.1 * math.log(n / original_max_position_embeddings) + 1.0)
        key, softmax_scale = key * factor, softmax_scale * factor

    def flash(qs, ks, vs, causal):  # flash_attn_varlen_func with return_softmax_lse
        s = torch.einsum("qhd,khd->hqk", qs, ks) * softmax_scale
        if causal:  # aligned at the bottom right
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril(ks.shape[0] - qs.shape[0]).logical_not(),
                              float("-inf"))
        lse = torch.logsumexp(s, -1)  # (H, c)
        return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vs), lse

    outputs, begin = [], 0
    while begin < n:
        prev = (begin // chunk_len) * chunk_len
        end = min(prev + chunk_len, n)
        parts = [flash(query[begin:end], key[prev:end], v[prev:end], True)]
        if prev - chunk_len >= 0:
            parts.append(flash(query_succ[begin:end], key[prev - chunk_len:prev], v[prev - chunk_len:prev], False))
        if prev - 2 * chunk_len >= 0:
            parts.append(flash(query_inter[begin:end], key[:prev - chunk_len], v[:prev - chunk_len], False))
        out = torch.stack([o for o, _ in parts])  # (parts, c, H, D): merged by their log-sum-exp
        weights = torch.softmax(torch.stack([lse for _, lse in parts]), 0)  # (parts, H, c)
        outputs.append((out * weights.transpose(1, 2)[..., None]).sum(0))
        begin = end
    return torch.cat(outputs)


@pytest.mark.parametrize("draw", range(3))
def test_parity_with_vllm_drawn_at_random(draw):
    """posenc's ``dual_chunk`` attention equals vLLM's prefill, parameters drawn at random: every
    query without the temperature; with it, the last query (vLLM's factor is the whole sequence's
    length for every query, posenc's the length each query has seen: they agree there)."""
    rng = np.random.default_rng(draw)
    chunk = int(rng.integers(4, 12))
    local = int(rng.integers(0, chunk))
    n = int(rng.integers(3 * chunk, 6 * chunk))
    base = float(rng.choice([100.0, 10000.0, 1e6]))
    g = torch.Generator().manual_seed(draw)
    q, k, v = (torch.randn(n, H, D, generator=g, dtype=torch.float64) for _ in range(3))
    for original in (0, max(1, n // 3)):
        theirs = _vllm_dual_chunk(q, k, v, base=base, chunk_size=chunk, local_size=local,
                                  original_max_position_embeddings=original)
        m = posenc.build({"scheme": "dual_chunk", "head_dim": D, "chunk_size": chunk, "local_size": local,
                          "base": base, "original_max_position_embeddings": original or None})
        ours = posenc.attention(*(t.transpose(0, 1)[None] for t in (q, k, v)), m, causal=True)[0].transpose(0, 1)
        rows = slice(None) if original == 0 else slice(n - 1, n)
        torch.testing.assert_close(ours[rows], theirs[rows], atol=1e-12, rtol=0)


# -- inside a transformers model ------------------------------------------------------------------------

def test_patched_into_a_llama_it_is_rope_within_a_chunk_and_decodes_through_the_cache():
    """``posenc.interop.patch`` into a Llama (grouped key/value heads): with one chunk longer than the
    text the logits are the model's own (DCA inside a chunk is RoPE); with chunks of 4 tokens they
    change, gradients reach the projections, and greedy ``generate()`` with the cache, across chunks,
    equals recomputing."""
    transformers = pytest.importorskip("transformers")
    import posenc.interop

    config = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="sdpa")
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))

    def patched(spec):
        torch.manual_seed(0)  # a config of its own: patch sets the model's attention implementation
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config)).eval()
        with torch.no_grad():
            before = model(ids).logits
        posenc.interop.patch(model, spec)
        return model, before

    model, before = patched({"scheme": "dual_chunk", "chunk_size": 64, "local_size": 8})
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before, atol=1e-5, rtol=0)
    model, before = patched({"scheme": "dual_chunk", "chunk_size": 6, "local_size": 2,
                             "original_max_position_embeddings": 8})
    with torch.no_grad():  # chunks of l = 4: up to position 6 every distance is kept (the successive
        change = (model(ids).logits - before).abs().amax(dim=(0, 2))  # query position min(p mod 4 + 4, 6)
    assert change[:7].max() < 1e-5 and change[7:].min() > 1e-4  # is p itself), so RoPE's logits; then not
    model(ids, labels=ids).loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 0
    kw = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(model.generate(ids[:1], **kw), model.generate(ids[:1], use_cache=False, **kw))
