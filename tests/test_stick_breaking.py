"""Stick-breaking attention: the reference is the product formula, and shawntan/stickbreaking-
attention's ``sb_ref.py`` convention (its cumulative-weight matrix form, the leftover to v_i)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc.encodings._base import to_numpy
from posenc.reference.stick_breaking import stick_breaking, stick_breaking_weights


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.mark.parametrize("attend_current", [False, True])
def test_reference_is_the_product_formula(attend_current):
    """A_ij = σ(z_ij) Π_{j<t<i} (1 − σ(z_it)) (t ≤ i with attend_current), in plain loops."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 8, 4)) * 2 for _ in range(3))
    z = np.einsum("bhqd,bhkd->bhqk", q, k) / 2.0
    a = np.zeros_like(z)
    for h in range(2):
        for i in range(8):
            last = i if attend_current else i - 1
            for j in range(last + 1):
                a[0, h, i, j] = _sigmoid(z[0, h, i, j]) * math.prod(1 - _sigmoid(z[0, h, i, t])
                                                                    for t in range(j + 1, last + 1))
    np.testing.assert_allclose(stick_breaking_weights(q, k, attend_current=attend_current), a, rtol=0, atol=1e-14)
    expected = np.einsum("bhqk,bhkd->bhqd", a, v) + (1 - a.sum(-1))[..., None] * v
    np.testing.assert_allclose(stick_breaking(q, k, v, attend_current=attend_current), expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("attend_current", [False, True])
def test_module_equals_the_repositorys_sb_ref(attend_current):
    """sb_ref.py's matrix form (log σ(z) masked, log σ(−z) summed through ``tril(−1)``, ``o + rem · v``),
    rewritten here in float64, at random inputs and two shapes."""
    torch.manual_seed(0)
    for b, h, length, d in ((1, 3, 7, 8), (2, 2, 16, 4)):
        q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) for _ in range(3))
        logits = q @ k.transpose(-1, -2) / math.sqrt(d)
        mask = torch.ones(length, length).triu(1 if attend_current else 0).bool()
        log_z = torch.nn.functional.logsigmoid(logits).masked_fill(mask, -1e5)
        log_beta = torch.nn.functional.logsigmoid(-logits).masked_fill(mask, 0)
        cum = torch.einsum("bhij,jk->bhik", log_beta, torch.ones(length, length).tril(-1).double())
        att = (log_z + cum).exp()
        expected = att @ v + (1 - att.sum(-1))[..., None] * v
        m = posenc.build({"scheme": "stick_breaking", "attend_current": attend_current})
        torch.testing.assert_close(posenc.attention(q, k, v, m, causal=True), expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(m.reference(*(to_numpy(t) for t in (q, k, v))), expected.numpy(), rtol=0, atol=1e-12)


def test_attend_current_is_a_bool():
    with pytest.raises(TypeError, match="attend_current"):
        posenc.build({"scheme": "stick_breaking", "attend_current": 1})
