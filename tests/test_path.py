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
