"""Sinusoidal absolute encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5).

    PE(pos, 2i) = sin(pos / base^(2i/d)),   PE(pos, 2i+1) = cos(pos / base^(2i/d))

Low dimensions oscillate fast, high ones slowly: each position gets a unique multi-frequency
fingerprint, and PE(pos + k) is a fixed rotation of PE(pos) for every pos. A function of position:
real-valued positions (seconds, fractional coordinates) are accepted.

**Several axes** (``axes = A``, positions ``[..., L, A]``): axis ``a`` takes the dims
``[a·D/A, (a+1)·D/A)``, each the 1D encoding above with ``d = D/A`` — the factorized 2D/3D sin-cos
of ViT and MAE (Dosovitskiy et al. 2021; He et al. 2022), or hierarchical positions (section,
sentence, token).

**Layout.** ``layout="interleaved"`` (default) is the formula above, sin in even and cos in odd
dims of each axis's block; ``layout="half"`` lays each axis's block out as ``[sin… | cos…]``:
``PE(p, a·d + i) = sin(p_a·θ_i)``, ``PE(p, a·d + d/2 + i) = cos(p_a·θ_i)``, i.e. the pairing
``(i, i + d/2)`` of rope's "half" layout. With it, these tables equal posenc's with no column
permutation (tests/test_angles.py):

- MAE's ``get_2d_sincos_pos_embed(D, S)``: positions ``(c, r)``, column first (its ``grid[0]``,
  from ``np.meshgrid(grid_w, grid_h)``, is the column): ``posenc.grid_positions((S, S))[:, [1, 0]]``;
- diffusers' ``get_2d_sincos_pos_embed(D, (H, W), base_size=b, interpolation_scale=s)``: the same
  order, real positions ``(c·b/W/s, r·b/H/s)``;
- timm's ``build_sincos2d_pos_embed((H, W), D, interleave_sin_cos=True)``: positions ``(r, c)``,
  row first, ``posenc.grid_positions((H, W))``; its default ``interleave_sin_cos=False`` lays
  out ``[sin(all axes) | cos(all axes)]``, which is neither layout.

**Exact.** θ is the double-double of ``base^(−2i/d)`` (``posenc.rotary.angles``).
"""

from __future__ import annotations

import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.reference.positions import exact_inv_freq, exact_split
from posenc.reference.sinusoidal import LAYOUTS
from posenc.registry import register
from posenc.rotary import angles_cos_sin
from posenc.encodings._base import AdditiveEncoding
from posenc.limits import Axes, Dim, check_memory


@register("sinusoidal", kind="additive")
class Sinusoidal(AdditiveEncoding):
    """Fixed sin/cos table of Vaswani et al. 2017; extrapolates to any position, one or several axes."""

    real_positions = True

    def __init__(self, *, d_model: Dim, base: float = 10000.0, axes: Axes = 1, layout: str = "interleaved") -> None:
        super().__init__()
        self.d_model = check_even("d_model", check_int("d_model", d_model, min=2))
        self.base = check_float("base", base, min=0.0, min_open=True)
        check_memory("d_model", self.d_model, self.d_model, bytes_per=8, what="its float64 frequencies")
        self.axes = check_int("axes", axes, min=1, max=8)
        self.layout = check_choice("layout", layout, LAYOUTS)
        if self.d_model % (2 * self.axes):
            raise ValueError(f"d_model must be divisible by 2·axes = {2 * self.axes} (each axis takes an even "
                             f"share of the dims), got d_model={self.d_model} with axes={self.axes}")
        ref.sinusoidal_inv_freq(self.d_model // self.axes, self.base)  # checks
        hi, lo = exact_split(exact_inv_freq(self.d_model // self.axes, self.base))  # (d/(2A),) each
        self.register_float64("inv_freq", torch.from_numpy(hi).repeat(self.axes))  # (d/2,)
        self.register_float64("inv_freq_lo", torch.from_numpy(lo).repeat(self.axes))
        axis_of_pair = torch.arange(self.axes).repeat_interleave(len(hi))
        self.register_buffer("axis_of_pair", axis_of_pair if self.axes > 1 else None, persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """``[L]``/``[B, L]`` (or ``[L, A]``/``[B, L, A]``) -> ``[..., L, d_model]`` in the module's dtype."""
        positions = self.check_positions("positions", positions).to(self.device)
        cos, sin = angles_cos_sin(positions, self.inv_freq, self.dtype, axis_of_pair=self.axis_of_pair,
                                  inv_freq_lo=self.inv_freq_lo)  # (..., L, d/2)
        if self.layout == "interleaved":
            return torch.stack((sin, cos), dim=-1).flatten(-2)  # (..., L, d): sin even, cos odd within each axis
        shape = (*sin.shape[:-1], self.axes, 1, -1)  # (..., L, A, 1, d/(2A))
        return torch.cat((sin.reshape(shape), cos.reshape(shape)), dim=-2).flatten(-3)  # (..., L, d): [sin | cos] per axis

    def reference(self, positions):
        return ref.sinusoidal(positions, self.d_model, self.base, axes=self.axes, layout=self.layout)
