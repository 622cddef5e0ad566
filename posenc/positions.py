"""The positions model: what a position is, checked in one place for every kind of scheme.

    positions                 one axis (text)         several axes (A = the spec's ``axes``)
    unbatched                 [L]                     [L, A]     e.g. (row, col) of image patches
    batched                   [B, L]                  [B, L, A]  e.g. (time, row, col) of video patches

- A module knows ``A`` from its spec (``module.axes``: ``axes`` for sinusoidal/rope/rope_mixed,
  ``len(grid)`` for a learned grid), never from the tensor: for a module with ``axes=3`` a
  ``[L, 3]`` tensor is L tokens, never a batch of L three-token sequences.
- Values are non-negative integers, or real numbers (any floating dtype) for the schemes that are
  functions of position (``module.real_positions``; ``posenc.registry.real_schemes()``): time in seconds,
  fractional NaViT coordinates, interpolated resolutions. An integer-valued float gives exactly
  the integer's result. Table schemes (learned, t5, shaw, transformer_xl) raise TypeError naming
  the schemes that accept real positions.
- ``grid_positions(shape, *, offset=0)`` builds row-major grids: ``[prod(shape), len(shape)]``;
  ``text_positions(positions, axes)`` puts text tokens at the same position on every axis.
- ``segment_positions(tokens, separators)`` builds positions from a sequence's structure:
  ``[L, levels + 1]``, each level's segment index (paragraph, sentence; block, line) and the offset
  in the innermost segment (BiPE's bilevel positions with one level); ``randomized_positions``
  draws the ordered random training positions of Ruoss et al. (2023) for any scheme.
- Angles for every rotary form come from one function, ``posenc.rotary.angles(positions,
  inv_freq, axis_of_pair)``: pair ``i`` turns by ``positions[..., axis_of_pair[i]] · inv_freq[i]``
  (one axis: ``axis_of_pair=None``), exactly at any position (see its docstring).

The NumPy twin of this module (torch-free, for the reference) is ``posenc.reference.positions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from posenc._validate import check_int
from posenc.limits import check_memory
from posenc.reference.positions import INT64_MAX, REAL_SCHEMES, SegmentState
from posenc.reference.positions import grid_positions as _grid_positions_np
from posenc.reference.positions import segment_separators as _segment_separators_np
from posenc.reference.positions import segment_state_rows as _segment_state_rows
from posenc.reference.positions import token_ids as _token_ids_np

INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def shape_text(axes: int) -> str:
    return "[L] or [B, L]" if axes == 1 else f"[L, {axes}] or [B, L, {axes}] (axes={axes})"


def check_positions(name: str, positions: Any, *, axes: int = 1, real: bool = False, scheme: str = "",
                    max_value: int | None = None, why: str = "") -> torch.Tensor:
    """Positions of a module with ``axes`` axes: an integer (or, when ``real``, floating-point)
    tensor ``[L]``/``[B, L]`` (one axis) or ``[L, A]``/``[B, L, A]``, non-negative (and finite).

    ``scheme`` names the module in the TypeError a table scheme raises for real positions;
    ``max_value`` (with ``why``) bounds every value.
    """
    if not isinstance(positions, torch.Tensor):
        kind = "an integer or floating-point" if real else "an integer"
        raise TypeError(f"{name} must be {kind} torch.Tensor of shape {shape_text(axes)}, "
                        f"got {type(positions).__name__}")
    floating = positions.is_floating_point()
    if floating and not real:
        who = f"scheme {scheme!r}" if scheme else "this call"
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long): {who} takes integer positions only, "
                        f"got {positions.dtype}; real-valued positions are accepted by: {', '.join(REAL_SCHEMES)}")
    if not floating and positions.dtype not in INDEX_DTYPES:
        allowed = "an integer or floating-point dtype" if real else "an integer dtype (e.g. torch.long)"
        raise TypeError(f"{name} must have {allowed}, got {positions.dtype}")
    rank = (1, 2) if axes == 1 else (2, 3)
    if positions.dim() not in rank or (axes > 1 and positions.shape[-1] != axes):
        raise ValueError(f"{name} must have shape {shape_text(axes)}, got shape {list(positions.shape)}")
    if not torch.compiler.is_compiling() and positions.numel():
        if floating and not bool(torch.isfinite(positions).all()):
            raise ValueError(f"{name} must be finite, got {positions[~torch.isfinite(positions)].flatten()[0].item()}")
        low = positions.item() if positions.numel() == 1 else positions.min().item()  # one token: no reduction
        if low < 0:
            raise ValueError(f"{name} must be non-negative, got minimum {low}")
        if max_value is not None:
            high = positions.max().item()
            if high > max_value:
                raise ValueError(f"{name} must be <= {max_value}{' (' + why + ')' if why else ''}, got {high}")
    return positions


def length_of(positions: torch.Tensor, axes: int = 1) -> int:
    """``L`` of checked positions."""
    return positions.shape[-1] if axes == 1 else positions.shape[-2]


def batch_of(positions: torch.Tensor, axes: int = 1) -> int | None:
    """``B`` of checked positions, None when unbatched."""
    batched = positions.dim() == (2 if axes == 1 else 3)
    return positions.shape[0] if batched else None


def layout_hint(found: str, tensor: str = "x") -> str:
    """The end of an error about a tensor read as ``[B, H, L, D]`` that looks ``[B, L, H, D]`` (the
    layout of a projection's ``view(B, L, H, D)``), ``found`` saying why: every entry point taking
    ``[B, H, L, D]`` (``posenc.attention``, the modules, ``posenc.apply_rotary``) ends its shape
    error with it when a ``[B, L, H, D]`` tensor would fit."""
    return (f"; the tensor is read as [B, H, L, D] (heads before length) and {found}: for a [B, L, H, D] tensor "
            f"pass {tensor}.transpose(1, 2) (and transpose the result back)")


def heads_hint(num_heads: int, x: torch.Tensor, tensor: str = "q") -> str:
    """``layout_hint`` for a scheme of ``num_heads`` heads given ``x [B, H, L, D]`` whose dim 2 (read as
    its length) has that size and whose dim 1 does not; else ``""``."""
    if x.dim() == 4 and x.shape[2] == num_heads != x.shape[1]:
        return layout_hint(f"its dim 2 has the scheme's num_heads={num_heads}", tensor)
    return ""


def check_batch(name: str, positions: torch.Tensor, batch: int, length: int, *, axes: int = 1,
                heads: int | None = None) -> None:
    """Checked positions agree with a tensor of batch ``batch`` and length ``length``.

    ``heads``: the size of the heads dimension of a ``[B, H, L, D]`` tensor; when the positions'
    length is that size instead, the error says that the layout is ``[B, H, L, D]`` (a ``[B, L, H, D]``
    tensor, the layout of a projection's ``view(B, L, H, D)``, needs ``.transpose(1, 2)``)."""
    n = length_of(positions, axes)
    if n != length:
        hint = layout_hint(f"its dim 1 has the positions' size {n}") if heads is not None and heads == n else ""
        raise ValueError(f"{name} has length {n} but the tensor has length {length}{hint}")
    b = batch_of(positions, axes)
    if b is not None and b not in (1, batch):
        raise ValueError(f"{name} has batch {b} but the tensor has batch {batch}")


def check_position_batches(q_positions: torch.Tensor, k_positions: torch.Tensor, *, axes: int = 1) -> None:
    """Query and key positions broadcast: equal batches, or one of them 1 (or unbatched)."""
    bq = batch_of(q_positions, axes) or 1
    bk = batch_of(k_positions, axes) or 1
    if bq != bk and 1 not in (bq, bk):
        raise ValueError(f"q_positions has batch {bq} but k_positions has batch {bk}; "
                         "they must be equal, or one of them 1 or unbatched")


def check_document_ids(name: str, ids: Any) -> torch.Tensor:
    """Document ids: an integer tensor ``[L]`` or ``[B, L]``, non-decreasing along ``L``."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be an integer torch.Tensor of shape [L] or [B, L] "
                        f"(e.g. posenc.packing(...).document_ids), got {type(ids).__name__}")
    if ids.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long), got {ids.dtype}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"{name} must have shape [L] or [B, L], got shape {list(ids.shape)}")
    if not torch.compiler.is_compiling() and ids.shape[-1] > 1:
        step = ids[..., 1:].long() - ids[..., :-1].long()
        if bool((step < 0).any()):
            where = (step < 0).nonzero()[0].tolist()
            raise ValueError(f"{name} must be non-decreasing along L (each document contiguous), got a "
                             f"decrease after index {where}")
    return ids


def as_working(positions: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Integer positions as int64, real ones as float64 (the dtypes the schemes compute with)."""
    dtype = torch.float64 if positions.is_floating_point() else torch.int64
    return positions.to(device=device, dtype=dtype)


def relative_distance(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``k - q`` for every pair of one-axis positions: ``[Lq, Lk]`` (``[B, Lq, Lk]`` if batched);
    int64, or float64 if either is real."""
    return as_working(k_positions).unsqueeze(-2) - as_working(q_positions).unsqueeze(-1)


def text_positions(positions: torch.Tensor, axes: int) -> torch.Tensor:
    """One-axis positions ``[..., L]`` as text tokens of a module with ``axes`` axes: the same
    position on every axis, ``[..., L, axes]`` (a view; unchanged for one axis). This is how
    multimodal RoPE places text, and what ``posenc.attention`` uses by default for several axes."""
    return positions if axes == 1 else positions.unsqueeze(-1).expand(*positions.shape, axes)


def grid_positions(shape, *, offset: int = 0, device: torch.device | str | None = None) -> torch.Tensor:
    """Row-major grid positions ``[prod(shape), len(shape)]`` (int64): for an image ``(H, W)`` the
    rows are ``(r, c)``, r = 0..H-1 outer, c = 0..W-1 inner (the order of flattened patches); for a
    video ``(T, H, W)``, ``(t, r, c)``. ``offset`` is added to every axis.

        >>> posenc.grid_positions((2, 3))
        tensor([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])
    """
    return torch.from_numpy(_grid_positions_np(shape, offset=offset)).to(device)


# -- positions from structure ---------------------------------------------------------------------

def token_ids(tokens: Any) -> torch.Tensor:
    """``tokens`` as int64 ``[L]`` or ``[B, L]`` (a byte string: its byte values; a list or array: on the CPU)."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype not in INDEX_DTYPES:
            raise TypeError(f"tokens must have an integer dtype (token ids), got {tokens.dtype}")
        if tokens.dim() not in (1, 2):
            raise ValueError(f"tokens must have shape [L] or [B, L], got shape {list(tokens.shape)}")
        return tokens.long()
    return torch.from_numpy(_token_ids_np(tokens))  # checked there: bytes, lists, arrays


def _segment_documents(document_ids: Any, tokens: torch.Tensor, batched: bool, first) -> torch.Tensor:
    """``document_ids`` checked against ``tokens [B, L]``: int64 ``[B, L]`` on their device."""
    b, length = tokens.shape
    if document_ids is None:
        last = torch.tensor([0 if d is None else d for d in first], dtype=torch.int64)  # (B,)
        return last.to(tokens.device)[:, None].expand(b, length)
    if not isinstance(document_ids, torch.Tensor):
        ids = np.asarray(document_ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"document_ids must hold integers (e.g. posenc.packing(...).document_ids), "
                            f"got dtype {ids.dtype}")
        document_ids = torch.from_numpy(ids.astype(np.int64))
    ids = check_document_ids("document_ids", document_ids)
    allowed = [[length], [b, length]] if batched else [[length]]
    if list(ids.shape) not in allowed:
        text = " or ".join(str(s) for s in allowed)
        raise ValueError(f"document_ids must have shape {text} (that of tokens), got shape {list(ids.shape)}")
    ids = ids.to(device=tokens.device, dtype=torch.int64).expand(b, length)
    if length and any(d is not None for d in first):
        starts = ids[:, 0].tolist()
        for row, (d, s) in enumerate(zip(first, starts)):
            if d is not None and s < d:
                raise ValueError(f"document_ids must continue the state's documents: row {row} ended in document "
                                 f"{d}, but this call starts it at document {s}")
    return ids


def segment_positions(tokens: Any, separators: Any, *, document_ids: Any = None,
                      state: SegmentState | None = None) -> tuple[torch.Tensor, SegmentState]:
    """Positions from a sequence's structure (paragraphs, sentences, lines, blocks): ``(positions, state)``.

    ``positions`` is int64 ``[L, A]`` (``[B, L, A]`` for batched tokens), ``A = len(separators) + 1``,
    on the tokens' device: column ``j < A - 1`` holds the index of the token's segment at level ``j``
    (outermost first), counted inside its enclosing segment (level 0 from the document's start);
    the last column holds the token's offset inside its innermost segment (0 for its first token).

    Args:
        tokens: token ids, an integer tensor, array or list ``[L]`` or ``[B, L]``; or a byte string
            (its bytes are the ids).
        separators: one entry per level, outermost first; each a token id, a byte string or a list
            of them, e.g. ``[[b"\\n\\n"], [b".", b"\\n"]]`` (paragraphs, then sentences),
            ``[b"\\n\\n", b"\\n"]`` (blocks of code, then lines) or ``[[869, 13]]`` (BiPE's Llama
            tokens ``▁.`` and ``<0x0A>``). A byte string is a sequence of ids: it ends a segment at
            the token that completes it.
        document_ids: ``[L]`` or ``[B, L]``, non-decreasing (``posenc.packing(...).document_ids``):
            positions restart at each document; a separator never spans two documents.
        state: what a previous call returned, to continue its stream (cached decoding): the new
            tokens get the positions the whole stream gives them (a separator split across the
            calls included). Without ``document_ids`` they continue the state's last document.

    The rules (``posenc.reference.positions.segment_positions`` is the token-by-token specification):
    a token *ends a segment at level l* when the tokens up to it inside its document end with a
    separator of level ``l`` (every occurrence, overlapping ones included: each ``\\n`` after the
    first of a run completes ``\\n\\n``); where several levels end, the outermost wins. The token
    after it starts a new segment at level ``l``: that level's index goes up by one and the inner
    levels' indices and the offset restart at 0; a separator is the last token of the segment it
    ends. A document's first token is at all zeros.

        >>> positions, state = posenc.segment_positions(b"Hi. Yo.", [[b"."]])
        >>> positions.tolist()
        [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [1, 3]]

    Vectorised: a token's segment at level ``j`` is the number of level-``j`` boundaries since the
    last boundary of a level ``< j`` (a cumulative sum less its value at that boundary, found with
    a running maximum), its offset the distance to the last boundary of any level.
    """
    levels = _segment_separators_np(separators)
    toks = token_ids(tokens)
    batched = toks.dim() == 2
    rows = toks if batched else toks[None]  # (B, L)
    b, length = rows.shape
    begun = _segment_state_rows(state, levels, batched, b)
    docs = _segment_documents(document_ids, rows, batched, begun.document)  # (B, L)
    check_memory("tokens", f"<shape {list(toks.shape)}>", b * length * (len(levels) + 6), bytes_per=8,
                 what="its positions (int64, with the temporaries)")
    if length == 0:
        return rows.new_zeros((*toks.shape, len(levels) + 1)), begun
    stream = _SegmentStream.of(rows, docs, begun, levels)
    end = _segment_ends(stream, rows, docs, levels)  # (B, L)
    boundary = _segment_boundaries(end, docs, begun, len(levels))  # (B, L)
    positions = _segment_columns(boundary, begun, len(levels))  # (B, L, A)
    after = _segment_state_after(stream, docs, end, positions, levels, batched)
    return (positions if batched else positions[0]), after


@dataclass(frozen=True)
class _SegmentStream:
    """The new tokens after the previous call's tail, left-padded to ``pad`` tokens (as many as the
    longest separator may need before a new token): ``tokens``, whether each is ``known`` (not
    padding) and its document, each ``(B, pad + L)``."""

    tokens: torch.Tensor
    known: torch.Tensor
    docs: torch.Tensor
    pad: int

    @classmethod
    def of(cls, rows: torch.Tensor, docs: torch.Tensor, begun: SegmentState, levels) -> "_SegmentStream":
        b, device = rows.shape[0], rows.device
        pad = max(len(seq) for level in levels for seq in level) - 1  # tokens of the prefix a separator may need
        tail = torch.tensor([[-1] * (pad - len(t)) + list(t) for t in begun.tail], dtype=torch.int64).reshape(b, pad)
        known = torch.tensor([[False] * (pad - len(t)) + [True] * len(t) for t in begun.tail],
                             dtype=torch.bool).reshape(b, pad)
        last_doc = torch.tensor([0 if d is None else d for d in begun.document], dtype=torch.int64).to(device)  # (B,)
        return cls(torch.cat([tail.to(device), rows], -1),  # (B, pad + L)
                   torch.cat([known.to(device), torch.ones_like(rows, dtype=torch.bool)], -1),  # (B, pad + L)
                   torch.cat([last_doc[:, None].expand(b, pad), docs], -1), pad)  # (B, pad + L)


def _segment_ends(stream: _SegmentStream, rows: torch.Tensor, docs: torch.Tensor, levels) -> torch.Tensor:
    """The level at which each token ends a segment (``len(levels)``: none), ``(B, L)``: it ends
    level ``l`` when the stream up to it, inside its document, ends with a separator of level
    ``l``; outer levels overwrite inner ones."""
    length, k = rows.shape[1], len(levels)
    end = torch.full_like(rows, k)  # (B, L)
    for lvl in reversed(range(k)):
        hit = torch.zeros_like(rows, dtype=torch.bool)
        for seq in levels[lvl]:
            first = stream.pad - (len(seq) - 1)  # the stream index of token 0's match start
            match = stream.known[:, first:first + length] & (stream.docs[:, first:first + length] == docs)
            for i, value in enumerate(seq):
                match = match & (stream.tokens[:, first + i:first + i + length] == value)
            hit = hit | match
        end = torch.where(hit, torch.full_like(end, lvl), end)
    return end


def _segment_boundaries(end: torch.Tensor, docs: torch.Tensor, begun: SegmentState, k: int) -> torch.Tensor:
    """The boundary before each token, ``(B, L)``: -1 a document starts, ``l`` the previous token
    ended level ``l``, ``k`` none."""
    device = end.device
    last_doc = torch.tensor([0 if d is None else d for d in begun.document], dtype=torch.int64).to(device)  # (B,)
    ended_before = torch.tensor([k if e is None else e for e in begun.ended], dtype=torch.int64).to(device)
    boundary = torch.cat([ended_before[:, None], end[:, :-1]], -1)  # (B, L)
    starts = torch.cat([(last_doc != docs[:, 0])[:, None], docs[:, 1:] != docs[:, :-1]], -1)
    fresh = torch.tensor([d is None for d in begun.document], dtype=torch.bool).to(device)  # (B,)
    starts[:, 0] |= fresh
    return torch.where(starts, torch.full_like(boundary, -1), boundary)


def _segment_columns(boundary: torch.Tensor, begun: SegmentState, k: int) -> torch.Tensor:
    """The positions ``(B, L, k + 1)`` from the boundaries: level ``j``'s index counts the level-``j``
    boundaries since the last boundary of an outer level (a cumulative sum less its value there,
    found with a running maximum); the offset is the distance to the last boundary of any level.
    Where no such boundary is in this call, the state's indices and offset continue."""
    b, length = boundary.shape
    device = boundary.device
    index = torch.arange(length, device=device).expand(b, length)  # (B, L)
    before_idx = torch.tensor(begun.indices, dtype=torch.int64).reshape(b, k).to(device)  # (B, K)
    before_off = torch.tensor(begun.offset, dtype=torch.int64).to(device)  # (B,)
    columns = []
    for j in range(k + 1):
        reset = boundary < j  # a boundary of an outer level (or the document's start) restarts level j
        last = torch.where(reset, index, torch.full_like(index, -1)).cummax(-1).values  # (B, L)
        if j < k:
            count = (boundary == j).long().cumsum(-1)  # level-j boundaries so far
            since = count - count.gather(-1, last.clamp(min=0))
            columns.append(torch.where(last >= 0, since, before_idx[:, j:j + 1] + count))
        else:  # the offset: restarted by a boundary of any level
            columns.append(torch.where(last >= 0, index - last, before_off[:, None] + index + 1))
    return torch.stack(columns, -1)  # (B, L, A)


def _segment_state_after(stream: _SegmentStream, docs: torch.Tensor, end: torch.Tensor, positions: torch.Tensor,
                         levels, batched: bool) -> SegmentState:
    """What the next call continues from: the last document, indices, offset and level ended, and
    the stream's last ``pad`` tokens inside that document (a separator may span the calls)."""
    k, pad = len(levels), stream.pad
    width = stream.tokens.shape[-1]
    tail_rows, doc_rows = stream.tokens[:, width - pad:].tolist(), stream.docs[:, width - pad:].tolist()
    known_rows, last = stream.known[:, width - pad:].tolist(), positions[:, -1].tolist()
    docs_end, end_last = docs[:, -1].tolist(), end[:, -1].tolist()
    return SegmentState(
        levels, batched, tuple(docs_end), tuple(tuple(p[:k]) for p in last), tuple(p[k] for p in last),
        tuple(None if e == k else e for e in end_last),
        tuple(tuple(t for t, d, ok in zip(ts, ds, ks) if ok and d == de)
              for ts, ds, ks, de in zip(tail_rows, doc_rows, known_rows, docs_end)))


# -- randomized positions -------------------------------------------------------------------------

def randomized_positions(length: int, max_positions: int, *, batch: int | None = None,
                         generator: torch.Generator | None = None, seed: int | None = None,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """Randomized positional encodings (Ruoss et al., ACL 2023, "Randomized Positional Encodings Boost
    Length Generalization of Transformers"): the training positions of a sequence of ``length``
    tokens are an ordered sample of ``length`` distinct positions drawn uniformly from
    ``[0, max_positions)`` (every subset equally likely), so the model sees, during training, the
    positions of sequences up to ``max_positions`` long. At evaluation the scheme takes its usual
    positions (``torch.arange(L)``): this is a training-time transform only.

    Returns sorted int64 positions ``[length]``, or ``[batch, length]`` with one independent sample
    per row. Any scheme's positions ``p`` (per-document positions, say) map through the sample:
    ``sample[p]`` (``sample.gather(-1, p)`` batched) keeps their order and equalities.

    Args:
        length: the number of tokens, at most ``max_positions``.
        max_positions: the size of the range sampled from (the paper's ``noise_max_length``, e.g. 2048).
        batch: rows, each with its own sample (None: one unbatched row).
        generator: the ``torch.Generator`` to draw from (its device is used), or ``seed``: an integer
            for a fresh one; neither: torch's global generator.
        device: where the positions are made (default: the generator's device, else the CPU).

    A row is the indices of the ``length`` largest of ``max_positions`` uniform float64 keys (a
    uniformly random subset), sorted: ``O(batch · max_positions)`` time and memory.
    """
    length = check_int("length", length, min=0)
    max_positions = check_int("max_positions", max_positions, min=1, max=INT64_MAX)
    if length > max_positions:
        raise ValueError(f"length={length} must be <= max_positions={max_positions}: the positions are "
                         f"{length} distinct values of [0, max_positions)")
    rows = 1 if batch is None else check_int("batch", batch, min=1)
    if generator is not None and seed is not None:
        raise TypeError("randomized_positions takes generator or seed, not both")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator (or pass seed=...), got {type(generator).__name__}")
    if seed is not None:
        seed = check_int("seed", seed, min=0, max=(1 << 64) - 1)
    check_memory("max_positions", max_positions if batch is None else f"{max_positions} with batch={rows}",
                 rows * max_positions * 2, bytes_per=8,
                 what=f"{rows} row(s) of float64 sampling keys and their ranking")
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    keys = torch.rand(rows, max_positions, generator=generator, dtype=torch.float64, device=device)  # (B, M)
    chosen = keys.topk(length, dim=-1, sorted=False).indices.sort(-1).values  # (B, L) int64
    return chosen if batch is not None else chosen[0]
