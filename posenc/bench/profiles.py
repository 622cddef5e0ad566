"""Sizes and repeats of a ``posenc bench`` run: ``Profile`` and the named ``PROFILES`` (full, quick),
and what the command can time (``WHATS``), at which dtypes and layouts, on which devices
(``DEVICES``: the attention cases measure peak resident memory, so they run on the CPU only)."""

from __future__ import annotations

from dataclasses import dataclass

WHATS = ("rotary", "attention")
DEVICES = {"rotary": ("cpu", "cuda"), "attention": ("cpu",)}  # the device types each part runs on
DTYPES = ("float32", "bfloat16")
LAYOUTS = ("half", "interleaved")


@dataclass(frozen=True)
class Profile:
    """Sizes and repeats of one benchmark run."""

    shapes: tuple[tuple[int, int, int, int], ...]  # (B, H, L, D) of the rotary cases
    # ... and on a GPU also these: 4x32x4096x128 is 64M elements, so x and out (256 MB in bf16) are
    # far past any GPU's L2 cache (50 MB on an H100/H200, 126 MB on a B200): copy_ is the HBM roofline
    # there, where 1x32x4096x128 in bf16 (32 MB each) could partly stay in L2.
    cuda_shapes: tuple[tuple[int, int, int, int], ...] = ((4, 32, 4096, 128),)
    # (B, H, L, D, offset) of the decoding-step cases: L tokens at positions offset..offset+L-1
    decode: tuple[tuple[int, int, int, int, int], ...] = ((8, 32, 1, 128, 4095),)
    dtypes: tuple[str, ...] = DTYPES
    layouts: tuple[str, ...] = LAYOUTS
    partial: bool = True  # also rotary_dim = D/2
    repeats: int = 7  # interleaved rounds; the median is reported
    min_sample_s: float = 0.02  # calls per sample grow until one sample lasts this long
    lengths: tuple[int, ...] = ()  # attention lengths
    schemes: tuple[str, ...] = ("alibi", "t5")
    heads: int = 8
    head_dim: int = 64
    # A materialized [H, L, L] bias (built in float64, then cast and masked) peaked at 6.9 GB
    # at L=8192 (13 bytes per score); 16384 would need ~28 GB. 8192 is safe on 24 GB.
    materialize_max: int = 8192
    attention_repeats: int = 1  # flex calls timed after the first, which compiles
    # forward+backward cases (the goals of bias attention that trains at length) at the lengths up to train_max
    train_schemes: tuple[str, ...] = ("alibi", "t5", "kerple", "fire")
    train_max: int = 32768
    # positions that depend on content: forward+backward at these lengths (the goal's
    # goal: within 2 GB peak at 8192, 8 heads, head_dim 64)
    content_schemes: tuple[str, ...] = ("fox", "cope", "dape", "stick_breaking")
    content_lengths: tuple[int, ...] = ()
    # Address-space cap of each attention case: the largest planned case (a materialized map at
    # 8192) peaked at 6.9 GB RSS; 12 GB leaves room for torch's virtual reservations and for the
    # other jobs of a shared 24 GB machine.
    memory_cap_gb: float = 12.0


PROFILES = {
    "full": Profile(shapes=((1, 32, 4096, 128), (4, 8, 1024, 64)), repeats=9,
                    lengths=(1024, 2048, 4096, 8192, 16384, 32768), schemes=("alibi", "t5", "kerple", "fire"),
                    train_max=8192, content_lengths=(8192,)),
    "quick": Profile(shapes=((1, 32, 4096, 128),), repeats=3,
                     lengths=(1024, 8192), materialize_max=1024, train_schemes=("alibi", "fire"), train_max=1024,
                     content_lengths=(1024,)),
}


@dataclass(frozen=True)
class RotaryCase:
    """One rotation the benchmark times (``posenc.bench.rotary``), as the peers (``posenc.bench.peers``) see it."""

    batch: int
    heads: int
    length: int
    head_dim: int
    dtype: str
    layout: str
    rotary_dim: int
    offset: int = 0  # positions are offset..offset+length-1

    @property
    def label(self) -> str:
        part = "" if self.rotary_dim == self.head_dim else f" rd={self.rotary_dim}"
        at = f" @{self.offset}" if self.offset else ""
        dt = {"float32": "f32", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return f"{self.batch}x{self.heads}x{self.length}x{self.head_dim}{at} {dt} {self.layout[:5]}{part}"
