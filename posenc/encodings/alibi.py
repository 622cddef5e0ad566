"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long", arXiv:2108.12409).

    bias[h, i, j] = −m_h · |i − j|

No embedding at all: each head penalises distance linearly with its own slope m_h (a geometric
sequence, 1/2 … 1/256 for 8 heads). Trained at one length, it extrapolates to longer ones.
"""

from __future__ import annotations

import torch

from posenc import reference as ref
from posenc._validate import check_int
from posenc.registry import register
from posenc.encodings._base import BiasEncoding
from posenc.limits import Heads, check_memory


@register("alibi", kind="bias")
class ALiBi(BiasEncoding):
    """Linear distance penalty with the paper's per-head slopes (any head count)."""

    real_positions = True  # a function of the distance: real-valued positions are accepted

    translation_invariant = True  # a function of k − q only
    peak_at_nearest_key = True  # falls with |k − q|: each row peaks at its nearest key

    def __init__(self, *, num_heads: Heads) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        check_memory("num_heads", self.num_heads, 3 * self.num_heads, bytes_per=8, what="its float64 slopes")
        self.register_float64("slopes", torch.from_numpy(ref.alibi_slopes(self.num_heads)))

    def score_fn(self):
        slopes = self.slopes  # (H,) float64

        def bias(h, q_pos, k_pos):
            return -slopes[h] * (q_pos - k_pos).abs().to(torch.float64)

        return bias

    def reference(self, q_positions, k_positions):
        return ref.alibi(q_positions, k_positions, ref.alibi_slopes(self.num_heads))
