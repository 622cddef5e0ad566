"""FoPE: Fourier position embedding (Hua et al. 2024, arXiv:2412.17739; code people run: the
paper's TsinghuaC3I/Fourier-Position-Embedding, vLLM's ``FourierRotaryEmbedding`` for Intern-S1-Pro).

    C_{h,d}(t) = Σ_j A_{h,j,d} cos(t θ_j),   S_{h,d}(t) = Σ_j B_{h,j,d} sin(t θ_j)     (d < M)
    (x_a, x_b) -> (x_a C − x_b S, x_b C + x_a S),   C = 1, S = 0 for the pairs d >= M

over RoPE's frequencies ``θ_j = base^(−2j/D)`` that the training length ``max_positions`` (vLLM's
``max_position_embeddings``; 2048 by default, transformers' Llama default: give the length the
model is trained at, not the length shown) turns at least once (``θ_j >= 2π/max_positions``; the ``D/2 − M`` lower ones are clipped to zero
frequency), with coefficients ``A, B [H_c, M, M]`` (``posenc.reference.fope``, which also states
how the two upstreams differ). A rotary scheme in posenc's sense: the same map for queries and
keys, each at its own position, of x's width; unlike RoPE, ``(C, S)`` is no rotation (separate
coefficients for cos and sin), so a score is not a function of ``t − s`` alone, which is the
paper's point (a dimension's spectrum is a mix of frequencies, not one).

**Coefficients.** ``num_heads`` sets (vLLM: one per key/value head; the paper: one per head;
1: shared): a tensor of ``H`` heads, a multiple of ``num_heads``, gives head ``h`` set
``h // (H / num_heads)``, so queries and grouped keys both take it (GQA). Initialised as the
paper's ``eye_xavier_norm``: the identity (RoPE) plus ``xavier_normal_(gain=init_gain)`` noise on
``[num_heads, M, M]``; fixed by default (the paper's ``fourier_learnable=False``, vLLM's
``requires_grad=False``), trained with ``learned=True``. Either way they are parameters, so
``state_dict`` keeps the draw. ``init_gain=0`` is RoPE with the low frequencies clipped.

**KV cache.** The map of a token depends on its position only: decoding with cached keys equals
recomputing. The series is summed in float64 from ``posenc.rotary.angles`` (``t θ_j`` reduced
mod 2π), then cast; the pairs are turned by ``posenc.apply_rotary``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posenc import reference as ref
from posenc._validate import check_bool, check_choice, check_even, check_float, check_int
from posenc.encodings._base import RotaryEncoding
from posenc.limits import Dim, Heads, Positions, check_memory
from posenc.reference.fope import fope_inv_freq
from posenc.registry import register
from posenc.rotary import LAYOUTS, angles, apply_rotary


INIT_GAIN_MAX = 100.0  # noise a hundred times the identity is no longer a perturbation of RoPE; float32-safe


@register("fope", kind="rotary")
class FoPE(RotaryEncoding):
    """FoPE (Hua et al. 2024): each pair a Fourier series of the trained frequencies, the rest clipped to zero.

    ``module(x [B, H, L, D], positions [L] or [B, L], *, role=None)``: ``rope``'s call.
    """

    real_positions = True

    def __init__(self, *, head_dim: Dim, num_heads: Heads, max_positions: Positions = 2048, base: float = 10000.0,
                 init_gain: float = 0.3, learned: bool = False, layout: str = "half") -> None:
        super().__init__()
        self.head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
        check_memory("head_dim", self.head_dim, 2 * self.head_dim, bytes_per=8, what="its float64 frequencies")
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.max_positions = check_int("max_positions", max_positions, min=1)
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.init_gain = check_float("init_gain", init_gain, min=0.0, max=INIT_GAIN_MAX)
        self.learned = check_bool("learned", learned)
        self.layout = check_choice("layout", layout, LAYOUTS)
        theta = torch.from_numpy(fope_inv_freq(self.head_dim, self.base, self.max_positions))  # (M,)
        m = theta.numel()
        check_memory("num_heads", self.num_heads, 2 * self.num_heads * m * m, bytes_per=8,
                     what=f"its Fourier coefficients ({m} × {m} per head, twice)")
        self.register_float64("inv_freq", theta)
        self.cos_coef = nn.Parameter(self._initial(m), requires_grad=self.learned)  # (H_c, M, M): A
        self.sin_coef = nn.Parameter(self._initial(m), requires_grad=self.learned)  # (H_c, M, M): B

    def _initial(self, m: int) -> torch.Tensor:
        """The identity plus ``xavier_normal_(gain=init_gain)`` noise, ``[num_heads, M, M]`` float32."""
        noise = torch.zeros(self.num_heads, m, m)
        if m and self.init_gain:
            nn.init.xavier_normal_(noise, gain=self.init_gain)
        return noise + torch.eye(m)

    @property
    def frequencies(self) -> int:
        """``M``: the pairs whose series is kept (the others are clipped to zero frequency)."""
        return self.inv_freq.numel()

    def _series(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``C, S`` float64 ``[..., num_heads, L, head_dim/2]`` at checked positions."""
        phi = angles(positions, self.inv_freq)  # (..., L, M)
        a, b = self.cos_coef.to(torch.float64), self.sin_coef.to(torch.float64)  # (H_c, M, M)
        c = torch.einsum("...lj,hjd->...hld", torch.cos(phi), a)  # (..., H_c, L, M)
        s = torch.einsum("...lj,hjd->...hld", torch.sin(phi), b)
        clipped = self.head_dim // 2 - self.frequencies
        return F.pad(c, (0, clipped), value=1.0), F.pad(s, (0, clipped), value=0.0)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        """``C, S`` (in place of RoPE's cos and sin): ``[..., num_heads, L, head_dim/2]`` each."""
        c, s = self._series(self.check_positions("positions", positions).to(self.device))
        return c.to(dtype), s.to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, H, L, D]`` with each pair turned by ``(C, S)`` of its head; same shape and dtype.
        ``out``: as in ``posenc.apply_rotary`` (a preallocated result, or ``x`` to turn in place)."""
        x, positions = self.check_call(x, positions, role)
        heads = x.shape[1]
        if heads % self.num_heads:
            raise ValueError(f"x must have a multiple of num_heads={self.num_heads} heads (each coefficient set "
                             f"serves H / num_heads of them), got shape {list(x.shape)}; with grouped key/value "
                             f"heads give num_heads = the key/value heads (one set each, as vLLM) or a divisor")
        c, s = self._series(positions)  # (..., H_c, L, D/2)
        if heads != self.num_heads:
            c, s = (t.repeat_interleave(heads // self.num_heads, dim=-3) for t in (c, s))  # (..., H, L, D/2)
        return apply_rotary(x, c.to(x.dtype), s.to(x.dtype), layout=self.layout, out=out)

    # -- kind protocol: the benchmark's model (see posenc.encodings._base) --------------------------
    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        """One call for the last position with the model's ``num_heads`` heads (a multiple of the sets)."""
        self(torch.zeros(1, num_heads, 1, head_dim, device=positions.device), positions[-1:])

    @classmethod
    def fit_to_training(cls, given: dict[str, Any], length: int) -> dict[str, Any]:
        """``max_positions``: the training length, the length whose undertrained frequencies FoPE clips."""
        return {} if "max_positions" in given else {"max_positions": length}

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result (``posenc.reference.fope``)."""
        return ref.fope(x, positions, self.inv_freq.cpu().numpy(), self.cos_coef.detach().double().cpu().numpy(),
                        self.sin_coef.detach().double().cpu().numpy(), layout=self.layout)
