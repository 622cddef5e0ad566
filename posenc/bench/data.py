"""Byte-level language-modelling data: a corpus found offline, a train/held-out split, and the
evaluation protocol that scores every length on the same held-out tokens.

Corpus: the source files of the Python standard library of the running interpreter (found at run
time with ``sysconfig``; nothing is downloaded), or any text file the user names. Tokens are bytes
(vocabulary 256), so any file works and no vocabulary is built. The corpus's SHA-256 is part of
every result's key, so results from different corpora never mix.

Held-out protocol: one fixed stream of ``N + 1`` held-out tokens (``N`` a multiple of every
evaluation length). At length ``T`` the stream is cut into ``N / T`` windows (non-overlapping), or
into windows of ``T`` tokens every ``T/2`` (sliding: each token is scored once, in the last half
of a window, so it sees at least ``T/2`` tokens of context; the first window scores all of its
tokens). Either way every length scores exactly the targets ``1..N``, so the lengths differ only
in context, and the per-token NLL is summed in fixed blocks of the stream, which gives paired
standard errors between lengths and between schemes.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB_SIZE = 256  # bytes
_STDLIB_SKIP = ("test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "idlelib")


def stdlib_files() -> list[Path]:
    """The ``.py`` files of the running Python's standard library, sorted (tests excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not set(p.relative_to(root).parts[:-1]) & set(_STDLIB_SKIP)]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


@dataclass(frozen=True)
class Corpus:
    """Bytes of text and where they came from."""

    data: bytes
    source: str  # "stdlib:<path>" or the user's file

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def __len__(self) -> int:
        return len(self.data)


def load_corpus(path: str | None, *, max_bytes: int) -> Corpus:
    """The first ``max_bytes`` of ``path`` (a text file), or of the standard library's sources.

    Raises FileNotFoundError / ValueError with the path when the file is missing, unreadable or
    too small to hold a training split and the held-out stream.
    """
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"corpus file {str(p)!r} does not exist or is not a file")
        try:
            with open(p, "rb") as f:
                data = f.read(max_bytes)
        except OSError as e:
            raise ValueError(f"cannot read corpus file {str(p)!r}: {e.strerror or e}") from None
        return Corpus(data, str(p))
    files = stdlib_files()
    if not files:
        raise FileNotFoundError("no Python standard-library sources found; pass a text file with --corpus FILE")
    chunks: list[bytes] = []
    total = 0
    for f in files:
        try:
            text = f.read_bytes()
        except OSError:
            continue
        chunks.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return Corpus(b"".join(chunks)[:max_bytes], f"stdlib:{files[0].parent}")


def lcm_lengths(lengths: list[int]) -> int:
    """The held-out length must be a multiple of every window length (and so of every stride)."""
    return math.lcm(*lengths)


@dataclass
class LMData:
    """Training tokens and the held-out stream (``N + 1`` tokens, targets ``1..N``)."""

    train: torch.Tensor  # (Ntrain,) uint8 -> long on use
    heldout: torch.Tensor  # (N + 1,)
    block: int  # tokens per block of the paired statistics (the longest evaluation length)

    @property
    def n_heldout(self) -> int:
        return self.heldout.numel() - 1


def split(corpus: Corpus, *, heldout_tokens: int, lengths: list[int]) -> LMData:
    """The last ``N + 1`` bytes are held out, ``N`` the largest multiple of every length (and of
    every half-length, for the sliding stride) that is at most ``heldout_tokens``."""
    unit = lcm_lengths(lengths)
    n = (heldout_tokens // unit) * unit
    if n == 0:
        raise ValueError(f"heldout_tokens={heldout_tokens} is smaller than one window set ({unit} tokens "
                         f"for lengths {lengths})")
    data = torch.frombuffer(bytearray(corpus.data), dtype=torch.uint8)
    if data.numel() < 4 * (n + 1):
        raise ValueError(f"corpus {corpus.source!r} has {data.numel()} bytes; need at least {4 * (n + 1)} "
                         f"(the held-out stream is {n + 1} bytes and training needs three times more)")
    return LMData(train=data[: -(n + 1)].clone(), heldout=data[-(n + 1):].clone(), block=max(lengths))


def sample_batch(train: torch.Tensor, *, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``length + 1`` tokens: ``(B, length + 1)`` long."""
    starts = torch.randint(0, train.numel() - length - 1, (batch,), generator=generator)
    idx = starts.unsqueeze(1) + torch.arange(length + 1)  # (B, length + 1)
    return train[idx].long()


@dataclass(frozen=True)
class Window:
    """One evaluation window: inputs ``stream[start:start+T]``; scores its targets from ``score_from``."""

    start: int
    length: int
    score_from: int  # index inside the window of the first scored target


def windows(n: int, length: int, mode: str) -> list[Window]:
    """Windows over targets ``1..n`` at ``length``: every target is scored exactly once."""
    if n % length:
        raise ValueError(f"held-out length {n} is not a multiple of the window length {length}")
    if mode == "nonoverlap":
        return [Window(s, length, 0) for s in range(0, n, length)]
    if mode == "sliding":
        if length % 2:
            raise ValueError(f"sliding windows need an even length (stride = length / 2), got {length}")
        stride = length // 2
        out = [Window(0, length, 0)]
        out += [Window(s, length, length - stride) for s in range(stride, n - length + 1, stride)]
        return out
    raise ValueError(f"mode must be 'nonoverlap' or 'sliding', got {mode!r}")
