"""Positions of digits for arithmetic: Abacus (McLeish et al., NeurIPS 2024) and position coupling
(Cho et al., NeurIPS 2024), vectorised; ``posenc.reference.digits`` is the token-by-token
specification (and says what the official code of each paper computes).

    posenc.digit_positions(b"12+345=", b"0123456789").tolist()
    # [1, 2, 0, 1, 2, 3, 0]                    each digit's index in its number, from 1
    posenc.coupled_positions(b"12+345=", b"0123456789", plus=b"+", equals=b"=").tolist()
    # [3, 2, 1, 4, 3, 2, 1]                    digits of one significance share a position

Both find a number's digits with a run start (a digit after a non-digit), a running maximum of the
run starts (a token's run began there) and, for coupling, a running minimum from the right of the
run ends: no loop over tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from posenc.limits import check_memory
from posenc.positions import token_ids
from posenc.reference.digits import check_offset, token_id, token_set


def _check_memory(tokens: torch.Tensor) -> None:
    check_memory("tokens", f"<shape {list(tokens.shape)}>", tokens.numel() * 8, bytes_per=8,
                 what="its positions (int64, with the temporaries)")


def _runs(rows: torch.Tensor, digits: tuple[int, ...]):
    """``(is_digit, first, last)`` of ``rows [B, L]``: whether each token is a digit, and the index
    of the first and the last token of its run of digits (meaningful where it is a digit)."""
    is_digit = torch.isin(rows, torch.tensor(digits, dtype=torch.int64, device=rows.device))  # (B, L)
    b, length = rows.shape
    index = torch.arange(length, device=rows.device).expand(b, length)
    before = torch.nn.functional.pad(is_digit[:, :-1], (1, 0))  # the previous token is a digit
    after = torch.nn.functional.pad(is_digit[:, 1:], (0, 1))  # the next token is a digit
    first = torch.where(is_digit & ~before, index, torch.full_like(index, -1)).cummax(-1).values
    ends = torch.where(is_digit & ~after, index, torch.full_like(index, length))
    last = ends.flip(-1).cummin(-1).values.flip(-1)
    return is_digit, first, last, index


def digit_positions(tokens: Any, digit_ids: Any, *, offset: int = 0) -> torch.Tensor:
    """Abacus positions (McLeish et al., NeurIPS 2024): int64 ``[L]`` (``[B, L]`` batched), each
    digit's index inside its number counted from 1 in token order, plus ``offset``; 0 elsewhere.

    Args:
        tokens: token ids ``[L]`` or ``[B, L]`` (tensor, array, list) or a byte string.
        digit_ids: the digits' token ids (``tokenizer.convert_tokens_to_ids(list("0123456789"))``),
            or a byte string such as ``b"0123456789"``.
        offset: added to every digit's position: during training a random ``k``, drawn once per
            batch from ``0..max_k`` (``random.randint(0, 99)`` in the official ``abacus.py``); 0
            at evaluation.

    As in the paper, numbers are meant to be written least significant digit first: the count
    then starts at the units digit, so digits of one significance share a position across numbers
    of any length. Numbers written most significant first count from their leading digit.
    """
    toks = token_ids(tokens)
    digits = token_set("digit_ids", digit_ids)
    offset = check_offset(offset, toks.shape[-1], 0)
    _check_memory(toks)
    rows = toks if toks.ndim == 2 else toks[None]  # (B, L)
    is_digit, first, _, index = _runs(rows, digits)
    out = torch.where(is_digit, index - first + 1 + offset, torch.zeros_like(index))
    return out.reshape(toks.shape)


def coupled_positions(tokens: Any, digit_ids: Any, *, plus: Any, equals: Any, offset: int = 0) -> torch.Tensor:
    """Position coupling for addition (Cho et al., NeurIPS 2024): int64 ``[L]`` (``[B, L]`` batched).

    For ``a+b=c`` written as the official code's addition task writes it (operands most
    significant digit first, zero-padded or not; the sum reversed, least significant digit first,
    zero-padded to one more digit than the longer operand), the digit of significance ``i``
    (0: units) of ``a``, ``b`` and ``c`` is at ``s + 1 + i``, ``s = 1 + offset``; ``plus`` and
    ``equals`` are at ``s``; every other token (BOS, EOS, padding) at 0. The sum is a run of digits
    right after ``equals``; every other run is an operand. The sum's positions depend only on the
    tokens before them, so they hold while decoding it.

    Args:
        tokens: token ids ``[L]`` or ``[B, L]`` or a byte string.
        digit_ids: the digits' token ids, or a byte string such as ``b"0123456789"``.
        plus, equals: the ``+`` and ``=`` token ids (or one-byte strings ``b"+"``, ``b"="``).
        offset: shifts every coupled position: during training the official code draws
            ``s = 1 + offset`` uniformly from ``[1, max_position - len(c))``; 0 at evaluation.
    """
    toks = token_ids(tokens)
    digits = token_set("digit_ids", digit_ids)
    plus_id, equals_id = token_id("plus", plus), token_id("equals", equals)
    if plus_id in digits or equals_id in digits or plus_id == equals_id:
        raise ValueError(f"plus={plus!r}, equals={equals!r} and digit_ids must be distinct tokens")
    offset = check_offset(offset, toks.shape[-1], 1)
    _check_memory(toks)
    rows = toks if toks.ndim == 2 else toks[None]  # (B, L)
    is_digit, first, last, index = _runs(rows, digits)
    before_run = rows.gather(-1, (first - 1).clamp(min=0))  # the token before the run
    is_sum = (first > 0) & (before_run == equals_id)
    significance = torch.where(is_sum, index - first, last - index)
    start = 1 + offset
    out = torch.where(is_digit, start + 1 + significance, torch.zeros_like(index))
    out = torch.where((rows == plus_id) | (rows == equals_id), torch.full_like(out, start), out)
    return out.reshape(toks.shape)
