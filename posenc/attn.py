"""``posenc.attention``: scaled dot-product attention that applies any built scheme.

    attention(q, k, v, pe, q_positions=..., k_positions=..., causal=...)

- ``rotary``: rotates q at q_positions and k at k_positions, then SDPA;
- ``bias``: adds ``pe(q_positions, k_positions)`` to the scores. Small maps are materialized;
  long ones run through FlexAttention with a ``score_mod`` (forward only on CPU), or block by
  block (``posenc.blockwise``, with its backward), so ``[H, Lq, Lk]`` never exists whole;
- ``relative``: adds ``pe(q, k, q_positions, k_positions)`` (and Shaw's value term), in blocks;
- ``none``: plain SDPA. ``additive`` encodings belong to the token embeddings, not here.

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, D head dim.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from posenc._validate import check_choice, check_float
from posenc.blockwise import blockwise_attention
from posenc.encodings._base import BiasEncoding, check_batch, check_positions, check_tensor

BACKENDS = ("auto", "materialize", "flex", "chunked", "blockwise")
MATERIALIZE_ELEMENTS = 1 << 22  # a bias map up to 4M scores (16 MB in float32) is built whole
CHUNK_ELEMENTS = 1 << 23  # scores per query chunk on the chunked path


def _default_positions(lq: int, lk: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys at 0..Lk-1; queries are the last Lq of them (a KV cache), or 0..Lq-1 if Lq > Lk."""
    k = torch.arange(lk, device=device)
    q = torch.arange(lk - lq, lk, device=device) if lq <= lk else torch.arange(lq, device=device)
    return q, k


def _causal_allowed(lq: int, lk: int, device) -> torch.Tensor:
    """``[Lq, Lk]`` True where query i may see key j: ``j <= i + (Lk - Lq)`` (bottom-right aligned)."""
    return torch.arange(lk, device=device) <= torch.arange(lq, device=device).unsqueeze(-1) + (lk - lq)


def _sdpa(q, k, v, *, causal: bool, scale, mask=None):
    lq, lk = q.shape[-2], k.shape[-2]
    if causal and mask is None and lq == lk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if causal:
        allowed = _causal_allowed(lq, lk, q.device)
        mask = allowed if mask is None else mask.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe=None, *,
              q_positions: torch.Tensor | None = None, k_positions: torch.Tensor | None = None,
              causal: bool = False, scale: float | None = None, backend: str = "auto") -> torch.Tensor:
    """Attention of ``q [B, H, Lq, D]`` over ``k, v [B, H, Lk, D]`` with positional encoding ``pe``.

    Args:
        pe: a module from ``posenc.build`` (or None, the same as ``nope``).
        q_positions, k_positions: integer ``[L]`` or ``[B, L]``. By default keys are at
            ``0..Lk-1`` and queries at the last ``Lq`` of them, as when decoding with a KV cache.
        causal: query ``i`` sees key ``j`` only when ``j <= i + (Lk - Lq)``.
        scale: multiplies ``q·k``; ``1/√D`` by default.
        backend: for bias and relative kinds, ``"materialize"`` the whole score bias,
            ``"flex"`` (FlexAttention ``score_mod``; bias kind, forward only on CPU),
            ``"chunked"`` (query blocks), ``"blockwise"`` (``posenc.blockwise``: query and key
            blocks with an online softmax, and a backward that recomputes them; trains at long
            context), or ``"auto"`` (materialize when small, else flex when no gradient is
            needed, else blockwise).

    Returns:
        ``[B, H, Lq, D]`` in the dtype of ``q``.
    """
    q = check_tensor("q", q, ndim=4)
    k = check_tensor("k", k, ndim=4, last_dim=q.shape[-1])
    v = check_tensor("v", v, ndim=4)
    if k.shape[:2] != q.shape[:2] or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"q, k, v must be [B, H, Lq, D], [B, H, Lk, D], [B, H, Lk, Dv] with the same B and H; "
                         f"got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    check_choice("backend", backend, BACKENDS)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else check_float("scale", scale)
    if causal and lq > lk:
        raise ValueError(f"causal attention needs Lq <= Lk (queries are the last Lq keys); got Lq={lq}, Lk={lk}")
    if q_positions is None or k_positions is None:
        dq, dk = _default_positions(lq, lk, q.device)
    q_positions = dq if q_positions is None else check_positions("q_positions", q_positions).to(q.device)
    k_positions = dk if k_positions is None else check_positions("k_positions", k_positions).to(q.device)
    check_batch("q_positions", q_positions, b, lq)
    check_batch("k_positions", k_positions, b, lk)

    kind = "none" if pe is None else getattr(pe, "kind", None)
    if kind == "none":
        return _sdpa(q, k, v, causal=causal, scale=scale)
    if kind == "rotary":  # keys first: a length-dependent scaling then rotates q at the keys' length
        k = pe(k, k_positions, role="key")
        return _sdpa(pe(q, q_positions, role="query"), k, v, causal=causal, scale=scale)
    if kind == "additive":
        raise ValueError(f"pe {pe.name!r} is additive: add pe(positions) to the token embeddings before the "
                         "q/k/v projections; attention() applies rotary, bias and relative kinds")
    if kind not in ("bias", "relative"):
        raise TypeError(f"pe must be a module from posenc.build (with a kind), got {type(pe).__name__}")
    if kind == "bias" and pe.num_heads != h:
        raise ValueError(f"pe has num_heads={pe.num_heads} but q has {h} heads")

    if backend == "auto":
        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v, *pe.parameters()))
        if b * h * lq * lk <= MATERIALIZE_ELEMENTS:
            backend = "materialize"
        elif kind == "bias" and pe.flex_ok and not needs_grad:
            backend = "flex"
        else:
            backend = "blockwise"
    if backend == "blockwise":
        return blockwise_attention(q, k, v, pe, q_positions, k_positions, causal=causal, scale=scale)
    if backend == "flex":
        if kind != "bias" or not pe.flex_ok:
            raise ValueError(f"backend='flex' needs a bias scheme with an elementwise score; {pe.name!r} is not one")
        if q.device.type == "cpu" and torch.is_grad_enabled() and any(
                t.requires_grad for t in (q, k, v, *pe.parameters())):
            raise ValueError("backend='flex' has no backward on CPU; use backend='chunked' or "
                             "'materialize' when gradients are needed (or wrap the call in torch.no_grad())")
        return _flex(q, k, v, pe, q_positions, k_positions, causal=causal, scale=scale)
    chunk = lq if backend == "materialize" else max(1, CHUNK_ELEMENTS // (b * h * lk))
    return _chunked(q, k, v, pe, q_positions, k_positions, causal=causal, scale=scale, chunk=chunk)


def _chunked(q, k, v, pe, q_positions, k_positions, *, causal: bool, scale: float, chunk: int):
    """Exact attention over query blocks of ``chunk`` rows; scores in float32 at least."""
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    lq, lk = q.shape[2], k.shape[2]
    outs = []
    for start in range(0, lq, chunk):
        stop = min(start + chunk, lq)
        qp = q_positions[..., start:stop]
        qc = q[:, :, start:stop]  # (B, H, c, D)
        if isinstance(pe, BiasEncoding):  # float64 map cast once to the score dtype, not the module's
            bias = pe(qp, k_positions, dtype=work)  # (H, c, Lk) or (B, H, c, Lk)
        elif pe.kind == "bias":
            bias = pe(qp, k_positions).to(work)
        else:
            bias = pe(qc, k, qp, k_positions).to(work)  # (B, H, c, Lk)
        if causal:
            allowed = _causal_allowed(lq, lk, q.device)[start:stop]  # (c, Lk)
            bias = bias.masked_fill(~allowed, float("-inf"))
        if getattr(pe, "value_term", None) is None:
            outs.append(F.scaled_dot_product_attention(qc, k, v, attn_mask=bias, scale=scale))
        else:  # Shaw: the output also mixes relative value embeddings with the same weights
            p = torch.softmax(qc @ k.transpose(-1, -2) * scale + bias, dim=-1)  # (B, H, c, Lk)
            outs.append(p @ v + pe.value_term(p, qp, k_positions))
    return torch.cat(outs, dim=2).to(dtype)


_FLEX = None


def _compiled_flex():
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


_BLOCK_MASK = None


def _compiled_block_mask():
    """``torch.compile(create_block_mask)``: never materializes the ``[Lq, Lk]`` mask (what the
    deprecated ``_compile=True`` flag did)."""
    global _BLOCK_MASK
    if _BLOCK_MASK is None:
        from torch.nn.attention.flex_attention import create_block_mask

        _BLOCK_MASK = torch.compile(create_block_mask)
    return _BLOCK_MASK


def _flex(q, k, v, pe, q_positions, k_positions, *, causal: bool, scale: float):
    """FlexAttention: the bias is computed score by score in ``score_mod``; never a whole map."""
    b, lq, lk = q.shape[0], q.shape[2], k.shape[2]
    qpos = q_positions.long().expand(b, lq).contiguous()  # (B, Lq)
    kpos = k_positions.long().expand(b, lk).contiguous()  # (B, Lk)

    bias = pe.score_fn()

    def score_mod(score, bi, hi, qi, ki):
        return score + bias(hi, qpos[bi, qi], kpos[bi, ki]).to(score.dtype)

    block_mask = None
    if causal:
        shift = lk - lq

        def mask_mod(bi, hi, qi, ki):
            return ki <= qi + shift

        block_mask = _compiled_block_mask()(mask_mod, None, None, lq, lk, device=q.device)
    # CPU FlexAttention has no backward; elsewhere keep the caller's grad mode (never force it on)
    with torch.no_grad() if q.device.type == "cpu" else contextlib.nullcontext():
        return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
