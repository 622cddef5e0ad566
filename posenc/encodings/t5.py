"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning
with a Unified Text-to-Text Transformer", §2.1).

    bias[h, i, j] = W[bucket(j − i), h]

A learned scalar per head and bucket; buckets are exact for small distances and logarithmic up
to ``max_distance``, beyond which all distances share the last bucket.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import MAX_INIT_STD, check_bool, check_float, check_int
from posenc.registry import register
from posenc.encodings._base import BiasEncoding
from posenc.limits import Buckets, Distance, Heads, check_memory


@register("t5", kind="bias")
class T5Bias(BiasEncoding):
    """Learned per-head bias on log-spaced buckets of relative distance (T5)."""

    translation_invariant = True  # a function of k − q only

    def __init__(self, *, num_heads: Heads, num_buckets: Buckets = 32, max_distance: Distance = 128,
                 bidirectional: bool = True, init_std: float = 0.5) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.bidirectional = check_bool("bidirectional", bidirectional)
        low = 4 if self.bidirectional else 2  # at least one exact and one log bucket per side
        self.num_buckets = check_int("num_buckets", num_buckets, min=low)
        half = self.num_buckets // 2 if self.bidirectional else self.num_buckets
        self.max_distance = check_int("max_distance", max_distance, min=half // 2 + 1)
        init_std = check_float("init_std", init_std, min=0.0, max=MAX_INIT_STD)
        check_memory("max_distance", self.max_distance, (2 * self.max_distance + 1) * (1 + self.num_heads),
                     what=f"its bucket lookup over distances -max_distance..max_distance, {self.num_heads} heads")
        self.weight = nn.Parameter(torch.randn(self.num_buckets, self.num_heads) * init_std)  # (buckets, H)
        # Buckets are constant past max_distance, so a lookup table over [-M, M] is exact.
        rel = torch.arange(-self.max_distance, self.max_distance + 1)
        lut = ref.t5_bucket(rel.numpy(), num_buckets=self.num_buckets, max_distance=self.max_distance,
                            bidirectional=self.bidirectional)
        self.register_buffer("bucket_lut", torch.from_numpy(lut), persistent=False)

    @classmethod
    def fit_to_training(cls, given: dict[str, Any], length: int) -> dict[str, Any]:
        """``max_distance = L/2`` and ``num_buckets`` the largest (at most T5's 32) for which every
        bucket is reached by a distance below ``L`` (the training length), when the spec gives
        neither: every bucket is trained and every distance past ``L`` falls into the trained last
        bucket (T5's 32 buckets up to 128 at L = 32 left the buckets for distances of 35 and more
        at their random initialisation)."""
        if "num_buckets" in given or "max_distance" in given:
            return {}
        bidirectional = bool(given.get("bidirectional", False))
        distance = max(length // 2, 2)
        reached = -np.arange(length) if not bidirectional else np.arange(-length + 1, length)
        buckets = 32
        while buckets > (4 if bidirectional else 2):
            half = buckets // 2 if bidirectional else buckets
            if distance >= half // 2 + 1 and np.unique(ref.t5_bucket(reached, num_buckets=buckets,
                                                                    max_distance=distance,
                                                                    bidirectional=bidirectional)).size == buckets:
                break
            buckets -= 1
        return {"num_buckets": buckets, "max_distance": distance}

    def bucket(self, relative: torch.Tensor) -> torch.Tensor:
        """Bucket of each relative distance ``j − i``."""
        m = self.max_distance
        return self.bucket_lut[relative.clamp(-m, m) + m]

    def score_fn(self):
        m = self.max_distance
        # The table is read in the score itself: under torch.compile, FlexAttention takes a
        # score_mod's tensors only as graph inputs (parameters, buffers), not tensors computed from them.
        weight, lut = self.weight, self.bucket_lut  # (buckets, H), (2M+1,)

        def bias(h, q_pos, k_pos):
            return weight[lut[(k_pos - q_pos).clamp(-m, m) + m], h]

        return bias

    def reference(self, q_positions, k_positions):
        return ref.t5(q_positions, k_positions, self.weight.detach().double().cpu().numpy(),
                      num_buckets=self.num_buckets, max_distance=self.max_distance,
                      bidirectional=self.bidirectional)
