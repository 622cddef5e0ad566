"""Positions from the tokens for the benchmark's models (``TinyGPT.positions_fn``): the rows of
the structured positions' claims (their part: ``posenc.extrapolate.parts.structure``).

Each function returns ``fn(idx [B, L], training) -> positions``, the positions of a batch of
sequences made from their tokens (a model given no positions calls it):

- ``segments`` (BiPE, He et al. 2024): ``(segment, offset)`` ``[B, L, 2]`` of
  ``posenc.segment_positions`` at ``LINES``, a byte stream of source code cut into lines (the
  separator ``docs/guide/structure.md`` gives code; BiPE's official code cuts at the full stop and
  the newline);
- ``lines_and_tokens`` (HiRoPE, Zhang et al. 2024): ``(line, token)`` ``[B, L, 2]``, the line
  index at ``LINES`` beside each token's index;
- ``abacus`` (McLeish et al. 2024): ``posenc.digit_positions`` of the task's digits (each digit's
  index in its number from 1, 0 elsewhere), plus, in training, one offset per batch drawn from
  ``0..offset_max`` (the official ``random.randint(0, 99)``), 0 at evaluation;
- ``coupled`` (Cho et al. 2024): position coupling for the benchmark's ``add`` task (operands and
  sum all least significant digit first, ``posenc.extrapolate.task_generators``): the digit of significance
  ``i`` of each number at ``s + 1 + i``, the ``+`` and the separator before the sum at ``s``,
  every other token at 0; in training ``s`` drawn per example from ``1..offset_max`` (the
  official random start), ``s = 1`` at evaluation. With every number least significant first, a
  digit's index in its number counted from 1 is its significance plus 1, so this is
  ``digit_positions(idx, digits, offset=s)`` with the two markers at ``s``;
  ``posenc.coupled_positions`` gives the same positions for the paper's own format (operands most
  significant first, the sum reversed);
- ``randomized`` (Ruoss et al. 2023): in training an ordered sample of ``L`` positions of
  ``[0, max_positions)`` per row (``posenc.randomized_positions``), at evaluation ``0..L-1``.

The draws come from a generator seeded by the run's seed, so a run repeats exactly. ``LINES`` and
the functions here are part of the benchmark's protocol (no run key holds them): a change to them
bumps ``posenc.extrapolate.profiles.BENCH_VERSION``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from posenc import registry
from posenc.digits import digit_positions
from posenc.positions import randomized_positions, segment_positions

LINES = [[b"\n"]]
"""One level, lines: a line's ``\\n`` is its last token (``posenc.segment_positions``)."""
DIGITS = tuple(range(10))  # the tasks' digit tokens (posenc.extrapolate.task_generators)

PositionsFn = Callable[[torch.Tensor, bool], torch.Tensor]


def segments() -> PositionsFn:
    """BiPE's ``(segment, offset)`` of each byte, segments ending at each line's ``\\n``."""

    def fn(idx: torch.Tensor, training: bool) -> torch.Tensor:
        return segment_positions(idx, LINES)[0]  # (B, L, 2)

    return fn


def lines_and_tokens() -> PositionsFn:
    """HiRoPE's ``(line, token)`` of each byte: the line index and the token index."""

    def fn(idx: torch.Tensor, training: bool) -> torch.Tensor:
        line = segment_positions(idx, LINES)[0][..., 0]  # (B, L)
        token = torch.arange(idx.shape[1], device=idx.device).expand_as(line)  # (B, L)
        return torch.stack((line, token), dim=-1)  # (B, L, 2)

    return fn


def abacus(offset_max: int, seed: int) -> PositionsFn:
    """Abacus positions; training adds one offset per batch from ``0..offset_max``."""
    g = torch.Generator().manual_seed(seed)

    def fn(idx: torch.Tensor, training: bool) -> torch.Tensor:
        base = digit_positions(idx, DIGITS)  # (B, L): index in the number from 1, 0 elsewhere
        if not training:
            return base
        k = int(torch.randint(0, offset_max + 1, (1,), generator=g))
        return base + k * (base > 0)

    return fn


def coupled(offset_max: int, seed: int, *, markers: tuple[int, ...]) -> PositionsFn:
    """Coupled positions of the ``add`` task (see the module docstring); ``markers``: the ``+``
    and the separator before the sum, at the start ``s``."""
    g = torch.Generator().manual_seed(seed)
    marks = torch.tensor(markers, dtype=torch.int64)

    def fn(idx: torch.Tensor, training: bool) -> torch.Tensor:
        base = digit_positions(idx, DIGITS)  # (B, L): significance + 1 at the digits, 0 elsewhere
        if training:
            s = torch.randint(1, offset_max + 1, (idx.shape[0], 1), generator=g).to(idx.device)  # (B, 1)
        else:
            s = torch.ones(idx.shape[0], 1, dtype=torch.int64, device=idx.device)
        marker = torch.isin(idx, marks.to(idx.device))
        return base + s * (base > 0) + s * marker  # (B, L)

    return fn


def randomized(max_positions: int, seed: int) -> PositionsFn:
    """Ruoss et al.'s training positions (an ordered sample of ``[0, max_positions)`` per row);
    ``0..L-1`` at evaluation."""
    g = torch.Generator().manual_seed(seed)

    def fn(idx: torch.Tensor, training: bool) -> torch.Tensor:
        b, length = idx.shape
        if not training:
            return torch.arange(length, device=idx.device)
        return randomized_positions(length, max_positions, batch=b, generator=g).to(idx.device)  # (B, L)

    return fn


def for_spec(spec: dict) -> PositionsFn | None:
    """The positions a language model of ``spec`` reads from its bytes: BiPE's segments of lines,
    HiRoPE's ``(line, token)``; None (``0..L-1``) for any other scheme."""
    name = spec.get("scheme")
    structure = registry.get(name).cls.text_structure if name in registry.schemes() else None  # its own rule
    return {"segments": segments, "lines": lines_and_tokens}[structure]() if structure else None
