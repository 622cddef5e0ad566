"""DAPE: equals the repository's AliBi_DAPE / ParallelKerpleLog_DAPE forward (``x + a + mlp2(cat(x,
a))``, rewritten here with the module's weights), causal or not, and its FIRE_DAPE (FIRE's MLP
with a LeakyReLU: ``fire_activation="leaky_relu"``); the module equals the reference (dtypes,
documents, gradients); its spec wraps a bias scheme."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from conftest import DTYPES, assert_close, assert_directional_gradients
from posenc.encodings._base import to_numpy


@pytest.mark.parametrize("bias", ["alibi", "kerple"])
@pytest.mark.parametrize("causal", [True, False])
def test_equals_the_repositorys_formula(bias, causal):
    torch.manual_seed(0)
    b, h, length, d = 2, 4, 13, 8
    m = posenc.build({"scheme": "dape", "num_heads": h, "bias": bias, "hidden": 16}).double()
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) for _ in range(3))
    x = q @ k.transpose(-1, -2) / math.sqrt(d)  # the scaled scores, [b, np, sq, sk]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    dist = (i - j).abs().double()
    if bias == "alibi":
        a = -m.inner.slopes.view(h, 1, 1) * dist
    else:
        r1, r2 = m.inner.rates()
        a = -r1.double().view(h, 1, 1) * torch.log1p(r2.double().view(h, 1, 1) * dist)
    mlp = torch.nn.Sequential(m.mlp_in, torch.nn.LeakyReLU(), m.mlp_out)
    x_a = torch.cat((x, a.expand(b, h, length, length)), dim=1).permute(0, 2, 3, 1)
    scores = x + a + mlp(x_a).permute(0, 3, 1, 2)
    if causal:
        scores = scores.masked_fill(j > i, float("-inf"))
    expected = torch.softmax(scores, -1) @ v
    with torch.no_grad():
        torch.testing.assert_close(posenc.attention(q, k, v, m, causal=causal), expected, rtol=0, atol=1e-12)


def test_spec_wraps_a_bias_scheme():
    m = posenc.build({"scheme": "dape", "num_heads": 3, "bias": {"scheme": "fire", "num_heads": 3}})
    assert m.inner.name == "fire" and posenc.build(m.spec).spec == m.spec
    with pytest.raises(ValueError, match="must agree"):
        posenc.build({"scheme": "dape", "num_heads": 3, "bias": {"scheme": "kerple", "num_heads": 4}})
    with pytest.raises(ValueError, match="bias must name a bias scheme"):
        posenc.build({"scheme": "dape", "num_heads": 3, "bias": {"scheme": "rope", "head_dim": 8}})
    with pytest.raises(TypeError, match="bias must be a bias scheme's spec"):
        posenc.build({"scheme": "dape", "num_heads": 3, "bias": 3})


def _leaky_fire_dape(h: int, seed: int):
    torch.manual_seed(seed)
    m = posenc.build({"scheme": "dape", "num_heads": h, "bias": {"scheme": "fire", "c": 0.3, "L_threshold": 6.0},
                      "hidden": 16, "fire_activation": "leaky_relu"}).double()
    with torch.no_grad():  # FIRE's units on both sides of 0 on [0, 1], where LeakyReLU and ReLU differ
        m.inner.mlp[0].bias.uniform_(-1.0, 1.0)
        m.inner.L_multiplier.fill_(0.7)
    return m


@pytest.mark.parametrize("length", [5, 13])
def test_leaky_fire_equals_the_repositorys_fire_dape(length):
    """The repository's ``FIRE_DAPE.forward`` re-stated from its definition: the distances
    ``tril(i − j)``, the normaliser ``max(max_j tril(i − j), |L_multiplier · init_L|)`` (= ``max(i, L)``),
    ``log(|c·d| + 1) / (log(|c·norm| + 1) + eps)``, FIRE's ``mlp`` with ``nn.LeakyReLU()``, then
    ``x + fire_bias + mlp2(cat(x, fire_bias))`` on the scaled scores, causal. The threshold is below
    the length, so the normaliser switches from ``L`` to ``i`` inside the map."""
    b, h, d = 2, 3, 8
    m = _leaky_fire_dape(h, seed=length)
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) for _ in range(3))
    x = q @ k.transpose(-1, -2) / math.sqrt(d)
    fire = m.inner
    rel = torch.tril(torch.arange(length).view(length, 1).repeat(1, length) + torch.arange(0, -length, -1)).double()
    threshold = torch.abs(fire.L_multiplier.double() * fire.L_threshold)
    normaliser = torch.max(torch.max(torch.tril(rel), dim=-1)[0], threshold)[:, None]
    c = fire.c.double()
    normalized = torch.log(torch.abs(c * rel) + 1) / (torch.log(torch.abs(c * normaliser) + 1) + 1e-6)
    mlp = torch.nn.Sequential(fire.mlp[0], torch.nn.LeakyReLU(), fire.mlp[2])
    fire_bias = mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)
    mlp2 = torch.nn.Sequential(m.mlp_in, torch.nn.LeakyReLU(), m.mlp_out)
    both = torch.cat((x, torch.tile(fire_bias, (b, 1, 1, 1))), dim=1).permute(0, 2, 3, 1)
    scores = x + fire_bias + mlp2(both).permute(0, 3, 1, 2)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    expected = torch.softmax(scores.masked_fill(j > i, float("-inf")), -1) @ v
    with torch.no_grad():
        out = posenc.attention(q, k, v, m, causal=True)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        relu = posenc.build({**m.spec, "fire_activation": "relu"}).double()
        relu.load_state_dict(m.state_dict())
        assert not torch.allclose(posenc.attention(q, k, v, relu, causal=True), expected, atol=1e-6)


@pytest.mark.parametrize("dtype", (torch.float64, *DTYPES), ids=str)
@pytest.mark.parametrize("causal", [True, False])
def test_leaky_fire_equals_the_reference(dtype, causal):
    """Module = float64 reference (on the inputs rounded to ``dtype``), packed documents, every
    backend (causal: Lq < Lk too)."""
    m = _leaky_fire_dape(4, seed=1)
    g = torch.Generator().manual_seed(2)
    lq = 9 if causal else 14
    q = torch.randn(2, 4, lq, 8, generator=g, dtype=torch.float64).to(dtype)
    k, v = (torch.randn(2, 4, 14, 8, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    docs = torch.tensor([0] * 6 + [1] * 8)
    expected = m.reference(to_numpy(q), to_numpy(k), to_numpy(v), causal=causal, document_ids=docs.numpy())
    m = m.to(dtype)
    for backend in ("materialize", "chunked", "blockwise"):
        with torch.no_grad():
            out = posenc.attention(q, k, v, m, causal=causal, document_ids=docs, backend=backend)
        assert out.dtype == dtype
        # float64 to rounding; the others computed in float32 on scores of size ~8, cast at the end
        assert_close(out, expected, magnitude=None if dtype == torch.float64 else 8.0, what=backend)


def test_leaky_fire_gradients_are_the_references():
    """Blockwise, packed documents: the gradients into q and FIRE's parameters (its MLP, c and the
    multiplier of L) equal the central differences of the float64 reference."""
    m = _leaky_fire_dape(2, seed=3)
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 11, 4, generator=g, dtype=torch.float64) for _ in range(3))
    q.requires_grad_()
    docs = torch.tensor([0] * 5 + [1] * 6)
    weights = torch.randn(1, 2, 11, 4, generator=g, dtype=torch.float64)
    out = posenc.attention(q, k, v, m, causal=True, document_ids=docs, backend="blockwise")
    (out * weights).sum().backward()

    def loss():
        ref = m.reference(to_numpy(q), to_numpy(k), to_numpy(v), document_ids=docs.numpy())
        return float((ref * weights.numpy()).sum())

    fire = m.inner
    assert_directional_gradients({"q": q, "w1": fire.mlp[0].weight, "b1": fire.mlp[0].bias, "w2": fire.mlp[2].weight,
                                  "c": fire.c, "L_multiplier": fire.L_multiplier}, loss, seed=5)


def test_fire_activation_is_checked():
    assert posenc.build({"scheme": "dape", "num_heads": 2, "bias": "fire"}).fire_activation == "relu"  # as before
    with pytest.raises(ValueError, match="fire_activation must be one of 'relu', 'leaky_relu'; got 'gelu'"):
        posenc.build({"scheme": "dape", "num_heads": 2, "bias": "fire", "fire_activation": "gelu"})
    with pytest.raises(ValueError, match="fire_activation='leaky_relu' is FIRE's MLP activation: it needs bias "
                                         "'fire', got bias 'kerple'"):
        posenc.build({"scheme": "dape", "num_heads": 2, "fire_activation": "leaky_relu"})


def test_the_command_line_takes_fire_activation_and_refuses_a_wrong_one(capsys):
    from posenc.cli import main

    assert main(["show", "dape:bias=fire,fire_activation=leaky_relu", "--length", "8"]) == 0
    capsys.readouterr()
    assert main(["show", "dape:bias=fire,fire_activation=leaky"]) == 2
    err = capsys.readouterr().err
    assert "fire_activation must be one of 'relu', 'leaky_relu'; got 'leaky'" in err
    assert len(err.strip().splitlines()) == 1
