"""The results file: JSON Lines, one finished run per line, appended as each run finishes.

Crash safety:
- each line is written with one ``os.write`` on an ``O_APPEND`` descriptor, then ``fsync``;
- a process killed mid-write can leave only a *trailing* partial line (no newline): on open it
  is cut off (the file is truncated back to its last newline) before anything is appended, so
  it never merges with the next line; a line that does not parse is skipped, never fatal;
- a run whose key is already in the file is not run again, and a key is never written twice;
- an exclusive ``flock`` on the file keeps two writers apart (the kernel drops it when a process
  dies, so a killed run never leaves a stale lock).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any


class ResultStore:
    """Append-only JSONL of run records keyed by ``record["key"]``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.records: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        self.repaired_bytes = 0

    # -- opening ----------------------------------------------------------------------------
    def open(self) -> ResultStore:
        """Locks the file (creating it and its folder), repairs a trailing partial line, loads it."""
        if self.path.exists() and not self.path.is_file():
            raise ValueError(f"results path {str(self.path)!r} exists and is not a file")
        if self.path.parent.exists() and not self.path.parent.is_dir():
            raise ValueError(f"results path {str(self.path)!r}: {str(self.path.parent)!r} is not a folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(f"{str(self.path)!r} is being written by another posenc process; "
                             "wait for it or use another output") from None
        self._fd = fd
        self._repair()
        self.records = load(self.path, on_skip=self._count_skip)
        return self

    def _count_skip(self, lineno: int, line: bytes) -> None:
        self.skipped_lines += 1
        print(f"posenc: skipping unreadable line {lineno} of {self.path}", file=sys.stderr)

    def _repair(self) -> None:
        if self._fd is None:
            raise RuntimeError("ResultStore._repair before open()")
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            data = f.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1  # 0 when the only line is partial
        os.ftruncate(self._fd, keep)
        os.fsync(self._fd)
        self.repaired_bytes = size - keep
        print(f"posenc: removed a half-written last line ({self.repaired_bytes} bytes) from {self.path}",
              file=sys.stderr)

    def close(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ResultStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: dict[str, Any]) -> None:
        """Writes one record as one line (single write, flush, fsync); a known key is not rewritten."""
        if self._fd is None:
            raise RuntimeError("ResultStore.append before open()")
        key = record["key"]
        if key in self.records:
            return
        line = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # a short write (disk full): cut it off so the file stays whole
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
        os.fsync(self._fd)
        self.records[key] = record


def load(path: str | os.PathLike, *, on_skip=None) -> dict[str, dict[str, Any]]:
    """Records by key, first occurrence kept; a trailing line without newline is ignored."""
    path = Path(path)
    if not path.exists():
        return {}
    records: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    complete = lines[:-1]  # the piece after the last newline is empty or a partial line
    for i, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = record["key"]
        except (ValueError, KeyError, TypeError):
            if on_skip is not None:
                on_skip(i, line)
            continue
        records.setdefault(key, record)
    return records
