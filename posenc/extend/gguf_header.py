"""A GGUF file's header walked and checked against the file's size, before any reader trusts it.

gguf-py's ``GGUFReader`` believes every count and length in the header: a tensor count or key/value
count overwritten with a large number runs its loops past the end of the memory map (an
``IndexError`` 34 frames deep), a string length past the end is sliced short, and a truncated file
fails in ``reshape`` ("cannot reshape array of size 8214336 into shape (49152,612)"), none of them
naming the file. ``check`` walks the same layout (the GGUF specification, versions 2 and 3, either
byte order) with ``struct`` over a read-only ``mmap`` and raises ``Damaged`` (a ValueError: one line,
naming the file and what is wrong) where

- a count cannot fit: ``tensors × 24`` bytes (the smallest tensor record: empty name, one dimension)
  or ``keys × 13`` bytes (empty key, a one-byte value) exceed the file, checked before the loop;
- a string, or an array of ``count`` elements, runs past the end of the file;
- a value type, a tensor's GGML type or its number of dimensions (at most 4) is not one GGUF knows;
- a tensor's bytes (``elements / block × block bytes``, gguf-py's ``GGML_QUANT_SIZES``) run past the end.

Nothing is allocated but a few small Python objects per header entry (the entries it reads are each
at least a few bytes of the file), so a damaged file costs no more memory than its size. It returns
``Header``: the counts, the tensor bytes and the float32 size of the tensors (what the conversion
writes). It does not judge the architecture: ``posenc.extend.gguf_llama`` refuses what it does not
handle by name, as before. SmolLM2's 98 MB file (a 49k-token vocabulary and 48k merges: 100k strings)
is walked in 0.1 s (0.8 s the first time, importing gguf; the loaded 2-core machine). Its copies with
the tensor count, the key/value count or the first key's length overwritten, or cut to 10 MB, are
refused in one line each ("tensor 'token_embd.weight' (576 × 49152) spans bytes 1785664 to
31866688, past the end of the file")."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT (general.alignment overrides it)
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}  # value type -> struct
STRING, ARRAY = 8, 9
MIN_TENSOR = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dimension, type, offset
MIN_KEY = 8 + 4 + 1  # key length, value type, a one-byte value


class Damaged(ValueError):
    """A GGUF file whose header does not fit its size: the message names the file and what is wrong."""


@dataclass(frozen=True)
class Header:
    version: int
    tensors: int
    keys: int
    tensor_bytes: int  # the tensors' bytes in the file (quantised)
    float32_bytes: int  # their size dequantised to float32 (the converted copy's weights)


class _Walk:
    def __init__(self, buf, size: int, order: str, name: str):
        self.buf, self.size, self.order, self.name, self.at = buf, size, order, name, 0

    def fail(self, what: str) -> Damaged:
        return Damaged(f"{self.name}: damaged GGUF file ({self.size} bytes): {what}")

    def take(self, fmt: str, what: str):
        n = struct.calcsize(self.order + fmt)
        if self.at + n > self.size:
            raise self.fail(f"{what} at byte {self.at} runs past the end of the file")
        value = struct.unpack_from(self.order + fmt, self.buf, self.at)[0]
        self.at += n
        return value

    def string(self, what: str) -> bytes:
        start, end = self.skip_string(what)
        return bytes(self.buf[start:end])

    def skip_string(self, what: str) -> tuple[int, int]:
        """Steps over a length-prefixed string, checked against the file's end; its byte range."""
        n = self.take("Q", f"the length of {what}")
        if n > self.size - self.at:
            raise self.fail(f"{what} at byte {self.at} claims {n} bytes, past the end of the file")
        self.at += n
        return self.at - n, self.at

    def value(self, value_type: int, key: str, depth: int = 0) -> object:
        """Reads (a scalar, a key's string) or skips (arrays) one value of type ``value_type``."""
        if value_type in SCALAR:
            return self.take(SCALAR[value_type], f"the value of {key!r}")
        if value_type == STRING:
            self.skip_string(f"the string value of {key!r}")
            return None
        if value_type == ARRAY and depth < 4:
            inner = self.take("I", f"the element type of {key!r}")
            count = self.take("Q", f"the element count of {key!r}")
            if inner in SCALAR:
                width = struct.calcsize(self.order + SCALAR[inner])
                if count * width > self.size - self.at:
                    raise self.fail(f"the array {key!r} claims {count} elements of {width} bytes, past the end "
                                    "of the file")
                self.at += count * width
                return None
            if inner not in (STRING, ARRAY):
                raise self.fail(f"the array {key!r} has elements of unknown type {inner}")
            if count * 8 > self.size - self.at:
                raise self.fail(f"the array {key!r} claims {count} elements, past the end of the file")
            for _ in range(count):
                self.value(inner, key, depth + 1)
            return None
        raise self.fail(f"the value of {key!r} has unknown type {value_type}")


def check(path: str | Path) -> Header:
    """Walks the header of the GGUF ``path``; raises ``Damaged`` (one line naming the file) for a header
    that does not fit the file, before anything larger than a header entry is allocated."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    size = path.stat().st_size
    name = str(path)
    if size < 24:
        raise Damaged(f"{name}: damaged GGUF file ({size} bytes): shorter than a GGUF header (24 bytes)")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != MAGIC:
            raise Damaged(f"{name}: not a GGUF file (its first bytes are {bytes(buf[:4])!r}, not {MAGIC!r})")
        order = "<"
        version = struct.unpack_from("<I", buf, 4)[0]
        if version & 0xFFFF == 0:  # written in the other byte order (as gguf-py detects it)
            order, version = ">", struct.unpack_from(">I", buf, 4)[0]
        w = _Walk(buf, size, order, name)
        if version not in VERSIONS:
            raise w.fail(f"version {version}; GGUF versions {VERSIONS} are read")
        w.at = 8
        tensors, keys = w.take("Q", "the tensor count"), w.take("Q", "the key/value count")
        if tensors * MIN_TENSOR > size:
            raise w.fail(f"the header counts {tensors} tensors; a file of {size} bytes holds at most "
                         f"{size // MIN_TENSOR}")
        if keys * MIN_KEY > size:
            raise w.fail(f"the header counts {keys} key/value pairs; a file of {size} bytes holds at most "
                         f"{size // MIN_KEY}")
        alignment = ALIGNMENT
        for i in range(keys):
            key = w.string(f"key {i}").decode("utf-8", errors="replace")
            value_type = w.take("I", f"the value type of {key!r}")
            value = w.value(value_type, key)
            if key == "general.alignment":
                if not isinstance(value, int) or value <= 0 or value & (value - 1):
                    raise w.fail(f"general.alignment {value!r} is not a power of two")
                alignment = value
        infos = []
        for i in range(tensors):
            tname = w.string(f"the name of tensor {i}").decode("utf-8", errors="replace")
            n_dims = w.take("I", f"the dimension count of {tname!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise w.fail(f"tensor {tname!r} has {n_dims} dimensions (GGUF allows 1 to {MAX_DIMS})")
            dims = [w.take("Q", f"a dimension of {tname!r}") for _ in range(n_dims)]
            ggml_type = w.take("I", f"the type of {tname!r}")
            offset = w.take("Q", f"the data offset of {tname!r}")
            infos.append((tname, dims, ggml_type, offset))
        start = -(-w.at // alignment) * alignment
        stored = elements = 0
        for tname, dims, ggml_type, offset in infos:
            try:
                block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            except (ValueError, KeyError):
                raise w.fail(f"tensor {tname!r} has GGML type {ggml_type}, which gguf does not know") from None
            count = 1
            for d in dims:
                count *= d
            nbytes = count // block * block_bytes
            if start + offset + nbytes > size:
                raise w.fail(f"tensor {tname!r} ({' × '.join(map(str, dims))}) spans bytes {start + offset} to "
                             f"{start + offset + nbytes}, past the end of the file")
            stored += nbytes
            elements += count
    return Header(version, tensors, keys, stored, 4 * elements)
