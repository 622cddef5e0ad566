"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Queries and keys are rotated pairwise by position-proportional angles, so attention scores depend
only on relative position:

    ⟨R(m)q, R(n)k⟩ = Re[Σ_i q_i k̄_i e^{i(m−n)θ_i}],   θ_i = base^(−2i/rotary_dim)

Long-context scalings (``scaling={"type": ...}``) only change the float64 frequencies θ and an
attention factor; see ``posenc.scaling``.

**Exact angles.** ``m·θ_i`` is formed in float64 from the integer position, reduced to [−π, π)
and only then passed to cos/sin and cast, so cos and sin are within 1e-6 of the truth at every
position below 2^24 in float32 (transformers' float32 angles are off by 2e-3 at 32k), and a
bfloat16 or float16 input never changes which position is used.

**Tables.** Outside ``torch.compile``, cos/sin tables are cached per (frequencies, device,
dtype, scale) and grown by powers of two up to ``TABLE_MAX_ELEMENTS`` entries; past that, and
under ``torch.compile``, they are computed directly. Both paths give the same values.
``.to()``/``.cuda()`` drop the tables; the float64 frequencies stay float64.

**Length-dependent scalings and the KV cache** (``dynamic``, ``longrope``). Their frequencies
depend on a sequence length ``L``. The module keeps ``seen_length``, the largest ``max(position)
+ 1`` it has been called with; each call (``forward`` or ``cos_sin``) first raises it to cover its
own positions, then uses the frequencies at ``seen_length``. So:

- ``seen_length`` only grows (until ``reset_length()``): a short call after a long one keeps the
  long frequencies, unlike transformers, which switches back below the original length;
- the frequencies of a call never depend on what comes later, so keys that were rotated and
  cached are never rotated again with another base by posenc; ``posenc.attention`` first
  ``observe``s the query positions, then rotates keys and queries, so both use the same length
  (the largest of the two);
- up to ``original_max_positions``, ``dynamic`` and ``longrope`` are static and incremental
  decoding (one token at a time, rotated keys in a cache) equals the full pass. Past it, a full
  pass of length ``L`` rotates every position with the frequencies at ``L``, while decoding
  rotated each cached key with the frequencies current at its step: the two differ, by design of
  these methods. Keep the keys unrotated and call ``posenc.attention`` (which rotates them at
  every step) to get the full-pass result at each step; call ``reset_length()`` before an
  unrelated sequence.

Every other scaling is static, and decoding equals the full pass at every length.

**xPos** scales queries and keys differently, so its calls need ``role="query"`` or
``role="key"``; every rotary module accepts ``role``, and ``posenc.attention`` passes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posenc import reference as ref
from posenc._validate import check_choice, check_even, check_float, check_int
from posenc.registry import register
from posenc.rotary import LAYOUTS, angles_cos_sin, apply_rotary
from posenc.encodings._base import PositionalEncoding, check_batch, check_positions, check_tensor

ROLES = (None, "query", "key")
TABLE_MIN_POSITIONS = 256
TABLE_MAX_ELEMENTS = 1 << 22  # per table (cos or sin): 16 MB in float32


@register("rope", kind="rotary")
class RoPE(PositionalEncoding):
    """Rotary embedding of RoFormer / Llama, with optional long-context scaling."""

    def __init__(self, *, head_dim: int, base: float = 10000.0, rotary_dim: int | None = None,
                 layout: str = "half", scaling: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
        self.base = check_float("base", base, min=0.0, min_open=True)
        rd = self.head_dim if rotary_dim is None else check_int("rotary_dim", rotary_dim, min=2)
        if rd > self.head_dim:
            raise ValueError(f"rotary_dim must be <= head_dim={self.head_dim}, got {rd}")
        self.rotary_dim = check_even("rotary_dim", rd)
        self.layout = check_choice("layout", layout, LAYOUTS)
        from posenc import scaling as _scaling

        base_freq = ref.rope_inv_freq(self.rotary_dim, self.base)
        self.scaling = _scaling.resolve(scaling, base_freq, head_dim=self.head_dim, base=self.base)
        self.register_float64("inv_freq", torch.from_numpy(self.scaling.inv_freq))
        rule = self.scaling.by_length
        if rule is not None:
            self.register_float64("_long_freq", torch.from_numpy(np.asarray(rule.long)))
            exponent = np.zeros(len(rule.long)) if rule.exponent is None else rule.exponent
            self.register_float64("_length_exponent", torch.from_numpy(np.asarray(exponent, dtype=np.float64)))
            self.register_buffer("_seen_length", torch.zeros((), dtype=torch.int64), persistent=False)
        if self.scaling.decay is not None:
            self.register_float64("_decay", torch.from_numpy(self.scaling.decay))
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- frequencies ----------------------------------------------------------------------------
    @property
    def attention_factor(self) -> float:
        """Multiplies the rotated dimensions (YaRN's mscale, LongRoPE's factor); 1 without scaling."""
        return self.scaling.attention_factor

    @property
    def seen_length(self) -> int:
        """The largest ``max(position) + 1`` seen (length-dependent scalings; else 0)."""
        return int(self._seen_length) if self.scaling.by_length is not None else 0

    def reset_length(self) -> None:
        """Forgets ``seen_length``: the next call starts from its own length (a new sequence)."""
        if self.scaling.by_length is not None:
            self._seen_length.zero_()

    def frequencies(self, seq_len: int | None = None) -> torch.Tensor:
        """The float64 frequencies ``[rotary_dim/2]`` used at ``seq_len`` (default: ``seen_length``)."""
        if self.scaling.by_length is None:
            return self.inv_freq
        length = self._seen_length if seq_len is None else torch.tensor(
            check_int("seq_len", seq_len, min=0), device=self.inv_freq.device)
        return self._frequencies_at(length)

    def _frequencies_at(self, length: torch.Tensor) -> torch.Tensor:
        """``ByLength`` evaluated in torch (traceable): ``length`` is an int64 scalar tensor."""
        rule = self.scaling.by_length
        long = self._long_freq
        if rule.exponent is not None:
            s = (length.to(torch.float64) * rule.slope + rule.intercept).clamp(min=1.0)
            long = long * s ** self._length_exponent
        return torch.where(length > rule.switch, long, self.inv_freq)

    def _observe(self, positions: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The frequencies for a call at ``positions``, and a key naming them for the table cache
        (None when they are not worth caching). Raises ``seen_length`` to cover ``positions``."""
        rule = self.scaling.by_length
        if rule is None:
            return self.inv_freq, "static"
        if positions.numel():
            if (not torch.compiler.is_compiling() and self._seen_length.is_inference()
                    and not torch.is_inference_mode_enabled()):  # built under inference_mode, used outside it
                self._seen_length = self._seen_length.clone()  # an ordinary tensor from now on
            needed = positions.max().to(device=self._seen_length.device, dtype=torch.int64) + 1
            self._seen_length.copy_(torch.maximum(self._seen_length, needed))
        freq = self._frequencies_at(self._seen_length)
        if torch.compiler.is_compiling():
            return freq, None
        length = int(self._seen_length)
        if length <= rule.switch:
            return freq, "short"
        return freq, ("long" if rule.exponent is None else None)

    def observe(self, positions: torch.Tensor) -> None:
        """Raises ``seen_length`` to cover ``positions`` and rotates nothing (a no-op for static
        scalings). ``posenc.attention`` observes the query positions before rotating the keys, so
        that q and k of one call use the frequencies of one length."""
        if self.scaling.by_length is not None:
            self._observe(check_positions("positions", positions).to(self._seen_length.device))

    # -- cos and sin ----------------------------------------------------------------------------
    def _apply(self, fn, recurse=True):  # .to()/.cuda()/.half(): the tables are rebuilt on use
        self._tables = {}
        return super()._apply(fn, recurse)

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, scale: float,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = positions.to(device)
        freq, key = self._observe(positions)
        freq = freq.to(device)
        if key is None or torch.compiler.is_compiling() or positions.numel() == 0:
            return angles_cos_sin(positions, freq, dtype, scale)
        top = int(positions.max())
        width = freq.shape[0]
        if (top + 1) * width > TABLE_MAX_ELEMENTS:
            return angles_cos_sin(positions, freq, dtype, scale)
        key = (key, device, dtype, scale)
        table = self._tables.get(key)
        if table is None or table[0].shape[0] <= top:
            n = max(TABLE_MIN_POSITIONS, 1 << top.bit_length())  # a power of two > top
            n = max(top + 1, min(n, TABLE_MAX_ELEMENTS // width))
            table = angles_cos_sin(torch.arange(n, device=device), freq, dtype, scale)  # (n, R) each
            self._tables[key] = table
        index = positions.long()
        return table[0][index], table[1][index]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled ``cos, sin`` of the angles at ``positions``: ``[..., L, rotary_dim // 2]``.

        Neither the attention factor nor xPos's scale is applied. For a length-dependent
        scaling this call counts as a use (it raises ``seen_length``, see the module docstring).
        """
        positions = check_positions("positions", positions)
        return self._cos_sin(positions, dtype, 1.0, self.device)

    def _xpos_scale(self, positions: torch.Tensor, role: str) -> torch.Tensor:
        """``exp(±m·decay)`` in float64: ``[..., L, rotary_dim/2]``; + for queries, − for keys."""
        sign = 1.0 if role == "query" else -1.0
        return torch.exp(sign * positions.to(torch.float64).unsqueeze(-1) * self._decay.to(positions.device))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``positions [L]`` or ``[B, L]``; same shape and dtype.

        The rotated dims are multiplied by ``attention_factor``, so rotating both q and k
        reproduces transformers, whose cos and sin carry the factor. ``role`` ("query" or
        "key") matters only for xPos, where it is required.
        """
        x = check_tensor("x", x, ndim=4, last_dim=self.head_dim)
        positions = check_positions("positions", positions)
        check_batch("positions", positions, x.shape[0], x.shape[2])
        check_choice("role", role, ROLES)
        positions = positions.to(x.device)
        if self.scaling.decay is None:
            cos, sin = self._cos_sin(positions, x.dtype, self.attention_factor, x.device)
        else:
            if role is None:
                raise ValueError("xpos scales queries and keys differently: pass role='query' or role='key'")
            cos, sin = self._cos_sin(positions, torch.float64, self.attention_factor, x.device)
            scale = self._xpos_scale(positions, role)
            cos, sin = (cos * scale).to(x.dtype), (sin * scale).to(x.dtype)
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, L, R)
        return apply_rotary(x, cos, sin, layout=self.layout)

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result of a full pass: length-dependent scalings use ``L = max(positions) + 1``."""
        pos = np.asarray(positions)
        freq = self.scaling.at(int(pos.max()) + 1 if pos.size else 0)
        out = ref.rope(x, positions, freq, layout=self.layout, attention_factor=self.attention_factor)
        if self.scaling.decay is not None:
            check_choice("role", role, ("query", "key"))
            sign = 1.0 if role == "query" else -1.0
            scale = np.exp(sign * pos.astype(np.float64)[..., None] * self.scaling.decay)  # (..., L, R)
            if scale.ndim == 3 and out.ndim == 4:
                scale = scale[:, None]
            a, b = ref.rotate_pairs_index(self.rotary_dim, self.layout)
            out[..., a] *= scale
            out[..., b] *= scale
        return out
