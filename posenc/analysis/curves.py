"""Scores: ``q·k`` against relative distance and RoFormer's decay bound (rotary), the score term and per-head bias maps (bias, relative), a content scheme's weights, and the signal against distance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.analysis.base import _for_kind, _numpy, _ones_qk, _positions, _positions_on_axes, build, DEFAULT_HEADS, KIND_ANALYSIS, shown_label
from posenc.analysis.frequencies import inv_freq
from posenc.spec import label


def rotary_scores(spec: Any, *, max_distance: int = 256, dim: int = 64, q=None, k=None) -> np.ndarray:
    """``⟨R(0)q, R(r)k⟩ / D`` for ``r = 0 .. max_distance``, through ``module(x, positions)``.

    With ``q = k = 1`` (the default) and RoPE, it is ``(2/D) Σ_i cos(r θ_i) · a²`` (``a`` the
    attention factor): 1 at ``r = 0``, then decaying and oscillating.
    """
    n = check_int("max_distance", max_distance, min=0) + 1
    m = build(spec, dim=dim, length=n)
    return _for_kind(m, "qk", "q·k vs distance")(m, n, q, k)


def _rotary_qk(m, n: int, q, k) -> np.ndarray:
    import torch

    ones = _ones_qk(m, n)  # (1, H, N, D): every head for per-head frequencies (rope_mixed), else one
    ones = ones if getattr(m, "num_heads", None) else ones[:, :1]
    qx = ones if q is None else torch.as_tensor(q, dtype=torch.float64).expand_as(ones)
    kx = ones if k is None else torch.as_tensor(k, dtype=torch.float64).expand_as(ones)
    pos = _positions(n, m)
    rq, rk = m(qx, pos, role="query")[0], m(kx, pos, role="key")[0]  # (H, N, D)
    return _numpy((rk @ rq[:, 0].unsqueeze(-1)).squeeze(-1).mean(0)) / ones.shape[-1]


def rope_decay_bound(*, dim: int = 128, base: float = 10000.0, max_distance: int = 256,
                     inv_freq: np.ndarray | None = None) -> np.ndarray:
    """RoFormer's long-term decay bound (Su et al. 2021, §3.4.3, Fig. 2), ``r = 0 .. max_distance``.

        (1/(d/2)) · Σ_{j=1}^{d/2} |S_j|,   S_j = Σ_{i=0}^{j-1} e^{i·r·θ_i},   θ_i = base^(−2i/d)

    By Abel summation, ``|Σ_i h_i e^{i r θ_i}| ≤ max_i |h_{i+1} − h_i| · Σ_j |S_j|`` for the
    complex products ``h_i`` of query and key pairs (``h_{d/2} = 0``), so the score's envelope
    decays as this does. ``inv_freq`` overrides θ (e.g. a scaled spectrum).
    """
    from posenc.reference import rope_inv_freq

    dim = check_int("dim", dim, min=2)
    n = check_int("max_distance", max_distance, min=0) + 1
    theta = rope_inv_freq(dim, base) if inv_freq is None else np.asarray(inv_freq, dtype=np.float64)
    r = np.arange(n, dtype=np.float64)[:, None]  # (N, 1)
    s = np.cumsum(np.exp(1j * r * theta), axis=-1)  # (N, d/2): S_1 .. S_{d/2}
    return np.abs(s).sum(-1) / theta.size


def score_term(spec: Any, q_positions, k_positions, *, num_heads: int = DEFAULT_HEADS, dim: int = 64) -> np.ndarray:
    """``[H, Lq, Lk]``: the term a bias or relative scheme adds to the scores at these positions.

    Bias kind: ``module(q_positions, k_positions)``. Relative kind (query-dependent): the term
    with ``q = k = 1``, as one example of it.
    """
    import torch

    qp, kp = (torch.as_tensor(np.asarray(p, dtype=np.int64)) for p in (q_positions, k_positions))
    m = build(spec, dim=dim, num_heads=num_heads, length=int(max(qp.max(), kp.max())) + 1)
    if getattr(m, "axes", 1) > 1 and qp.dim() == 1:  # one-axis positions: the same on every axis
        qp, kp = _positions_on_axes(qp, m), _positions_on_axes(kp, m)
    return _for_kind(m, "term", "bias maps")(m, qp, kp)


def _bias_term(m, qp, kp) -> np.ndarray:
    return _numpy(m(qp, kp))  # (H, Lq, Lk)


def _relative_term(m, qp, kp) -> np.ndarray:
    return _numpy(m(_ones_qk(m, qp.numel()), _ones_qk(m, kp.numel()), qp, kp)[0])  # (H, Lq, Lk): q = k = 1


def bias_maps(spec: Any, *, length: int = 64, num_heads: int = DEFAULT_HEADS, dim: int = 64) -> np.ndarray:
    """``[H, L, L]``: the score term of each head for queries and keys at ``0 .. L-1`` (``score_term``)."""
    pos = np.arange(check_int("length", length, min=1))
    return score_term(spec, pos, pos, num_heads=num_heads, dim=dim)


@dataclass(frozen=True)
class Curve:
    """A positional score against relative distance ``r = 0 .. length-1``."""

    label: str
    kind: str
    distance: np.ndarray
    score: np.ndarray
    quantity: str = field(default="")


QUANTITY = {
    "additive": "cosine similarity of PE(p), PE(p + r)\n(mean over p)",
    "rotary": "q·k / D with q = k = 1",
    "bias": "bias added to the score\n(mean over heads)",
    "relative": "relative term with q = k = 1\n(mean over heads)",
    "none": "no positional term (0)",
    "content": "attention weight of the key r back from the last query\n(identical tokens, mean over heads)",
}


def content_weights(spec: Any, *, length: int = 128, dim: int = 64, num_heads: int = DEFAULT_HEADS) -> np.ndarray:
    """A content scheme's attention weights ``[H, L]`` of the last query on the key ``r`` tokens back
    (``[:, r]``), when every token is the same (q = k = 1/√D, hidden = 1): the positions the
    content gives when the content says nothing (FoX: ALiBi's decay; CoPE: a gate per token;
    stick-breaking: a geometric stick). The weights are the output for ``v = I`` (one-hot values);
    stick-breaking's leftover lands on the query's own key (r = 0)."""
    m = build(spec, dim=dim, num_heads=num_heads, length=length)
    return _for_kind(m, "weights", "content_weights")(m, length, dim, num_heads)


def _content_weights(m, length: int, dim: int, num_heads: int) -> np.ndarray:
    import torch

    h = getattr(m, "num_heads", None) or num_heads
    d = getattr(m, "head_dim", None) or dim
    q = torch.full((1, h, length, d), d ** -0.5, dtype=torch.float64)
    v = torch.eye(length, dtype=torch.float64).expand(1, h, length, length)
    hidden = torch.ones(1, length, m.d_model, dtype=torch.float64) if m.reads_hidden else None
    with torch.no_grad():
        w = m(q[:, :, -1:], q, v, hidden, causal=True)  # (1, H, 1, L)
    return _numpy(w[0, :, 0])[:, ::-1].copy()


def score_vs_distance(spec: Any, *, length: int = 256, dim: int = 64, num_heads: int = DEFAULT_HEADS) -> Curve:
    """How an encoding's positional signal changes with distance ``r``, by kind (see ``QUANTITY``).

    Additive: ``similarity_vs_distance``; rotary: ``rotary_scores``; bias and relative: the
    mean over heads of the term between the key at ``r`` and the query at 0 — for a causal model
    the query at ``r`` and the key at 0: ``map[:, r, 0]``; none: zeros.
    """
    length = check_int("length", length, min=2)
    m = build(spec, dim=dim, num_heads=num_heads, length=length)
    score = KIND_ANALYSIS[m.kind].signal(m, length, dim, num_heads)
    return Curve(shown_label(m), m.kind, np.arange(length), score, QUANTITY.get(m.kind, m.kind))
