"""A Triton kernel for the rotation of ``posenc/rotary.py`` (the GPU path; the same formula).

    out[a_i] = x[a_i]·cos_i − x[b_i]·sin_i,   out[b_i] = x[b_i]·cos_i + x[a_i]·sin_i

with pairs ``(a_i, b_i) = (i, i + R)`` ("half") or ``(2i, 2i + 1)`` ("interleaved"), ``R =
rotary_dim / 2``; dims past ``rotary_dim`` pass through. One program rotates ``BLOCK_L`` tokens of
one (sequence, head): it reads each element of ``x`` once and writes it once (the memory
roofline), computing in float32 whatever the storage dtype.

``rotate(x, cos, sin, ...)`` takes cos/sin **tables** ``[Lc, R]`` (or ``[B, Lc, R]``, one per
sequence) and finds token ``l`` of sequence ``b`` at row ``l + seqlen_offsets[b]`` (a KV cache's
offset), as flash-attention's ``apply_rotary`` does:

- ``x [B, H, L, D]`` (posenc's layout), or packed sequences ``x [T, H, D]`` with ``cu_seqlens
  [nseq + 1]`` (int32 cumulative lengths, sequence ``s`` is rows ``cu[s]..cu[s+1]−1``) and
  ``max_seqlen``; a packed token's position restarts at 0 (plus its offset) in each sequence;
- ``out``: a new tensor (default), a given one, or ``x`` itself (in place);
- autograd: ``_RotateTriton`` whose backward is the same kernel with ``−sin`` (the transpose of
  a rotation is the rotation by ``−θ``), so nothing but cos/sin is saved; an in-place call marks
  ``x`` dirty, as PyTorch's in-place ops do.

``posenc.apply_rotary`` and the rope module use it for CUDA tensors when Triton imports (see
``posenc.rotary``); everything else takes the torch path. Correctness is tested on the CPU under
Triton's interpreter (``TRITON_INTERPRET=1``) against the float64 reference; GPU timings have
not been measured here (no GPU was available).

Notation: B sequences, H heads, L length, D head dim, R = rotary_dim / 2, T packed tokens.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from posenc._rotary_checks import check_rotation_args

BLOCK_L = 16  # tokens per program: with R = 64 a program moves 16 x 128 elements of x


@triton.jit
def _rotary_kernel(X, OUT, COS, SIN, OFFSETS, CU_SEQLENS,
                   seqlen, rotary_half, head_dim, cos_rows,
                   sxb, sxh, sxl, sob, soh, sol, scb, scl,
                   INTERLEAVED: tl.constexpr, CONJUGATE: tl.constexpr, PACKED: tl.constexpr,
                   HAS_OFFSETS: tl.constexpr, COPY_REST: tl.constexpr,
                   BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_REST: tl.constexpr):
    pid_l, h, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if PACKED:  # sequence b is rows cu[b]..cu[b+1]-1 of x [T, H, D]
        row0 = tl.load(CU_SEQLENS + b)
        length = tl.load(CU_SEQLENS + b + 1) - row0
    else:
        row0 = 0
        length = seqlen
    rows = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)  # (BLOCK_L,) token index within the sequence
    keep = rows < length
    pos = rows
    if HAS_OFFSETS:
        pos = rows + tl.load(OFFSETS + b)
    r = tl.arange(0, BLOCK_R)
    mask = keep[:, None] & (r[None, :] < rotary_half) & (pos[:, None] < cos_rows)  # (BLOCK_L, BLOCK_R)
    c_ptr = b * scb + pos[:, None] * scl + r[None, :]
    cos = tl.load(COS + c_ptr, mask=mask, other=1.0).to(tl.float32)
    sin = tl.load(SIN + c_ptr, mask=mask, other=0.0).to(tl.float32)
    if CONJUGATE:
        sin = -sin
    b64, h64, rows64 = b.to(tl.int64), h.to(tl.int64), (row0 + rows[:, None]).to(tl.int64)  # offsets past 2^31
    x_base = X + (b64 * sxb + h64 * sxh) + rows64 * sxl
    o_base = OUT + (b64 * sob + h64 * soh) + rows64 * sol
    if INTERLEAVED:
        ia, ib = 2 * r[None, :], 2 * r[None, :] + 1
    else:
        ia, ib = r[None, :], r[None, :] + rotary_half
    xa = tl.load(x_base + ia, mask=mask, other=0.0).to(tl.float32)
    xb = tl.load(x_base + ib, mask=mask, other=0.0).to(tl.float32)
    tl.store(o_base + ia, (xa * cos - xb * sin).to(OUT.dtype.element_ty), mask=mask)
    tl.store(o_base + ib, (xb * cos + xa * sin).to(OUT.dtype.element_ty), mask=mask)
    if COPY_REST:  # dims rotary_dim..D-1 pass through (not needed in place)
        d = 2 * rotary_half + tl.arange(0, BLOCK_REST)
        rest = keep[:, None] & (d[None, :] < head_dim)
        tl.store(o_base + d[None, :], tl.load(x_base + d[None, :], mask=rest), mask=rest)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, *, layout: str,
            offsets: torch.Tensor | None, cu_seqlens: torch.Tensor | None, max_seqlen: int,
            conjugate: bool) -> torch.Tensor:
    """Runs the kernel: ``x``/``out`` as ``[B, H, L, D]`` or packed ``[T, H, D]``, ``cos``/``sin`` ``[Bc, Lc, R]``."""
    packed = cu_seqlens is not None
    rh = cos.shape[-1]
    if packed:
        nseq, heads, seqlen = cu_seqlens.shape[0] - 1, x.shape[1], max_seqlen
        sxb, sxh, sxl = 0, x.stride(1), x.stride(0)
        sob, soh, sol = 0, out.stride(1), out.stride(0)
    else:
        nseq, heads, seqlen = x.shape[0], x.shape[1], x.shape[2]
        sxb, sxh, sxl = x.stride(0), x.stride(1), x.stride(2)
        sob, soh, sol = out.stride(0), out.stride(1), out.stride(2)
    scb = cos.stride(0) if cos.shape[0] > 1 else 0
    grid = (triton.cdiv(max(seqlen, 1), BLOCK_L), heads, nseq)
    rest = x.shape[-1] - 2 * rh
    dummy = cos  # an unused pointer argument must still be a tensor
    # Triton launches on the current device: make it x's (a tensor on another GPU than the current one)
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        _rotary_kernel[grid](
            x, out, cos, sin, dummy if offsets is None else offsets, dummy if cu_seqlens is None else cu_seqlens,
            seqlen, rh, x.shape[-1], cos.shape[1],
            sxb, sxh, sxl, sob, soh, sol, scb, cos.stride(1),
            INTERLEAVED=layout == "interleaved", CONJUGATE=conjugate, PACKED=packed,
            HAS_OFFSETS=offsets is not None, COPY_REST=rest > 0 and out is not x,
            BLOCK_L=BLOCK_L, BLOCK_R=triton.next_power_of_2(rh), BLOCK_REST=triton.next_power_of_2(max(rest, 1)))
    return out


class _RotateTriton(torch.autograd.Function):
    """Rotation by θ through the kernel; the backward is the kernel with −sin."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, offsets, cu_seqlens, max_seqlen, inplace):  # noqa: D102
        ctx.save_for_backward(cos, sin, offsets, cu_seqlens)
        ctx.layout, ctx.max_seqlen = layout, max_seqlen
        out = x if inplace else torch.empty_like(x)
        if inplace:
            ctx.mark_dirty(x)
        return _launch(x, cos, sin, out, layout=layout, offsets=offsets, cu_seqlens=cu_seqlens,
                       max_seqlen=max_seqlen, conjugate=False)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        cos, sin, offsets, cu_seqlens = ctx.saved_tensors
        dx = _launch(grad, cos, sin, torch.empty_like(grad), layout=ctx.layout, offsets=offsets,
                     cu_seqlens=cu_seqlens, max_seqlen=ctx.max_seqlen, conjugate=True)
        return dx, None, None, None, None, None, None, None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half",
           seqlen_offsets: int | torch.Tensor = 0, cu_seqlens: torch.Tensor | None = None,
           max_seqlen: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotates ``x [B, H, L, D]`` (or packed ``[T, H, D]`` with ``cu_seqlens``) with cos/sin tables.

    Args:
        cos, sin: ``[Lc, R]`` or ``[B, Lc, R]`` tables, ``rotary_dim = 2R <= D``; token ``l`` of
            sequence ``b`` uses row ``l + seqlen_offsets[b]``, which must be ``< Lc``.
        seqlen_offsets: an int or an integer tensor ``[B]`` (a KV cache's lengths).
        cu_seqlens: int32 ``[nseq + 1]`` cumulative lengths of packed sequences (then ``x`` is
            ``[T, H, D]`` and ``max_seqlen`` their longest length, computed if not given).
        out: where to write (``x`` itself: in place); a new tensor by default.

    Gradients flow to ``x`` (never to cos/sin, which must not require grad).
    """
    check_rotation_args(layout, x, cos, sin)
    packed = cu_seqlens is not None
    if x.dim() != (3 if packed else 4):
        raise ValueError(f"x must be [T, H, D] with cu_seqlens or [B, H, L, D] without; got shape {list(x.shape)}")
    if cos.shape != sin.shape or cos.dim() not in (2, 3) or 2 * cos.shape[-1] > x.shape[-1]:
        raise ValueError(f"cos and sin must have the same shape [Lc, R] or [B, Lc, R] with 2R <= D; "
                         f"got cos {list(cos.shape)}, sin {list(sin.shape)}, x {list(x.shape)}")
    if cos.device != x.device or sin.device != x.device:
        raise ValueError(f"cos and sin must be on x's device {x.device}, got {cos.device} and {sin.device}")
    if x.stride(-1) != 1:
        raise ValueError(f"x must have unit stride in its last dimension, got strides {list(x.stride())}")
    if out is not None and out is not x and out.stride(-1) != 1:  # write contiguously, then copy
        return out.copy_(rotate(x, cos, sin, layout=layout, seqlen_offsets=seqlen_offsets, cu_seqlens=cu_seqlens,
                                max_seqlen=max_seqlen))
    nseq = cu_seqlens.shape[0] - 1 if packed else x.shape[0]
    cos, sin = (t if t.dim() == 3 else t.unsqueeze(0) for t in (cos, sin))  # (Bc, Lc, R)
    if cos.shape[0] not in (1, nseq):
        raise ValueError(f"cos has {cos.shape[0]} tables but there are {nseq} sequences")
    cos, sin = cos.contiguous(), sin.contiguous()
    if packed:
        if cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 or cu_seqlens.device != x.device:
            raise TypeError(f"cu_seqlens must be an int32 [nseq + 1] tensor on x's device, got "
                            f"{cu_seqlens.dtype} {list(cu_seqlens.shape)} on {cu_seqlens.device}")
        if max_seqlen is None:
            max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if nseq else 0
    else:
        max_seqlen = x.shape[2]
    offsets = None
    if isinstance(seqlen_offsets, torch.Tensor):
        if seqlen_offsets.shape != (nseq,) or seqlen_offsets.dtype.is_floating_point:
            raise ValueError(f"seqlen_offsets must be an int or an integer tensor [{nseq}], got "
                             f"{seqlen_offsets.dtype} {list(seqlen_offsets.shape)}")
        offsets = seqlen_offsets.to(device=x.device, dtype=torch.int32).contiguous()
        top = int(offsets.max()) if nseq else 0
    elif seqlen_offsets:
        top = int(seqlen_offsets)
        offsets = torch.full((nseq,), top, dtype=torch.int32, device=x.device)
    else:
        top = 0
    if max_seqlen + top > cos.shape[1]:
        hint = ""
        if not packed and x.shape[1] + top == cos.shape[1]:  # tables made for x's dim 1: a [B, L, H, D] x
            hint = ("; x's length is its dim 2 ([B, H, L, D]) and the tables fit its dim 1: for a [B, L, H, D] x "
                    "pass x.transpose(1, 2)")
        raise ValueError(f"cos and sin have {cos.shape[1]} rows but positions reach {max_seqlen + top - 1} "
                         f"(max_seqlen {max_seqlen} + seqlen_offsets up to {top}){hint}")
    inplace = out is x
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError("cos and sin must not require grad on the Triton path (its backward is to x only); "
                         "use posenc.rotary._rotate_plain for gradients to the angles")
    if torch.is_grad_enabled() and x.requires_grad:
        y = _RotateTriton.apply(x, cos, sin, layout, offsets, cu_seqlens, max_seqlen, inplace)
        return y if out is None or inplace else out.copy_(y)
    if out is None:
        out = torch.empty_like(x)
    return _launch(x, cos, sin, out, layout=layout, offsets=offsets, cu_seqlens=cu_seqlens,
                   max_seqlen=max_seqlen, conjugate=False)
