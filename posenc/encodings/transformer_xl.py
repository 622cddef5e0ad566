"""Transformer-XL relative attention (Dai et al. 2019, "Transformer-XL: Attentive Language Models
Beyond a Fixed-Length Context", arXiv:1901.02860, §3.3).

    A_ij = q_i·k_j + q_i·W_R R_{i−j} + u·k_j + v·W_R R_{i−j}
           (a)       (b)               (c)     (d)

``R`` is the sinusoidal encoding (``d_r = H·D`` dimensions, sin even, cos odd) of the relative
distance ``i − j``; ``W_R [H, D, d_r]``, ``u, v [H, D]`` are learned. The module returns
(b) + (c) + (d), scaled by ``1/√D``; ``posenc.attention`` adds it to the scaled (a).

No ``[Lq, Lk, d_r]`` tensor is built: with ``g_i = (q_i + v) W_R`` (``[d_r]``, pairs ``(s, c)``
for sin and cos), the angle-difference identities give

    g_i · R_{i−j} = Σ_f (c_f cos ω_f i + s_f sin ω_f i) cos ω_f j
                      + (c_f sin ω_f i − s_f cos ω_f i) sin ω_f j

i.e. the pairs ``(c, −s)`` rotated by ``ω i`` (``posenc.rotary.apply_rotary``) dotted with
``(cos ω j, sin ω j)``: one ``[Lq, d_r] @ [d_r, Lk]`` matmul. The angles of the absolute positions
are float64 (``angles_cos_sin``) of the double-double θ, so cos and sin are exact to float32
rounding at every position below 2^63.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc import reference as ref
from posenc._validate import check_float, check_int
from posenc.reference.positions import exact_inv_freq, exact_split
from posenc.registry import register
from posenc.rotary import angles_cos_sin, apply_rotary
from posenc.encodings._base import RelativeEncoding, to_numpy as _numpy
from posenc.limits import Dim, Heads, check_memory


@register("transformer_xl", kind="relative")
class TransformerXL(RelativeEncoding):
    """Sinusoidal relative encoding with learned projection and global biases u, v (Dai et al. 2019)."""

    def __init__(self, *, num_heads: Heads, head_dim: Dim, base: float = 10000.0) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.d_r = self.num_heads * self.head_dim
        if self.d_r % 2:
            raise ValueError(f"num_heads * head_dim must be even (R pairs sin and cos), "
                             f"got {self.num_heads} * {self.head_dim} = {self.d_r}")
        self.base = check_float("base", base, min=0.0, min_open=True)
        check_memory("head_dim", self.head_dim, self.num_heads * self.head_dim * (self.d_r + 2),
                     what=f"its projection W_R of num_heads × head_dim × num_heads·head_dim = "
                          f"{self.num_heads} × {self.head_dim} × {self.d_r}")
        ref.sinusoidal_inv_freq(self.d_r, self.base)  # checks
        hi, lo = exact_split(exact_inv_freq(self.d_r, self.base))  # θ = hi + lo to 2^-106
        self.register_float64("inv_freq", torch.from_numpy(hi))
        self.register_float64("inv_freq_lo", torch.from_numpy(lo))
        self.w_r = nn.Parameter(torch.randn(self.num_heads, self.head_dim, self.d_r) / math.sqrt(self.d_r))
        self.u = nn.Parameter(torch.randn(self.num_heads, self.head_dim))  # (H, D)
        self.v = nn.Parameter(torch.randn(self.num_heads, self.head_dim))  # (H, D)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
                k_positions: torch.Tensor) -> torch.Tensor:
        """Terms (b) + (c) + (d) over ``√D``: ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]`` -> ``[B, H, Lq, Lk]``."""
        q, k, q_positions, k_positions = self.check_inputs(q, k, q_positions, k_positions)
        if q.shape[1] != self.num_heads or k.shape[1] != self.num_heads:
            raise ValueError(f"q and k must have num_heads={self.num_heads} heads, "
                             f"got shapes {list(q.shape)} and {list(k.shape)}")
        dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k = q.to(work), k.to(work)
        w_r, u, v = self.w_r.to(work), self.u.to(work), self.v.to(work)
        g = torch.einsum("bhqd,hdr->bhqr", q + v.unsqueeze(-2), w_r)  # (B, H, Lq, d_r): (q_i + v) W_R
        pairs = torch.cat((g[..., 1::2], -g[..., 0::2]), dim=-1)  # (c | −s): frequency f pairs f and f + d_r/2
        cos_q, sin_q = angles_cos_sin(q_positions, self.inv_freq, work, inv_freq_lo=self.inv_freq_lo)  # (..., Lq, d_r/2)
        cos_k, sin_k = angles_cos_sin(k_positions, self.inv_freq, work, inv_freq_lo=self.inv_freq_lo)  # (..., Lk, d_r/2)
        if cos_q.dim() == 3:
            cos_q, sin_q = cos_q.unsqueeze(1), sin_q.unsqueeze(1)  # (B, 1, Lq, d_r/2)
        rotated = apply_rotary(pairs, cos_q, sin_q, layout="half")  # (B, H, Lq, d_r)
        keys = torch.cat((cos_k, sin_k), dim=-1)  # (..., Lk, d_r): (cos ω j | sin ω j)
        if keys.dim() == 3:
            keys = keys.unsqueeze(1)  # (B, 1, Lk, d_r)
        bd = rotated @ keys.transpose(-1, -2)  # (B, H, Lq, Lk): terms (b) + (d)
        c = (k @ u.unsqueeze(-1)).transpose(-1, -2)  # (B, H, 1, Lk): term (c), u·k_j
        return ((bd + c) / math.sqrt(self.head_dim)).to(dtype)

    def reference(self, q, k, q_positions, k_positions):
        return ref.transformer_xl(_numpy(q), _numpy(k), _numpy(q_positions), _numpy(k_positions),
                                  _numpy(self.w_r), _numpy(self.u), _numpy(self.v), base=self.base)
