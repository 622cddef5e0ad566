"""A new scheme in one file, for ``--plugin``: ``my_alibi``, ALiBi's slopes on a logarithmic distance.

    bias[h, i, j] = −m_h · log(1 + |i − j|)

ALiBi (Press et al. 2022) penalises distance linearly; this variant penalises it logarithmically,
so far keys are penalised less than ALiBi would (a question the benchmark answers: does it
still hold past the training length?). The slopes ``m_h`` are ALiBi's geometric sequence, times
``scale``.

Use it with any command::

    posenc list --plugin docs/plugin_example.py
    posenc show my_alibi --plugin docs/plugin_example.py
    posenc report --plugin docs/plugin_example.py --part lm   # the profile's schemes and my_alibi

The file holds the three things a scheme is (``posenc.registry``): its float64 NumPy
reference (the specification), its torch module (a ``BiasEncoding`` whose ``score_fn`` serves
the full bias map and FlexAttention alike), and the registration that binds them under a name.
"""

from __future__ import annotations

import numpy as np
import torch

from posenc import reference as ref
from posenc.encodings import _base  # the kinds' base classes
from posenc.registry import register


def my_alibi_reference(q_positions, k_positions, slopes) -> np.ndarray:
    """The specification, in float64: ``[H, Lq, Lk]`` = ``−m_h · log(1 + |q − k|)``."""
    q = np.asarray(q_positions, dtype=np.float64)[:, None]  # (Lq, 1)
    k = np.asarray(k_positions, dtype=np.float64)[None, :]  # (1, Lk)
    return -np.asarray(slopes, dtype=np.float64)[:, None, None] * np.log1p(np.abs(q - k))[None]  # (H, Lq, Lk)


@register("my_alibi", kind="bias")
class MyALiBi(_base.BiasEncoding):
    """ALiBi's slopes on log(1 + distance) (an example --plugin scheme)."""

    translation_invariant = True  # a function of k − q only
    peak_at_nearest_key = True  # falls with |k − q|

    def __init__(self, *, num_heads: int, scale: float = 1.0) -> None:
        super().__init__()
        if not isinstance(num_heads, int) or isinstance(num_heads, bool) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        self.num_heads, self.scale = num_heads, float(scale)
        self.register_float64("slopes", torch.from_numpy(self.scale * ref.alibi_slopes(num_heads)))  # (H,)

    def score_fn(self):
        slopes = self.slopes  # (H,) float64

        def bias(h, q_pos, k_pos):
            return -slopes[h] * torch.log1p((q_pos - k_pos).abs().to(torch.float64))

        return bias

    def reference(self, q_positions, k_positions):
        return my_alibi_reference(q_positions, k_positions, self.scale * ref.alibi_slopes(self.num_heads))
