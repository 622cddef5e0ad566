"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional Interpolation
for Relative Positions Improves Long Context Transformers", arXiv:2310.04418, §3).

    bias[h, i, j] = f_θ( ψ(|i − j|) / (ψ(max(L, i)) + eps) )_h,     ψ(x) = log(c·x + 1)

``f_θ`` is an MLP 1 -> hidden -> H with ReLU; ``c`` and ``L`` are learned, parameterised as in
the paper's code: ``c = |c_param|``, ``L = |L_multiplier · L_threshold|`` with ``L_multiplier``
learned (initially 1). For causal pairs (``j <= i``) the MLP's input lies in ``[0, 1]`` at any
position, so the bias is bounded by ``f_θ`` on ``[0, 1]``. Keys after the query use ``|i − j|``
as the paper's code does; causal attention masks them.

Everything is float64 up to the output, which takes the module's dtype. For a whole map (or a
block of one) the MLP is evaluated as the piecewise-linear function it is: with a scalar input,
``f_h(x) = b2_h + Σ_u w2_hu relu(w1_u x + b1_u)`` is affine between the sorted breakpoints
``t_u = −b1_u / w1_u``, and on the segment ``s`` (``x`` above the ``s`` smallest breakpoints) the
units that are on are fixed (``w1_u > 0`` and ``t_u`` among them, ``w1_u < 0`` and ``t_u`` not,
or ``w1_u = 0`` and ``b1_u > 0``), so

    f_h(x) = α_sh x + β_sh,   α_sh = Σ_{u on in s} w2_hu w1_u,   β_sh = b2_h + Σ_{u on in s} w2_hu b1_u.

The ``(hidden + 1) × H`` tables α, β are differentiable in the MLP's weights (the same gradient
as the MLP's: ``∂f_h/∂w1_u = w2_hu x`` when ``u`` is on, else 0), and each pair costs one
``searchsorted`` among ``hidden`` breakpoints and one multiply-add per head, instead of
``hidden·(H + 3)`` operations and an ``[Lq, Lk, hidden]`` temporary (this made FIRE's
``posenc.attention`` forward+backward 5x slower than ALiBi's and its whole map 7.4 GB at 4k). A
pair exactly at a breakpoint has the same value on either side (ReLU is continuous). For one
score at a time (FlexAttention's score_mod, which lowers only elementwise code) the MLP is
unrolled over the hidden units. Both are held to the same reference.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import check_float, check_int
from posenc.registry import register
from posenc.encodings._base import BiasEncoding
from posenc.limits import Heads, Width, check_memory

EPS = 1e-6  # added to the denominator, as in the paper's code


@register("fire", kind="bias")
class Fire(BiasEncoding):
    """A learned MLP of the log distance over the log query position (FIRE)."""

    real_positions = True  # a function of the distance: real-valued positions are accepted

    def __init__(self, *, num_heads: Heads, hidden: Width = 32, c: float = 0.1, L_threshold: float = 512.0) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.hidden = check_int("hidden", hidden, min=1)
        check_memory("hidden", self.hidden, self.hidden * (self.num_heads + 3),
                     what=f"its MLP 1 → hidden → num_heads={self.num_heads}")
        self.mlp = nn.Sequential(nn.Linear(1, self.hidden), nn.ReLU(), nn.Linear(self.hidden, self.num_heads))
        self.c = nn.Parameter(torch.tensor(check_float("c", c, min=0.0, min_open=True)))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.register_float64("L_threshold", torch.tensor(check_float("L_threshold", L_threshold, min=0.0)))

    def interpolation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``c`` and ``L`` as used, float64 scalars."""
        c = self.c.to(torch.float64).abs()
        return c, (self.L_multiplier.to(torch.float64) * self.L_threshold).abs()

    def score_fn(self):
        # Parameters are read (and cast) in the score itself: under torch.compile, FlexAttention
        # takes a score_mod's tensors only as graph inputs, not as tensors computed from them.
        first, second = self.mlp[0], self.mlp[2]
        hidden, interpolation, segments = self.hidden, self.interpolation, self._segments
        f64 = torch.float64

        def bias(h, q_pos, k_pos):
            c, L = interpolation()
            d = (q_pos - k_pos).abs().to(f64)
            x = torch.log1p(c * d) / (torch.log1p(c * torch.maximum(q_pos.to(f64), L)) + EPS)
            if x.dim() == 0:  # one score (FlexAttention's score_mod, which lowers only elementwise code)
                out = second.bias[h].to(f64)
                for u in range(hidden):  # the MLP unrolled over its hidden units
                    w1, b1 = first.weight[u, 0].to(f64), first.bias[u].to(f64)
                    out = out + second.weight[h, u].to(f64) * torch.relu(x * w1 + b1)
                return out
            w1, b1 = first.weight.to(f64).flatten(), first.bias.to(f64)  # (hidden,) each
            w2, b2 = second.weight.to(f64), second.bias.to(f64)  # (H, hidden), (H,)
            breaks, alpha, beta = segments(w1, b1, w2, b2)
            segment = torch.searchsorted(breaks, x.detach().contiguous())  # breakpoints below each x
            return alpha[segment, h] * x + beta[segment, h]  # the MLP, affine on each segment

        return bias

    def _segments(self, w1, b1, w2, b2):
        """Sorted breakpoints ``[hidden]`` and the affine pieces ``α, β [hidden + 1, H]`` of the MLP."""
        with torch.no_grad():
            breaks = torch.where(w1 != 0, -b1 / w1, torch.inf)  # (hidden,): a unit with w1 = 0 never switches
            breaks, order = breaks.sort()
            rank = torch.empty_like(order)
            rank[order] = torch.arange(self.hidden, device=order.device)  # position of unit u among the breaks
            seg = torch.arange(self.hidden + 1, device=order.device).unsqueeze(-1)  # (S, 1)
            on = torch.where(w1 > 0, rank < seg, torch.where(w1 < 0, rank >= seg, b1 > 0))  # (S, hidden)
        on = on.to(w1.dtype)
        return breaks.contiguous(), (on * w1) @ w2.t(), (on * b1) @ w2.t() + b2  # (S, H) each

    def reference(self, q_positions, k_positions):
        first, second = self.mlp[0], self.mlp[2]
        w1, b1, w2, b2 = (t.detach().double().cpu().numpy()
                          for t in (first.weight, first.bias, second.weight, second.bias))
        c, L = (float(t.detach()) for t in self.interpolation())
        return ref.fire(q_positions, k_positions, w1.ravel(), b1, w2, b2, c=c, L=L, eps=EPS)
