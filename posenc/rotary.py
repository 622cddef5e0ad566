"""Rotation of queries and keys, shared by every rotary scheme (no copies of this code elsewhere).

Angles (``angles``, shared by 1D, axial, mixed and multimodal RoPE, sinusoidal and
Transformer-XL) are computed in float64 from the positions, reduced exactly mod 2π and only then
cast, so a bfloat16 or float16 input never changes which position is used. Frequencies that are a
closed form of ``base`` and ``i`` come as double-doubles ``inv_freq + inv_freq_lo``
(``posenc.reference.positions.exact_split``), so the angle is that of the true θ, not of θ
rounded to float64; positions must be below 2^63 (``POSITION_BOUND``).

**Speed.** On CPU, eager PyTorch pays for every pass over memory and, for large tensors, for
every fresh allocation (page faults). ``apply_rotary`` therefore writes into one output tensor:

- float32/float64 "interleaved" pairs are complex numbers: one complex multiply (a single pass,
  as fast as a copy);
- otherwise three passes (a multiply, a multiply-add, a copy or a second multiply-add) and one
  allocation, where the plain expression takes seven kernels and seven allocations;
- under autograd, a ``torch.autograd.Function`` whose backward is the same rotation by ``−θ``
  (the transpose), so training stores only cos and sin.

On CUDA, when Triton imports, ``posenc.rotary_triton``'s kernel runs instead (one pass,
in place or not, its backward the same kernel by ``−θ``).

The plain expression (``_rotate_plain``) is kept for what the fused path does not cover (cos/sin
that need a gradient, mixed dtypes, cos/sin that broadcast ``x`` to a bigger shape) and under
``torch.compile``, whose Inductor fuses it into a single pass anyway.
``posenc bench`` measures them against a warm copy, a fresh copy and the peers; small "half"
tensors (a decoding step) take the ``halves`` kernel (``HALF_FUSED_MIN_ELEMENTS``).
"""

from __future__ import annotations

import math

import torch

from posenc._rotary_checks import LAYOUTS, check_rotation_args
from posenc.reference import positions as _ref_positions

_CHUNK, _LEVELS = _ref_positions.CHUNK_BITS, _ref_positions.LEVELS
POSITION_BOUND = _ref_positions.POSITION_BOUND
HALF_FUSED_MIN_ELEMENTS = 1 << 17
"""Below this many elements (a decoding step), "half" tensors take the ``halves`` kernel (four
half-width ops, no concatenated cos): measured, one thread, into a warm ``out``, halves ÷ the
full-width ``addcmul``/``partner`` kernels = 0.66 (float32) / 0.73 (bfloat16) at 8×32×1×128
(32768 elements), 1.01 / 1.15 at 8×32×8×128 (262144), 1.84 at 2M elements: the cross-over lies
between, and 2^17 sits in it."""


def _two_pi_parts() -> tuple[float, ...]:
    """2π as a sum of 11-bit float64 parts and a float64 tail (Cody–Waite): ``n·part`` is exact for
    ``n < 2^42``, and ten parts carry 2π to 2^-108, so ``x − n·2π`` is right to ~1e-16 for
    ``x < 2^42·2π``."""
    from fractions import Fraction

    rest, parts = _ref_positions.TWO_PI, []
    for _ in range(10):
        unit = Fraction(2) ** (math.floor(math.log2(rest)) - 10)  # 11 significant bits
        part = (rest // unit) * unit
        parts.append(float(part))
        rest -= part
    return (*parts, float(rest))


_TWO_PI_PARTS = _two_pi_parts()


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _reduce_two_pi(hi: torch.Tensor, lo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The double-double ``hi + lo`` minus the nearest multiple ``n·2π``, as a double-double: 2π is
    subtracted part by part (``_TWO_PI_PARTS``; ``n·part`` exact for ``n < 2^42``), each difference
    carried exactly by ``_two_sum``, the last part's product rounding by < ``n·2^-160``."""
    n = torch.round(hi / (2 * math.pi))
    for part in _TWO_PI_PARTS:
        hi, e = _two_sum(hi, -(n * part))
        lo = lo + e
    return _two_sum(hi, lo)


def reduced_multiples(inv_freq: torch.Tensor, inv_freq_lo: torch.Tensor | None = None,
                      *, pair: bool = False, levels: int = _LEVELS) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``r_j = (2^(21j)·θ) mod 2π`` in about ``[−π, π]``: ``[..., R]`` float64 θ -> ``[levels, ..., R]``
    (``j < levels``, all ``LEVELS`` by default; ``angles`` asks for one below position 2^21, each
    level the same numbers as with more); with ``pair=True``, ``(hi, lo)``: each ``r_j`` as a
    double-double (what ``angles`` uses).

    The torch form of ``posenc.reference.positions.reduced_multiples``: θ (plus ``inv_freq_lo``, the
    low half of a double-double θ) is reduced mod 2π as a double-double, then each level is the
    previous one times 2^21 (exact) reduced again, so ``n < 2^20`` at every level and every product
    ``n·part`` is exact, for any θ below ``2^42·2π``. Differentiable in θ (``∂r_j/∂θ = 2^(21j)``,
    through ``hi``), traceable.
    """
    theta = inv_freq.to(torch.float64)
    with torch.no_grad():
        lo = torch.zeros_like(theta) if inv_freq_lo is None else inv_freq_lo.to(torch.float64).expand_as(theta)
        hi, lo = _two_sum(theta.detach(), lo)
        if not torch.compiler.is_compiling() and hi.numel() and bool(hi.abs().max() < math.pi):
            hi, lo = _two_sum(hi, lo)  # |θ| < π (every RoPE's θ ≤ 1): n = 0, the reduction's own result
        else:
            hi, lo = _reduce_two_pi(hi, lo)
        his, los = [hi], [lo]
        for _ in range(1, levels):
            hi, lo = _reduce_two_pi(hi * float(1 << _CHUNK), lo * float(1 << _CHUNK))
            his.append(hi)
            los.append(lo)
    scales = theta.new_tensor([float(1 << (_CHUNK * j)) for j in range(levels)])
    scales = scales.view(-1, *([1] * theta.dim()))  # (LEVELS, 1, ...)
    slope = theta.unsqueeze(0) * scales  # (LEVELS, ..., R): carries the gradient 2^(21j)
    hi = torch.stack(his) + (slope - slope.detach())
    return (hi, torch.stack(los)) if pair else hi


def _chunks(positions: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """``c_j`` (float64) with ``positions = Σ_j c_j·2^(21j)``, exact for integers and float64."""
    if not positions.is_floating_point():
        p = positions.long()
        mask = (1 << _CHUNK) - 1
        return [((p >> (_CHUNK * j)) & mask if j < levels - 1 else p >> (_CHUNK * j)).to(torch.float64)
                for j in range(levels)]
    rest, out = positions.to(torch.float64), []
    for j in reversed(range(1, levels)):
        c = torch.floor(rest * 2.0 ** (-_CHUNK * j))
        rest = rest - c * 2.0 ** (_CHUNK * j)
        out.append(c)
    return [rest] + out[::-1]


def angles(positions: torch.Tensor, inv_freq: torch.Tensor, axis_of_pair: torch.Tensor | None = None,
           *, reduced: torch.Tensor | None = None, inv_freq_lo: torch.Tensor | None = None) -> torch.Tensor:
    """The angle of every rotated pair, float64 in ``[−π, π)``: the one angle function of posenc.

    ``positions [..., L]`` (one axis, ``axis_of_pair=None``) or ``[..., L, A]`` with
    ``axis_of_pair [R]`` (int64) naming the axis whose position pair ``i`` takes (axial RoPE,
    M-RoPE); integer or real, below 2^63 (``POSITION_BOUND``, a ValueError past it). ``inv_freq``:
    ``[R]`` float64 θ, or any shape ``[..., R]`` that broadcasts against the result ``[..., L, R]``
    (per-head frequencies); ``inv_freq_lo`` (same shape): the low half of a double-double θ.

    **Exact at any position** (see ``posenc.reference.positions``): with ``p = Σ_j c_j·2^(21j) + f``
    split exactly (``f`` the fraction of a real position) and ``r_j = (2^(21j)·θ) mod 2π`` as
    double-doubles (``reduced_multiples(pair=True)``, or ``reduced`` if given),
    ``p·θ ≡ Σ_j c_j·r_j + f·θ``, each product formed and reduced exactly
    (``reference.positions.times_reduced``). Measured against 50-digit mpmath from ``base`` and
    ``i`` (tests/test_angles.py): within 1e-14 of the true angle at every position below 2^63 when θ
    is a double-double. Positions below 2^21 (checked outside ``torch.compile``) need only
    ``c_0``. Differentiable in ``inv_freq`` (``∂angle/∂θ = p``).
    """
    per_pair = positions.unsqueeze(-1) if axis_of_pair is None else positions[..., axis_of_pair]  # (..., L, R|1)
    levels = _LEVELS
    if not torch.compiler.is_compiling() and per_pair.numel():
        high = positions.max()
        if high >= (1 << _CHUNK):
            if positions.is_floating_point():
                _ref_positions.check_bound("positions", high.item())
        else:
            levels = 1
    elif not torch.compiler.is_compiling():
        levels = 1
    if reduced is None:
        r_hi, r_lo = reduced_multiples(inv_freq, inv_freq_lo, pair=True, levels=levels)
    else:
        r_hi, r_lo = reduced if isinstance(reduced, tuple) else (reduced, torch.zeros_like(reduced))
    c = _chunks(per_pair, levels)
    fraction = None
    if positions.is_floating_point():  # p = whole + f: (θ mod 2π)·f is not θ·f, so f takes θ itself
        whole = torch.floor(c[0])
        fraction, c[0] = c[0] - whole, whole
    total = _ref_positions.times_reduced(c[0], r_hi[0], r_lo[0], torch)
    for j in range(1, levels):
        total = total + _ref_positions.times_reduced(c[j], r_hi[j], r_lo[j], torch)
    if fraction is not None:
        theta = inv_freq.to(torch.float64)
        total = total + fraction * theta
        if inv_freq_lo is not None:
            total = total + fraction * inv_freq_lo.to(torch.float64)
    return torch.remainder(total + torch.pi, 2 * torch.pi) - torch.pi


DIRECTIONS = ("counterclockwise", "clockwise")
"""The way a rotation turns each pair ``(a, b)`` by its angle ``φ``: ``"counterclockwise"``,
``(a cos φ − b sin φ, b cos φ + a sin φ)`` (RoFormer's ``R(φ)``, every RoPE but NanoChat's), or
``"clockwise"``, ``R(−φ)`` (NanoChat's ``rotate_half``, ``(x2, −x1)``): the same cos and the
other sign of sin, since ``cos(−φ) = cos φ`` and ``sin(−φ) = −sin φ`` exactly."""


def angles_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype = torch.float32,
                   scale: float = 1.0, axis_of_pair: torch.Tensor | None = None, *,
                   inv_freq_lo: torch.Tensor | None = None,
                   direction: str = "counterclockwise") -> tuple[torch.Tensor, torch.Tensor]:
    """``cos(angle)·scale`` and ``sin(angle)·scale`` of ``angles(positions, inv_freq, axis_of_pair,
    inv_freq_lo=inv_freq_lo)``, computed in float64 and cast to ``dtype``: ``[..., L, R]`` each.
    ``direction="clockwise"`` (``DIRECTIONS``) turns by the negated angles: sin changes sign, so
    every rotation that takes these tables (``apply_rotary``, its kernels) turns the other way."""
    a = angles(positions, inv_freq, axis_of_pair, inv_freq_lo=inv_freq_lo)
    cos, sin = torch.cos(a), torch.sin(a)
    if direction == "clockwise":
        sin = -sin
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype), sin.to(dtype)


def _pairs(t: torch.Tensor, rd: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members ``(a_i, b_i)`` of each rotated pair of ``t [..., D]``, as views ``[..., rd/2]``."""
    if layout == "half":  # narrow: a fraction of the cost of t[..., a:b] (decoding steps see it)
        return t.narrow(-1, 0, rd // 2), t.narrow(-1, rd // 2, rd // 2)
    return t[..., 0:rd:2], t[..., 1:rd:2]


def _spread(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """``[..., rd/2]`` per-pair values -> ``[..., rd]`` per dimension: ``a`` at each pair's first
    member, ``b`` at its second."""
    if layout == "half":
        return torch.cat((a, b), dim=-1)
    return torch.stack((a, b), dim=-1).flatten(-2)


def _rotate_plain(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation as one expression: any dtypes, any broadcast, differentiable in cos and sin."""
    rd = 2 * cos.shape[-1]
    x1, x2 = _pairs(x, rd, layout)
    out = _spread(x1 * cos - x2 * sin, x2 * cos + x1 * sin, layout)
    return out if rd == x.shape[-1] else torch.cat((out, x[..., rd:]), dim=-1)


def _complex_view(t: torch.Tensor, rd: int) -> torch.Tensor | None:
    """``t[..., :rd]`` as ``[..., rd/2]`` complex numbers (interleaved pairs), or None if the strides forbid it."""
    if t.dtype not in (torch.float32, torch.float64) or t.stride(-1) != 1 or t.storage_offset() % 2:
        return None
    if any(s % 2 for s in t.stride()[:-1]):
        return None
    return torch.view_as_complex(t[..., :rd].unflatten(-1, (-1, 2)))


KERNELS = ("complex", "addcmul", "halves", "partner", "inplace")
"""The eager kernels of ``_rotate_into``, named so that tests can check each one is reached."""


def _kernel(x: torch.Tensor, rd: int, layout: str, out: torch.Tensor) -> str:
    """Which eager kernel ``_rotate_into`` runs (measured with ``posenc bench``, see the module docstring)."""
    if out is x:
        return "inplace"
    if layout == "interleaved" and _complex_view(x, rd) is not None and _complex_view(out, rd) is not None:
        return "complex"
    if layout == "half" and (x.numel() < HALF_FUSED_MIN_ELEMENTS or (x.element_size() < 4 and rd < x.shape[-1])):
        return "halves"  # small, or bfloat16/float16 partial rotary (halves ÷ partner = 0.49 at 1x32x4096x128, rd 64)
    if x.element_size() >= 4 and layout == "half":
        return "addcmul"
    return "partner"


def _rotate_into(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                 out: torch.Tensor) -> torch.Tensor:
    """The rotation written into ``out`` (``x`` itself, or memory that does not overlap it); no autograd.

    Kernels, picked by measurement (``posenc bench``):

    - ``complex``: interleaved float32/float64 pairs as complex numbers, one multiply (one pass,
      as fast as a copy);
    - ``addcmul``: half float32/float64, ``out = x·[cos, cos]`` then one ``addcmul_`` per half;
    - ``halves``: half, small tensors (``HALF_FUSED_MIN_ELEMENTS``: fewest ops, per-call overhead
      decides) and bfloat16/float16 partial rotary (measured 0.49× ``partner``, whose full-block
      ops are strided there; 2.4× with full rotary, 1.06–1.3× for float32): ``o₁ = x₁·cos``,
      ``o₁ −= x₂·sin``, ``o₂ = x₂·cos``, ``o₂ += x₁·sin``;
    - ``partner``: otherwise (bfloat16/float16, whose half-width strided kernels are slow on CPU),
      ``out = partner(x)·[−sin, sin] + x·[cos, cos]`` over the whole rotated block;
    - ``inplace`` (``out is x``): ``t = x₁·sin`` (half the rotated block), then
      ``x₁ ← x₁·cos − x₂·sin`` and ``x₂ ← x₂·cos + t``; complex pairs rotate in place directly.
    """
    rd = 2 * cos.shape[-1]
    kernel = _kernel(x, rd, layout, out)
    x1, x2 = _pairs(x, rd, layout)
    if kernel == "inplace":
        xc = _complex_view(x, rd) if layout == "interleaved" else None
        if xc is not None:
            xc.mul_(torch.complex(cos, sin))
            return x
        t = x1 * sin
        x1.mul_(cos).addcmul_(x2, sin, value=-1)  # x1 cos − x2 sin
        x2.mul_(cos).add_(t)  # x2 cos + x1 sin
        return x
    d = x.shape[-1]
    if rd < d:
        out.narrow(-1, rd, d - rd).copy_(x.narrow(-1, rd, d - rd))
    o1, o2 = _pairs(out, rd, layout)
    if kernel == "halves":
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
        return out
    xr, o = x.narrow(-1, 0, rd), out.narrow(-1, 0, rd)
    if kernel == "complex":
        torch.mul(_complex_view(x, rd), torch.complex(cos, sin), out=_complex_view(out, rd))  # (a + ib)(cos + i sin)
    elif kernel == "addcmul":
        torch.mul(xr, _spread(cos, cos, layout), out=o)
        o1.addcmul_(x2, sin, value=-1)  # x1 cos − x2 sin
        o2.addcmul_(x1, sin)  # x2 cos + x1 sin
    else:
        o1.copy_(x2)
        o2.copy_(x1)  # o = partner(x)
        o.mul_(_spread(-sin, sin, layout)).addcmul_(xr, _spread(cos, cos, layout))
    return out


def _rotate_fused(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation written into one new tensor with the strides of ``x`` (no autograd)."""
    return _rotate_into(x, cos, sin, layout, torch.empty_like(x))


class _Rotate(torch.autograd.Function):
    """Rotation by θ whose backward is the rotation by −θ (cos and sin are constants)."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout):  # noqa: D102
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return _rotate_fused(x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, -sin, ctx.layout), None, None, None


def _fusable(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """True when the fused path gives exactly the plain expression's result, shape and dtype."""
    if not (x.is_floating_point() and cos.dtype == sin.dtype == x.dtype and cos.shape == sin.shape):
        return False
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        return False
    lead, xlead = cos.shape[:-1], x.shape[:-1]
    if 2 * cos.shape[-1] > x.shape[-1] or len(lead) > len(xlead):
        return False
    return all(c in (1, n) for c, n in zip(reversed(lead), reversed(xlead)))  # cos broadcasts into x


def _plain_wins(x: torch.Tensor, layout: str) -> bool:
    """Under ``torch.compile`` the plain expression is the faster one: Inductor fuses it into one pass.
    Under ``torch.func`` transforms (``vmap``: the benchmark's seeds trained as one model) it is the
    only one they run: ``out=`` kernels have no batching rule."""
    return torch.compiler.is_compiling() or torch._C._functorch.is_functorch_wrapped_tensor(x)


TRITON_ON_CPU = False
"""CUDA tensors go through ``posenc.rotary_triton`` when Triton imports; the tests set this to send
CPU tensors there too, under Triton's interpreter (``TRITON_INTERPRET=1``)."""
_TRITON: object = None  # the posenc.rotary_triton module, False when Triton does not import


def _triton_tables(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """The Triton module and cos/sin as its ``[Bc, L, R]`` tables, or None where the torch path runs:
    another device, no Triton, under ``torch.compile``, or cos/sin of another shape than ``[L, R]``,
    ``[1, L, R]`` or ``[B or 1, 1, L, R]`` for ``x [B, H, L, D]``."""
    global _TRITON
    if not (x.is_cuda or TRITON_ON_CPU) or x.dim() != 4 or x.stride(-1) != 1 or torch.compiler.is_compiling():
        return None
    if not _fusable(x, cos, sin) or x.dtype == torch.float64:  # the kernel computes in float32
        return None
    length = x.shape[2]
    if cos.dim() == 4 and cos.shape[1] == 1 and cos.shape[2] == length:
        cos, sin = cos[:, 0], sin[:, 0]  # (Bc, L, R)
    elif not (cos.dim() in (2, 3) and cos.shape[-2] == length and (cos.dim() == 2 or cos.shape[0] == 1)):
        return None
    if _TRITON is None:
        try:
            from posenc import rotary_triton
        except ImportError:  # no Triton: the torch path
            _TRITON = False
        else:
            _TRITON = rotary_triton
    return (_TRITON, cos, sin) if _TRITON else None


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    triton = _triton_tables(x, cos, sin)
    if triton is not None:
        kernel, cos, sin = triton
        return kernel.rotate(x, cos, sin, layout=layout)
    if _plain_wins(x, layout) or not _fusable(x, cos, sin):
        return _rotate_plain(x, cos, sin, layout)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, cos, sin, layout)
    return _rotate_fused(x, cos, sin, layout)


def check_out(out: object, x: torch.Tensor) -> torch.Tensor:
    """``out`` is ``x`` itself or a tensor of its shape, dtype and device whose memory does not overlap it."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor (or None), got {type(out).__name__}")
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must have the shape, dtype and device of x ({list(x.shape)}, {x.dtype}, {x.device}); "
                         f"got {list(out.shape)}, {out.dtype}, {out.device}")
    if any(st == 0 and n > 1 for n, st in zip(out.shape, out.stride())):  # expanded: one element, many places
        raise ValueError(f"out must not write one memory location twice; got a tensor of shape {list(out.shape)} "
                         f"with strides {list(out.stride())} (an expanded tensor): give out=torch.empty_like(x)")
    if out is not x and not torch.compiler.is_compiling() and out.numel() and _overlaps(out, x):
        raise ValueError("out must be x itself (in place) or memory that does not overlap x; "
                         f"got a different tensor sharing x's memory (shape {list(out.shape)}, "
                         f"strides {list(out.stride())})")
    return out


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges spanned by ``a`` and ``b`` intersect (conservative)."""
    def span(t):
        start = t.data_ptr()
        return start, start + t.element_size() * (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())))
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _check_broadcast(x: torch.Tensor, cos: torch.Tensor) -> None:
    """``cos`` (and ``sin``, of its shape) broadcasts to ``x[..., :rotary_dim/2]`` without growing it."""
    target = (*x.shape[:-1], cos.shape[-1])
    try:
        ok = cos.dim() <= x.dim() and tuple(torch.broadcast_shapes(cos.shape, target)) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"cos and sin of shape {list(cos.shape)} must broadcast to x's [..., L, rotary_dim/2] = "
                         f"{list(target)} (x {list(x.shape)}): their length L and batch dimensions must be x's or 1"
                         f"{_layout_hint(x, cos)}")


def _layout_hint(x: torch.Tensor, cos: torch.Tensor) -> str:
    """The end of a shape error when ``cos``'s length fits ``x``'s dim -3 and not its dim -2: ``x`` is
    read as ``[B, H, L, D]`` and is likely ``[B, L, H, D]``; else ``""``."""
    if x.dim() >= 3 and cos.dim() >= 2 and cos.shape[-2] == x.shape[-3] != x.shape[-2]:
        return ("; x's length is its dim -2 ([B, H, L, D]) and cos fits its dim -3: for a [B, L, H, D] x pass "
                "x.transpose(1, 2)")
    return ""


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half",
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotates the first ``rotary_dim = 2 * cos.shape[-1]`` dims of ``x [..., L, D]``.

    ``cos`` and ``sin`` ``[..., L, rotary_dim/2]`` broadcast against ``x[..., :rotary_dim/2]``;
    ``layout`` pairs ``(i, i + rotary_dim/2)`` ("half") or ``(2i, 2i+1)`` ("interleaved").
    The remaining dims pass through unchanged:

        out[a_i] = x[a_i]·cos_i − x[b_i]·sin_i,   out[b_i] = x[b_i]·cos_i + x[a_i]·sin_i

    ``out``: write the result there and return it (no allocation): a tensor of ``x``'s shape,
    dtype and device that does not overlap ``x``, or ``x`` itself to rotate in place. Under
    autograd the rotation is computed as usual and copied into ``out`` (so gradients flow; an
    in-place rotation of a leaf that requires grad is refused by PyTorch as usual).
    """
    check_rotation_args(layout, x, cos, sin)
    if x.dim() == 0 or cos.shape != sin.shape or cos.dim() == 0 or 2 * cos.shape[-1] > x.shape[-1]:
        full = ("; cos has x's full width: posenc's tables hold one angle per pair (transformers' cos repeats "
                "its halves: pass cos[..., :D // 2])" if cos.dim() and cos.shape[-1] == x.shape[-1] else "")
        raise ValueError(f"cos and sin must have the same shape [..., L, rotary_dim/2] with rotary_dim <= "
                         f"x.shape[-1]; got x {list(x.shape)}, cos {list(cos.shape)}, sin {list(sin.shape)}"
                         f"{full}{_layout_hint(x, cos) if x.dim() else ''}")
    _check_broadcast(x, cos)
    return apply_rotary_unchecked(x, cos, sin, layout, None if out is None else check_out(out, x))


def apply_rotary_unchecked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                   out: torch.Tensor | None) -> torch.Tensor:
    """``apply_rotary`` without its argument checks, for callers that built cos/sin themselves (the
    rotary modules: a decoding step is short enough for the checks to show) and checked ``out``."""
    if out is None:
        return _rotate(x, cos, sin, layout)
    triton = _triton_tables(x, cos, sin)
    if triton is not None:
        kernel, cos, sin = triton
        return kernel.rotate(x, cos, sin, layout=layout, out=out)
    grad = torch.is_grad_enabled() and (x.requires_grad or out.requires_grad or cos.requires_grad
                                        or sin.requires_grad)
    if grad or _plain_wins(x, layout) or not _fusable(x, cos, sin):
        return out.copy_(_rotate(x, cos, sin, layout))
    return _rotate_into(x, cos, sin, layout, out)
