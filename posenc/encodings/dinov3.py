"""DINOv3's rotary embedding (Siméoni et al. 2025, "DINOv3", arXiv:2508.10104; timm
``RotaryEmbeddingDinoV3``, transformers ``dinov3_vit``): RoPE on patch coordinates in ``[−1, 1]``,
base 100, with training-time augmentations of the coordinates (shift, jitter, rescale).

    φ_k = 2π·y·θ_k  (k < D/4),   φ_k = 2π·x·θ_{k−D/4}  (D/4 ≤ k < D/2),   θ_j = base^(−4j/D)

Positions are the coordinates ``(y, x)`` themselves, ``[L, 2]`` or ``[B, L, 2]`` real numbers:
``dinov3_coordinates(h, w)`` gives the patch centres ``2·(i + ½)/n − 1`` of an ``h × w`` grid, and
``module.augment(coords, generator=g)`` draws the training augmentations (see
``posenc.reference.dinov3`` for the formulas). The augmentation is a step on the positions, not
inside the rotation, so queries and keys of a batch see the same drawn coordinates, as in DINOv3
(one draw per forward pass, shared by every layer).

**Why a scheme, not a ``rope`` option.** Three conventions differ from axial ``rope``: the angle
carries 2π (θ in cycles per unit of coordinate, so ``θ_0·2π = 2π``); the "half" layout pairs ``(k, k + D/2)``
across the whole head (axial rope pairs inside each axis's slice); and positions are normalised
coordinates with a random draw, not indices. One scheme per convention keeps ``rope``'s table and
cache policy untouched. Angles are formed in float64 (``2π·(c·θ)``) and only then cast; no table
is cached (coordinates are real and change with every augmentation).

**Upstream numerics.** transformers multiplies by ``inv_freq`` and timm divides by ``periods``,
both in float32: the two differ from each other and from the float64 angles by float32 rounding
(``tests/test_dinov3.py`` measures both). The augmentation draws are float32 uniforms in
upstream's order (shift ``[2]``, jitter ``[2]``, rescale ``[1]``), so a ``torch.Generator``
seeded as the global generator reproduces transformers' and timm's draws on CPU.
"""

from __future__ import annotations

import math

import torch

from posenc._validate import check_choice, check_float, check_int
from posenc.encodings._base import RotaryEncoding
from posenc.limits import Dim, check_memory
from posenc.positions import INDEX_DTYPES
from posenc.reference.dinov3 import NORMALIZE, dinov3, dinov3_coordinates as _coordinates, dinov3_inv_freq
from posenc.registry import register
from posenc.rotary import LAYOUTS, apply_rotary_unchecked, check_out


@register("dinov3", kind="rotary")
class DINOv3RoPE(RotaryEncoding):
    """DINOv3's rotary: RoPE on patch coordinates in [−1, 1] (base 100), with coordinate augmentations."""

    real_positions = True
    signed_positions = True
    """Coordinates lie around ``[−1, 1]``: negative positions are the scheme's own (the one scheme
    that takes them; ``tests/test_validation.py``'s non-negativity sweep skips it)."""
    axes = 2

    def __init__(self, *, head_dim: Dim, base: float = 100.0, layout: str = "half", normalize: str = "separate",
                 shift: float | None = None, jitter: float | None = None, rescale: float | None = None) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=4)
        if self.head_dim % 4:
            raise ValueError(f"head_dim must be divisible by 4 (D/4 frequencies on each of 2 axes), got {self.head_dim}")
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.normalize = check_choice("normalize", normalize, NORMALIZE)
        self.shift = None if shift is None else check_float("shift", shift, min=0.0, max=1e3)
        self.jitter = None if jitter is None else check_float("jitter", jitter, min=1.0, max=1e3)
        self.rescale = None if rescale is None else check_float("rescale", rescale, min=1.0, max=1e3)
        check_memory("head_dim", self.head_dim, 2 * self.head_dim, bytes_per=8, what="its float64 frequencies")
        theta = torch.from_numpy(dinov3_inv_freq(self.head_dim, self.base))  # (D/4,) float64
        self.register_float64("inv_freq", torch.cat([theta, theta]))  # (D/2,): pair k's θ
        self.register_buffer("axis_of_pair", torch.arange(2).repeat_interleave(self.head_dim // 4), persistent=False)

    # -- positions ---------------------------------------------------------------------------
    def check_positions(self, name: str, positions, **kw) -> torch.Tensor:
        """posenc's positions model (``posenc.positions.check_positions``: type, shape ``[L, 2]`` or
        ``[B, L, 2]``, finite), except that coordinates may be negative: they lie around ``[−1, 1]``.
        The model's checks run on ``|positions|``, whose type, shape and finiteness are the same."""
        numeric = isinstance(positions, torch.Tensor) and (positions.is_floating_point() or positions.dtype in INDEX_DTYPES)
        probe = positions.abs() if numeric else positions
        super().check_positions(name, probe, **kw)
        return positions

    def coordinates(self, height: int, width: int, *, device: torch.device | str | None = None) -> torch.Tensor:
        """``[h·w, 2]`` float64 patch centres of an ``h × w`` grid in ``[−1, 1]`` (``normalize``)."""
        return torch.from_numpy(_coordinates(height, width, normalize=self.normalize)).to(device)

    def grid_positions(self, grid) -> torch.Tensor:
        """The positions of an ``H × W`` grid's patches as this scheme takes them (``posenc show``)."""
        return self.coordinates(int(grid[0]), int(grid[1]))

    def draws(self, *, generator: torch.Generator | None = None,
              device: torch.device | str | None = None) -> dict[str, torch.Tensor | None]:
        """One draw of the augmentations: ``{"shift": [2], "jitter": [2], "rescale": [1]}`` float64
        (None for a step that is off), from float32 uniforms in upstream's order; ``generator``
        (default: torch's global one, as upstream) makes them reproducible."""
        out: dict[str, torch.Tensor | None] = {"shift": None, "jitter": None, "rescale": None}
        f32 = dict(device=device, dtype=torch.float32)
        if self.shift is not None:
            out["shift"] = torch.empty(2, **f32).uniform_(-self.shift, self.shift, generator=generator).double()
        if self.jitter is not None:
            lim = math.log(self.jitter)
            out["jitter"] = torch.empty(2, **f32).uniform_(-lim, lim, generator=generator).double().exp()
        if self.rescale is not None:
            lim = math.log(self.rescale)
            out["rescale"] = torch.empty(1, **f32).uniform_(-lim, lim, generator=generator).double().exp()
        return out

    def augment(self, coords: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Training: ``((coords + shift) ⊙ jitter) · rescale`` with one draw (``draws``); in eval mode,
        or with no augmentation set, ``coords`` unchanged. float64 ``[..., L, 2]``."""
        coords = self.check_positions("coords", coords).to(torch.float64)
        if not self.training or (self.shift is None and self.jitter is None and self.rescale is None):
            return coords
        d = self.draws(generator=generator, device=coords.device)
        if d["shift"] is not None:
            coords = coords + d["shift"]
        if d["jitter"] is not None:
            coords = coords * d["jitter"]
        if d["rescale"] is not None:
            coords = coords * d["rescale"]
        return coords

    # -- rotation ----------------------------------------------------------------------------
    def _angles(self, coords: torch.Tensor) -> torch.Tensor:
        """``2π·(c[a(k)]·θ_k)`` float64: ``[..., L, 2]`` -> ``[..., L, D/2]``."""
        per_pair = coords.to(torch.float64)[..., self.axis_of_pair.to(coords.device)]  # (..., L, D/2)
        return 2 * math.pi * (per_pair * self.inv_freq.to(coords.device))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        """``cos, sin`` of the angles at coordinates ``[..., L, 2]``: ``[..., L, D/2]`` each."""
        phi = self._angles(self.check_positions("positions", positions))
        return torch.cos(phi).to(dtype), torch.sin(phi).to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at coordinates ``[L, 2]`` or ``[B, L, 2]``; same shape and dtype."""
        x, positions = self.check_call(x, positions, role)
        phi = self._angles(positions)  # (L, D/2) or (B, L, D/2)
        if phi.dim() == 3:
            phi = phi[:, None]  # (B, 1, L, D/2)
        cos, sin = torch.cos(phi).to(x.dtype), torch.sin(phi).to(x.dtype)
        return apply_rotary_unchecked(x, cos, sin, self.layout, None if out is None else check_out(out, x))

    def reference(self, x, positions, *, role: str | None = None):
        return dinov3(x, positions, base=self.base, layout=self.layout)


def dinov3_coordinates(height: int, width: int, *, normalize: str = "separate") -> torch.Tensor:
    """``[h·w, 2]`` float64 ``(y, x)`` patch centres in ``[−1, 1]`` (``posenc.reference.dinov3_coordinates``)."""
    return torch.from_numpy(_coordinates(height, width, normalize=normalize))
