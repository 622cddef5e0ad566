"""FoPE (``fope``): the module against its float64 reference (dtypes, odd lengths, offsets, shared and
grouped coefficient sets, both layouts), RoPE recovered at zero noise, parity with vLLM's
``FourierRotaryEmbedding`` and the paper's ``FourierEmbedding`` (their few functions re-stated here,
as neither is installed) with coefficients drawn at random, ``posenc.attention`` with grouped heads,
documents and cached decoding equal to recomputing, gradients of learned coefficients, the
coefficients kept by ``state_dict``, bad input. (The generic checks are in test_schemes.py.)
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


def _build(head_dim=16, num_heads=2, max_positions=512, seed=0, **kw):
    torch.manual_seed(seed)
    return posenc.build({"scheme": "fope", "head_dim": head_dim, "num_heads": num_heads,
                         "max_positions": max_positions, **kw})


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


# -- the reference and the module ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout,sets,heads", [("half", 2, 4), ("interleaved", 1, 3)])
def test_module_matches_its_reference(dtype, layout, sets, heads):
    pe = _build(num_heads=sets, layout=layout, init_gain=0.6).to(dtype)
    x = torch.randn(2, heads, 37, 16).to(dtype)
    p = torch.arange(37) + 3001  # odd length, an offset past the training length
    out = pe(x, p)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close(out, pe.reference(x.double().numpy(), p.numpy()), what=f"{dtype} {layout}")


def test_frequencies_clipped_below_one_turn_in_the_training_length():
    theta = ref.fope_inv_freq(16, 10000.0, 512)  # θ_j = 10^(−j/2): 1, 0.32, 0.1, 0.032 kept; 0.01 < 2π/512 ≈ 0.0123
    assert theta.tolist() == pytest.approx([10 ** (-j / 2) for j in range(4)], rel=1e-15)
    assert _build().frequencies == 4 and ref.fope_inv_freq(16, 10000.0, 1).size == 0


def test_zero_noise_is_rope_with_the_low_frequencies_clipped_to_zero():
    """``init_gain=0``: A = B = I, so FoPE is RoPE whose pairs past M do not turn; with every frequency
    kept (a training length past the longest wavelength) it is posenc's ``rope``."""
    x, p = torch.randn(1, 2, 9, 16, dtype=torch.float64), torch.arange(9) + 40
    pe = _build(init_gain=0.0).double()
    theta = np.zeros(8)
    theta[:4] = ref.fope_inv_freq(16, 10000.0, 512)
    assert_close(pe(x, p), ref.rope(x.numpy(), p.numpy(), theta, layout="half"))
    everything = _build(init_gain=0.0, max_positions=10**6).double()
    rope = posenc.build({"scheme": "rope", "head_dim": 16}).double()
    torch.testing.assert_close(everything(x, p), rope(x, p), rtol=0, atol=1e-12)


# -- the code people run (re-stated) ----------------------------------------------------------------

def vllm_fope(q, k, positions, *, head_size, base, max_position_embeddings, cos_coef, sin_coef):
    """vLLM's ``FourierRotaryEmbedding`` (``fope.py``: ``_compute_inv_freq`` with ``num_inv_freq=None``,
    ``_compute_cos_sin_cache`` with ``fope_sep_head``, ``forward_native``) re-stated in float64:
    ``q [T, H, D]``, ``k [T, H_kv, D]``, coefficients ``[H_kv, M, M]``."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    inv_freq = inv_freq[inv_freq > 2.0 * math.pi / max_position_embeddings]
    freqs = torch.einsum("j,i->ji", positions.double(), inv_freq)  # (T, M)
    sin = torch.einsum("tD,hDd->thd", freqs.sin(), sin_coef)
    cos = torch.einsum("tD,hDd->thd", freqs.cos(), cos_coef)
    sin = torch.nn.functional.pad(sin, (0, head_size // 2 - sin.size(-1)), value=0)
    cos = torch.nn.functional.pad(cos, (0, head_size // 2 - cos.size(-1)), value=1)
    cos, sin = torch.cat((cos, cos), -1).flatten(0, 1)[:, None], torch.cat((sin, sin), -1).flatten(0, 1)[:, None]
    t, kv = q.shape[0], k.shape[1]
    qv, kv_ = q.reshape(t * kv, -1, head_size), k.reshape(t * kv, -1, head_size)  # (T·H_kv, G, D), (T·H_kv, 1, D)
    q2, k2 = qv * cos + _rotate_half(qv) * sin, kv_ * cos + _rotate_half(kv_) * sin
    return q2.reshape(q.shape), k2.reshape(k.shape)


def paper_fope(x, *, head_dim, base, max_sequence_length, sin_coef, cos_coef):
    """The paper's ``FourierEmbedding`` (TsinghuaC3I/Fourier-Position-Embedding, ``olmo/model.py``, with its
    configs' ``rope_clamp_floor_freq``, ``rope_clamp_floor_to_zero``, ``fourier_ignore_zero``,
    ``fourier_separate_basis``, ``fourier_separate_head``) re-stated in float64 for ``x [B, H, L, D]`` at
    positions ``0 … L−1``: coefficients ``[H, M, P]`` with ``P = min(M, D/4)``."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    inv_freq[inv_freq < 2 * math.pi / max_sequence_length] = 0.0
    inv_freq = inv_freq[inv_freq != 0.0][None, :]  # (1, M)
    seq = torch.arange(x.shape[-2], dtype=torch.float64)
    freqs = torch.einsum("t,hd->htd", seq, inv_freq)[None]  # (1, 1, L, M)
    fs = torch.einsum("bhtD,hDd->bhtd", freqs.sin(), sin_coef)
    fc = torch.einsum("bhtD,hDd->bhtd", freqs.cos(), cos_coef)
    fs = torch.nn.functional.pad(fs, (0, head_dim // 2 - fs.size(-1)), value=1)
    fc = torch.nn.functional.pad(fc, (0, head_dim // 2 - fc.size(-1)), value=1)
    fs, fc = torch.cat((fs, fs), -1), torch.cat((fc, fc), -1)
    return x * fc + _rotate_half(x) * fs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_vllms_fourier_rotary_embedding(seed):
    """Random sizes, base, training length and coefficients; queries of H heads and keys of H_kv."""
    g = torch.Generator().manual_seed(seed)
    d, kv, group = (16, 32, 64)[seed], (1, 2, 4)[seed], (4, 2, 1)[seed]
    base = float(torch.randint(100, 50000, (1,), generator=g))
    length = int(torch.randint(64, 8192, (1,), generator=g))
    pe = _build(head_dim=d, num_heads=kv, max_positions=length, base=base, init_gain=1.0, seed=seed).double()
    t = 29
    pos = torch.randint(0, 3 * length, (t,), generator=g)
    q, k = torch.randn(t, kv * group, d, generator=g, dtype=torch.float64), torch.randn(t, kv, d, generator=g,
                                                                                     dtype=torch.float64)
    tq, tk = vllm_fope(q, k, pos, head_size=d, base=base, max_position_embeddings=length,
                       cos_coef=pe.cos_coef.detach(), sin_coef=pe.sin_coef.detach())
    ours_q, ours_k = (pe(x.transpose(0, 1)[None], pos)[0].transpose(0, 1) for x in (q, k))  # (T, H, D)
    torch.testing.assert_close(ours_q, tq, rtol=0, atol=1e-9)  # their unreduced float64 angles, positions < 25k
    torch.testing.assert_close(ours_k, tk, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_equals_the_papers_fourier_embedding_on_its_series_pairs(seed):
    """The paper's code gives the series to ``P = min(M, D/4)`` pairs and pads the rest with (C, S) = (1, 1):
    equal to posenc on those P pairs (posenc's coefficients' first P columns its own); on the others it
    turns each pair into ``(x_a − x_b, x_b + x_a)`` where posenc (and vLLM) leave the clipped pairs as they are."""
    g = torch.Generator().manual_seed(seed)
    d, heads = (32, 64)[seed], (2, 3)[seed]
    length = (512, 2048)[seed]
    pe = _build(head_dim=d, num_heads=heads, max_positions=length, init_gain=0.3 + seed, seed=seed).double()
    m, p = pe.frequencies, min(pe.frequencies, d // 4)
    x = torch.randn(2, heads, 21, d, generator=g, dtype=torch.float64)
    theirs = paper_fope(x, head_dim=d, base=10000.0, max_sequence_length=length,
                        sin_coef=pe.sin_coef.detach()[..., :p], cos_coef=pe.cos_coef.detach()[..., :p])
    ours = pe(x, torch.arange(21))
    series = torch.cat((torch.arange(p), d // 2 + torch.arange(p)))
    torch.testing.assert_close(ours[..., series], theirs[..., series], rtol=0, atol=1e-12)
    assert m > p or seed == 0
    clipped = torch.cat((torch.arange(m, d // 2), d // 2 + torch.arange(m, d // 2)))
    torch.testing.assert_close(ours[..., clipped], x[..., clipped], rtol=0, atol=0)
    a, b = x[..., m:d // 2], x[..., d // 2 + m:]
    torch.testing.assert_close(theirs[..., clipped], torch.cat((a - b, b + a), -1), rtol=0, atol=1e-12)


# -- attention ---------------------------------------------------------------------------------------

def test_cached_decoding_and_documents_equal_recomputing():
    pe = _build(num_heads=2, init_gain=0.5).double()
    q = torch.randn(1, 4, 13, 16, dtype=torch.float64)
    k, v = torch.randn(1, 2, 13, 16, dtype=torch.float64), torch.randn(1, 2, 13, 16, dtype=torch.float64)
    full = posenc.attention(q, k, v, pe, causal=True)
    for t in (0, 7, 12):
        step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], pe, causal=True,
                                q_positions=torch.tensor([t]), k_positions=torch.arange(t + 1))
        torch.testing.assert_close(step, full[:, :, t:t + 1], rtol=0, atol=1e-12)
    packed = posenc.attention(q, k, v, pe, causal=True, document_ids=torch.tensor([0] * 6 + [1] * 7))
    torch.testing.assert_close(packed[:, :, 6:], posenc.attention(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], pe,
                                                                  causal=True), rtol=0, atol=1e-12)
    p = np.arange(13)
    expected = ref.attention(pe.reference(q.numpy(), p), pe.reference(k.numpy(), p), v.numpy(), causal=True)
    torch.testing.assert_close(full, torch.from_numpy(expected), rtol=0, atol=1e-12)


def test_learned_coefficients_get_their_gradient_fixed_ones_none():
    pe = _build(learned=True, init_gain=0.5).double()
    x, w = torch.randn(2, 2, 11, 16, dtype=torch.float64), torch.randn(2, 2, 11, 16, dtype=torch.float64)

    def loss():
        return (posenc.attention(x, x, x, pe, causal=True) * w).sum()

    loss().backward()
    assert_directional_gradients({"cos_coef": pe.cos_coef, "sin_coef": pe.sin_coef}, loss, seed=5)
    fixed = _build()
    assert not any(p.requires_grad for p in fixed.parameters())


def test_state_dict_keeps_the_drawn_coefficients():
    a, b = _build(seed=1), _build(seed=2)
    x, p = torch.randn(1, 2, 5, 16), torch.arange(5)
    assert (a(x, p) - b(x, p)).abs().max() > 1e-3
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b(x, p), a(x, p), rtol=0, atol=0)


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, error, text", [
    ({"head_dim": 15}, ValueError, "head_dim must be even"),
    ({"max_positions": 0}, ValueError, "max_positions must be >= 1, got 0"),
    ({"init_gain": -0.1}, ValueError, "init_gain must be >= 0.0"),
    ({"init_gain": float("inf")}, ValueError, "init_gain must be finite"),
    ({"learned": 1}, TypeError, "learned must be True or False"),
    ({"base": -1}, ValueError, "base must be > 0.0"),
    ({"layout": "neox"}, ValueError, "layout must be one of 'half', 'interleaved'"),
])
def test_bad_specs_are_refused_naming_the_parameter(spec, error, text):
    with pytest.raises(error, match=text):
        posenc.build({"scheme": "fope", "head_dim": 16, "num_heads": 2, **spec})


def test_heads_must_be_a_multiple_of_the_coefficient_sets():
    with pytest.raises(ValueError, match=r"x must have a multiple of num_heads=2 heads"):
        _build()(torch.randn(1, 3, 4, 16), torch.arange(4))


def test_the_benchmark_model_can_run_it_with_grouped_heads_and_fits_it_to_the_training_length():
    """The kind protocol: ``check_runs_at`` calls it with the model's heads (a multiple of the sets, not
    one head), and ``fit_to_training`` makes ``max_positions`` the training length unless it is given."""
    pe = _build(head_dim=16, num_heads=2)
    pe.check_runs_at(torch.arange(40), head_dim=16, num_heads=4)
    cls = posenc.registry.get("fope").cls
    assert cls.fit_to_training({"scheme": "fope"}, 64) == {"max_positions": 64}
    assert cls.fit_to_training({"scheme": "fope", "max_positions": 512}, 64) == {}


# -- inside a transformers model -----------------------------------------------------------------------

def test_patched_into_a_llama_it_trains_and_decodes_through_the_cache():
    """``posenc.interop.patch`` (the attention-function path) with one coefficient set per key/value head
    (vLLM's layout): the logits change, one step trains learned coefficients, and greedy ``generate()`` with
    the cache equals recomputing (``tests/_patched_llama.py``)."""
    check_patched_llama({"scheme": "fope", "num_heads": 2, "max_positions": 64, "learned": True, "init_gain": 1.0},
                        trained="cos_coef", hidden_size=64, min_change=1e-4)
