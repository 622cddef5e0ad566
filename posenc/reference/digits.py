"""Positions of digits, NumPy side (torch-free): the specification of ``posenc.digits``.

- **Abacus** (McLeish et al., NeurIPS 2024, "Transformers Can Do Arithmetic with the Right
  Embeddings"; official code ``abacus.py`` of mcleish7/arithmetic): each digit's index inside its
  number (a run of consecutive digit tokens) counted from 1 in token order, 0 for every other
  token; during training a random ``offset`` (``k``, drawn once per batch from ``0..max_k``, 99 in
  the official code) is added to the digits' positions. The paper writes numbers least significant
  digit first, so counting in token order counts from the least significant digit.
- **Position coupling** (Cho et al., NeurIPS 2024, "Position Coupling: Improving Length
  Generalization of Arithmetic Transformers Using Task Structure"; official code
  HanseulJo/position-coupling, its addition task): for ``a+b=c`` with the operands written most
  significant digit first and the sum reversed (least significant first, the official
  configuration), the digit of significance ``i`` (0: units) of every number gets ``s + 1 + i``
  with ``s = 1 + offset``; ``+`` and ``=`` get ``s``; every other token 0. Digits of the same
  significance in the operands and the sum share a position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.reference.positions import INT64_MAX, token_ids


def token_set(name: str, ids: Any) -> tuple[int, ...]:
    """Token ids given as a byte string (its bytes), or a non-empty list, tuple, array or tensor of integers."""
    if isinstance(ids, (bytes, bytearray)):
        values = list(bytes(ids))
    elif isinstance(ids, (str, int)) or not hasattr(ids, "__len__"):
        raise TypeError(f"{name} must be a list of token ids or a byte string such as b'0123456789', "
                        f"got {ids!r} ({type(ids).__name__})")
    else:
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError(f"{name} must be a 1-D list of integer token ids, got {ids!r}")
        values = [int(v) for v in arr.tolist()]
    if not values:
        raise ValueError(f"{name} must name at least one token id, got {ids!r}")
    if not -INT64_MAX - 1 <= min(values) <= max(values) <= INT64_MAX:
        raise ValueError(f"{name} must be token ids within int64, got {ids!r}")
    return tuple(sorted(set(values)))


def token_id(name: str, value: Any) -> int:
    """One token id: an integer, or a one-byte string (b'+')."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 1:
            raise ValueError(f"{name} must be one token: an integer id or a one-byte string, got {bytes(value)!r}")
        return value[0]
    if isinstance(value, np.integer):
        value = int(value)
    return check_int(name, value, min=-INT64_MAX - 1, max=INT64_MAX)


def check_offset(offset: Any, length: int, extra: int) -> int:
    """``offset`` such that the largest position, ``offset + length + extra``, stays an int64."""
    return check_int("offset", offset, min=0, max=INT64_MAX - length - extra)


def digit_positions(tokens, digit_ids, *, offset: int = 0) -> np.ndarray:
    """Abacus positions, int64 ``[L]`` (``[B, L]`` batched): a digit's index in its run of digits
    from 1, plus ``offset``; 0 for a token that is not a digit."""
    toks = token_ids(tokens)
    digits = set(token_set("digit_ids", digit_ids))
    offset = check_offset(offset, toks.shape[-1], 0)
    rows = toks if toks.ndim == 2 else toks[None]  # (B, L)
    out = np.zeros(rows.shape, dtype=np.int64)
    for r, row in enumerate(rows):
        run = 0
        for t, tok in enumerate(row.tolist()):
            run = run + 1 if tok in digits else 0
            out[r, t] = run + offset if run else 0
    return out.reshape(toks.shape)


def coupled_positions(tokens, digit_ids, *, plus, equals, offset: int = 0) -> np.ndarray:
    """Position coupling for ``a+b=c`` (sum reversed), int64 ``[L]`` (``[B, L]`` batched).

    A run of digits right after an ``equals`` token is a sum, written least significant first: its
    ``j``-th digit (from 0) has significance ``j``. Any other run is an operand, most significant
    first: a digit followed by ``m`` digits of its run has significance ``m``. A digit of
    significance ``i`` is at ``s + 1 + i``, ``plus`` and ``equals`` at ``s = 1 + offset``, the rest at 0.
    """
    toks = token_ids(tokens)
    digits = set(token_set("digit_ids", digit_ids))
    plus_id, equals_id = token_id("plus", plus), token_id("equals", equals)
    if plus_id in digits or equals_id in digits or plus_id == equals_id:
        raise ValueError(f"plus={plus!r}, equals={equals!r} and digit_ids must be distinct tokens")
    offset = check_offset(offset, toks.shape[-1], 1)
    start = 1 + offset
    rows = toks if toks.ndim == 2 else toks[None]  # (B, L)
    out = np.zeros(rows.shape, dtype=np.int64)
    for r, row in enumerate(rows.tolist()):
        t = 0
        while t < len(row):
            if row[t] in (plus_id, equals_id):
                out[r, t] = start
            if row[t] not in digits:
                t += 1
                continue
            end = t
            while end < len(row) and row[end] in digits:
                end += 1
            is_sum = t > 0 and row[t - 1] == equals_id
            for j in range(t, end):
                significance = j - t if is_sum else end - 1 - j
                out[r, j] = start + 1 + significance
            t = end
    return out.reshape(toks.shape)
