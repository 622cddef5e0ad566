"""Attention masks as data: which keys each query sees, one definition read by every backend.

``Visibility`` (built once per ``posenc.attention`` call, ``Visibility.build``) holds all of it:
``causal``, the sliding ``window``, packed ``document_ids`` and the ``attention_mask`` below, with
the query/key offset (queries are the last ``Lq`` keys: query ``i`` is key index ``i + Lk − Lq``).
Visibility is one predicate, ``predicate``: ``visible(b, h, q, k)``, the index offset within
``offset_bounds``, the same document, and the mask (as transformers' ``masking_utils`` composes
``and_masks(causal, sliding, padding, packed)``). Each backend's form is derived from it: the
boolean map of a tile ``allowed(q0, q1, k0, k1)`` (the predicate on the tile's index grids; ``tile``:
the same, never None, for a kernel that negates it) and its additive values (``added``);
FlexAttention's ``mask_mod`` (the predicate itself) and block tables (``flex_block_mask``); the key
range a block of queries can see (``key_range``: tiles outside it are skipped), whether a tile is
visible whole (``whole``), each query's visible key range (``row_ranges``, for
``BiasEncoding.nearest_keys``), all read from the same ``offset_bounds`` and documents; and a
tile's own ``Visibility`` (``crop``: context parallelism's ring tiles). No backend, context
parallelism included, derives causality, documents, padding or windows itself.

**Index offsets.** Causality and the window are conditions on ``d = j − (i + Lk − Lq)``, the key's
index minus the query's own: causal ``d ≤ 0``; a window ``W`` (Mistral's and Gemma's local
attention) ``d ≥ −(W − 1)`` (a query sees keys at most ``W − 1`` positions back) and, without
``causal``, also ``d ≤ W − 1`` (as far forward). Every tile, range and block table below is read
from the two bounds ``lo ≤ d ≤ hi`` (``offset_bounds``). A query always sees its own key under
causality, a window and documents, so only an ``attention_mask`` can leave a query with no key.

The ``attention_mask`` itself comes in the two forms that real batches carry:

- a **key padding mask** ``[B, Lk]`` (or ``[1, Lk]``), bool or 0/1 integers: ``True``/1 where
  a key is a real token, ``False``/0 where it is padding (the ``attention_mask`` of a
  transformers tokenizer and of ``generate()``, left or right padded);
- a **4D mask** ``[B or 1, H or 1, Lq, Lk]`` as transformers builds it: bool (``True`` where
  query ``i`` may see key ``j``) or floating point and *additive* (added to the scores). In an
  additive mask an entry of ``−inf``, or at or below ``torch.finfo(dtype).min`` (transformers'
  masked value), masks the key; every other value is added to the score as a bias.

The mask is combined with ``causal``, ``window`` and ``document_ids`` (a key must pass all of them),
on every backend, through ``Visibility``: ``AttentionMask.allowed(qs, qe, ks, ke)`` is the block of
pairs it allows and ``AttentionMask.added(qs, qe, ks, ke)`` the block of additive values.

**A query that sees no key** (a left-padded row under a causal mask, a row a 4D mask masks whole)
has no softmax. Its output is defined as zeros, on every backend and kind, with zero gradients,
as SDPA's CPU and memory-efficient kernels return (transformers' own SDPA path does the same by
unmasking such rows and discarding them).

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, c/n rows/columns of a block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.scores import check_causal



@dataclass(frozen=True)
class AttentionMask:
    """A checked ``attention_mask``: ``keys [1 or B, Lk]`` bool (padding), or ``pairs [1 or B, 1 or H,
    Lq, Lk]`` bool (a 4D mask) with ``bias`` of the same shape (its finite additive values) or None."""

    keys: torch.Tensor | None = None
    pairs: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    def allowed(self, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor:
        """``[1 or B, 1 or H, c, n]`` bool: True where query ``qs + r`` may see key ``ks + j`` (this mask only)."""
        if self.keys is not None:
            return self.keys[:, None, None, ks:ke]  # (1 or B, 1, 1, n)
        return self.pairs[:, :, qs:qe, ks:ke]

    def added(self, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor | None:
        """``[1 or B, 1 or H, c, n]``: the additive values of a 4D float mask for the block, or None."""
        return None if self.bias is None else self.bias[:, :, qs:qe, ks:ke]

    def to(self, device) -> "AttentionMask":
        move = (lambda t: None if t is None else t.to(device))
        return AttentionMask(move(self.keys), move(self.pairs), move(self.bias))


def check_attention_mask(attention_mask, *, b: int, h: int, lq: int, lk: int, device) -> AttentionMask | None:
    """``attention_mask`` checked against ``B, H, Lq, Lk`` (before anything is allocated) -> an
    ``AttentionMask`` on ``device``, or None when it is None."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor ([B, Lk] or [B, H, Lq, Lk]) or None, got "
                        f"{type(attention_mask).__name__}")
    mask = attention_mask
    if mask.dim() == 2:
        if mask.shape[0] not in (1, b) or mask.shape[1] != lk:
            raise ValueError(f"attention_mask as a key padding mask must have shape [B={b}, Lk={lk}] (or [1, Lk]); "
                             f"got {list(mask.shape)}")
        if mask.dtype != torch.bool:
            if mask.is_floating_point() or mask.is_complex():
                raise TypeError(f"a key padding attention_mask [B, Lk] must be bool or 0/1 integers, got {mask.dtype} "
                                "(a float mask is additive: pass it as [B, 1, Lq, Lk])")
            if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError("a key padding attention_mask [B, Lk] of integers must hold only 0 (padding) and 1 "
                                 f"(a token); got values {torch.unique(mask)[:8].tolist()}")
            mask = mask != 0
        return AttentionMask(keys=mask.to(device))
    if mask.dim() == 4:
        if (mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h) or mask.shape[2] != lq
                or mask.shape[3] != lk):
            raise ValueError(f"attention_mask as a 4D mask must have shape [B={b} or 1, H={h} or 1, Lq={lq}, Lk={lk}]; "
                             f"got {list(mask.shape)}")
        if mask.dtype == torch.bool:
            return AttentionMask(pairs=mask.to(device))
        if not mask.is_floating_point():
            raise TypeError(f"a 4D attention_mask must be bool (True: may see) or floating point (added to the "
                            f"scores), got {mask.dtype}")
        if bool(torch.isnan(mask).any()) or bool(torch.isposinf(mask).any()):
            raise ValueError("a 4D additive attention_mask must not hold NaN or +inf")
        hidden = mask <= torch.finfo(mask.dtype).min  # transformers' masked value, and −inf
        bias = mask.masked_fill(hidden, 0.0)
        return AttentionMask(pairs=(~hidden).to(device), bias=bias.to(device) if bool(bias.any()) else None)
    raise ValueError(f"attention_mask must be a key padding mask [B, Lk] or a 4D mask [B, H, Lq, Lk]; got shape "
                     f"{list(mask.shape)}")


def check_window(window, *, lq: int, lk: int) -> int | None:
    """``window``: an int ``W >= 1`` (a query sees keys at most ``W − 1`` positions back) or None."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int >= 1 (a query sees keys at most window - 1 positions back) or None, "
                        f"got {type(window).__name__} {window!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1 (a query sees keys at most window - 1 positions back; 1: only its "
                         f"own key) or None, got {window}")
    if lq > lk:
        raise ValueError(f"window needs Lq <= Lk (queries are the last Lq keys, the window counts back from each "
                         f"query's own key); got Lq={lq}, Lk={lk}")
    return window


def check_documents(document_ids, *, b: int, lq: int, lk: int, device) -> torch.Tensor | None:
    """``document_ids [Lk]`` or ``[B, Lk]``, non-decreasing along L -> ``[1 or B, Lk]`` int64, or None."""
    if document_ids is None:
        return None
    from posenc.positions import check_batch, check_document_ids

    docs = check_document_ids("document_ids", document_ids).to(device)
    check_batch("document_ids", docs, b, lk)
    if lq > lk:
        raise ValueError(f"document_ids needs Lq <= Lk (queries are the last Lq keys); got Lq={lq}, Lk={lk}")
    return docs.long().reshape(docs.shape[0] if docs.dim() == 2 else 1, lk)  # (1 or B, Lk), also when Lk = 0


@dataclass(frozen=True)
class Visibility:
    """Which keys each query sees (see the module docstring): ``causal``, a sliding ``window``,
    ``docs [1 or B, Lk]`` (document ids) and ``mask`` (a checked ``attention_mask``), for ``Lq``
    queries that are the last ``Lq`` of ``Lk`` keys. Built once per call (``build``); every backend
    reads it, none derives a mask itself."""

    lq: int
    lk: int
    causal: bool = False
    window: int | None = None
    docs: torch.Tensor | None = None
    mask: AttentionMask | None = None

    @classmethod
    def build(cls, *, b: int, h: int, lq: int, lk: int, device, causal: bool = False, window=None,
              document_ids=None, attention_mask=None) -> "Visibility":
        """Every input checked (before anything is allocated) against ``B, H, Lq, Lk``; an
        ``attention_mask`` already checked (an ``AttentionMask``) is taken as it is."""
        check_causal(causal)
        if causal and lq > lk:
            raise ValueError(f"causal attention needs Lq <= Lk (queries are the last Lq keys); got Lq={lq}, Lk={lk}")
        window = check_window(window, lq=lq, lk=lk)
        mask = (attention_mask if isinstance(attention_mask, AttentionMask)
                else check_attention_mask(attention_mask, b=b, h=h, lq=lq, lk=lk, device=device))
        docs = check_documents(document_ids, b=b, lq=lq, lk=lk, device=device)
        return cls(lq, lk, causal, window, docs, mask)

    # -- what it is -------------------------------------------------------------------------
    @property
    def shift(self) -> int:
        """``Lk − Lq``: query ``i`` is key index ``i + shift``."""
        return self.lk - self.lq

    @property
    def offset_bounds(self) -> tuple[int | None, int | None]:
        """``(lo, hi)``: key ``j`` is visible to query ``i`` only if ``lo ≤ j − (i + shift) ≤ hi``
        (None: unbounded): causal ``hi = 0``; a window ``lo = −(W − 1)`` and, not causal, ``hi = W − 1``."""
        lo = None if self.window is None else 1 - self.window
        hi = 0 if self.causal else (None if self.window is None else self.window - 1)
        return lo, hi

    @property
    def bounded(self) -> bool:
        """Causality or a window bounds the keys by their index offset."""
        return self.causal or self.window is not None

    @property
    def trivial(self) -> bool:
        """Every query sees every key."""
        return not self.bounded and self.docs is None and self.mask is None

    @property
    def hides_rows(self) -> bool:
        """A query may see no key at all (only an attention mask can do that)."""
        return self.mask is not None

    def to(self, device) -> "Visibility":
        docs = None if self.docs is None else self.docs.to(device)
        mask = None if self.mask is None else self.mask.to(device)
        return Visibility(self.lq, self.lk, self.causal, self.window, docs, mask)

    # -- tiles and ranges -------------------------------------------------------------------
    def key_range(self, qs: int, qe: int) -> tuple[int, int]:
        """``(k0, k1)``: queries ``qs … qe − 1`` see keys of ``k0 … k1 − 1`` only (causality and the
        window; documents and the mask may hide more), ``k0 <= k1``."""
        lo, hi = self.offset_bounds
        k0 = 0 if lo is None else min(self.lk, max(0, qs + self.shift + lo))
        k1 = self.lk if hi is None else max(k0, min(self.lk, qe - 1 + self.shift + hi + 1))
        return k0, k1

    def whole(self, qs: int, qe: int, ks: int, ke: int) -> bool:
        """Causality and the window allow every pair of the tile (documents and the mask aside)."""
        lo, hi = self.offset_bounds
        return ((lo is None or ks - (qe - 1 + self.shift) >= lo)
                and (hi is None or (ke - 1) - (qs + self.shift) <= hi))

    def offsets_allowed(self, d: torch.Tensor) -> torch.Tensor:
        """Bool, True where the index offset ``d = j − (i + shift)`` passes causality and the window."""
        lo, hi = self.offset_bounds
        ok = torch.ones_like(d, dtype=torch.bool)
        if lo is not None:
            ok = ok & (d >= lo)
        if hi is not None:
            ok = ok & (d <= hi)
        return ok

    def allowed(self, qs: int, qe: int, ks: int, ke: int, *, device, mask: bool = True) -> torch.Tensor | None:
        """The tile's map from ``predicate``: True where query ``qs + r`` may see key ``ks + c``; ``[c, n]``
        (offsets only), ``[1 or B, 1, c, n]`` with documents, ``[1 or B, 1 or H, c or 1, n]`` with the
        attention mask (``mask=False``: without it); None when every pair is allowed."""
        offsets = self.bounded and not self.whole(qs, qe, ks, ke)
        with_mask = mask and self.mask is not None
        if not offsets and self.docs is None and not with_mask:
            return None
        qi = torch.arange(qs, qe, device=device).unsqueeze(-1)  # (c, 1)
        ki = torch.arange(ks, ke, device=device)  # (n,)
        batch = max([t.shape[0] for t in (self.docs, *self._mask_tensors(with_mask)) if t is not None] or [1])
        heads = 1 if not with_mask or self.mask.pairs is None else self.mask.pairs.shape[1]
        bi = torch.arange(batch, device=device).view(-1, 1, 1, 1)  # (1 or B, 1, 1, 1)
        hi = torch.arange(heads, device=device).view(1, -1, 1, 1)  # (1, 1 or H, 1, 1)
        allowed = self.predicate(device, offsets=offsets, mask=with_mask)(bi, hi, qi, ki)
        if allowed.dim() < 4 and (self.docs is not None or with_mask):  # (.., n) -> (1, 1, c or 1, n)
            allowed = allowed.view(1, 1, -1, ke - ks)
        return allowed

    def _mask_tensors(self, with_mask: bool) -> tuple:
        if not with_mask:
            return ()
        return (self.mask.keys, self.mask.pairs)

    def predicate(self, device, *, b: int | None = None, offsets: bool = True, mask: bool = True):
        """The one definition of visibility, ``visible(bi, hi, qi, ki) -> bool`` over batch, head,
        query and key indices (scalars, or tensors that broadcast): the index offset
        ``d = ki − (qi + shift)`` within ``offset_bounds`` (causality, the window), the same document,
        and the attention mask. ``allowed`` calls it on a tile's index grids, FlexAttention's
        ``mask_mod`` is it; the block tables, ``key_range``, ``whole`` and ``row_ranges`` read the same
        ``offset_bounds`` and (non-decreasing) documents. ``b``: documents and a key padding mask
        expanded to ``b`` rows (FlexAttention's compile wants them so); ``offsets=False``: the tile is
        known whole under causality and the window; ``mask=False``: without the attention mask.
        For a ``mask_mod`` (``b`` given) the offsets are tensors, so that a compile does not
        specialize on them (and the caller's compile takes only inputs in a ``mask_mod``)."""
        lo, hi = self.offset_bounds if offsets else (None, None)
        shift, lo_t, hi_t = ((self.shift, lo, hi) if b is None or torch.compiler.is_compiling() else
                             tuple(None if x is None else torch.tensor(x, device=device) for x in (self.shift, lo, hi)))
        docs = None if self.docs is None else self.docs.to(device)
        m = self.mask if mask else None
        keys = None if m is None or m.keys is None else m.keys.to(device)
        if b is not None:  # (B, Lk), contiguous
            docs, keys = (None if t is None else t.expand(b, self.lk).contiguous() for t in (docs, keys))
        pairs = None if m is None else m.pairs  # (1 or B, 1 or H, Lq, Lk)
        doc_b, key_b = (t is not None and t.shape[0] != 1 for t in (docs, keys))  # (B = 0 too)
        pair_b, pair_h = (False, False) if pairs is None else (pairs.shape[0] != 1, pairs.shape[1] != 1)

        def visible(bi, hi_, qi, ki):
            d = ki - (qi + shift)
            ok = d >= lo_t if lo_t is not None else ki >= 0
            if hi_t is not None:
                ok = ok & (d <= hi_t)
            if docs is not None:
                row = bi if doc_b else 0
                ok = ok & (docs[row, qi + shift] == docs[row, ki])
            if keys is not None:
                ok = ok & keys[bi if key_b else 0, ki]
            if pairs is not None:
                ok = ok & pairs[bi if pair_b else 0, hi_ if pair_h else 0, qi, ki]
            return ok

        return visible

    def crop(self, qs: int, qe: int, ks: int, ke: int, *, device) -> "Visibility":
        """The visibility of one tile, queries ``qs … qe − 1`` × keys ``ks … ke − 1``, as a
        ``Visibility`` of its own (``lq = qe − qs``, ``lk = ke − ks``), for a kernel that runs the
        tile alone (context parallelism's ring). Causality and the window carry over when the
        tile's diagonal is the whole's (its queries the last of its keys) or the tile is whole;
        anything else (documents, a 4D mask, a tile that cuts the diagonal elsewhere) becomes the
        tile's map from ``allowed``, as a bool 4D mask; a key padding mask is cropped."""
        c, n = qe - qs, ke - ks
        whole = self.whole(qs, qe, ks, ke)
        aligned = qs + self.shift - ks == n - c and c <= n  # query r is the tile's key r + n − c
        keys_only = self.mask is None or (self.mask.keys is not None and self.mask.pairs is None)
        if (whole or aligned) and self.docs is None and keys_only:
            mask = None if self.mask is None else AttentionMask(keys=self.mask.keys[:, ks:ke])
            return Visibility(c, n, self.causal and not whole, None if whole else self.window, None, mask)
        allowed = self.allowed(qs, qe, ks, ke, device=device)
        if allowed is None:
            return Visibility(c, n)
        pairs = allowed.view(1, 1, c, n) if allowed.dim() == 2 else allowed.expand(*allowed.shape[:2], c, n)
        return Visibility(c, n, mask=AttentionMask(pairs=pairs, bias=self.added(qs, qe, ks, ke)))

    def tile(self, qs: int, qe: int, ks: int, ke: int, *, device) -> torch.Tensor:
        """The tile's map as a kernel reads it, never None: ``[1 or B, 1 or H, c, n]`` bool, True where
        query ``qs + r`` may see key ``ks + c`` (all True when every pair is; a content scheme's
        ``rows`` negates it, so "all visible" must be a map, not None)."""
        allowed = self.allowed(qs, qe, ks, ke, device=device)
        if allowed is None:
            return torch.ones(1, 1, qe - qs, ke - ks, dtype=torch.bool, device=device)  # (1, 1, c, n)
        return allowed.view(1, 1, qe - qs, ke - ks) if allowed.dim() == 2 else allowed

    def added(self, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor | None:
        """The attention mask's additive values of the tile, or None."""
        return None if self.mask is None else self.mask.added(qs, qe, ks, ke)

    def row_ranges(self, qs: int, qe: int, *, device) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The keys queries ``qs … qe − 1`` may see as index ranges ``first … last`` (inclusive, ``[c]``
        or ``[1 or B, c]``; ``first`` None: from key 0): causality, the window and documents (each
        a range; documents are contiguous), for ``BiasEncoding.nearest_keys``."""
        lo, hi = self.offset_bounds
        own = torch.arange(qs, qe, device=device) + self.shift  # (c,) each query's own key
        first = None if lo is None else (own + lo).clamp(min=0)
        last = torch.full_like(own, self.lk - 1) if hi is None else (own + hi).clamp(max=self.lk - 1)
        if self.docs is None:
            return first, last
        ids = self.docs.to(device).contiguous()  # (1 or B, Lk), non-decreasing
        mine = ids[:, own]  # (1 or B, c)
        start = torch.searchsorted(ids, mine)
        end = torch.searchsorted(ids, mine, right=True) - 1
        return (start if first is None else torch.maximum(start, first)), torch.minimum(last, end)

    # -- FlexAttention -----------------------------------------------------------------------
    def mask_mod(self, b: int, device):
        """FlexAttention's ``mask_mod(b, h, q_idx, kv_idx) -> bool``: ``predicate`` itself, or None when
        every pair is allowed."""
        if self.trivial:
            return None
        return self.predicate(device, b=b)

    def flex_block_mask(self, b: int, mask_mod, *, block: int, device):
        """The ``BlockMask`` of this visibility, from ``[nq, nk]`` block tables of ``block`` rows and
        columns built directly (never the ``[Lq, Lk]`` map, nor a compile of ``create_block_mask``):
        a block is skipped when none of its pairs is visible and known whole when all are (with an
        attention mask, none is known whole: ``mask_mod`` runs on each)."""
        from torch.nn.attention.flex_attention import BlockMask

        lq, lk, shift = self.lq, self.lk, self.shift
        nq, nk = -(-lq // block), -(-lk // block)
        q_first = torch.arange(nq, device=device) * block  # (nq,) first query row of each block
        q_last = (q_first + block - 1).clamp(max=lq - 1)
        k_first = torch.arange(nk, device=device) * block  # (nk,)
        k_last = (k_first + block - 1).clamp(max=lk - 1)
        some = torch.ones(1, nq, nk, dtype=torch.bool, device=device)  # a block with at least one allowed pair
        every = torch.ones(1, nq, nk, dtype=torch.bool, device=device)  # a block whose pairs are all allowed
        lo, hi = self.offset_bounds
        if hi is not None:  # k − (q + shift) <= hi
            some = some & (k_first <= q_last[:, None] + shift + hi)
            every = every & (k_last <= q_first[:, None] + shift + hi)
        if lo is not None:  # k − (q + shift) >= lo
            some = some & (k_last >= q_first[:, None] + shift + lo)
            every = every & (k_first >= q_last[:, None] + shift + lo)
        if self.docs is not None:  # non-decreasing ids: a block's first and last rows hold its smallest and largest
            docs = self.docs.to(device)
            q_lo, q_hi = docs[:, q_first + shift], docs[:, q_last + shift]  # (1 or B, nq)
            k_lo, k_hi = docs[:, k_first], docs[:, k_last]  # (1 or B, nk)
            some = some & (q_lo[:, :, None] <= k_hi[:, None, :]) & (k_lo[:, None, :] <= q_hi[:, :, None])
            every = every & ((q_lo == q_hi)[:, :, None] & (k_lo == k_hi)[:, None, :]
                             & (q_lo[:, :, None] == k_lo[:, None, :]))
        if self.mask is not None:
            every = every & False
        partial = some & ~every

        def table(m):  # (Bm, nq, nk) -> the count and the indices (allowed first) of each row's blocks
            m = m.unsqueeze(1)  # (Bm, 1, nq, nk)
            index = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
            return m.sum(-1, dtype=torch.int32), index

        return BlockMask.from_kv_blocks(*table(partial), *table(every), BLOCK_SIZE=block, mask_mod=mask_mod,
                                        seq_lengths=(lq, lk))
