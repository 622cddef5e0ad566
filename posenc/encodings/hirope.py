"""HiRoPE: hierarchical rotary position embedding (Zhang et al., ACL 2024, "HiRoPE: Length
Extrapolation for Code Models Using Hierarchical Position", arXiv:2403.19115).

Training-free: applied to a model trained with plain ``rope`` (same ``head_dim``, ``base``,
``rotary_dim``, ``layout``), it splits RoPE's frequency pairs between a token's position and a
higher-level position read from the code's structure (function, class, block or line index).

Positions are ``[L, 2]`` or ``[B, L, 2]``: ``(level, token)``, column 0 the higher-level position,
column 1 the token position (e.g. ``torch.stack([segment_positions(code, [b"\\n"])[0][:, 0],
torch.arange(L)], -1)``: line index, token index). With RoPE's ``θ_j = base^(−2j/rotary_dim)``,
``R = rotary_dim/2`` pairs and ``T = token_dims/2``:

    p_j(t) = token(t)   if j < T  or  token(t) < window
    p_j(t) = level(t)   otherwise
    angle_j(t) = p_j(t) · θ_j,   pair j rotated as in 1D RoPE (``layout`` "half"/"interleaved")

- the high-frequency pairs ``j < T`` keep token-level relative positions (local order);
- the low-frequency pairs ``j >= T`` see the higher-level distance, a small number even far past
  the training length, so their angles stay in the range the model was trained on;
- the window: the first ``window`` tokens keep their plain positions on every pair, so a
  sequence no longer than ``window`` is exactly the trained ``rope`` (the paper's window keeps
  short inputs as the original model sees them).

**Posenc's reading of the window.** The paper describes the window as the range within which the
original positions are kept; posenc applies it per token (by token position), which keeps HiRoPE a
rotary scheme (each token rotated once, cached keys never rotated again). A window on the
query–key *distance* would need two score passes per pair, as ReRoPE does, and is not this scheme.

Equal to ``rope`` of the same ``head_dim``, ``base``, ``rotary_dim`` and ``layout`` when
``token_dims = rotary_dim`` (every pair reads the token), when ``window`` exceeds every token
position, or when the level column equals the token column. Per-token, so decoding with a KV
cache (new tokens' positions continued with ``segment_positions``' state) equals recomputing.
Angles come from the one angle function, ``posenc.rotary.angles``, through ``rope``'s table path
with ``axis_of_pair`` (as ``mrope``); no scaling (HiRoPE replaces it).
"""

from __future__ import annotations

from typing import Any

import torch

from posenc import reference as ref
from posenc._validate import check_even, check_float, check_int
from posenc.encodings.rope import RoPE
from posenc.limits import Dim, Positions
from posenc.reference.hirope import AXES, hirope, hirope_axis_of_pair
from posenc.registry import register

MAX_WINDOW = (1 << 63) - 1  # positions are int64


@register("hirope", kind="rotary")
class HiRoPE(RoPE):
    """Hierarchical RoPE for code: low-frequency pairs take a higher-level position past a window.

    ``module(x [B, H, L, D], positions [L, 2] or [B, L, 2], *, role=None)`` and ``cos_sin`` are
    ``rope``'s calls; positions are ``(level, token)``.
    """

    structured = True  # (level, token) from the code's structure, not a grid
    text_structure = "lines"  # the kind protocol: (line, token) of a text

    def __init__(self, *, head_dim: Dim, base: float = 10000.0, rotary_dim: Dim | None = None,
                 token_dims: Dim | None = None, window: Positions = 0, layout: str = "half") -> None:
        super().__init__(head_dim=head_dim, base=base, rotary_dim=rotary_dim, layout=layout)
        if token_dims is None:
            token_dims = 2 * (self.rotary_dim // 4)
        token_dims = check_even("token_dims", check_int("token_dims", token_dims, min=0))
        if token_dims > self.rotary_dim:
            raise ValueError(f"token_dims must be <= rotary_dim={self.rotary_dim} (the rotated dims that keep the "
                             f"token position), got {token_dims}")
        self.token_dims = token_dims
        self.window = check_int("window", window, min=0, max=MAX_WINDOW)
        self.axes = AXES
        self.axis_of_pair = torch.from_numpy(hirope_axis_of_pair(self.rotary_dim, token_dims))  # (R,)

    def hierarchical(self, positions: torch.Tensor) -> torch.Tensor:
        """Checked ``(level, token)`` positions with the level replaced by the token inside the window."""
        positions = self.check_positions("positions", positions)
        token = positions[..., 1]
        level = torch.where(token < self.window, token, positions[..., 0])
        return torch.stack((level, token), dim=-1)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``(level, token)`` positions ``[L, 2]`` or ``[B, L, 2]``."""
        return super().forward(x, self.hierarchical(positions), role=role, out=out)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of every pair's angle at ``(level, token)`` positions: ``[..., L, rotary_dim/2]``."""
        return super().cos_sin(self.hierarchical(positions), dtype)

    def reference(self, x: Any, positions: Any, *, role: str | None = None):
        """Float64 NumPy result (``posenc.reference.hirope``)."""
        return hirope(x, positions, self.inv_freq.cpu().numpy(), token_dims=self.token_dims, window=self.window,
                      layout=self.layout)
