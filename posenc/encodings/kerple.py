"""KERPLE: kernelized relative positional embedding (Chi et al. 2022, "KERPLE: Kernelized Relative
Positional Embedding for Length Extrapolation", arXiv:2205.09921, §4).

    log:    bias[h, i, j] = −r1_h · log(1 + r2_h · |i − j|)
    power:  bias[h, i, j] = −r1_h · |i − j|^r2_h

Conditionally positive definite kernels of the distance, with two learned scalars per head.
Positivity (and ``r2 <= 2`` for power, where the kernel stops being CPD) is kept as in the paper's
code, by clamping: the forward pass uses ``r.clamp(eps)`` (``r2.clamp(eps, 2)`` for power), so a
parameter pushed out of range gets no gradient until the optimizer brings it back; the stored
values are never modified. Initialisation as in the paper's code: ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import check_choice, check_float, check_int
from posenc.registry import register
from posenc.encodings._base import BiasEncoding
from posenc.limits import Heads, check_memory

KERNELS = {  # the distance kernel of each variant, on float64 distances d and exponents/rates r2
    "log": lambda d, r2: torch.log1p(r2 * d),
    "power": lambda d, r2: d.pow(r2),
}


@register("kerple", kind="bias")
class Kerple(BiasEncoding):
    """Learned logarithmic or power distance penalty per head (KERPLE)."""

    real_positions = True  # a function of the distance: real-valued positions are accepted

    translation_invariant = True  # a function of k − q only
    peak_at_nearest_key = True  # falls with |k − q|: each row peaks at its nearest key

    def __init__(self, *, num_heads: Heads, variant: str = "log", eps: float = 1e-2) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        check_memory("num_heads", self.num_heads, 4 * self.num_heads, what="its rates r1, r2 per head")
        self.variant = check_choice("variant", variant, tuple(KERNELS))
        self.eps = check_float("eps", eps, min=0.0, min_open=True, max=1.0)
        self.r1 = nn.Parameter((torch.rand(self.num_heads) * 2).clamp(min=self.eps))  # (H,)
        self.r2 = nn.Parameter(torch.rand(self.num_heads).clamp(min=self.eps))  # (H,)

    def rates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``r1, r2`` the bias uses: the parameters clamped into range, ``[H]`` each."""
        r2_max = 2.0 if self.variant == "power" else None
        return self.r1.clamp(min=self.eps), self.r2.clamp(min=self.eps, max=r2_max)

    def score_fn(self):
        # The parameters are gathered and clamped in the score itself (as rates() does): under
        # torch.compile, FlexAttention takes a score_mod's tensors only as graph inputs.
        r1, r2, eps = self.r1, self.r2, self.eps
        r2_max = 2.0 if self.variant == "power" else None
        kernel = KERNELS[self.variant]

        def bias(h, q_pos, k_pos):
            a, b = r1[h].clamp(min=eps).to(torch.float64), r2[h].clamp(min=eps, max=r2_max).to(torch.float64)
            return -a * kernel((q_pos - k_pos).abs().to(torch.float64), b)

        return bias

    def reference(self, q_positions, k_positions):
        r1, r2 = (r.detach().double().cpu().numpy() for r in self.rates())
        return ref.kerple(q_positions, k_positions, r1, r2, variant=self.variant)
