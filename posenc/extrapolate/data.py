"""Byte-level language-modelling data: a corpus found offline, a clean train/held-out split by
whole documents, its contamination, and the evaluation protocol that scores every length on the
same held-out tokens.

Corpus: the source files of the Python standard library of the running interpreter (found at run
time with ``sysconfig``; nothing is downloaded), or any text file the user names. Tokens are bytes
(vocabulary 256), so any file works and no vocabulary is built. The corpus's SHA-256 is part of
every result's key, so results from different corpora never mix.

Documents and the split (``load_corpus``, ``split``): the standard library's documents are its
files; a user's file is cut into documents of about ``DOC_BYTES`` bytes at line ends (a 64th of
the file when that is smaller, at least 256 bytes). Documents
are drawn in an order fixed by a seed from across the whole corpus (not its first bytes), and
each drawn document is dropped when it is an exact copy of one already kept (same SHA-256) or a
near copy (at least ``NEAR_SHARE`` of its sampled 64-byte strings occur in the documents already
kept: generated codec tables, vendored copies). The first documents drawn form the held-out
stream (at most an eighth of it from one document, so it spans many files), the rest the
training text: no document is on both sides.

Contamination (``overlap``): the share of the held-out stream's 32- and 128-byte strings (every
position) that occur anywhere in the training text, found with a 64-bit polynomial hash of every
substring (collisions: about ``n²/2⁶⁴``, none in practice). The goal is ``overlap_128 <= 0.01``:
a held-out 128-byte string seen verbatim in training is memorisation, not modelling.

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
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

VOCAB_SIZE = 256  # bytes
_STDLIB_SKIP = ("test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "idlelib")
DOC_BYTES = 4096  # a user file is cut into documents of about this size (at the next line end)
NEAR_SHARE = 0.5  # a document is a near copy when this share of its sampled 64-byte strings is already kept
READ_FACTOR = 16  # a user file: documents are drawn from its first READ_FACTOR x corpus_bytes bytes
HELDOUT_DOCS = 8  # at most 1/HELDOUT_DOCS of the held-out stream comes from one document
HASH_K = 128  # a held-out document may share at most MAX_SHARED of its HASH_K-byte strings with others
MAX_SHARED = 0.01  # (the goal for overlap_128; on the standard library a few % of files exceed it)


def stdlib_files() -> list[Path]:
    """The ``.py`` files of the running Python's standard library, sorted (tests excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _STDLIB_SKIP]  # pruned, not walked (site-packages is large)
        files += [Path(folder) / n for n in names if n.endswith(".py")]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


# -- substring hashes --------------------------------------------------------------------------

_P = 0x100000001B3  # FNV's 64-bit prime: odd, so multiplication is a bijection mod 2^64


def substring_hashes(data: bytes | np.ndarray, k: int) -> np.ndarray:
    """64-bit hash of every ``k``-byte substring (``len − k + 1`` of them; ``k`` a power of 2).

    ``h_{2m}[i] = h_m[i]·P^m + h_m[i+m] (mod 2^64)`` is the polynomial hash
    ``Σ_j b[i+j]·P^(k−1−j)``, built by doubling in ``log2 k`` vectorised steps.
    """
    if k < 1 or k & (k - 1):
        raise ValueError(f"k must be a power of 2, got {k}")
    h = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.uint64) + np.uint64(1)
    m = 1
    with np.errstate(over="ignore"):
        while m < k:
            if h.size <= m:
                return np.zeros(0, dtype=np.uint64)
            h = h[:-m] * np.uint64(pow(_P, m, 2**64)) + h[m:]
            m *= 2
    return h


def _mix(h: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (splitmix64's), so the low bits of a hash are uniform for sampling."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def overlap(heldout: bytes, train: bytes, k: int) -> float:
    """The share (0..1) of ``heldout``'s ``k``-byte strings (every position) found in ``train``."""
    held = substring_hashes(heldout, k)
    if held.size == 0:
        return 0.0
    return float(_contains(np.sort(substring_hashes(train, k)), held).mean())


def _contains(sorted_hashes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``query`` in ``sorted_hashes`` (a sort and a binary search: numpy's unique/isin are far slower)."""
    if sorted_hashes.size == 0:
        return np.zeros(query.shape, dtype=bool)
    at = np.searchsorted(sorted_hashes, query).clip(max=sorted_hashes.size - 1)
    return sorted_hashes[at] == query


def _fingerprint(data: bytes) -> np.ndarray:
    """Content-defined sample (about 1 in 8) of a document's 64-byte strings, as unique hashes."""
    h = _mix(substring_hashes(data, 64))
    return h[(h & np.uint64(7)) == 0]


def _shared_hashes(documents) -> np.ndarray:
    """Sorted hashes of the ``HASH_K``-byte strings that occur in two or more documents."""
    per_doc = []
    for d in documents:
        h = np.sort(substring_hashes(d.data, HASH_K))
        per_doc.append(h[np.concatenate([[True], h[1:] != h[:-1]])] if h.size else h)  # unique per document
    every = np.sort(np.concatenate(per_doc)) if per_doc else np.zeros(0, dtype=np.uint64)
    return every[1:][every[1:] == every[:-1]]


# -- corpus ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Document:
    name: str  # a path relative to the standard library, or "FILE@offset"
    data: bytes


@dataclass(frozen=True)
class Corpus:
    """Documents in drawn order (duplicates already dropped) and where they came from."""

    documents: tuple[Document, ...]
    source: str  # "stdlib:<path>" or the user's file
    dropped_exact: int = 0  # documents dropped as exact copies of kept ones
    dropped_near: int = 0  # ... as near copies

    @classmethod
    def from_bytes(cls, data: bytes, source: str, *, doc_bytes: int = DOC_BYTES) -> Corpus:
        """``data`` cut into documents of about ``doc_bytes`` at line ends, in order (no draw)."""
        return cls(tuple(Document(f"{source}@{a}", data[a:b]) for a, b in _cuts(data, doc_bytes)), source)

    @property
    def data(self) -> bytes:
        return b"".join(d.data for d in self.documents)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for d in self.documents:
            h.update(len(d.data).to_bytes(8, "little"))
            h.update(d.data)
        return h.hexdigest()

    def __len__(self) -> int:
        return sum(len(d.data) for d in self.documents)


def _cuts(data: bytes, size: int) -> list[tuple[int, int]]:
    """``[(start, end)]`` pieces of about ``size`` bytes, each ending after a newline when one is near."""
    out, a = [], 0
    while a < len(data):
        b = min(len(data), a + size)
        if b < len(data):
            nl = data.find(b"\n", b - 1, b + size // 4)
            b = nl + 1 if nl >= 0 else b
        out.append((a, b))
        a = b
    return out


def _draw(named: list[tuple[str, Any]], read, *, max_bytes: int, seed: int, source: str,
          doc_cap: int) -> Corpus:
    """Documents in a seeded order, exact and near copies dropped, until ``max_bytes`` are kept."""
    order = np.random.default_rng(seed).permutation(len(named))
    kept: list[Document] = []
    shas: set[bytes] = set()
    seen = np.zeros(0, dtype=np.uint64)
    pending: list[np.ndarray] = []
    exact = near = total = 0
    for i in order:
        name, ref = named[int(i)]
        data = read(ref)
        if not data:
            continue
        data = data[:doc_cap]
        sha = hashlib.sha256(data).digest()
        if sha in shas:
            exact += 1
            continue
        fp = _fingerprint(data)
        if pending:
            seen = np.sort(np.concatenate([seen, *pending]))
            pending = []
        if fp.size and _contains(seen, fp).mean() >= NEAR_SHARE:
            near += 1
            continue
        shas.add(sha)
        pending.append(fp)
        kept.append(Document(name, data))
        total += len(data)
        if total >= max_bytes:
            break
    return Corpus(tuple(kept), source, exact, near)


def load_corpus(path: str | None, *, max_bytes: int, seed: int = 0) -> Corpus:
    """About ``max_bytes`` of documents drawn with ``seed`` from ``path`` (a text file) or from the
    standard library's sources, exact and near copies dropped (see the module docstring).

    Raises FileNotFoundError / ValueError with the path when the file is missing or unreadable.
    """
    doc_cap = max(DOC_BYTES, max_bytes // 16)  # one huge file (pydoc's topics) cannot fill the corpus
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"corpus file {str(p)!r} does not exist or is not a file")
        try:
            with open(p, "rb") as f:
                data = f.read(READ_FACTOR * max_bytes)
        except OSError as e:
            raise ValueError(f"cannot read corpus file {str(p)!r}: {e.strerror or e}") from None
        size = min(DOC_BYTES, max(256, len(data) // 64))  # a small file still gives enough documents
        named = [(f"{p.name}@{a}", (a, b)) for a, b in _cuts(data, size)]
        return _draw(named, lambda ab: data[ab[0]:ab[1]], max_bytes=max_bytes, seed=seed, source=str(p),
                     doc_cap=doc_cap)
    files = stdlib_files()
    if not files:
        raise FileNotFoundError("no Python standard-library sources found; pass a text file with --corpus FILE")
    root = Path(sysconfig.get_paths()["stdlib"])

    def read(f: Path) -> bytes:
        try:
            return f.read_bytes()
        except OSError:
            return b""

    named = [(f.relative_to(root).as_posix(), f) for f in files]
    return _draw(named, read, max_bytes=max_bytes, seed=seed, source=f"stdlib:{_portable(root)}", doc_cap=doc_cap)


def _portable(root: Path) -> str:
    """The standard library's folder as records name it: relative to the Python installation
    (``lib/python3.11``), so that a kept record names no path of the machine that wrote it; the
    corpus itself is identified by its sha256."""
    try:
        return root.relative_to(Path(sys.base_prefix).resolve()).as_posix()
    except ValueError:
        try:
            return root.relative_to(Path(sys.base_prefix)).as_posix()
        except ValueError:
            return root.name


def lcm_lengths(lengths: list[int]) -> int:
    """The held-out length must be a multiple of every window length (and so of every stride)."""
    return math.lcm(*lengths)


@dataclass
class LMData:
    """Training tokens and the held-out stream (``N + 1`` tokens, targets ``1..N``)."""

    train: torch.Tensor  # (Ntrain,) uint8 -> long on use
    heldout: torch.Tensor  # (N + 1,)
    block: int  # tokens per block of the paired statistics (the longest evaluation length)
    info: dict[str, Any] | None = None  # documents, bytes and contamination of the split (``split``)

    @property
    def n_heldout(self) -> int:
        return self.heldout.numel() - 1


def _piece(data: bytes, size: int) -> bytes:
    """``size`` bytes of ``data`` from a line start at an offset fixed by its content (so the
    held-out stream is not made of file openings: licences, docstrings and imports)."""
    room = len(data) - size
    if room <= 0:
        return data
    at = int.from_bytes(hashlib.sha256(data).digest()[:8], "little") % (room + 1)
    nl = data.rfind(b"\n", 0, at)
    at = nl + 1 if nl >= 0 else 0
    return data[at:at + size]


def split(corpus: Corpus, *, heldout_tokens: int, lengths: list[int]) -> LMData:
    """Held-out stream from the first documents drawn, training text from the rest.

    ``N`` is the largest multiple of every length (and of every half-length, for the sliding
    stride) that is at most ``heldout_tokens``; the stream is ``N + 1`` bytes, at most
    ``(N + 1) / HELDOUT_DOCS`` of them (rounded up) from one document; what a held-out document
    has past that is used by neither side. ``info`` gives both sides' documents and bytes and
    the contamination ``overlap_32`` / ``overlap_128``.
    """
    unit = lcm_lengths(lengths)
    n = (heldout_tokens // unit) * unit
    if n == 0:
        raise ValueError(f"heldout_tokens={heldout_tokens} is smaller than one window set ({unit} tokens "
                         f"for lengths {lengths})")
    if len(corpus) < 4 * (n + 1):
        raise ValueError(f"corpus {corpus.source!r} has {len(corpus)} bytes; need at least {4 * (n + 1)} "
                         f"(the held-out stream is {n + 1} bytes and training needs three times more)")
    cap = -(-(n + 1) // HELDOUT_DOCS)
    shared = _shared_hashes(corpus.documents)
    held: list[bytes] = []
    held_idx: list[int] = []
    need = n + 1
    for i, doc in enumerate(corpus.documents):
        if need <= 0:
            break
        piece = _piece(doc.data, min(cap, need))
        if len(piece) >= HASH_K and _contains(shared, substring_hashes(piece, HASH_K)).mean() > MAX_SHARED:
            continue  # has a near copy elsewhere in the corpus: training only
        held.append(piece)
        held_idx.append(i)
        need -= len(piece)
    if need > 0:
        raise ValueError(f"corpus {corpus.source!r} has too few distinct documents for a {n + 1}-byte held-out "
                         "stream")
    used = len(held_idx)
    skip = set(held_idx)
    train_docs = [d for i, d in enumerate(corpus.documents) if i not in skip]
    heldout = b"".join(held)
    train = b"".join(d.data for d in train_docs)
    if len(train) < 3 * (n + 1):
        raise ValueError(f"corpus {corpus.source!r} leaves {len(train)} training bytes after the held-out "
                         f"stream; need at least {3 * (n + 1)}")
    info = {"source": corpus.source, "documents_train": len(train_docs), "documents_heldout": used,
            "bytes_train": len(train), "bytes_heldout": len(heldout),
            "dropped_exact": corpus.dropped_exact, "dropped_near": corpus.dropped_near,
            "overlap_32": round(overlap(heldout, train, 32), 5), "overlap_128": round(overlap(heldout, train, 128), 5),
            "heldout_names": [corpus.documents[i].name for i in held_idx]}
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()  # noqa: E731
    return LMData(train=as_tensor(train), heldout=as_tensor(heldout), block=max(lengths), info=info)


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
