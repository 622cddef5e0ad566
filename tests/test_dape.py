"""DAPE: equals the repository's AliBi_DAPE / ParallelKerpleLog_DAPE forward (``x + a + mlp2(cat(x,
a))``, rewritten here with the module's weights), causal or not; its spec wraps a bias scheme."""

from __future__ import annotations

import math

import pytest
import torch

import posenc


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
