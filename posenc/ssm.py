"""``ssm``: a diagonal linear state-space layer, the recurrent baseline that needs no position.

S4D (Gu et al. 2022, arXiv:2206.11893) with real decays, i.e. the diagonal, non-selective form of
Mamba (Gu & Dao 2023, arXiv:2312.00752); its specification is ``posenc.reference.ssm``:

    u_t = W_in x_t + b_in,   a_n = exp(−exp(log_dt_n))
    h_t = a ⊙ h_{t−1} + (1 − a) ⊙ u_t
    y_t = W_out h_t + b_out + D ⊙ x_t

It is not a positional encoding (it is not in the scheme registry): it replaces attention. The
state at step t is built from the steps before it *in order*, so it carries order by
construction; ``posenc.demo`` shows it, and ``posenc extrapolate --arch hybrid`` puts it
between attention blocks (Jamba, Lieber et al. 2024, arXiv:2403.19887).

The fast form: a chunked scan (the block decomposition of Mamba-2's SSD, Dao & Gu 2024,
arXiv:2405.21060). Unrolled, ``h_t = Σ_{s≤t} a^(t−s) v_s + a^(t+1) h_{−1}`` with ``v = (1 − a) ⊙ u``.
Cut time into chunks of K steps starting at c; for ``0 ≤ i < K``

    h_{c+i} = Σ_{j≤i} a^(i−j) v_{c+j}  +  a^(i+1) h_{c−1}

The first term is one batched matrix product with the lower-triangular ``W[n, i, j] = a_n^(i−j)``
(the same for every chunk), the second carries the last state of the previous chunk. So a
sequence of L steps costs ⌈L/K⌉ small matrix products instead of L dependent steps, and the
result is the loop's exactly (up to rounding): no ``a^(−s)`` factor ever appears, so nothing
overflows at any length. ``W`` needs only ``exp(−Δ·k)`` for integers ``0 ≤ k < K``: the exponent
is ≤ 0, so every entry lies in (0, 1], and float32 rounding of ``Δ·k`` perturbs
``e^(−Δk)`` by at most ``eps · max_x x·e^(−x) = eps / e``. Half-precision inputs are scanned in
float32 (as Mamba's kernels keep the state in float32) and the output cast back.

Notation used for tensor shapes: B batch, L length, C = d_model, N = d_state, K chunk length.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validate import check_bool, check_float, check_int
from posenc.limits import check_memory

CHUNK = 64
"""Steps per chunk of the scan. Measured on this project's shared 2-core CPU (one torch thread,
B = 16, L = 512, N = 64, float32, forward + backward, three runs, speed-up over a plain loop
over time within each run): K = 8: 1.1–1.6×, 16: 1.9–2.7×, 32: 3.0–4.2×, 64: 3.4–4.1×,
128: 2.0–2.8×. Work grows with K (the triangle), dependent steps fall as L/K; 32 and 64 tie,
and 64 keeps the full profile's training length (64) in a single chunk."""

DT_MIN, DT_MAX = 1e-3, 1.0
"""Initial Δ, log-spaced over the channels: time scales 1/Δ from 1 step (the previous byte) to
1000 steps (past the quick profile's longest evaluation length, 512), as S4D spreads its
decays over the scales of the task."""


MAX_DT = 1e30
"""The largest Δ: ``dt_max``'s bound, and where the layer clamps ``exp(log_dt)`` (a learned
``log_dt`` past log(MAX_DT) ≈ 69.1 gives this Δ). ``a = exp(−Δ)`` is already exactly 0 in float32
past Δ ≈ 104 (and in float64 past 745), so the clamp changes no value, and no gradient (``∂a/∂log_dt
= −a·Δ`` is 0 there too); without it a Δ past float32's range (3.4e38, ``log_dt`` > 88.7) would
be inf, and its gradient ``0·inf`` NaN."""


def _scan_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def diagonal_scan(v: torch.Tensor, dt: torch.Tensor, state: torch.Tensor | None = None, *,
                  chunk: int = CHUNK) -> torch.Tensor:
    """Every state of ``h_t = exp(−dt) ⊙ h_{t−1} + v_t``: ``v [B, L, N]``, ``dt [N] >= 0`` ->
    ``[B, L, N]`` (chunked; see the module docstring). ``state [B, N]`` is ``h_{−1}`` (zeros by
    default). Computed in float32 (float64 for float64 input) and returned in that dtype.

    ``dt = 0`` is no decay (``a = 1``, a running sum), ``dt = inf`` a decay of exactly 0
    (``h_t = v_t``). ``v``, ``dt`` and ``state`` must be floating-point tensors (a list is refused
    with a TypeError, as every tensor argument of posenc is); a negative or NaN ``dt`` is a
    ValueError."""
    if not isinstance(v, torch.Tensor) or not v.is_floating_point():
        raise TypeError(f"v must be a floating-point torch.Tensor [B, L, N], got {_what(v)}")
    if v.dim() != 3:
        raise ValueError(f"v must have shape [B, L, N], got shape {list(v.shape)}")
    if not isinstance(dt, torch.Tensor) or not dt.is_floating_point():
        raise TypeError(f"dt must be a floating-point torch.Tensor [N] (the step of each channel, "
                        f"exp(−dt) its decay), got {_what(dt)}")
    if dt.shape != v.shape[-1:]:
        raise ValueError(f"dt must have shape [{v.shape[-1]}] ([N], N = v's last dimension), got shape {list(dt.shape)}")
    if not torch.compiler.is_compiling() and dt.numel() and not bool((dt >= 0).all()):  # NaN fails too
        bad = dt[~(dt >= 0)][0].item()
        raise ValueError(f"dt must be >= 0 (a decay exp(−dt) in [0, 1]; inf is a decay of 0), got {bad}")
    chunk = check_int("chunk", chunk, min=1)
    if state is not None:
        _check_state(state, v.shape[0], v.shape[-1])
    return _scan(v, dt, state, chunk=chunk)


def _scan(v: torch.Tensor, dt: torch.Tensor, state: torch.Tensor | None, *, chunk: int) -> torch.Tensor:
    """``diagonal_scan`` on checked arguments (the layer checks its own)."""
    b, length, n = v.shape
    work = _scan_dtype(v.dtype)
    k = min(chunk, max(length, 1))
    check_memory("chunk", chunk, 2 * n * k * k, bytes_per=torch.empty((), dtype=work).element_size(),
                 what=f"the scan's [N={n}, K, K] decay triangle (K = min(chunk, L) = {k})")
    v, dt = v.to(work), dt.to(work)
    h = torch.zeros(b, n, dtype=work, device=v.device) if state is None else state.to(v.device, work)  # (B, N)
    steps = torch.arange(k, device=v.device, dtype=work)  # (K,)
    lag = steps[:, None] - steps[None, :]  # (K, K): i − j
    # W[n, i, j] = a_n^(i−j) below the diagonal (the exponent −Δ·(i−j) < 0), 1 on it (a^0, also
    # where a = 0: Δ·0 is never formed, so Δ = inf is exact), 0 above.
    w = torch.where(lag > 0, torch.exp(-dt[:, None, None] * lag.clamp(min=1)), (lag == 0).to(work))  # (N, K, K)
    carry = torch.exp(-dt[None, :] * (steps[:, None] + 1))  # (K, N): a^(i+1)
    out = []
    for start in range(0, length, k):
        vc = v[:, start:start + k]  # (B, K', N)
        kk = vc.shape[1]
        hc = torch.einsum("nij,bjn->bin", w[:, :kk, :kk], vc) + carry[:kk] * h[:, None, :]  # (B, K', N)
        out.append(hc)
        h = hc[:, -1]
    if not out:
        return v.new_zeros(b, 0, n)
    return torch.cat(out, dim=1)  # (B, L, N)


def _what(x) -> str:
    return f"a {x.dtype} tensor" if isinstance(x, torch.Tensor) else type(x).__name__


def _check_state(state, b: int, n: int) -> None:
    """``state``: a floating-point tensor ``[B, N]`` (the previous chunk's last state)."""
    if not isinstance(state, torch.Tensor) or not state.is_floating_point():
        got = f"a {state.dtype} tensor" if isinstance(state, torch.Tensor) else type(state).__name__
        raise TypeError(f"state must be a floating-point torch.Tensor [B, N] (the last state a previous call "
                        f"returned with return_state=True) or None, got {got}")
    if tuple(state.shape) != (b, n):
        raise ValueError(f"state must have shape [{b}, {n}] ([B, N]), got {list(state.shape)}")


class DiagonalSSM(nn.Module):
    """The ``ssm`` layer: ``x [B, L, C]`` -> ``y [B, L, C]`` (see the module docstring).

    Args:
        d_model: C, the width of the input and the output.
        d_state: N, the number of state channels (default ``d_model``).
        dt_min, dt_max: the range of the initial steps Δ (log-spaced over the channels).
        chunk: steps per chunk of the scan (``CHUNK``).
    """

    def __init__(self, d_model: int, d_state: int | None = None, *, dt_min: float = DT_MIN, dt_max: float = DT_MAX,
                 chunk: int = CHUNK) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, min=1)
        self.d_state = check_int("d_state", d_model if d_state is None else d_state, min=1)
        dt_min = check_float("dt_min", dt_min, min=0.0, min_open=True)
        dt_max = check_float("dt_max", dt_max, max=MAX_DT)
        if dt_max < dt_min:
            raise ValueError(f"dt_max must be >= {dt_min} (dt_min), got {dt_max}")
        self.chunk = check_int("chunk", chunk, min=1)
        check_memory("d_model" if d_state is None else "d_state", self.d_state if d_state is not None else self.d_model,
                     2 * self.d_model * self.d_state + 2 * self.d_model + 3 * self.d_state,
                     what=f"the layer's weights (d_model={self.d_model} × d_state={self.d_state}, float32)")
        self.in_proj = nn.Linear(self.d_model, self.d_state)
        self.out_proj = nn.Linear(self.d_state, self.d_model)
        log_dt = torch.linspace(math.log(dt_max), math.log(dt_min), self.d_state, dtype=torch.float64)
        self.log_dt = nn.Parameter(log_dt.float())  # (N,)
        self.skip = nn.Parameter(torch.ones(self.d_model))  # D, (C,)

    kind = "recurrent"

    def dt(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``Δ = exp(log_dt)``, ``[N]``, clamped at ``MAX_DT`` (a decay of exactly 0 either way)."""
        log_dt = self.log_dt if dtype is None else self.log_dt.to(dtype)
        return torch.exp(log_dt.clamp(max=math.log(MAX_DT)))

    def decay(self) -> torch.Tensor:
        """``a = exp(−exp(log_dt))``, ``[N]``."""
        return torch.exp(-self.dt())

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None, *,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, C]`` -> ``y [B, L, C]`` in x's dtype; ``state [B, N]`` continues a sequence
        (``h_{−1}``); ``return_state=True`` also returns the last state ``[B, N]`` (in float32, or
        float64 for float64 input), so that a sequence cut in two gives the same outputs. For an
        empty ``x`` (``L = 0``) the last state is the one before it: ``state``, or zeros (``h_{−1} = 0``)."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}"
                            f"{'' if not isinstance(x, torch.Tensor) else ' of dtype ' + str(x.dtype)}")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape [B, L, {self.d_model}] (d_model={self.d_model}), "
                             f"got {list(x.shape)}")
        weights = self.in_proj.weight.dtype
        if x.dtype != weights and not torch.is_autocast_enabled(x.device.type):  # autocast casts for Linear
            raise TypeError(f"x has dtype {x.dtype} but the layer's weights are {weights}; give x in {weights} "
                            f"or convert the layer (layer.to({x.dtype}))")
        check_bool("return_state", return_state)
        if state is not None:
            _check_state(state, x.shape[0], self.d_state)
        work = _scan_dtype(x.dtype)
        u = self.in_proj(x)  # (B, L, N)
        dt = self.dt(work)  # (N,): Δ
        gain = -torch.expm1(-dt)  # (N,): 1 − a, exact even where Δ is small (1 − exp(−Δ) would cancel)
        h = _scan(gain * u.to(work), dt, state, chunk=self.chunk)  # (B, L, N), work dtype
        y = self.out_proj(h.to(x.dtype)) + self.skip * x  # (B, L, C)
        if return_state:
            if h.shape[1]:
                return y, h[:, -1]
            before = h.new_zeros(x.shape[0], self.d_state) if state is None else state.to(h.device, work)
            return y, before
        return y

    def reference_weights(self) -> dict:
        """The weights as float64 NumPy arrays, the keyword arguments of ``posenc.reference.ssm``."""
        def np64(t: torch.Tensor):
            return t.detach().cpu().double().numpy()

        return {"w_in": np64(self.in_proj.weight), "b_in": np64(self.in_proj.bias), "log_dt": np64(self.log_dt),
                "w_out": np64(self.out_proj.weight), "b_out": np64(self.out_proj.bias), "skip": np64(self.skip)}

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_state={self.d_state}, chunk={self.chunk}"


__all__ = ["DiagonalSSM", "diagonal_scan", "CHUNK"]
