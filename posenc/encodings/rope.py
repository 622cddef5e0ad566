"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Queries and keys are rotated pairwise by position-proportional angles, so attention scores depend
only on relative position:

    ⟨R(m)q, R(n)k⟩ = Re[Σ_i q_i k̄_i e^{i(m−n)θ_i}],   θ_i = base^(−2i/rotary_dim)

Long-context scalings (``scaling={"type": ...}``) only change the float64 frequencies θ and an
attention factor; see ``posenc.scaling``.

**Exact angles.** Each frequency is a double-double ``inv_freq + inv_freq_lo``, the true
``θ_i = base^(−2i/d)`` (and its scaled form, see ``posenc.scaling``) to 2^-106, computed once at
build from ``base`` and ``i`` with 40 digits. Angles come from ``posenc.rotary.angles``: ``m·θ_i``
reduced mod 2π exactly (the position split in 21-bit chunks, ``2^(21j)·θ_i mod 2π`` reduced once
per frequency) in float64, and only then passed to cos/sin and cast, so cos and sin are within
1e-8 of a 50-digit reference computed from ``base`` and ``i`` at every integer or real position
below 2^63 (tests/test_angles.py; float64 θ alone is off by 0.3 at 2^53, transformers' float32
angles by 2e-3 at 32k). Real positions at or above 2^63 are refused (ValueError). A bfloat16 or
float16 input never changes which position is used.

**Tables.** Outside ``torch.compile``, cos/sin tables are cached per (frequencies, device,
dtype, scale) and grown by powers of two up to ``TABLE_MAX_ELEMENTS`` entries; past that, and
under ``torch.compile``, they are computed directly. Both paths give the same values.
``.to()``/``.cuda()`` drop the tables; the float64 frequencies stay float64. Nothing is cached
per positions tensor: every call reads its positions' values (a tensor can change without torch
seeing it: memory shared with NumPy, a write through ``.data``). A decoding step (one integer
position) keeps the last step's table rows keyed on the position's value, so q and then k look
the table up once.

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

**Two cache semantics past ``original_max_positions``** (``dynamic``), a named choice:

- *keys rotated once* (transformers' rotary modules, and posenc's drop-in
  ``posenc.interop.HFRotaryEmbedding``, which follows transformers call by call): each key is
  rotated at its own step with the frequencies of that step's length and cached rotated. This is
  what ``posenc.interop.patch`` gives when one rope module goes into the model's rotary module
  (``patch(model, from_hf(config))``): the patched model generates what transformers generates.
- *keys rotated at every step* (``posenc.attention`` with unrotated keys, and so ``patch``'s
  attention function: one module per layer as ``patch(model, hf_layer_specs(config))`` builds
  them, another layout or width, per-layer patterns): every cached key is rotated again with the
  frequencies of the current length. In one attention layer this equals the full pass at every
  step; in a deeper model the cached keys and values of later layers still come from lower
  layers computed at their own step, so neither this nor transformers' cache equals recomputing
  the sequence. Past ``original_max_positions`` its generations differ from transformers'.

Both are tested in tests/test_hf.py.

Every other scaling is static, and decoding equals the full pass at every length.

**Axial** (``axes = A >= 2``, positions ``[..., L, A]``; FLUX's ``axes_dim``, EVA-02): axis ``a``
rotates its own contiguous slice of ``axes_dims[a]`` dims (default: an equal split of
``rotary_dim``) with its own spectrum ``base^(−2i/axes_dims[a])`` in the module's layout, i.e. a 1D
rope of head_dim ``axes_dims[a]`` on that slice, so ``q·k`` depends only on the per-axis position
differences. Angles come from ``posenc.rotary.angles`` with each pair's axis (``axis_of_pair``);
the cached table is shared by the axes. Axial rope takes no scaling. The "half" layout pairs
``(k, k + axes_dims[a]/2)`` inside axis ``a``'s slice; timm's ``apply_rot_embed_cat(half=True)``
pairs ``(i, i + D/2)`` across the whole head (dims in quarters: row first, column first, row
second, column second), so with two equal axes swap the second and third quarters of q and k to
go from one to the other; "interleaved" (timm's default, EVA-02) is the same pairing in both.

**Partial rotary** (``rotary_dim < head_dim``) has two conventions, ``partial_rotary=``:

- ``"neox"`` (the default): the first ``rotary_dim`` dimensions are a RoPE of their own,
  ``θ_i = base^(−2i/rotary_dim)``, pairs ``(i, i + rotary_dim/2)`` (``"half"``), the rest pass
  through. GPT-NeoX, Phi, StableLM and every transformers rope type but ``proportional`` do this,
  and it is what every posenc rope did before the option, so it stays the default.
- ``"proportional"`` (p-RoPE; Barbero et al. 2025, "Round and Round We Go! What makes Rotary
  Positional Encodings useful?", arXiv:2410.06205; Gemma 4's full-attention layers): the
  frequencies are the whole head's, ``θ_i = base^(−2i/head_dim)``, the first ``rotary_dim/2``
  kept and the rest 0 (those pairs never rotate), with pairs over the whole head
  (``(i, i + head_dim/2)`` in ``"half"``). The module's tables are ``head_dim/2`` wide
  (``cos_sin`` returns ``[..., L, head_dim/2]``, cos 1 and sin 0 past ``rotary_dim/2``), as
  transformers' ``proportional`` returns them. It takes ``scaling=None`` or ``"linear"`` (the
  ``factor`` transformers' ``proportional`` reads), one axis. Reference:
  ``posenc.reference.proportional_rope_inv_freq``.

**Direction** (``direction=``): each pair turns by ``+p·θ_i`` (``"counterclockwise"``, RoFormer's
``R(pθ)``: every RoPE but one) or by ``−p·θ_i`` (``"clockwise"``: NanoChat, whose ``rotate_half``
returns ``(x2, −x1)``, so ``(x1, x2) → (x1 cos + x2 sin, x2 cos − x1 sin)``). The scores then
depend on ``−(m − n)`` instead of ``m − n``: a different model, not a relabelling. The tables are
``angles_cos_sin``'s with the sign of sin changed (``posenc.rotary.DIRECTIONS``), so every
rotation path (plain, fused, Triton, backward) turns the same way from one definition.

**Query temperature** (``query_temperature=``; Ministral 3's ``llama_4_scaling_beta``): the
queries, after rotation, are multiplied by ``τ(p) = 1 + attn_scale · log(1 + ⌊(p +
position_offset) / floor_scale⌋)`` (float64 from integer positions, as ``nope_temperature``'s,
``posenc.reference.query_temperature_scale``); keys are untouched, so a call needs
``role="query"`` or ``role="key"`` (``posenc.attention`` passes it). Ministral 3:
``{"attn_scale": β, "floor_scale": original_max_position_embeddings, "position_offset": 0}``;
Llama 4's NoPE layers count ``p + 1`` (``position_offset=1``, the ``nope_temperature`` scheme).

**Real positions** (floating point) are rotated by their exact angles, without the table.

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
from posenc.rotary import DIRECTIONS, LAYOUTS, angles_cos_sin, apply_rotary_unchecked, check_out
from posenc.encodings._base import RotaryEncoding
from posenc.encodings.nope_temperature import temper, temperature_scale
from posenc.limits import Axes, Dim, check_memory

ROLES = RotaryEncoding.ROLES
TABLE_MIN_POSITIONS = 256
TABLE_MAX_ELEMENTS = 1 << 22  # per table (cos or sin): 16 MB in float32
PARTIAL_ROTARY = ("neox", "proportional")  # frequencies over the rotated width, or over the whole head (p-RoPE)


def check_axes_dims(axes_dims: Any, axes: int, rotary_dim: int | None, head_dim: int) -> list[int]:
    """``axes_dims``: one even size per axis, summing to ``rotary_dim`` (default: an equal split)."""
    if axes_dims is None:
        rd = head_dim if rotary_dim is None else rotary_dim
        if rd % (2 * axes):
            raise ValueError(f"rotary_dim must be divisible by 2·axes = {2 * axes} for an equal split over the axes, "
                             f"got rotary_dim={rd} with axes={axes}; or give axes_dims=[...] (even sizes summing "
                             "to rotary_dim)")
        return [rd // axes] * axes
    if isinstance(axes_dims, (str, bytes)) or not isinstance(axes_dims, (list, tuple)):
        raise TypeError(f"axes_dims must be a list of {axes} even sizes, got {axes_dims!r} ({type(axes_dims).__name__})")
    if len(axes_dims) != axes:
        raise ValueError(f"axes_dims must have one size per axis (axes={axes}), got {len(axes_dims)}: {list(axes_dims)}")
    dims = [check_even(f"axes_dims[{i}]", check_int(f"axes_dims[{i}]", d, min=2)) for i, d in enumerate(axes_dims)]
    total = sum(dims)
    if rotary_dim is not None and total != rotary_dim:
        raise ValueError(f"axes_dims must sum to rotary_dim={rotary_dim}, got {dims} (sum {total})")
    if total > head_dim:
        raise ValueError(f"axes_dims must sum to at most head_dim={head_dim}, got {dims} (sum {total})")
    return dims


TEMPERATURE_KEYS = ("attn_scale", "floor_scale", "position_offset")


def check_query_temperature(value: Any) -> dict[str, Any] | None:
    """``query_temperature``: None, or ``{"attn_scale": ≥ 0, "floor_scale": > 0, "position_offset":
    int ≥ 0}`` (every key), the query temperature ``τ(p) = 1 + attn_scale · log(1 + ⌊(p +
    position_offset) / floor_scale⌋)``."""
    if value is None:
        return None
    example = "e.g. {'attn_scale': 0.1, 'floor_scale': 16384, 'position_offset': 0} (Ministral 3's)"
    if not isinstance(value, dict):
        raise TypeError(f"query_temperature must be None or a dict, {example}; got {value!r} ({type(value).__name__})")
    if sorted(value) != sorted(TEMPERATURE_KEYS):
        raise ValueError(f"query_temperature must have exactly the keys {', '.join(TEMPERATURE_KEYS)}, {example}; "
                         f"got keys {sorted(value)}")
    return {"attn_scale": check_float("query_temperature['attn_scale']", value["attn_scale"], min=0.0),
            "floor_scale": check_float("query_temperature['floor_scale']", value["floor_scale"], min=0.0,
                                       min_open=True),
            "position_offset": check_int("query_temperature['position_offset']", value["position_offset"], min=0)}


@register("rope", kind="rotary")
class RoPE(RotaryEncoding):
    """Rotary embedding of RoFormer / Llama, with optional long-context scaling; axial with ``axes``."""

    real_positions = True

    def __init__(self, *, head_dim: Dim, base: float = 10000.0, rotary_dim: Dim | None = None,
                 layout: str = "half", scaling: dict[str, Any] | None = None, axes: Axes = 1,
                 axes_dims: list[Dim] | None = None, partial_rotary: str = "neox",
                 direction: str = "counterclockwise", query_temperature: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.head_dim = check_even("head_dim", check_int("head_dim", head_dim, min=2))
        check_memory("head_dim", self.head_dim, 2 * self.head_dim, bytes_per=8, what="its float64 frequencies")
        self.base = check_float("base", base, min=0.0, min_open=True)
        self.axes = check_int("axes", axes, min=1, max=8)
        if rotary_dim is not None:
            rotary_dim = check_int("rotary_dim", rotary_dim, min=2)
        if self.axes == 1 and axes_dims is not None:
            raise ValueError(f"axes_dims is for axial rope (axes >= 2), got axes_dims={axes_dims!r} with axes=1")
        self.axes_dims = check_axes_dims(axes_dims, self.axes, rotary_dim, self.head_dim) if self.axes > 1 else None
        rd = self.head_dim if rotary_dim is None else rotary_dim
        if self.axes_dims is not None:
            rd = sum(self.axes_dims)
        if rd > self.head_dim:
            raise ValueError(f"rotary_dim must be <= head_dim={self.head_dim}, got {rd}")
        self.rotary_dim = check_even("rotary_dim", rd)
        self.layout = check_choice("layout", layout, LAYOUTS)
        from posenc import scaling as _scaling

        if self.axes > 1 and scaling is not None:
            raise ValueError(f"scaling applies to one-axis rope; axial rope (axes={self.axes}) takes scaling=None, "
                             f"got scaling={scaling!r}")
        self.partial_rotary = check_choice("partial_rotary", partial_rotary, PARTIAL_ROTARY)
        self.direction = check_choice("direction", direction, DIRECTIONS)
        self.query_temperature = check_query_temperature(query_temperature)
        if self.partial_rotary == "proportional":
            base_freq, exact = self._proportional_frequencies(scaling)
        else:
            dims = [self.rotary_dim] if self.axes_dims is None else self.axes_dims  # axis a: a 1D rope of axes_dims[a]
            base_freq = np.concatenate([ref.rope_inv_freq(d, self.base) for d in dims])
            exact = np.concatenate([ref.rope_inv_freq_exact(d, self.base) for d in dims])  # θ to 40 digits
        axis_of_pair = None if self.axes_dims is None else torch.cat(
            [torch.full((d // 2,), a) for a, d in enumerate(self.axes_dims)])
        self.register_buffer("axis_of_pair", axis_of_pair, persistent=False)
        self.scaling = _scaling.resolve(scaling, base_freq, head_dim=self.head_dim, base=self.base, exact=exact)
        self.register_float64("inv_freq", torch.from_numpy(self.scaling.inv_freq))
        self.register_float64("inv_freq_lo", torch.from_numpy(self.scaling.inv_freq_lo))  # θ = inv_freq + lo
        rule = self.scaling.by_length
        if rule is not None:
            self.register_float64("_long_freq", torch.from_numpy(np.asarray(rule.long)))
            long_lo = np.zeros(len(rule.long)) if rule.long_lo is None else rule.long_lo
            self.register_float64("_long_freq_lo", torch.from_numpy(np.asarray(long_lo, dtype=np.float64)))
            exponent = np.zeros(len(rule.long)) if rule.exponent is None else rule.exponent
            self.register_float64("_length_exponent", torch.from_numpy(np.asarray(exponent, dtype=np.float64)))
            self.register_buffer("_seen_length", torch.zeros((), dtype=torch.int64), persistent=False)
        if self.scaling.decay is not None:
            self.register_float64("_decay", torch.from_numpy(self.scaling.decay))
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._row: tuple | None = None  # (position value, dtype, scale, device, cos, sin): see _cos_sin

    def _proportional_frequencies(self, scaling: Any) -> tuple[np.ndarray, np.ndarray]:
        """p-RoPE's ``[head_dim/2]`` frequencies (float64 and exact): zero past ``rotary_dim/2``."""
        if self.axes > 1:
            raise ValueError(f"partial_rotary='proportional' is a one-axis rope; got axes={self.axes}")
        kind = scaling.get("type") if isinstance(scaling, dict) else scaling
        if kind not in (None, "linear"):
            raise ValueError(f"partial_rotary='proportional' takes scaling None or 'linear' (transformers' "
                             f"'proportional' reads only factor), got scaling type {kind!r}")
        return (ref.proportional_rope_inv_freq(self.head_dim, self.rotary_dim, self.base),
                ref.proportional_rope_inv_freq_exact(self.head_dim, self.rotary_dim, self.base))

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

    def _frequencies_lo_at(self, length: torch.Tensor) -> torch.Tensor:
        """The low halves of ``_frequencies_at(length)`` (zeros past the switch for ``dynamic``)."""
        return torch.where(length > self.scaling.by_length.switch, self._long_freq_lo, self.inv_freq_lo)

    def _observe(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """The frequencies for a call at ``positions`` (``hi``, ``lo``), and a key naming them for
        the table cache (None when they are not worth caching). Raises ``seen_length`` to cover
        ``positions``."""
        rule = self.scaling.by_length
        if rule is None:
            return self.inv_freq, self.inv_freq_lo, "static"
        if positions.numel():
            if (not torch.compiler.is_compiling() and self._seen_length.is_inference()
                    and not torch.is_inference_mode_enabled()):  # built under inference_mode, used outside it
                self._seen_length = self._seen_length.clone()  # an ordinary tensor from now on
            top = positions.max().to(device=self._seen_length.device, dtype=torch.int64)
            needed = top.clamp(max=(1 << 63) - 2) + 1  # a position of 2^63 − 1: L = 2^63 − 1, not a wrap
            self._seen_length.copy_(torch.maximum(self._seen_length, needed))
        freq, lo = self._frequencies_at(self._seen_length), self._frequencies_lo_at(self._seen_length)
        if torch.compiler.is_compiling():
            return freq, lo, None
        length = int(self._seen_length)
        if length <= rule.switch:
            return freq, lo, "short"
        return freq, lo, ("long" if rule.exponent is None else None)

    def observe(self, positions: torch.Tensor) -> None:
        """Raises ``seen_length`` to cover ``positions`` and rotates nothing (a no-op for static
        scalings). ``posenc.attention`` observes the query positions before rotating the keys, so
        that q and k of one call use the frequencies of one length."""
        if self.scaling.by_length is not None:
            self._observe(self.check_positions("positions", positions).to(self._seen_length.device))

    # -- cos and sin ----------------------------------------------------------------------------
    def _apply(self, fn, recurse=True):  # .to()/.cuda()/.half(): the tables are rebuilt on use
        self._tables, self._row = {}, None
        return super()._apply(fn, recurse)

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, scale: float,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``[..., L, R]`` cos and sin at checked positions (``[..., L]`` or ``[..., L, A]``), read-only:
        possibly views of the cached table.

        One integer position (a decoding step, static frequencies): the last such call's table rows
        are kept with the position's value, so q then k at one step look the table up once. The key
        is the value read from the tensor at every call, never the tensor's identity or version."""
        if (self.scaling.by_length is None and positions.dim() == 1 and positions.numel() == 1
                and not positions.is_floating_point() and not torch.compiler.is_compiling()):
            top, row = int(positions.item()), self._row
            if row is not None and row[0] == top and row[1] == dtype and row[2] == scale and row[3] == device:
                return row[4], row[5]
            cos, sin = self._cos_sin_new(positions, dtype, scale, device, views=True)
            self._row = (top, dtype, scale, device, cos, sin)
            return cos, sin
        return self._cos_sin_new(positions, dtype, scale, device, views=True)

    def _cos_sin_new(self, positions: torch.Tensor, dtype: torch.dtype, scale: float, device: torch.device, *,
                     views: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin computed or read from the table: new tensors, or with ``views`` (read-only
        callers) possibly views of the cached table."""
        positions = positions.to(device)
        freq, lo, key = self._observe(positions)
        if freq.device != device:
            freq, lo = freq.to(device), lo.to(device)
        axis_of_pair = self.axis_of_pair
        if (key is None or torch.compiler.is_compiling() or positions.numel() == 0
                or positions.is_floating_point()):  # real positions have no table row
            return angles_cos_sin(positions, freq, dtype, scale, axis_of_pair, inv_freq_lo=lo,
                                  direction=self.direction)
        top = int(positions.item() if positions.numel() == 1 else positions.max())
        width = freq.shape[0]
        if (top + 1) * width > TABLE_MAX_ELEMENTS:
            return angles_cos_sin(positions, freq, dtype, scale, axis_of_pair, inv_freq_lo=lo,
                                  direction=self.direction)
        key = (key, device, dtype, scale)
        table = self._tables.get(key)
        if table is None or table[0].shape[0] <= top:
            n = max(TABLE_MIN_POSITIONS, 1 << top.bit_length())  # a power of two > top
            n = max(top + 1, min(n, TABLE_MAX_ELEMENTS // width))
            table = angles_cos_sin(torch.arange(n, device=device), freq, dtype, scale, inv_freq_lo=lo,
                                   direction=self.direction)  # (n, R) each
            self._tables[key] = table
        if axis_of_pair is None:
            if views and positions.numel() == 1 and positions.dim() == 1:  # a decoding step: the table's row, no gather
                return table[0][top:top + 1], table[1][top:top + 1]  # (1, R)
            flat = positions.reshape(-1).long()  # index_select: a fraction of advanced indexing's per-call cost
            shape = (*positions.shape, width)
            return table[0].index_select(0, flat).view(shape), table[1].index_select(0, flat).view(shape)
        index = positions.long()
        per_pair = index[..., axis_of_pair]  # (..., L, R): the position pair i takes
        flat = per_pair.reshape(-1, width)
        return (table[0].gather(0, flat).view(per_pair.shape), table[1].gather(0, flat).view(per_pair.shape))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled ``cos, sin`` of the angles at ``positions``: ``[..., L, rotary_dim // 2]``.

        Neither the attention factor nor xPos's scale is applied. For a length-dependent
        scaling this call counts as a use (it raises ``seen_length``, see the module docstring).
        """
        positions = self.check_positions("positions", positions)
        return self._cos_sin_new(positions, dtype, 1.0, self.device)  # the caller's own tensors

    def _xpos_scale(self, positions: torch.Tensor, role: str) -> torch.Tensor:
        """``exp(±m·decay)`` in float64: ``[..., L, rotary_dim/2]``; + for queries, − for keys."""
        sign = 1.0 if role == "query" else -1.0
        return torch.exp(sign * positions.to(torch.float64).unsqueeze(-1) * self._decay.to(positions.device))

    def query_scale(self, positions: torch.Tensor) -> torch.Tensor:
        """The query temperature ``τ(p)`` (``query_temperature``; 1 without one): integer positions
        ``[L]`` or ``[B, L]`` -> float64 of the same shape."""
        p = self.check_positions("positions", positions).to(self.device)
        if self.query_temperature is None:
            return torch.ones(p.shape, dtype=torch.float64, device=p.device)
        t = self.query_temperature
        return temperature_scale(p, t["attn_scale"], t["floor_scale"], t["position_offset"])

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` at ``positions [L]`` or ``[B, L]``; same shape and dtype.

        The rotated dims are multiplied by ``attention_factor``, so rotating both q and k
        reproduces transformers, whose cos and sin carry the factor. ``role`` ("query" or
        "key") matters only for xPos and a ``query_temperature``, where it is required (the
        queries, after rotation, are multiplied by ``τ``). ``out``: as in ``posenc.apply_rotary``, a
        preallocated result (no allocation), or ``x`` itself to rotate in place.
        """
        if self.query_temperature is None:
            return self._rotate_call(x, positions, role, out)
        if role is None:
            raise ValueError("a query_temperature scales the queries only: pass role='query' or role='key'")
        rotated = self._rotate_call(x, positions, role, out)
        if role != "query":
            return rotated
        tempered = temper(rotated, self.query_scale(positions))  # (B, H, L, D) times τ (L,) or (B, L)
        return tempered if out is None else out.copy_(tempered)

    def _rotate_call(self, x: torch.Tensor, positions: torch.Tensor, role: str | None,
                     out: torch.Tensor | None) -> torch.Tensor:
        """``forward``'s rotation (the module's scaling, xPos, axes), before any query temperature."""
        x, positions = self.check_call(x, positions, role)
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
        out = None if out is None else check_out(out, x)
        if self.axes_dims is None or self.layout == "interleaved":  # the slices' pairs line up with the whole's
            return apply_rotary_unchecked(x, cos, sin, self.layout, out)
        a, d = len(self.axes_dims), self.axes_dims[0]
        if self.axes_dims == [d] * a and a * d == x.shape[-1]:  # equal axes over the whole head: one rotation
            # of the view [..., A, d] (each axis's pairs (i, i + d/2) are that view's "half" pairs), no slices
            # to copy or to zero-fill in backward: (B, H, L, D) -> (B, H, L, A, d), cos (…, L, A, d/2)
            cos, sin = cos.unflatten(-1, (a, d // 2)), sin.unflatten(-1, (a, d // 2))
            xv = x.unflatten(-1, (a, d))
            view = None if out is None else xv if out is x else out.unflatten(-1, (a, d))  # in place stays in place
            rotated = apply_rotary_unchecked(xv, cos, sin, "half", view)
            return rotated.flatten(-2) if out is None else out
        if out is None:
            parts, start, pair = [], 0, 0  # "half": each axis's slice pairs (i, i + d_a/2) of its own
            for d in self.axes_dims:
                sl = slice(pair, pair + d // 2)
                parts.append(apply_rotary_unchecked(x[..., start:start + d], cos[..., sl], sin[..., sl], "half", None))
                start, pair = start + d, pair + d // 2
            parts.append(x[..., start:])
            return torch.cat(parts, dim=-1)
        start, pair = 0, 0  # into out (or in place: each slice is its own in-place rotation)
        for d in self.axes_dims:
            sl = slice(pair, pair + d // 2)
            xs = x[..., start:start + d]
            apply_rotary_unchecked(xs, cos[..., sl], sin[..., sl], "half", xs if out is x else out[..., start:start + d])
            start, pair = start + d, pair + d // 2
        if out is not x and start < x.shape[-1]:
            out[..., start:].copy_(x[..., start:])
        return out

    def reference(self, x, positions, *, role: str | None = None):
        """Float64 NumPy result of a full pass: length-dependent scalings use ``L = max(positions) + 1``."""
        pos = np.asarray(positions)
        if self.axes_dims is not None:
            return ref.rope_axial(x, positions, self.axes_dims, self.base, layout=self.layout,
                                  direction=self.direction)
        freq = self.scaling.exact_at(int(pos.max()) + 1 if pos.size else 0)
        out = ref.rope(x, positions, freq, layout=self.layout, attention_factor=self.attention_factor,
                       direction=self.direction)
        if self.scaling.decay is not None:
            check_choice("role", role, ("query", "key"))
            sign = 1.0 if role == "query" else -1.0
            scale = np.exp(sign * pos.astype(np.float64)[..., None] * self.scaling.decay)  # (..., L, R)
            if scale.ndim == 3 and out.ndim == 4:
                scale = scale[:, None]
            a, b = ref.rotate_pairs_index(self.rotary_dim, self.layout)
            out[..., a] *= scale
            out[..., b] *= scale
        if self.query_temperature is not None:
            check_choice("role", role, ("query", "key"))
            if role == "query":
                tau = ref.query_temperature_scale(pos, **self.query_temperature, scheme="rope")  # (L,) or (B, L)
                out = out * tau.reshape(tau.shape[:-1] + (1,) * (out.ndim - tau.ndim - 1) + tau.shape[-1:] + (1,))
        return out
