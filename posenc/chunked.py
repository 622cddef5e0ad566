"""The chunked backend of ``posenc.attention`` (``backend="chunked"``): exact attention over query
blocks, each over the keys its rows can see (``Visibility.key_range``), with the scheme's term of
the block (``block_bias``), the masks, the logit cap, sinks and dropout (``capped_weights``,
``posenc.dropout``). ``call`` is ``posenc.attn``'s prepared call (its q, k, v, scheme, positions,
visibility, scale, softcap, sinks, dropout)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc import scores
from posenc.masking import Visibility
from posenc.positions import as_working
from posenc.scores import cap_scores, fold, sink_softmax, unfold


def chunked_attention(call, *, chunk: int) -> torch.Tensor:
    """Exact attention over query blocks of ``chunk`` rows, each over the keys its rows can see
    (``Visibility.key_range``); scores in float32 at least. ``pe`` None: no bias, only the masks.
    Grouped heads are folded (``posenc.scores.fold``), never repeated; a query that sees no key
    gives zeros. With ``softcap``, ``sinks`` or dropout a block's scores are formed explicitly
    (``capped_weights``), then the softmax with the sink column, then the dropout of the weights
    (``posenc.dropout``: the block's part of the call's mask, from the seed and its position)."""
    q, k, v, pe, vis = call.q, call.k, call.v, call.pe, call.vis
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    h, lq = q.shape[1], q.shape[2]
    group = h // k.shape[1]
    value_term = None if pe is None else pe.value_term
    outs = []
    for start in range(0, lq, chunk):
        stop = min(start + chunk, lq)
        k0, k1 = vis.key_range(start, stop)
        qc, kc, vc = q[:, :, start:stop], k[:, :, k0:k1], v[:, :, k0:k1]  # (B, H, c, D), (B, H_kv, n, ·)
        qp = None if pe is None else along(call.q_positions, start, stop, pe.axes)
        kp = None if pe is None else along(call.k_positions, k0, k1, pe.axes)
        allowed = vis.allowed(start, stop, k0, k1, device=q.device)
        seen = None
        if vis.hides_rows:  # (.., c, 1): a query with no key gives zeros (posenc.scores)
            allowed, seen = scores.unmask_empty_rows(allowed)
        bias = block_bias(pe, qc, kc, qp, kp, vis, start, stop, k0, work)
        added = vis.added(start, stop, k0, k1)
        if added is not None:
            bias = added.to(work) if bias is None else bias + added.to(work)
        if allowed is not None:
            bias = allowed if bias is None else torch.where(allowed, bias, float("-inf"))
        if call.softcap is not None or call.sinks is not None or call.dropout is not None:
            p = capped_weights(qc, kc, bias, group, scale=call.scale, softcap=call.softcap, sinks=call.sinks)
            if call.dropout is not None:  # the weights' dropout, this tile's part of the call's mask
                p = call.dropout.apply(p, start, k0)
            out = unfold(torch.matmul(fold(p, group), vc), group)  # (B, H, c, Dv)
            if value_term is not None:
                out = out + value_term(p, qp, kp)
        elif value_term is None:
            if group > 1 and bias is not None:  # (.., c, n) -> (B or 1, H/G, G·c, n)
                bias = fold(bias.expand(bias.shape[0] if bias.dim() == 4 else 1, h, stop - start, k1 - k0), group)
            out = unfold(F.scaled_dot_product_attention(fold(qc, group), kc, vc, attn_mask=bias, scale=call.scale),
                         group)
        else:  # Shaw: the output also mixes relative value embeddings with the same weights
            p = torch.softmax(qc @ kc.transpose(-1, -2) * call.scale + bias, dim=-1)  # (B, H, c, n)
            out = p @ vc + value_term(p, qp, kp)
        outs.append(out if seen is None else out * seen)
    return torch.cat(outs, dim=2).to(dtype)


def along(positions: torch.Tensor, start: int, stop: int, axes: int) -> torch.Tensor:
    """Positions ``[..., L]`` (``[..., L, A]`` with ``A`` axes) of rows ``start … stop − 1``."""
    return positions[..., start:stop] if axes == 1 else positions[..., start:stop, :]


def block_bias(pe, qc, kc, qp, kp, vis: Visibility, start: int, stop: int, k0: int, work):
    """The scheme's term of a block of queries ``start … stop − 1`` over keys from ``k0`` (those of
    ``kc``): a bias scheme's float64 map cast once to the score dtype (each row's peak removed
    first where it has one: far keys), or a relative scheme's ``pe(q, k, ...)``; None without one."""
    if pe is None:
        return None
    if not pe.scores_from_positions:  # a relative scheme: of the queries and keys too
        return pe(qc, kc, qp, kp).to(work)  # (B, H, c, n)
    first, last = vis.row_ranges(start, stop, device=qc.device)
    near = pe.nearest_keys(qp, kp, first=None if first is None else first - k0, last=last - k0)
    if near is None:
        return pe(qp, kp, dtype=work)  # (H, c, n) or (B, H, c, n)
    return pe.peak_removed(as_working(qp), as_working(kp), near).to(work)  # each row's peak removed in float64


def capped_weights(qc, k, bias, group: int, *, scale: float, softcap: float | None, sinks: torch.Tensor | None):
    """The softmax weights ``[B, H, c, n]`` of one query block with a logit cap and/or sinks:
    ``s = c·tanh(q·k·scale / c) + bias`` (the cap on the content score only; ``bias`` the scheme's
    term plus the masks, ``−∞`` where masked, or a bool ``allowed``), then a column ``sinks[h]``
    joins each row's softmax and is dropped (``posenc.scores``)."""
    s = unfold(torch.matmul(fold(qc, group), k.transpose(-1, -2)), group) * scale  # (B, H, c, n)
    s = cap_scores(s, softcap)
    if bias is not None:
        s = s.masked_fill(~bias, float("-inf")) if bias.dtype == torch.bool else s + bias
    return sink_softmax(s, sinks)
