"""What every attention backend applies to its scores, each formula once.

- **The logit cap** (Gemma 2's ``attn_logit_softcapping``; Gemma Team 2024, arXiv:2408.00118):
  ``cap(s) = c·tanh(s / c)`` on the content score ``q·k·scale``, before a bias and the mask are
  added; its slope ``∂cap/∂s = 1 − tanh²(s / c)`` for a backward (``cap_scores``, ``capped``).
- **Attention sinks** (GPT-OSS's ``s_aux``; Xiao et al. 2023, arXiv:2309.17453): one more key of
  score ``σ_h`` and value 0 in every row of head ``h``. Either as one more column of the softmax
  (``sink_softmax``), or merged after the fact into a row's log-sum-exp and output:
  ``lse' = log(e^{lse} + e^{σ})``, ``o' = o·e^{lse − lse'}`` (``merge_sinks``), whose gradient in
  ``σ`` is ``−Σ_i e^{σ − lse'_i} δ_i`` with ``δ_i = dO_i·o'_i`` (``sinks_grad``).
- **Grouped heads** (GQA, MQA: Ainslie et al. 2023): the ``G = H / H_kv`` query heads that share a
  key/value head are folded into one head of ``G·c`` rows (``fold``/``unfold``), so a product reads
  each key/value head once; ``repeat_kv`` repeats them for the kinds that read keys per query head.
- **The size budget**: ``MATERIALIZE_ELEMENTS``, the scores ``auto`` builds whole, and the content
  kind's ``auto`` among its own rows (``content_backend``; ``posenc.attn._choose_backend`` is the
  one chooser and reads it).
- **The log-sum-exp merge** of two softmaxes over disjoint keys (``merge_lse``): context
  parallelism's ring tiles, the online softmax one tile at a time.
- **A query that sees no key gives zeros** (``unmask_empty_rows`` for a tile's map,
  ``empty_rows_lse`` for an online softmax: output 0, ``lse`` +∞).
- **The default scale** ``1/√D`` or the scheme's ``default_scale`` (``scale_of``), and the shared
  input checks: ``check_cap_and_sinks``, ``check_num_heads``, ``check_causal``.

Notation used for tensor shapes: B batch, H heads, c rows of a block, n its keys, X anything.
"""

from __future__ import annotations

import math

import torch

MATERIALIZE_ELEMENTS = 1 << 22  # auto builds a map up to 4M scores (16 MB in float32) whole, every kind


def check_cap_and_sinks(softcap, sinks, h: int):
    """``softcap`` a finite float > 0 or None; ``sinks`` a floating ``[H]`` tensor or None (checked
    before anything is allocated): ``posenc.attention``'s and every content scheme's."""
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
            raise TypeError(f"softcap must be a float > 0 (the logit cap c in c·tanh(s / c)) or None, got "
                            f"{type(softcap).__name__} {softcap!r}")
        softcap = float(softcap)
        if not math.isfinite(softcap) or softcap <= 0:
            raise ValueError(f"softcap must be finite and > 0 (the logit cap c in c·tanh(s / c)) or None, got {softcap!r}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"sinks must be a floating torch.Tensor of shape [H={h}] (one logit per head) or None, "
                            f"got {type(sinks).__name__}")
        if not sinks.is_floating_point():
            raise TypeError(f"sinks must be floating point (one logit per head), got dtype {sinks.dtype}")
        if tuple(sinks.shape) != (h,):
            raise ValueError(f"sinks must have shape [H={h}] (one logit per query head), got {list(sinks.shape)}")
    return softcap, sinks


def scale_of(scale, pe, d: int) -> float:
    """The factor of ``q·k``: ``scale`` checked (a finite float), or by default the scheme's own
    ``default_scale`` (DeBERTa's ``1/√(D·f)``) or ``1/√D`` of the head size given."""
    if scale is None:
        return getattr(pe, "default_scale", None) or 1.0 / math.sqrt(d)
    from posenc._validate import check_float

    return check_float("scale", scale)


def check_num_heads(pe, q: torch.Tensor) -> None:
    """A scheme with per-head parameters (``pe.num_heads`` set) must have ``q``'s ``H`` heads: the
    one check and message of ``posenc.attention``, the content kind and context parallelism."""
    h = q.shape[1]
    if pe.num_heads is not None and pe.num_heads != h:
        from posenc.positions import heads_hint

        raise ValueError(f"pe has num_heads={pe.num_heads} but q has {h} heads{heads_hint(pe.num_heads, q)}")


def check_causal(causal) -> bool:
    """``causal`` must be a bool (``posenc.attention``, the content kind, ``Visibility.build``)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    return causal


def cap_scores(scores: torch.Tensor, softcap: float | None, *, inplace: bool = False) -> torch.Tensor:
    """``c·tanh(scores / c)`` (Gemma 2's logit cap), or ``scores`` when ``softcap`` is None;
    ``inplace``: into ``scores`` itself (a temporary the caller owns)."""
    if softcap is None:
        return scores
    if inplace:
        return torch.tanh(scores.div_(softcap)).mul_(softcap)
    return torch.tanh(scores / softcap) * softcap


def capped(scores: torch.Tensor, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c·tanh(s / c), 1 − tanh²(s / c))``: the capped scores and their slope in ``s`` (a backward's)."""
    t = torch.tanh(scores / softcap)
    return t * softcap, 1.0 - t * t


def sink_softmax(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """``softmax(scores)`` over the last axis of ``[B, H, c, n]``; with ``sinks [H]`` a column of score
    ``sinks[h]`` joins each row of head ``h`` and is dropped after (its value is 0), so the weights
    sum to ``σ(lse − sinks[h])``."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.to(device=scores.device, dtype=scores.dtype).view(1, -1, 1, 1)
    sink = sink.expand(*scores.shape[:-1], 1)  # (B, H, c, 1)
    return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]


def merge_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``o [B, H, L, Dv]`` and ``lse [B, H, L]`` of the keys merged with one more key of score
    ``sinks[h]`` and value 0: ``lse' = log(e^{lse} + e^{σ})``, ``o' = o·e^{lse − lse'}``. A row with
    no key (``lse`` +∞ by the blockwise convention, or −∞) keeps ``o = 0``."""
    mass = lse.masked_fill(torch.isposinf(lse), float("-inf"))  # (B, H, L); −∞: a row with no key
    merged = torch.logaddexp(mass, sinks.view(1, -1, 1))
    return out * (mass - merged).exp().unsqueeze(-1), merged


def content_backend(n: int, grad: bool) -> str:
    """``auto`` among a content scheme's own backends (``posenc.rowwise``) for ``n = B·H·Lq·Lk``
    scores: ``materialize`` up to ``MATERIALIZE_ELEMENTS``, else ``blockwise`` when autograd records
    (its backward recomputes each block) or ``chunked``. ``posenc.attn._choose_backend``, the one
    chooser, reads it for content schemes; a scheme's own ``forward(backend="auto")`` too."""
    if n <= MATERIALIZE_ELEMENTS:
        return "materialize"
    return "blockwise" if grad else "chunked"


def unmask_empty_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """**A query that sees no key gives zeros** (and zero gradients), on every backend and kind
    (``posenc.masking``): ``(allowed', seen)`` for a tile's map ``allowed [.., c, n]``, ``seen [.., c, 1]``
    True where a row sees a key, and ``allowed'`` letting an empty row see every key meanwhile (so
    nothing is NaN); the caller multiplies its rows by ``seen``. The log-sum-exp form of the rule
    (``empty_rows_lse``) is the blockwise kernel's and the ring's."""
    seen = allowed.any(-1, keepdim=True)
    return allowed | ~seen, seen


def empty_rows_lse(m: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """The same rule for an online softmax: a row whose running maximum ``m`` is still ``−∞`` saw no
    key; its output becomes 0 and its ``lse`` +∞, so that a backward's ``p = e^{s − lse}`` is 0 on it
    (in place)."""
    empty = torch.isneginf(m)
    out.masked_fill_(empty.unsqueeze(-1), 0.0)
    lse.masked_fill_(empty, float("inf"))


def merge_lse(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor,
              lse2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two softmaxes over disjoint keys as one (the online softmax, one tile at a time):
    ``lse = log(e^{lse₁} + e^{lse₂})``, ``o = o₁·e^{lse₁ − lse} + o₂·e^{lse₂ − lse}`` for ``o [.., c, Dv]``,
    ``lse [.., c]``. A row with no key has ``lse`` −∞ (or +∞, the blockwise convention for a row a
    tile hides whole, read as −∞) and contributes nothing."""
    lse1, lse2 = (t.masked_fill(torch.isposinf(t), float("-inf")) for t in (lse1, lse2))
    lse = torch.logaddexp(lse1, lse2)
    safe = lse.masked_fill(torch.isneginf(lse), 0.0)
    return o1 * (lse1 - safe).exp().unsqueeze(-1) + o2 * (lse2 - safe).exp().unsqueeze(-1), lse


def sinks_grad(sinks: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``∂L/∂σ_h = −Σ_{b,i} e^{σ_h − lse_i} δ_i`` (the sink column's weight times its ``ds``), for the
    merged ``lse [B, H, L]`` and ``δ = rowsum(dO ∘ O)`` ``[B, H, L]``."""
    return -((sinks.view(1, -1, 1) - lse).exp() * delta).sum((0, 2))


def fold(x: torch.Tensor, group: int) -> torch.Tensor:
    """``[B, H, c, ·] -> [B, H/G, G·c, ·]`` (``[B, H, c]`` too): the ``G`` query heads that share a
    key/value head as one head of ``G·c`` rows (head ``h = kv·G + g``, row ``g·c + r``), so a product
    with ``k [B, H/G, X, n]`` reads each key/value head once instead of repeating it ``G`` times."""
    if group == 1:
        return x
    return x.reshape(x.shape[0], x.shape[1] // group, group * x.shape[2], *x.shape[3:])


def unfold(x: torch.Tensor, group: int) -> torch.Tensor:
    """``[B, H/G, G·c, ·] -> [B, H, c, ·]``, the inverse of ``fold``."""
    if group == 1:
        return x
    return x.reshape(x.shape[0], x.shape[1] * group, x.shape[2] // group, *x.shape[3:])


def repeat_kv(k: torch.Tensor, v: torch.Tensor, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``k, v [B, H_kv, Lk, ·]`` repeated to ``H`` heads (head ``h`` reads ``h // (H / H_kv)``), for
    the kinds whose scheme reads keys per query head (relative, content)."""
    group = h // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
