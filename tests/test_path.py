"""PaTH: the scores are q_iᵀ (H_i ⋯ H_{j+1}) k_j with the reflections multiplied out as matrices,
and inputs past max_length are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.encodings._base import to_numpy
from posenc.reference.attention import causal_mask, masked_attention
from posenc.reference.path import path_gates


def test_scores_are_the_product_of_householder_matrices():
    torch.manual_seed(0)
    m = posenc.build({"scheme": "path", "num_heads": 2, "head_dim": 4, "d_model": 6}).double()
    q, k, v = (torch.randn(1, 2, 7, 4, dtype=torch.float64) for _ in range(3))
    hidden = torch.randn(1, 7, 6, dtype=torch.float64)
    w, beta = path_gates(to_numpy(hidden), to_numpy(m.w_weight), to_numpy(m.beta_weight), to_numpy(m.beta_bias), 2)
    qn, kn = to_numpy(q), to_numpy(k)
    scores = np.full((1, 2, 7, 7), -np.inf)
    for h in range(2):
        for i in range(7):
            product = np.eye(4)
            for j in range(i, -1, -1):  # product = H_i ⋯ H_{j+1}
                scores[0, h, i, j] = qn[0, h, i] @ product @ kn[0, h, j]
                product = product @ (np.eye(4) - beta[0, h, j] * np.outer(w[0, h, j], w[0, h, j]))
    expected = masked_attention(scores / 2.0, to_numpy(v), causal_mask(7, 7))
    np.testing.assert_allclose(to_numpy(posenc.attention(q, k, v, m, causal=True, hidden=hidden)), expected,
                               rtol=0, atol=1e-12)


def test_long_inputs_are_refused():
    m = posenc.build({"scheme": "path", "num_heads": 1, "head_dim": 4, "d_model": 4, "max_length": 16})
    q = torch.randn(1, 1, 17, 4)
    with pytest.raises(ValueError, match="Lk=17 is over max_length=16"):
        posenc.attention(q, q, q, m, causal=True, hidden=torch.randn(1, 17, 4))


def _reflections(w, beta, i, j):
    """``H_i H_{i−1} ⋯ H_j`` for one head (the identity when ``i < j``), multiplied out."""
    out = np.eye(w.shape[-1])
    for t in range(i, j - 1, -1):
        out = out @ (np.eye(w.shape[-1]) - beta[t] * np.outer(w[t], w[t]))
    return out


def _chunk_product(w, beta):
    """``H_{c−1} ⋯ H_0`` of one chunk by the UT transform, as flash-linear-attention's naive reference
    builds its chunk matrices: ``H_0 ⋯ H_{c−1} = I − Σ_t y_t w_tᵀ`` with ``y_t = β_t (w_t − Σ_{s<t} (w_s·w_t) y_s)``
    (forward substitution), and the product the other way round is its transpose."""
    y = np.zeros_like(w)
    for t in range(w.shape[0]):
        y[t] = beta[t] * (w[t] - sum((w[s] @ w[t]) * y[s] for s in range(t)))
    return (np.eye(w.shape[-1]) - y.T @ w).T


def _fla_naive(q, k, v, w, beta, *, scale, chunk):
    """flash-linear-attention's ``naive_path_attn`` (no forget gate) re-stated from its definition,
    ``[H, L, D]`` for one sequence: the path from key ``j`` to query ``i`` cut at the chunk
    boundaries, ``q_iᵀ (H_i ⋯ H_{start of i's chunk}) · P_{n−1} ⋯ P_{m+1} · (H_{end of j's chunk} ⋯ H_{j+1}) k_j``
    with each whole chunk's ``P`` from the UT transform; the causal softmax of the scaled scores."""
    heads, length, _ = q.shape
    scores = np.full((heads, length, length), -np.inf)
    for h in range(heads):
        chunks = [_chunk_product(w[h, c:c + chunk], beta[h, c:c + chunk]) for c in range(0, length, chunk)]
        for i in range(length):
            n = i // chunk
            for j in range(i + 1):
                m = j // chunk
                if m == n:
                    path = _reflections(w[h], beta[h], i, j + 1)
                else:
                    path = _reflections(w[h], beta[h], i, n * chunk)
                    for c in range(n - 1, m, -1):
                        path = path @ chunks[c]
                    path = path @ _reflections(w[h], beta[h], (m + 1) * chunk - 1, j + 1)
                scores[h, i, j] = q[h, i] @ path @ k[h, j]
    weights = np.exp(scores * scale - (scores * scale).max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def _fla_gates(m, hidden, sizes):
    """flash-linear-attention's ``PaTHAttention`` making ``w`` and ``β`` from the layer's input,
    re-stated with posenc's weights: ``w_proj`` (two bias-free linear maps through the rank, or
    one), the ``ShortConvolution`` (a depthwise nn.Conv1d padded by ``K − 1`` on the left, SiLU,
    run on each packed sequence alone, as its ``cu_seqlens``), heads split and L2-normalized;
    ``β = 2σ(bt_proj x)``. ``hidden [L, d_model]`` for one sequence of documents ``sizes``."""
    x = hidden
    w = x @ m.w_weight.T if m.w_rank is None else (x @ m.w_down.T) @ m.w_up.T  # (L, H·D)
    if m.w_conv_size is not None:
        parts, start = [], 0
        for n in sizes:
            seg = w[start:start + n].T.unsqueeze(0)  # (1, H·D, n)
            out = torch.nn.functional.conv1d(seg, m.w_conv.unsqueeze(1), padding=m.w_conv_size - 1,
                                             groups=seg.shape[1])[..., :n]
            parts.append(torch.nn.functional.silu(out)[0].T)
            start += n
        w = torch.cat(parts)
    w = torch.nn.functional.normalize(w.view(x.shape[0], m.num_heads, m.head_dim), dim=-1).transpose(0, 1)
    beta = 2 * torch.sigmoid(x @ m.beta_weight.T + m.beta_bias).T  # (H, L)
    return w, beta


@pytest.mark.parametrize("options", [{}, {"w_rank": 32}, {"w_conv_size": 3}, {"w_rank": 32, "w_conv_size": 3},
                                     {"w_rank": 2, "w_conv_size": 5}], ids=str)
def test_equals_flash_linear_attentions_naive_reference_and_layer(options):
    """flash-linear-attention's layer defaults (``w_rank=32``, ``w_conv_size=3``) and the others:
    the output equals its naive chunked reference (chunks of 3 over 8 tokens, so one is partial)
    on the ``w`` and ``β`` its layer makes, each packed document alone; random weights."""
    rng = np.random.default_rng(len(options) + 7 * options.get("w_conv_size", 0))
    h, d, d_model = 2, 4, 6
    torch.manual_seed(int(rng.integers(1 << 30)))
    m = posenc.build({"scheme": "path", "num_heads": h, "head_dim": d, "d_model": d_model, **options}).double()
    sizes = [8, 5]
    length = sum(sizes)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, h, length, d))) for _ in range(3))
    hidden = torch.from_numpy(rng.standard_normal((1, length, d_model)))
    docs = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    with torch.no_grad():
        out = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs)
        w, beta = (to_numpy(t) for t in _fla_gates(m, hidden[0], sizes))
    start = 0
    for n in sizes:
        part = slice(start, start + n)
        expected = _fla_naive(*(to_numpy(t[0, :, part]) for t in (q, k, v)), w[:, part], beta[:, part],
                              scale=d ** -0.5, chunk=3)
        np.testing.assert_allclose(to_numpy(out[0, :, part]), expected, rtol=0, atol=1e-12)
        start += n
    reference = m.reference(to_numpy(q), to_numpy(k), to_numpy(v), to_numpy(hidden), document_ids=docs.numpy())
    np.testing.assert_allclose(to_numpy(out), reference, rtol=0, atol=1e-12)


def test_the_short_convolution_is_causal_and_decodes_exactly():
    """A token's ``w`` reads its own and the ``K − 1`` previous inputs only: changing ``hidden`` from
    token 6 on leaves the outputs of queries 0–5 exactly as they were, and moves query 6's; one
    query at a time over the cache (``hidden`` of every key) equals the full pass."""
    torch.manual_seed(3)
    m = posenc.build({"scheme": "path", "num_heads": 2, "head_dim": 4, "d_model": 6, "w_rank": 3,
                      "w_conv_size": 3}).double()
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 10, 4, generator=g, dtype=torch.float64) for _ in range(3))
    hidden = torch.randn(1, 10, 6, generator=g, dtype=torch.float64)
    later = hidden.clone()
    later[:, 6:] += torch.randn(1, 4, 6, generator=g, dtype=torch.float64)
    with torch.no_grad():
        full = posenc.attention(q, k, v, m, causal=True, hidden=hidden)
        changed = posenc.attention(q, k, v, m, causal=True, hidden=later)
        assert torch.equal(full[:, :, :6], changed[:, :, :6])
        assert not torch.allclose(full[:, :, 6], changed[:, :, 6])
        for t in range(10):
            step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], m, causal=True,
                                    hidden=hidden[:, :t + 1])
            torch.testing.assert_close(step[:, :, 0], full[:, :, t], rtol=0, atol=1e-12)


def test_options_are_checked_and_bounded():
    base = {"scheme": "path", "num_heads": 2, "head_dim": 4, "d_model": 6}
    m = posenc.build(base)
    assert m.w_rank is None and m.w_conv_size is None and hasattr(m, "w_weight")  # the paper's formula, as before
    fla = posenc.build({**base, "w_rank": 32, "w_conv_size": 3})
    assert fla.w_down.shape == (32, 6) and fla.w_up.shape == (8, 32) and fla.w_conv.shape == (8, 3)
    assert not hasattr(fla, "w_weight") and posenc.build(fla.spec).spec == fla.spec
    for key, value, error in [("w_rank", 0, ValueError), ("w_conv_size", 0, ValueError), ("w_rank", 2.5, TypeError),
                              ("w_conv_size", "3", TypeError)]:
        with pytest.raises(error, match=key):
            posenc.build({**base, key: value})
    with pytest.raises(ValueError, match=r"w_rank=1099511627776 needs .* for its projections d_model → w_rank"):
        posenc.build({**base, "w_rank": 2**40})
    with pytest.raises(ValueError, match=r"w_conv_size must be at most 64 on the command line"):
        posenc.registry.check_limits({**base, "w_conv_size": 65})


def test_gradients_through_the_low_rank_and_the_convolution_are_the_references():
    """Blockwise, packed documents: the gradients into ``hidden``, ``w_down``, ``w_up`` and ``w_conv``
    equal the central differences of the float64 reference along random directions."""
    from conftest import assert_directional_gradients

    torch.manual_seed(5)
    m = posenc.build({"scheme": "path", "num_heads": 2, "head_dim": 4, "d_model": 6, "w_rank": 3,
                      "w_conv_size": 3}).double()
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    hidden = torch.randn(1, 9, 6, generator=g, dtype=torch.float64, requires_grad=True)
    docs = torch.tensor([0] * 4 + [1] * 5)
    weights = torch.randn(1, 2, 9, 4, generator=g, dtype=torch.float64)
    out = posenc.attention(q, k, v, m, causal=True, hidden=hidden, document_ids=docs, backend="blockwise")
    (out * weights).sum().backward()

    def loss():
        ref = m.reference(to_numpy(q), to_numpy(k), to_numpy(v), to_numpy(hidden), document_ids=docs.numpy())
        return float((ref * weights.numpy()).sum())

    assert_directional_gradients({"hidden": hidden, "w_down": m.w_down, "w_up": m.w_up, "w_conv": m.w_conv}, loss,
                                 seed=7)


def test_the_command_line_takes_the_options_and_refuses_wrong_ones(capsys):
    from posenc.cli import main

    assert main(["show", "path:w_rank=32,w_conv_size=3", "--length", "8"]) == 0
    capsys.readouterr()
    for spec, message in [("path:w_conv_size=65", "w_conv_size must be at most 64 on the command line"),
                          ("path:w_rank=wide", "w_rank must be an integer, got 'wide'")]:
        assert main(["show", spec]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
