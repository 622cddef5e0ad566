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

**Blocks without gradient** (``block_fn``, ``posenc.blockwise``'s forward) take a third form, in
the score dtype, every head at once. The input ``x = ψ(|i − j|) · r_i`` (``r_i = 1 / (ψ(max(L,
i)) + eps)``, computed per row in float64 and cast) does not depend on the head: one ``[c, n]``
tensor per block. If the block's smallest and largest ``x`` lie on the segments ``lo`` and ``hi``,
every ``x`` of the block lies on ``lo … hi``, and as ``f_h`` is continuous at each breakpoint
``t_k`` (between segments ``k`` and ``k + 1``),

    f_h(x) = α_lo,h x + β_lo,h + Σ_{k = lo}^{hi − 1} (α_{k+1,h} − α_{k,h}) relu(x − t_k),

one matrix product ``[H, 1 + K] @ [1 + K, c·n]`` over ``x`` and its ``K = hi − lo`` hinges. Away
from the diagonal a block's ``x`` spans a narrow range (``ψ`` is flat there): each breakpoint's
curve ``x = t_k`` crosses ``O(L)`` of the ``O(L²)`` blocks, so the hinges per score fall as ``1/L``
(default init, 8 breakpoints in ``[0, 1]``, blocks of 256 x 512: 0.33 per score at L = 32768,
where 75% of the scores lie in blocks with none and 20% in blocks with one; 2.3 at 4096).
Measured on one such block (one thread, 8 heads): ``x`` 0.9 ns per score and head, the affine
part 0.6 ns, a hinge 0.3 ns, against 9.6 ns for SDPA's fused kernel on the block; the per-pair
form (ψ in float64, α and β gathered per pair and head) cost 76 ns.

Overflow: ``|i − j|`` (real positions past float32's 3.4e38) or ``c·|i − j|`` can leave the score
dtype's range where ``ψ`` of them, in float64, is an ordinary number (``ψ(5e39) ≈ 89.1`` at
``c = 0.1``; ``x ≤ 1``). A block whose ``x`` comes out non-finite (seen in the min and max the
segments are read from, no extra pass) computes ``x`` again in float64 and casts it: where the
float64 reference is finite, so is the block.
"""

from __future__ import annotations

from typing import Any

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
    # FlexAttention's score_mod unrolls the MLP over its hidden units: compiling it took 51 s at
    # hidden=32 and 177–189 s at 128 on the CPU (measured when its flex path was added), where chunked runs the call in 0.3 s
    flex_compiles_fast = False

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

    @classmethod
    def fit_to_training(cls, given: dict[str, Any], length: int) -> dict[str, Any]:
        """``L_threshold = L`` (the training length) when the spec leaves it out, so that the
        ``max(L, i)`` normalisation engages past the training length."""
        return {} if "L_threshold" in given else {"L_threshold": float(length)}

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

    def block_fn(self):
        f64 = torch.float64
        with torch.no_grad():
            c, L = self.interpolation()
            first, second = self.mlp[0], self.mlp[2]
            breaks, alpha, beta = self._segments(first.weight.to(f64).flatten(), first.bias.to(f64),
                                                 second.weight.to(f64), second.bias.to(f64))
            steps = alpha.diff(dim=0)  # (S − 1, H): α_{k+1} − α_k, the slope added at breakpoint k
        cast: dict[torch.dtype, tuple[torch.Tensor, ...]] = {}  # the tables in each score dtype

        def mlp_input(q_pos, k_pos, work, c_):
            """``ψ(|i − j|) · r_i`` computed in ``work``: ``[..., c, n]``."""
            r = 1 / (torch.log1p(c * torch.maximum(q_pos.to(f64), L)) + EPS)  # (..., c) float64
            x = (q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)).abs_().to(work)  # (..., c, n): |i − j|
            return x.mul_(c_).log1p_().mul_(r.to(work).unsqueeze(-1))

        def bias(q_pos, k_pos, dtype):
            if dtype not in cast:
                cast[dtype] = tuple(a.to(dtype) for a in (breaks, alpha, steps, beta, c))
            t, a, da, b, c_ = cast[dtype]
            h = b.shape[-1]
            with torch.no_grad():
                x = mlp_input(q_pos, k_pos, dtype, c_)  # the MLP's input
                shape = (h, *x.shape)
                if x.numel() == 0:
                    return x.new_empty(shape).movedim(0, -3)
                ends = torch.stack(torch.aminmax(x))
                lo, hi, finite = torch.cat([torch.searchsorted(t, ends), ends.isfinite().all().view(1)]).tolist()
                if not finite and dtype != f64:  # |i − j| or c·|i − j| past the dtype's range
                    x = mlp_input(q_pos, k_pos, f64, c).to(dtype)
                    lo, hi = torch.searchsorted(t, torch.stack(torch.aminmax(x))).tolist()
                flat = x.view(1, -1)
                out = torch.addmm(b[lo].unsqueeze(-1), a[lo].unsqueeze(-1), flat)  # (H, c·n)
                if hi > lo:  # the hinges relu(x − t_k) of the breakpoints inside the block's range
                    hinges = (flat - t[lo:hi].unsqueeze(-1)).clamp_min_(0)  # (K, c·n)
                    out.addmm_(da[lo:hi].t(), hinges)
                return out.view(shape).movedim(0, -3)  # (..., H, c, n)

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
