"""PoPE: polar coordinate position embeddings (Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025,
arXiv:2509.10534; code people run: PoPE-pytorch, x-transformers' ``polar_pos_emb=True``).

    q̃_c = softplus(q_c)·e^{i(t θ_c − δ_{h,c})},   k̃_c = softplus(k_c)·e^{i s θ_c},   θ_c = base^(−c/R)
    q̃·k̃ = Σ_c μ(q_c) μ(k_c) cos((t − s)θ_c − δ_{h,c})

(``posenc.reference.pope``: the magnitudes carry *what*, the phases *where*; δ ∈ [−2π, 0] learned
per head, clamped in every call as the paper's code does.)

**Its kind.** PoPE is of the ``rotary`` kind as ``posenc.attention`` applies that kind: a map of
each query at its own position and each key at its own, before ``q·k``, told apart by ``role``
(as xPos's scales are). It is not a rotation of ``x``: the magnitudes are ``softplus`` of the
features and the result is ``[..., 2R + D − R]``, twice as wide for ``rotary_dim = D``
(``widens = True``, ``out_dim``). SDPA takes the wider q and k (only v's width sets the output's),
and the scale stays ``1/√D`` of the head given to attention, as PoPE-pytorch's
``flash_attn_with_pope`` and x-transformers use. So ``out=`` must be a tensor of the wider shape
(never ``x`` itself), and there is no in-place call.

**Query or key.** δ enters the query's phase (``role="query"``), with the opposite sign of the
paper's key bias: only the phase difference reaches a score, and keys then carry no per-head term,
so grouped key/value heads (GQA) need no repeat. ``role="key"`` and ``role=None`` give the plain
polar form. PoPE-pytorch's and x-transformers' scores are the same numbers (``tests/test_pope.py``).

**KV cache.** Each token's map depends only on its own position, so decoding with cached keys
(raw, as ``posenc.attention`` takes them, or already mapped) equals recomputing.
Angles come from ``posenc.rotary.angles`` (``t θ_c`` reduced mod 2π in float64), then cos/sin
and softplus in float32 (float64 for a float64 input), cast to x's dtype at the end.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc import reference as ref
from posenc._validate import check_choice, check_float, check_int
from posenc.encodings._base import RotaryEncoding
from posenc.limits import Dim, Heads, check_memory
from posenc.reference.pope import BIAS_RANGE, pope_inv_freq
from posenc.registry import register
from posenc.rotary import LAYOUTS, angles

BIAS_INITS = ("zeros", "uniform")  # PoPE-pytorch's bias_uniform_init=False / True: δ = 0, or U(−2π, 0)


@register("pope", kind="rotary")
class PoPE(RotaryEncoding):
    """PoPE (Gopalakrishnan et al. 2025): softplus magnitudes, positional phases, a learned phase per head.

    ``module(x [B, H, L, D], positions [L] or [B, L], *, role=None) -> [B, H, L, 2R + D − R]``.
    """

    real_positions = True
    widens = True  # the result is wider than x: [..., out_dim]

    def __init__(self, *, head_dim: Dim, num_heads: Heads, base: float = 10000.0, rotary_dim: Dim | None = None,
                 layout: str = "interleaved", bias_init: str = "zeros") -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.rotary_dim = self.head_dim if rotary_dim is None else check_int("rotary_dim", rotary_dim, min=1,
                                                                             max=self.head_dim)
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.bias_init = check_choice("bias_init", bias_init, BIAS_INITS)
        check_memory("num_heads", self.num_heads, self.num_heads * self.rotary_dim, bytes_per=8,
                     what=f"its phase biases of {self.rotary_dim} features per head")
        self.register_float64("inv_freq", torch.from_numpy(pope_inv_freq(self.rotary_dim, self.base)))  # (R,)
        self.bias = nn.Parameter(torch.zeros(self.num_heads, self.rotary_dim))  # (H, R): δ
        if self.bias_init == "uniform":
            with torch.no_grad():
                self.bias.uniform_(*BIAS_RANGE)

    @property
    def out_dim(self) -> int:
        """The width of the result: ``2·rotary_dim`` polar features, then the ``head_dim − rotary_dim`` passed through."""
        return self.head_dim + self.rotary_dim

    def _phase(self, positions: torch.Tensor, role: str | None) -> torch.Tensor:
        """``t θ_c`` (float64, ``[..., 1, L, R]``), less ``δ_{h,c}`` for a query (``[..., H, L, R]``)."""
        phi = angles(positions, self.inv_freq).unsqueeze(-3)  # (..., 1, L, R)
        if role == "query":
            delta = self.bias.to(torch.float64).clamp(*BIAS_RANGE)  # (H, R)
            phi = phi - delta.unsqueeze(-2)
        return phi

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        """``cos, sin`` of the keys' phase ``t θ_c``: ``[..., L, rotary_dim]`` each (a query's also subtracts δ)."""
        positions = self.check_positions("positions", positions).to(self.device)
        phi = angles(positions, self.inv_freq)  # (..., L, R)
        return torch.cos(phi).to(dtype), torch.sin(phi).to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, H, L, D]`` in polar form at ``positions``: ``[B, H, L, out_dim]``, x's dtype.
        ``out``: a tensor of that shape, dtype and device to write into (not ``x``: the result is wider)."""
        x, positions = self.check_call(x, positions, role)
        if role == "query" and x.shape[1] != self.num_heads:
            raise ValueError(f"queries must have num_heads={self.num_heads} heads (one phase bias each), "
                             f"got shape {list(x.shape)}")
        if out is not None:
            self._check_out(out, x)
        r = self.rotary_dim
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        phi = self._phase(positions, role)  # (..., 1 or H, L, R)
        mu = F.softplus(x[..., :r].to(work))  # (B, H, L, R)
        re, im = mu * torch.cos(phi).to(work), mu * torch.sin(phi).to(work)
        if self.layout == "interleaved":
            polar = torch.stack((re, im), dim=-1).flatten(-2)  # (B, H, L, 2R): (μ cos, μ sin) per feature
        else:
            polar = torch.cat((re, im), dim=-1)
        result = torch.cat((polar.to(x.dtype), x[..., r:]), dim=-1)  # (B, H, L, out_dim)
        return result if out is None else out.copy_(result)

    def _check_out(self, out, x: torch.Tensor) -> None:
        shape = [*x.shape[:-1], self.out_dim]
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor (or None), got {type(out).__name__}")
        if out is x or list(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"out must be a new tensor of shape {shape} (pope's result is wider than x: "
                             f"2·rotary_dim + head_dim − rotary_dim = {self.out_dim}), dtype {x.dtype}, device "
                             f"{x.device}; got {'x itself' if out is x else f'{list(out.shape)}, {out.dtype}, {out.device}'}")

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result (``posenc.reference.pope``)."""
        return ref.pope(x, positions, self.inv_freq.cpu().numpy(), self.bias.detach().double().cpu().numpy(),
                        role=role, layout=self.layout)

