"""BiPE: bilevel positional encoding (He et al., ICML 2024, "Two Stones Hit One Bird: Bilevel
Positional Encoding for Better Length Extrapolation", arXiv:2401.16421), the float64 specification.

Positions are ``[L, 2]`` or ``[B, L, 2]``: ``(segment, offset)`` (``posenc.segment_positions`` with
one level). The token embedding gets the intra-segment part, an absolute encoding of the offset,
and attention the inter-segment part, a relative scheme of the segment indices:

    h_t = E[x_t] + A(min(offset_t, M − 1))         (A learned, M = max_positions; or sinusoidal, uncapped)
    rotary inter:  s_ij = ⟨R(seg_i) q_i, R(seg_j) k_j⟩
    bias inter:    s_ij = q_i·k_j / √D + c · b(seg_i, seg_j)
"""

from __future__ import annotations

import numpy as np

from posenc.reference.positions import positions_array

AXES = 2  # (segment index, offset in the segment)


def bipe_columns(positions) -> tuple[np.ndarray, np.ndarray]:
    """``(segment, offset)``: the two int64 columns of checked ``[..., L, 2]`` positions."""
    pos = positions_array("positions", positions, axes=AXES, scheme="bipe")
    return pos[..., 0], pos[..., 1]


def bipe_offsets(positions, max_positions: int | None) -> np.ndarray:
    """The intra-segment positions the additive part reads: offsets capped at ``max_positions − 1``
    (the official code's cap at its training length), or as they are (``None``: an uncapped scheme)."""
    _, offset = bipe_columns(positions)
    return offset if max_positions is None else np.minimum(offset, max_positions - 1)
