"""Attention dropout whose mask is a function of ``(seed, position)``: replayed, never stored.

Dropout on the attention probabilities (Srivastava et al. 2014, JMLR 15; on the weights after the
softmax, as in Vaswani et al. 2017, arXiv:1706.03762, and transformers' ``attention_dropout``):

    o_i = Σ_j p_ij · z_ij · v_j,   z_ij = keep_ij / (1 − p),   P(keep_ij) = 1 − p

so ``E[o_i]`` is the output without dropout. The normaliser of the softmax is the full one (the
dropped weights still count in ``Σ_j e^{s_ij}``), exactly as ``F.dropout(softmax(s)) @ v``.

**The mask.** ``keep_ij`` is not drawn from a random stream but computed from the call's seed and
the pair's coordinates ``(b, h, i, j)`` (batch, query head, query index ``0 … Lq − 1``, key index
``0 … Lk − 1``), by a counter-based hash (Salmon et al. 2011, "Parallel random numbers: as easy as
1, 2, 3"; flash-attention derives each tile's mask from ``(seed, offset)`` with Philox the same
way):

    r_bh = mix(mix((b·H + h) ⊕ s₀) ⊕ i),   c_j = mix(j ⊕ s₁),   u_bhij = mix(r_bhi ⊕ c_j)
    keep_ij = [u_bhij ≥ ⌊p · 2³²⌋]

with ``mix`` a 32-bit integer finaliser (``x ⊕= x≫16; x ·= 0x21f0aaad; x ⊕= x≫15; x ·= 0x735a2d97;
x ⊕= x≫15``, mod 2³²: C. Wellons' hash prospector, "lowbias32"'s improved constants), a bijection of
32-bit words, and ``(s₀, s₁)`` the seed, two 32-bit words drawn once per call from the caller's
``generator`` (or torch's default generator of the query's device). Consequences:

- any tile ``[qs, qe) × [ks, ke)`` computes its own part of the mask, and a backward recomputes it
  (``posenc.blockwise``'s backward replays it from the seed; no ``[Lq, Lk]`` mask is kept);
- every backend, whatever its block sizes, drops the same pairs for the same seed, so the backends
  agree with each other and with the float64 reference given the dense mask (``keep_mask``);
- the same seed gives the same mask on any thread count (integer arithmetic only).

Both multipliers are below 2³¹, so with ``x < 2³²`` every product is below 2⁶³: int64 never
overflows (torch's int64 arithmetic is C's, where a signed overflow is undefined).

**Cost.** About 10 integer operations per score and a ``[B, H, c, n]`` int64 temporary per tile,
on the paths that form their weights explicitly; ``dropout_p = 0`` (the default) never builds this
object and runs exactly what it ran before.

Notation used for tensor shapes: B batch, H query heads, c rows of a tile, n its keys.
"""

from __future__ import annotations

import math

import torch

_M32 = 0xFFFFFFFF
_MUL1, _MUL2 = 0x21F0AAAD, 0x735A2D97  # odd, < 2^31: x·m < 2^63 for x < 2^32


def _mix(x: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """The 32-bit finaliser (module docstring) on int64 values in ``[0, 2³²)``; a new tensor, or ``x``
    itself with ``inplace`` (a temporary the caller owns: a tile's ``[B, H, c, n]``, written once)."""
    x = x.clone() if not inplace else x
    x ^= x >> 16
    x.mul_(_MUL1).bitwise_and_(_M32)
    x ^= x >> 15
    x.mul_(_MUL2).bitwise_and_(_M32)
    x ^= x >> 15
    return x


def check_dropout(dropout_p, generator, device: torch.device) -> float:
    """``dropout_p`` a real number in ``[0, 1)`` (1 would drop every weight) and ``generator`` a
    ``torch.Generator`` on ``device`` (the query's) or None; TypeError/ValueError naming the parameter
    and the value, before anything is allocated. Returns ``dropout_p`` as a float."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float in [0, 1) (the probability of dropping an attention weight), "
                        f"got {type(dropout_p).__name__} {dropout_p!r}")
    p = float(dropout_p)
    if not (0.0 <= p < 1.0):  # NaN fails too
        raise ValueError(f"dropout_p must be in [0, 1) (the probability of dropping an attention weight; 1 would "
                         f"drop them all), got {dropout_p!r}")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator (on the query's device) or None, got "
                            f"{type(generator).__name__}")
        if not _same_device(generator.device, device):
            raise ValueError(f"generator must be on the query's device {device}, got a generator on "
                             f"{generator.device}")
    return p


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type == "cpu":
        return True
    index = lambda d: torch.device(d).index if torch.device(d).index is not None else 0  # noqa: E731
    return index(a) == index(b)


class AttentionDropout:
    """One call's dropout: the rate ``p`` and the seed ``[2]`` (int64 words in ``[0, 2³²)``, on the
    query's device, so drawing it never synchronises a GPU). ``draw`` makes one; the backends ask
    ``apply(weights, qs, ks)`` for a tile whose rows start at query ``qs`` and keys at ``ks``."""

    def __init__(self, p: float, seed: torch.Tensor) -> None:
        self.p = p
        self.seed = seed  # (2,) int64
        self.threshold = min(int(math.floor(p * 2.0 ** 32)), _M32)
        self.scale = 1.0 / (1.0 - p)

    @classmethod
    def draw(cls, p: float, generator: torch.Generator | None, device) -> AttentionDropout | None:
        """The dropout of one call, its seed drawn once from ``generator`` (or the default generator
        of ``device``); None when ``p`` is 0 (nothing drawn: the generator's state is untouched)."""
        if p == 0.0:
            return None
        seed = torch.randint(0, 2 ** 32, (2,), generator=generator, device=device, dtype=torch.int64)
        return cls(p, seed)

    def keep(self, qs: int, ks: int, shape) -> torch.Tensor:
        """The bool mask ``[B, H, c, n]`` of queries ``qs … qs + c − 1`` and keys ``ks … ks + n − 1``."""
        b, h, c, n = shape
        device = self.seed.device
        s0, s1 = self.seed[0], self.seed[1]
        bh = torch.arange(b * h, device=device, dtype=torch.int64).view(b, h, 1, 1)
        rows = torch.arange(qs, qs + c, device=device, dtype=torch.int64).view(1, 1, c, 1)
        cols = torch.arange(ks, ks + n, device=device, dtype=torch.int64).view(1, 1, 1, n)
        r = _mix(_mix(bh ^ s0) ^ rows)  # (B, H, c, 1)
        u = _mix(r ^ _mix(cols ^ s1), inplace=True)  # (B, H, c, n)
        return u >= self.threshold

    def factor(self, qs: int, ks: int, shape, dtype) -> torch.Tensor:
        """``z = keep / (1 − p)`` of a tile, in ``dtype``."""
        return self.keep(qs, ks, shape).to(dtype).mul_(self.scale)

    def apply(self, weights: torch.Tensor, qs: int, ks: int) -> torch.Tensor:
        """``weights [B, H, c, n] · z`` of the tile whose rows start at query ``qs``, keys at ``ks`` (a new tensor)."""
        return weights.masked_fill(~self.keep(qs, ks, weights.shape), 0.0).mul_(self.scale)

    def at(self, qs: int, ks: int) -> TileDropout:
        """This dropout bound to a tile's origin: a callable on the tile's weights (a content scheme's rows)."""
        return TileDropout(self, qs, ks)

    def keep_mask(self, b: int, h: int, lq: int, lk: int) -> torch.Tensor:
        """The whole call's mask ``[B, H, Lq, Lk]`` (tests and references; the backends never build it)."""
        return self.keep(0, 0, (b, h, lq, lk))


class TileDropout:
    """``AttentionDropout.apply`` at one tile's origin: ``drop(weights)``; the same mask on every call."""

    def __init__(self, dropout: AttentionDropout, qs: int, ks: int) -> None:
        self.dropout, self.qs, self.ks = dropout, qs, ks

    def __call__(self, weights: torch.Tensor) -> torch.Tensor:
        return self.dropout.apply(weights, self.qs, self.ks)
