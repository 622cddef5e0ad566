"""RoPE-Mixed (Heo, Park, Han & Yun 2024, "Rotary Position Embedding for Vision Transformer",
ECCV, arXiv:2403.13298, §3.3; code: naver-ai/rope-vit).

    φ_{h,i}(p) = Σ_a p_a · f[a, h, i],     x'_{2i} + i·x'_{2i+1} = (x_{2i} + i·x_{2i+1}) · e^{iφ}

Learned frequencies ``f [A, H, D/2]`` mix the axes of a position ``p`` (patches at ``(row, col)``
from ``posenc.grid_positions``), so each rotated pair follows its own direction in the plane; the
score still depends only on ``p − p'``. Initialised as the paper's ``init_random_2d_freqs``: per
head a random angle ``α``; magnitudes ``m_j = base^(−4j/D)`` for ``j < D/4``; the first ``D/4``
pairs point along ``α``, the next ``D/4`` along ``α + π/2``:

    f[col] = [m·cos α, m·cos(α + π/2)],   f[row] = [m·sin α, m·sin(α + π/2)]

(the paper's ``freqs[0]`` multiplies the column ``t_x``, ``freqs[1]`` the row ``t_y``; posenc's
axis 0 is the row, so ``f[0]`` is the paper's ``freqs[1]``). ``base`` is the paper's ``theta``
(10 for images, where positions are small). Angles come from ``posenc.rotary.angles`` per axis,
exact in float64 and differentiable in ``f``; rotation is ``apply_rotary``. No table cache: the
frequencies are trained.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import check_choice, check_float, check_int
from posenc.registry import register
from posenc.rotary import LAYOUTS, angles, apply_rotary
from posenc.encodings._base import RotaryEncoding
from posenc.limits import Axes, Dim, Heads, check_memory


def init_random_2d_freqs(head_dim: int, num_heads: int, base: float = 10.0) -> torch.Tensor:
    """The paper's initialisation in posenc's axis order (row, col): ``[2, H, D/2]`` float32."""
    mag = 1 / (base ** (torch.arange(0, head_dim, 4)[: head_dim // 4].float() / head_dim))  # (D/4,)
    alpha = torch.rand(num_heads, 1) * 2 * math.pi  # (H, 1)
    fx = torch.cat([mag * torch.cos(alpha), mag * torch.cos(math.pi / 2 + alpha)], dim=-1)  # (H, D/2): column
    fy = torch.cat([mag * torch.sin(alpha), mag * torch.sin(math.pi / 2 + alpha)], dim=-1)  # (H, D/2): row
    return torch.stack([fy, fx])


@register("rope_mixed", kind="rotary")
class RoPEMixed(RotaryEncoding):
    """RoPE-Mixed (Heo et al. 2024): learned per-head frequencies that mix the 2D axes."""

    real_positions = True

    def __init__(self, *, head_dim: Dim, num_heads: Heads, axes: Axes = 2, base: float = 10.0,
                 layout: str = "interleaved") -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=4)
        if self.head_dim % 4:
            raise ValueError(f"head_dim must be divisible by 4 (D/4 magnitudes in two directions), got {self.head_dim}")
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.axes = check_int("axes", axes, min=2, max=2)
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.layout = check_choice("layout", layout, LAYOUTS)
        check_memory("head_dim", self.head_dim, 4 * self.axes * self.num_heads * self.head_dim, bytes_per=8,
                     what=f"its float64 frequency directions for {self.num_heads} heads")
        self.freqs = nn.Parameter(init_random_2d_freqs(self.head_dim, self.num_heads, self.base))  # (A, H, D/2)

    def _angles(self, positions: torch.Tensor) -> torch.Tensor:
        """``Σ_a p_a·f[a]``: checked ``[..., L, A]`` -> ``[..., H, L, D/2]`` float64."""
        f = self.freqs.to(device=positions.device, dtype=torch.float64)
        total = sum(angles(positions[..., None, :, a], f[a][:, None, :]) for a in range(self.axes))
        return torch.remainder(total + torch.pi, 2 * torch.pi) - torch.pi

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        """``cos, sin`` of the mixed angles: ``[..., H, L, D/2]`` (differentiable in ``freqs``)."""
        phi = self._angles(self.check_positions("positions", positions).to(self.freqs.device))
        return torch.cos(phi).to(dtype), torch.sin(phi).to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``positions [L, 2]`` or ``[B, L, 2]``; same shape and dtype.
        ``out``: as in ``posenc.apply_rotary`` (a preallocated result, or ``x`` to rotate in place)."""
        x, positions = self.check_call(x, positions, role)
        if x.shape[1] != self.num_heads:
            raise ValueError(f"x must have num_heads={self.num_heads} heads, got shape {list(x.shape)}")
        phi = self._angles(positions)  # (H, L, R) or (B, H, L, R)
        return apply_rotary(x, torch.cos(phi).to(x.dtype), torch.sin(phi).to(x.dtype), layout=self.layout, out=out)

    def reference(self, x, positions, *, role: str | None = None):
        return ref.rope_mixed(x, positions, self.freqs.detach().double().cpu().numpy(), layout=self.layout)
