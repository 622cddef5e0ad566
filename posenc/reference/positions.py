"""The positions model, NumPy side (torch-free); ``posenc.positions`` is its torch twin.

Positions say where each token is. One axis (text): ``[L]`` or ``[B, L]``. Several axes (an image
patch at (row, column), a video patch at (time, row, column), a hierarchical position): ``[L, A]``
or ``[B, L, A]``, where ``A`` comes from the scheme's spec (``axes``), never from the tensor, so
``[L, 3]`` is never read as a batch of 3-token sequences. Values are non-negative; they are
integers, or real numbers for the schemes that are functions of position (seconds of audio,
fractional NaViT coordinates), where an integer-valued float gives exactly the integer result.

**Positions from structure.** ``segment_positions`` is the token-by-token specification of
``posenc.segment_positions``: a segment index per level (paragraph, sentence; block, line) and the
offset inside the innermost segment, from separators; ``SegmentState`` continues a stream.

**Exact angles.** ``p·θ mod 2π`` for positions below 2^63 (``POSITION_BOUND``): write
``p = Σ_j c_j·2^(21j)`` with ``0 <= c_j < 2^21`` (exact splits of an integer or a float64), so

    p·θ ≡ Σ_j c_j · r_j   (mod 2π),     r_j = (2^(21j)·θ) mod 2π

Each ``r_j`` is reduced once per frequency (here exactly, with rational arithmetic; in torch as a
double-double with a Cody–Waite split of 2π), and each product ``c_j·r_j`` (below 2^21·π) is formed
and reduced exactly by ``times_reduced``, so the angle is right to ~2e-15 at any position, where the
plain float64 ``p·θ`` is off by ``ulp(p·θ)``, 1.2e-4 at 2^40 (and 1.8e-12 at 16384, enough to show
in the residual of ``posenc.analysis.linear_map``). A real position's fraction ``f`` adds ``f·θ``
with θ itself (``(θ mod 2π)·f`` is not ``θ·f mod 2π``).

**True frequencies.** That is exact for the θ it is given. ``θ_i = base^(−2i/d)`` rounded to
float64 is off by up to 1e-16 relative, i.e. by ``p·θ·1e-16`` in the angle (0.3 at 2^53), so the
schemes whose frequencies are a closed form of ``base`` and ``i`` carry each θ as a double-double
``hi + lo`` (``exact_split`` of ``exact_inv_freq``, evaluated once with 40 significant digits):
``|θ − hi − lo| <= 2^-106·θ``, off by < 1e-13 in the angle at 2^63. The reduction takes ``lo``
into ``r_j`` (``2^(21j)·lo`` is exact), so ``Σ_j c_j·r_j`` is the angle of the true θ.
Real positions at or above 2^63 would need a fourth chunk: they are refused (``check_bound``).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.limits import check_memory

INT64_MAX = (1 << 63) - 1
"""The largest int64: positions are int64, and every integer that could pass it is refused first."""

CHUNK_BITS = 21
"""Positions are split in 21-bit chunks: ``c_j·r_j < 2^21·π`` is formed exactly (``times_reduced``), and
three chunks cover every int64."""
LEVELS = 3
POSITION_BOUND = 1 << (CHUNK_BITS * LEVELS)
"""Positions must be below 2^63: three 21-bit chunks, each product ``c_j·r_j`` below 2^21·π."""
EXACT_DIGITS = 40
"""Significant digits of ``exact_inv_freq``: θ to 1e-40 relative, more than the double-double's 2^-106."""
TWO_PI = Fraction("6.28318530717958647692528676655900576839433879875021164194988918461563281257241799")
"""2π to 80 digits: exact enough to reduce ``2^42·θ`` (the largest multiple) to 1e-37."""


def _shape_text(axes: int) -> str:
    return "[L] or [B, L]" if axes == 1 else f"[L, {axes}] or [B, L, {axes}] (axes={axes})"


def positions_array(name: str, positions: Any, *, axes: int = 1, real: bool = False,
                    scheme: str = "") -> np.ndarray:
    """Checked positions: int64 (or float64 when ``real`` and the input is floating point),
    shape ``[L]``/``[B, L]`` for one axis, ``[L, A]``/``[B, L, A]`` for ``axes = A > 1``."""
    arr = np.asarray(positions)
    if arr.dtype.kind == "f":
        if not real:
            who = f"scheme {scheme!r}" if scheme else "this function"
            raise TypeError(f"{name} must hold integers for {who}, got dtype {arr.dtype}; real-valued "
                            f"positions are accepted by: {', '.join(REAL_SCHEMES)}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} must be finite, got {arr[~np.isfinite(arr)].ravel()[0]}")
    elif arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers{' or real numbers' if real else ''}, got dtype {arr.dtype}")
    rank = (1, 2) if axes == 1 else (2, 3)
    if arr.ndim not in rank or (axes > 1 and arr.shape[-1] != axes):
        raise ValueError(f"{name} must have shape {_shape_text(axes)}, got shape {list(arr.shape)}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, got minimum {arr.min()}")
    return arr.astype(np.float64 if arr.dtype.kind == "f" else np.int64)


REAL_SCHEMES = ("alibi", "dinov3", "fire", "hirope", "kerple", "liere", "mrope", "rope", "rope_mixed", "sinusoidal",
                "videorope", "fope", "pope")
"""The schemes that are functions of position and so accept real-valued positions (the rest index
tables: learned rows, T5 buckets, Shaw's clipped distances). ``tests/test_positions.py`` holds this
list equal to the registry's (``posenc.registry.real_schemes()``); the torch positions model names them in its errors."""


def distance(q_positions, k_positions, *, real: bool = False, scheme: str = "") -> np.ndarray:
    """``k - q`` for every pair of one-axis positions: ``[..., Lq, Lk]`` (float64 if either is real)."""
    q = positions_array("q_positions", q_positions, real=real, scheme=scheme)
    k = positions_array("k_positions", k_positions, real=real, scheme=scheme)
    return k[..., None, :] - q[..., :, None]


def grid_positions(shape, *, offset: int = 0) -> np.ndarray:
    """Row-major grid positions ``[prod(shape), len(shape)]`` int64: for ``(H, W)`` the rows are
    ``(r, c)`` for r in 0..H-1, c in 0..W-1; for ``(T, H, W)``, ``(t, r, c)``. ``offset`` is added
    to every axis."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__") or len(shape) == 0:
        raise TypeError(f"shape must be a non-empty list of sizes such as (H, W), got {shape!r}")
    sizes = [check_int(f"shape[{i}]", s, min=1, max=INT64_MAX) for i, s in enumerate(shape)]
    offset = check_int("offset", offset, min=0, max=INT64_MAX)
    if offset + max(sizes) - 1 > INT64_MAX:  # the largest position, before it wraps in int64
        raise ValueError(f"offset={offset} with shape {list(sizes)} reaches position {offset + max(sizes) - 1}; "
                         f"positions are int64: offset + max(shape) - 1 must be <= 2**63 - 1 = {INT64_MAX}")
    check_memory("shape", list(sizes), math.prod(sizes) * len(sizes) * 3, bytes_per=8,
                 what="its grid positions (int64, with the meshgrid temporaries)")
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in sizes], indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=-1) + offset


# -- exact angles -------------------------------------------------------------------------------

def exact_inv_freq(rotary_dim: int, base: float) -> np.ndarray:
    """``θ_i = base^(−2i/rotary_dim)`` for ``i < rotary_dim/2`` with ``EXACT_DIGITS`` digits: an object
    array of mpmath numbers (mpmath ships with torch, through sympy). ``base`` is the float64 given.

    Arithmetic on these numbers keeps their precision only inside ``exact_context()``."""
    return np.array(_exact_inv_freq(int(rotary_dim), float(base)), dtype=object)


@functools.lru_cache(maxsize=256)
def _exact_inv_freq(rotary_dim: int, base: float) -> tuple:
    import mpmath

    with exact_context():
        b = mpmath.mpf(base)
        return tuple(b ** (-mpmath.mpf(2 * i) / rotary_dim) for i in range(rotary_dim // 2))


def exact_context():
    """The mpmath precision under which exact frequencies are computed and transformed (scalings)."""
    import mpmath

    return mpmath.workdps(EXACT_DIGITS)


def exact_split(values) -> tuple[np.ndarray, np.ndarray]:
    """``(hi, lo)`` float64 with ``hi = round(v)`` and ``lo = round(v − hi)``: a double-double per
    value of an object array of exact numbers (``exact_inv_freq``); a float64 array gives ``lo = 0``."""
    arr = np.asarray(values)
    if arr.dtype != object:
        hi = arr.astype(np.float64)
        return hi, np.zeros_like(hi)
    with exact_context():
        hi = np.array([float(v) for v in arr.ravel()], dtype=np.float64).reshape(arr.shape)
        lo = np.array([float(v - h) for v, h in zip(arr.ravel(), hi.ravel())], dtype=np.float64).reshape(arr.shape)
    return hi, lo


def check_bound(name: str, high: float) -> None:
    """``high`` (the largest position) is below ``POSITION_BOUND``: past it the reduction is not exact."""
    if high >= POSITION_BOUND:
        raise ValueError(f"{name} must be below 2^63 = {POSITION_BOUND} (the bound of the exact angle reduction: "
                         f"three 21-bit chunks), got {high!r}")


def reduced_multiples(inv_freq, inv_freq_lo=None, *, pair: bool = False):
    """``r_j = (2^(21j)·θ) mod 2π`` in ``[−π, π)`` for ``j < LEVELS``: ``[LEVELS, R]`` float64,
    computed exactly from ``θ = inv_freq + inv_freq_lo`` (float64s, hence rationals) and rounded once;
    with ``pair=True``, ``(hi, lo)``: ``r_j`` as a double-double (``lo = round(r_j − hi)``)."""
    theta = np.asarray(inv_freq, dtype=np.float64)
    low = np.zeros_like(theta) if inv_freq_lo is None else np.broadcast_to(np.asarray(inv_freq_lo, np.float64),
                                                                            theta.shape)
    hi, lo = np.empty((LEVELS,) + theta.shape), np.empty((LEVELS,) + theta.shape)
    for j in range(LEVELS):
        for idx, t in np.ndenumerate(theta):
            x = (Fraction(float(t)) + Fraction(float(low[idx]))) * (1 << (CHUNK_BITS * j))
            r = x - TWO_PI * math.floor(x / TWO_PI + Fraction(1, 2))  # in [−π, π)
            hi[(j,) + idx] = float(r)
            lo[(j,) + idx] = float(r - Fraction(hi[(j,) + idx]))
    return (hi, lo) if pair else hi


TWO_PI_SPLIT_BITS = 29
"""``2π = TWO_PI_HIGH + TWO_PI_LOW``: the high part a multiple of 2^-29 (32 significant bits)."""
TWO_PI_HIGH = float(Fraction(math.floor(TWO_PI * (1 << TWO_PI_SPLIT_BITS)), 1 << TWO_PI_SPLIT_BITS))
TWO_PI_LOW = float(TWO_PI - Fraction(TWO_PI_HIGH))


def times_reduced(c, r_hi, r_lo, xp=np):
    """``c·r mod 2π`` (about ``[−π, π]``, right to ~4e-16) for integer-valued float64 ``0 <= c < 2^21`` and
    ``r = r_hi + r_lo`` (a double-double, ``|r_hi| <= π``): the exact product of one chunk of a position
    and its reduced frequency. ``r_hi = a + b`` with ``a`` the multiple of 2^-29 nearest it (32
    significant bits), so ``c·a`` is exact (53 bits); ``c·a − n·TWO_PI_HIGH`` (``n = round(c·a/2π) <
    2^20``) is exact too (multiples of 2^-29 below 4), and the rest, ``−n·TWO_PI_LOW + c·(b + r_lo)``, is
    below 2^-8 and rounds by < 2^-60. ``xp``: ``numpy`` or ``torch`` (the same steps on both)."""
    a = xp.round(r_hi * float(1 << TWO_PI_SPLIT_BITS)) / float(1 << TWO_PI_SPLIT_BITS)
    if xp is not np:
        a = a.detach()  # the gradient flows through r_hi − a
    rest = (r_hi - a) + r_lo
    x = c * a
    n = xp.round(x * (1.0 / (2 * math.pi)))
    return (x - n * TWO_PI_HIGH) - n * TWO_PI_LOW + c * rest


def chunks(pos: np.ndarray) -> list[np.ndarray]:
    """``c_j`` with ``pos = Σ_j c_j·2^(21j)``, ``0 <= c_j < 2^21`` (``c_2`` unbounded), float64;
    exact for int64 and for float64 positions."""
    if pos.dtype.kind in "iu":
        mask = (1 << CHUNK_BITS) - 1
        pos = pos.astype(np.int64)
        return [((pos >> (CHUNK_BITS * j)) & mask if j < LEVELS - 1 else pos >> (CHUNK_BITS * j)).astype(np.float64)
                for j in range(LEVELS)]
    out, rest = [], pos.astype(np.float64)
    for j in reversed(range(1, LEVELS)):
        c = np.floor(np.ldexp(rest, -CHUNK_BITS * j))
        rest = rest - np.ldexp(c, CHUNK_BITS * j)
        out.append(c)
    return [rest] + out[::-1]


def angles(positions, inv_freq, axis_of_pair=None) -> np.ndarray:
    """``p_{a(i)}·θ_i`` reduced to ``[−π, π)``: the angle of every pair ``i``, float64.

    ``positions``: ``[..., L]`` (one axis; ``axis_of_pair`` None) or ``[..., L, A]`` with
    ``axis_of_pair [R]`` naming the axis whose position pair ``i`` takes (axial RoPE, M-RoPE).
    ``inv_freq``: float64 θ, or exact θ (``exact_inv_freq``: reduced as its double-double).
    Returns ``[..., L, R]``. Positions are checked non-negative by the callers
    (``positions_array``); below ``POSITION_BOUND`` here.
    """
    pos = np.asarray(positions)
    if pos.size:
        check_bound("positions", pos.max().item())
    hi, lo = exact_split(inv_freq)
    if axis_of_pair is None:
        per_pair = pos[..., None]  # (..., L, 1)
    else:
        per_pair = np.take(pos, np.asarray(axis_of_pair, dtype=np.int64), axis=-1)  # (..., L, R)
    r_hi, r_lo = reduced_multiples(hi, lo, pair=True)  # (LEVELS, R) each
    c = chunks(per_pair)
    frac = 0.0
    if per_pair.dtype.kind == "f":  # p = whole + frac: (θ mod 2π)·frac is not θ·frac
        whole = np.floor(c[0])
        frac, c[0] = c[0] - whole, whole
    total = sum(times_reduced(cj, r_hi[j], r_lo[j]) for j, cj in enumerate(c)) + (frac * hi + frac * lo)
    return np.remainder(total + np.pi, 2 * np.pi) - np.pi


# -- positions from structure ---------------------------------------------------------------------

def segment_separators(separators: Any) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``separators`` of ``segment_positions``, checked: one tuple per level (outermost first) of the
    token sequences that end a segment at that level (a token id ``i`` is ``(i,)``; a byte string is
    its byte values)."""
    example = "e.g. [[b'\\n\\n'], [b'.', b'\\n']] (paragraphs, then sentences) or [[869, 13]] (token ids)"
    if isinstance(separators, (str, bytes, bytearray)) or not isinstance(separators, (list, tuple)):
        raise TypeError(f"separators must be a list with one entry per level, outermost first, {example}; "
                        f"got {separators!r} ({type(separators).__name__})")
    if not separators:
        raise ValueError(f"separators must name at least one level, {example}; got {separators!r}")
    levels, level_of = [], {}
    for i, level in enumerate(separators):
        alternatives = level if isinstance(level, (list, tuple)) else [level]
        if not alternatives:
            raise ValueError(f"separators[{i}] must name at least one separator (a token id or a byte string), got []")
        sequences = []
        for j, item in enumerate(alternatives):
            name = f"separators[{i}][{j}]" if isinstance(level, (list, tuple)) else f"separators[{i}]"
            if isinstance(item, (bytes, bytearray)):
                if not item:
                    raise ValueError(f"{name} must be a non-empty byte string, got {bytes(item)!r}")
                seq = tuple(bytes(item))
            elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
                if not -INT64_MAX - 1 <= int(item) <= INT64_MAX:
                    raise ValueError(f"{name} must be a token id within int64, got {item}")
                seq = (int(item),)
            else:
                hint = f"; encode text first, e.g. {item!r}.encode()" if isinstance(item, str) else ""
                raise TypeError(f"{name} must be a token id (an integer) or a byte string, got {item!r} "
                                f"({type(item).__name__}){hint}")
            if seq in level_of and level_of[seq] != i:
                raise ValueError(f"{name}={item!r} is also a separator of level {level_of[seq]}: each separator "
                                 f"belongs to one level")
            level_of[seq] = i
            if seq not in sequences:
                sequences.append(seq)
        levels.append(tuple(sequences))
    return tuple(levels)


@dataclass(frozen=True)
class SegmentState:
    """Where ``segment_positions`` stopped, to continue the same stream (cached decoding).

    One entry per row (a single row for unbatched tokens) of ``document`` (the last token's document
    id; None before any token), ``indices`` and ``offset`` (the last token's positions), ``ended``
    (the level at which the last token ended a segment, None if it ended none) and ``tail`` (the
    stream's last tokens in that document, as many as the longest separator minus one: a separator
    split across two calls is still found). Plain Python values: the NumPy reference and the torch
    builder read and write the same state.
    """

    separators: tuple[tuple[tuple[int, ...], ...], ...]
    batched: bool
    document: tuple[int | None, ...]
    indices: tuple[tuple[int, ...], ...]
    offset: tuple[int, ...]
    ended: tuple[int | None, ...]
    tail: tuple[tuple[int, ...], ...]

    @property
    def batch(self) -> int:
        return len(self.document)


def segment_state_rows(state: Any, levels, batched: bool, batch: int) -> SegmentState:
    """``state`` checked against this call (its separators, batching and batch), or a fresh one."""
    if state is None:
        k = len(levels)
        return SegmentState(levels, batched, (None,) * batch, ((0,) * k,) * batch, (0,) * batch,
                            (None,) * batch, ((),) * batch)
    if not isinstance(state, SegmentState):
        raise TypeError(f"state must be the state a previous segment_positions call returned, or None; "
                        f"got {type(state).__name__}")
    if state.separators != levels:
        raise ValueError(f"state comes from another separators set ({state.separators!r}); this call has "
                         f"separators {levels!r}: continue a stream with the separators that began it")
    if state.batched != batched or state.batch != batch:
        given = f"[{state.batch}, L]" if state.batched else "[L]"
        now = f"[{batch}, L]" if batched else "[L]"
        raise ValueError(f"state continues tokens of shape {given}, but tokens has shape {now}")
    return state


def token_ids(tokens: Any) -> np.ndarray:
    """Token ids (of ``segment_positions``, ``digit_positions``, ...) as int64 ``[L]`` or ``[B, L]``
    (a byte string: its byte values)."""
    if isinstance(tokens, (bytes, bytearray)):
        return np.frombuffer(bytes(tokens), dtype=np.uint8).astype(np.int64)
    if isinstance(tokens, str):
        raise TypeError(f"tokens must be token ids or a byte string, got a str; encode it first, e.g. "
                        f"{tokens[:20]!r}.encode()")
    arr = np.asarray(tokens)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and isinstance(tokens, (list, tuple))):
        raise TypeError(f"tokens must be integer token ids (a tensor, array or list) or a byte string, "
                        f"got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"tokens must have shape [L] or [B, L], got shape {list(arr.shape)}")
    return arr.astype(np.int64)


def segment_documents(document_ids: Any, shape: tuple[int, int], batched: bool,
                      first: tuple[int | None, ...]) -> np.ndarray:
    """``document_ids`` checked against tokens of ``shape`` ``[B, L]``: ``[B, L]`` int64 (zeros when
    None, meaning the document the state ended in); ``first`` is each row's last document id so far."""
    b, length = shape
    if document_ids is None:
        return np.array([[0 if d is None else d] * length for d in first], dtype=np.int64).reshape(b, length)
    ids = np.asarray(document_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"document_ids must hold integers (e.g. posenc.packing(...).document_ids), got dtype {ids.dtype}")
    allowed = [[length], [b, length]] if batched else [[length]]
    if list(ids.shape) not in allowed:
        text = " or ".join(str(s) for s in allowed)
        raise ValueError(f"document_ids must have shape {text} (that of tokens), got shape {list(ids.shape)}")
    ids = np.broadcast_to(ids.astype(np.int64), (b, length))
    steps = np.diff(ids, axis=-1)
    if (steps < 0).any():
        where = np.argwhere(steps < 0)[0].tolist()
        raise ValueError(f"document_ids must be non-decreasing along L (each document contiguous), got a "
                         f"decrease after index {where}")
    for row, d in enumerate(first):
        if d is not None and length and ids[row, 0] < d:
            raise ValueError(f"document_ids must continue the state's documents: row {row} ended in document {d}, "
                             f"but this call starts it at document {ids[row, 0]}")
    return ids


def segment_positions(tokens, separators, *, document_ids=None, state=None) -> tuple[np.ndarray, SegmentState]:
    """Positions from structure: ``(positions, state)``, ``positions`` int64 ``[L, A]`` (``[B, L, A]``
    for batched tokens), ``A = len(separators) + 1``: column ``j < A - 1`` is the index of the
    token's segment at level ``j`` (outermost first) inside its enclosing segment, the last column
    its offset inside its innermost segment. The specification of ``posenc.segment_positions``,
    token by token:

    - a token *ends a segment at level* ``l`` when the tokens up to it, inside its document, end with
      one of the separators of level ``l`` (every occurrence counts, overlapping ones included); when
      several levels' separators end there, the outermost level wins;
    - the next token starts a new segment at that level: the index at level ``l`` goes up by one,
      every inner level's index and the offset restart at 0 (the separator belongs to the segment it
      ends, as its last token); otherwise the offset goes up by one;
    - a document's first token has every index and the offset 0.

    ``state`` (from a previous call) continues that call's stream: the positions of the new tokens
    are those the whole stream gives.
    """
    levels = segment_separators(separators)
    toks = token_ids(tokens)
    batched = toks.ndim == 2
    rows = toks if batched else toks[None]  # (B, L)
    b, length = rows.shape
    begun = segment_state_rows(state, levels, batched, b)
    docs = segment_documents(document_ids, (b, length), batched, begun.document)  # (B, L)
    k = len(levels)
    longest = max(len(seq) for level in levels for seq in level)
    out = np.zeros((b, length, k + 1), dtype=np.int64)  # (B, L, A)
    rows_after = []
    for r in range(b):
        doc, idx, off = begun.document[r], list(begun.indices[r]), begun.offset[r]
        ended, history = begun.ended[r], list(begun.tail[r])
        for t in range(length):
            d = int(docs[r, t])
            if doc is None or d != doc:  # a document starts: everything at 0
                idx, off, history = [0] * k, 0, []
            elif ended is not None:  # the previous token ended a segment at level `ended`
                idx[ended] += 1
                idx[ended + 1:] = [0] * (k - ended - 1)
                off = 0
            else:
                off += 1
            doc = d
            history.append(int(rows[r, t]))
            out[r, t, :k] = idx
            out[r, t, k] = off
            ended = next((lvl for lvl, level in enumerate(levels)
                          if any(tuple(history[-len(seq):]) == seq for seq in level if len(history) >= len(seq))),
                         None)
            history = history[-(longest - 1):] if longest > 1 else []
        rows_after.append((doc, tuple(idx), off, ended, tuple(history)))
    after = SegmentState(levels, batched, *(tuple(col) for col in zip(*rows_after))) if b else begun
    return (out if batched else out[0]), after
