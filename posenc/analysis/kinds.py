"""The table from kind to quantity: ``KIND_ANALYSIS``'s entries, the only place the analysis says how each kind is read.
"""

from __future__ import annotations


import numpy as np

from posenc.analysis.base import _numpy, _ones_qk, KIND_ANALYSIS, KindAnalysis
from posenc.analysis.curves import _bias_term, _content_weights, _relative_term, _rotary_qk, content_weights, rotary_scores, score_term
from posenc.analysis.numbers import _additive_numbers, _content_numbers, _none_numbers, _rotary_numbers, _term_numbers
from posenc.analysis.tables import _additive_table, _rotary_table, cosine_similarity_matrix, similarity_vs_distance, table


def _similarity_signal(m, length, dim, num_heads):
    return similarity_vs_distance(table(m, length=length))


def _qk_signal(m, length, dim, num_heads):
    return rotary_scores(m, max_distance=length - 1)


def _term_signal(m, length, dim, num_heads):
    return score_term(m, np.arange(length), [0])[:, :, 0].mean(0)  # query at r, key at 0


def _weights_signal(m, length, dim, num_heads):
    return content_weights(m, length=length, dim=dim, num_heads=num_heads).mean(0)


def _zero_signal(m, length, dim, num_heads):
    return np.zeros(length)


def _similarity_grid(m, pos, i, dim, num_heads):
    return cosine_similarity_matrix(_numpy(m(pos)))[i]


def _qk_grid(m, pos, i, dim, num_heads):
    ones = _ones_qk(m, pos.shape[0])
    if getattr(m, "num_heads", None) is None:
        ones = ones[:, :1]
    rq, rk = m(ones, pos, role="query")[0], m(ones, pos, role="key")[0]  # (H, N, D)
    return _numpy((rk @ rq[:, i].unsqueeze(-1)).squeeze(-1).mean(0)) / ones.shape[-1]


def _term_grid(m, pos, i, dim, num_heads):
    import torch

    flat = torch.arange(pos.shape[0])
    return score_term(m, flat[i:i + 1], flat, num_heads=num_heads, dim=dim)[:, 0].mean(0)


def _zero_grid(m, pos, i, dim, num_heads):
    return np.zeros(pos.shape[0])


KIND_ANALYSIS.update({
    "additive": KindAnalysis(_similarity_signal, _similarity_grid, _additive_numbers, table=_additive_table,
                             numbers_first=True, learned_signal=True),
    "rotary": KindAnalysis(_qk_signal, _qk_grid, _rotary_numbers, table=_rotary_table, qk=_rotary_qk,
                           numbers_first=True, learned_signal=True),
    "bias": KindAnalysis(_term_signal, _term_grid, _term_numbers, term=_bias_term),
    "relative": KindAnalysis(_term_signal, _term_grid, _term_numbers, term=_relative_term),
    "none": KindAnalysis(_zero_signal, _zero_grid, _none_numbers),
    "content": KindAnalysis(_weights_signal, _zero_grid, _content_numbers, weights=_content_weights),
})
"""The one place the analysis says how each kind is read: kind -> ``KindAnalysis``."""
