"""BiPE: bilevel positional encoding (He et al., ICML 2024, "Two Stones Hit One Bird: Bilevel
Positional Encoding for Better Length Extrapolation", arXiv:2401.16421; official code
zhenyuhe00/BiPE).

A text is cut into segments at separators (the official code: the Llama tokens ``▁.`` and the
newline). Each token has two positions, ``(segment, offset)``: its segment's index and its offset
inside the segment (``posenc.segment_positions`` with one level: ``[L, 2]`` or ``[B, L, 2]``).
The offset is encoded absolutely, on the token embeddings (the *intra-segment* part); the segment
index relatively, in attention (the *inter-segment* part):

    h_t  = E[x_t] + A(min(offset_t, M − 1))          A: ``intra`` (learned, M rows; sinusoidal: uncapped)
    s_ij = ⟨R(seg_i) q_i, R(seg_j) k_j⟩ / √D          ``bipe``:      a rotary ``inter`` (RoPE) on segments
    s_ij = q_i·k_j / √D + c · b_h(seg_i, seg_j)       ``bipe_bias``: a bias ``inter`` (ALiBi), scaled by c

**How it fits the kinds.** A registered name has one kind, and BiPE's attention side takes the
kind of its inter-segment scheme, so there are two names: ``bipe`` (kind ``rotary``, ``inter`` any
one-axis rotary spec, default ``rope``) and ``bipe_bias`` (kind ``bias``, ``inter`` any one-axis
bias spec, default ``alibi``). Both are the attention-side module, reading ``[.., L, 2]``
positions, so ``posenc.attention(q, k, v, module, q_positions=P, k_positions=P)`` works with ``P``
from ``segment_positions``; both carry the additive part as ``module.embedding(P) -> [.., L,
d_model]``, to add to the token embeddings (``intra``, a submodule, so it trains with the model).

- **Intra** (``intra``, an additive one-axis spec; ``d_model`` and ``max_positions`` filled in):
  ``"learned"`` (the official code: ``nn.Embedding(train_scale, d_model)``, offsets capped at
  ``max_positions − 1`` as ``get_bilevel_ids`` caps them; default 1024, its ``train_scale``) or
  ``"sinusoidal"`` (no cap). The official table is built with ``padding_idx = pad_token_id = −1``,
  i.e. its last row is zero and never trained, so a capped offset gets no embedding there; posenc's
  table trains every row.
- **Inter** (``inter``): the scheme's own call at the segment column, ``inter(x, P[..., 0])`` or
  ``c · inter(P_q[..., 0], P_k[..., 0])``. The official BiPE-ALiBi multiplies ALiBi's slopes by 96
  (``_init_alibi_mul96``) and adds ``m·seg_j``, which under a causal mask is ALiBi's
  ``−m·|seg_i − seg_j|`` up to a constant per row: ``{"scheme": "bipe_bias", "bias_scale": 96}``.

Per-token positions, so decoding with a KV cache (new tokens' positions continued with
``segment_positions``' state) equals recomputing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from posenc._validate import check_float, check_int
from posenc.encodings._base import BiasEncoding, PositionalEncoding, RotaryEncoding, as_working, check_position_batches
from posenc.limits import Dim, Heads, Rows
from posenc.reference.bipe import AXES, bipe_columns, bipe_offsets
from posenc.registry import build, get, register

DEFAULT_SEPARATORS = [[b".", b"\n"]]
SENTENCE = "Segments end here. Then a new one starts.\nA line too."
MAX_TEXT = 2000
"""The segments ``posenc show bipe --text`` cuts a sentence into: the official code's full stop and newline."""


def _sub_spec(key: str, spec: Any, kind: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (a scheme name or dict) of a one-axis ``kind`` scheme, with ``sizes`` filled where
    the scheme takes them and the spec leaves them out; errors name ``key``."""
    if isinstance(spec, str):
        spec = {"scheme": spec}
    if not isinstance(spec, Mapping) or "scheme" not in spec or not isinstance(spec["scheme"], str):
        raise TypeError(f"{key} must be a scheme name or a spec dict with a 'scheme' key (a {kind} scheme), "
                        f"got {spec!r}")
    try:
        scheme = get(spec["scheme"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{key}: {e}") from None
    if scheme.kind != kind:
        other = {"rotary": "bipe", "bias": "bipe_bias"}.get(scheme.kind)
        hint = f"; for a {scheme.kind} scheme between segments use scheme {other!r}" if other else ""
        raise ValueError(f"{key} must be a {kind} scheme, got {spec['scheme']!r} (kind {scheme.kind}){hint}")
    if scheme.name in ("bipe", "bipe_bias", "hirope"):
        raise ValueError(f"{key} must be a one-axis scheme, got {scheme.name!r}")
    full = dict(spec)
    for k, v in sizes.items():
        if k in scheme.params and k not in full:
            full[k] = v
    return full


def _built(key: str, spec: dict[str, Any]) -> PositionalEncoding:
    try:
        module = build(spec)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{key}: {e}") from None
    if getattr(module, "axes", 1) != 1:
        raise ValueError(f"{key} must be a one-axis scheme (it reads the segment index), got axes={module.axes}")
    return module


class _Bilevel:
    """What ``bipe`` and ``bipe_bias`` share: the positions ``(segment, offset)`` and the intra part."""

    axes = AXES
    structured = True
    text_structure = "segments"  # the kind protocol: (segment, offset) of a text's lines
    intra: PositionalEncoding

    def _intra(self, intra: Any, d_model: Any, max_positions: Any) -> None:
        self.d_model = check_int("d_model", d_model, min=1)
        self.max_positions = check_int("max_positions", max_positions, min=1)
        spec = _sub_spec("intra", intra, "additive", {"d_model": self.d_model, "max_positions": self.max_positions})
        self.intra = _built("intra", spec)
        if getattr(self.intra, "d_model", self.d_model) != self.d_model:
            raise ValueError(f"intra has d_model={self.intra.d_model} but bipe has d_model={self.d_model}")
        rows = getattr(self.intra, "max_positions", None)
        self.cap = None if rows is None or getattr(self.intra, "grid", None) else int(rows)  # offsets capped here

    def segments(self, positions: Any, name: str = "positions") -> torch.Tensor:
        """The segment column of checked ``[..., L, 2]`` positions: what the inter part reads."""
        return self.check_positions(name, positions)[..., 0]

    def intra_positions(self, positions: Any) -> torch.Tensor:
        """The offsets the intra part reads, capped at ``max_positions − 1`` for a table."""
        offset = self.check_positions("positions", positions)[..., 1]
        return offset if self.cap is None else offset.clamp(max=self.cap - 1)

    def embedding(self, positions: Any) -> torch.Tensor:
        """The intra-segment part, ``[..., L, 2] -> [..., L, d_model]``: add it to the token embeddings."""
        return self.intra(self.intra_positions(positions))

    def reference_embedding(self, positions: Any) -> np.ndarray:
        """Float64 NumPy ``embedding``: the intra scheme's reference at the capped offsets."""
        return self.intra.reference(bipe_offsets(positions, self.cap))

    def describe(self, *, text: str | None = None) -> list[tuple[str, str]]:
        """``posenc show``'s rows: each token's segment index and offset in a typed sentence (its UTF-8
        bytes as tokens; segments end at the full stop and the newline, the official code's separators)."""
        from posenc.positions import segment_positions

        text = SENTENCE if text is None else text
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
            raise ValueError(f"text must be a non-empty sentence of at most {MAX_TEXT} characters, got {text!r:.80}")
        data = text.encode()
        pos, _ = segment_positions(data, DEFAULT_SEPARATORS)  # (L, 2)
        rows = [("bilevel positions", f"of each byte of {text!r}: segments end at '.' and '\\n' (the official "
                                      f"code's separators); the intra part reads min(offset, {self.cap - 1})"
                 if self.cap else f"of each byte of {text!r}: segments end at '.' and '\\n' (the official "
                                  "code's separators)")]
        for byte, (segment, offset) in zip(data, pos.tolist()):
            shown = repr(chr(byte)) if byte < 128 else f"0x{byte:02x}"
            rows.append((f"  {shown}", f"segment {segment:>4}   offset {offset:>4}"))
        return rows


@register("bipe", kind="rotary")
class BiPE(_Bilevel, RotaryEncoding):
    """Bilevel positions: an absolute offset in each segment, a rotary scheme between segments."""

    def __init__(self, *, d_model: Dim, head_dim: Dim, inter: Any = "rope", intra: Any = "learned",
                 max_positions: Rows = 1024) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.inter = _built("inter", _sub_spec("inter", inter, "rotary", {"head_dim": self.head_dim}))
        if self.inter.head_dim != self.head_dim:
            raise ValueError(f"inter has head_dim={self.inter.head_dim} but bipe has head_dim={self.head_dim}")
        self._intra(intra, d_model, max_positions)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotates ``x [B, H, L, D]`` by the inter scheme at the segment column of ``positions [.., L, 2]``."""
        x, positions = self.check_call(x, positions, role)
        return self.inter(x, positions[..., 0], role=role, out=out)

    def observe(self, positions: torch.Tensor) -> None:
        observe = getattr(self.inter, "observe", None)
        if observe is not None:
            observe(self.segments(positions))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        return self.inter.cos_sin(self.segments(positions), dtype)

    def reference(self, x: Any, positions: Any, *, role: str | None = None):
        """Float64 NumPy result: the inter scheme's reference at the segment indices."""
        segment, _ = bipe_columns(positions)
        return self.inter.reference(x, segment, role=role)


class _SegmentBias(BiasEncoding):
    """``c · b(seg_q, seg_k)``: ``bipe_bias``'s attention side, a bias scheme at segment indices scaled
    by a positive constant (BiPE-ALiBi's ×96). What ``posenc.attention`` runs (``attention_form``):
    one score function for every backend (``score_fn``), the inner scheme's peak and shortcuts kept.
    Named after the scheme it serves; its dtype and device are the inner scheme's."""

    def __init__(self, inner: BiasEncoding, scale: float, name: str) -> None:
        super().__init__()
        self.inner, self.scale = inner, float(scale)
        self.num_heads, self.name, self.kind = inner.num_heads, name, "bias"
        for flag in ("flex_ok", "flex_compiles_fast", "peak_at_nearest_key", "translation_invariant", "real_positions"):
            setattr(self, flag, getattr(inner, flag))

    @property
    def dtype(self) -> torch.dtype:
        return self.inner.dtype

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def check_positions(self, name: str, positions: Any, **kw: Any) -> torch.Tensor:
        return self.inner.check_positions(name, positions, **kw)

    def score_fn(self):
        fn, scale = self.inner.score_fn(), self.scale

        def bias(h, q_pos, k_pos):
            return fn(h, q_pos, k_pos) * scale

        return bias

    def nearest_keys(self, q_pos, k_pos, *, first=None, last=None):
        return self.inner.nearest_keys(q_pos, k_pos, first=first, last=last)  # a positive scale keeps the peak

    def block_fn(self):
        block, scale = self.inner.block_fn(), self.scale

        def bias(q_pos, k_pos, dtype):
            return (block(q_pos, k_pos, torch.float64) * scale).to(dtype)

        return bias


@register("bipe_bias", kind="bias")
class BiPEBias(_Bilevel, BiasEncoding):
    """Bilevel positions: an absolute offset in each segment, a bias scheme between segments."""

    def __init__(self, *, d_model: Dim, num_heads: Heads, inter: Any = "alibi", intra: Any = "learned",
                 max_positions: Rows = 1024, bias_scale: float = 1.0) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        inner = _built("inter", _sub_spec("inter", inter, "bias", {"num_heads": self.num_heads}))
        if inner.num_heads != self.num_heads:
            raise ValueError(f"inter has num_heads={inner.num_heads} but bipe_bias has num_heads={self.num_heads}")
        self.bias_scale = check_float("bias_scale", bias_scale, min=0.0, min_open=True)
        self.inter = inner
        # not a submodule (its parameters are inter's, saved once): moved and copied with inter
        self.__dict__["segment_bias"] = _SegmentBias(inner, self.bias_scale, "bipe_bias")
        for flag in ("flex_ok", "flex_compiles_fast", "peak_at_nearest_key", "translation_invariant"):
            setattr(self, flag, getattr(inner, flag))
        self._intra(intra, d_model, max_positions)

    def attention_form(self, q_positions: torch.Tensor, k_positions: torch.Tensor):
        """What ``posenc.attention`` runs: the (scaled) inter bias at the segment columns."""
        return self.segment_bias, q_positions[..., 0], k_positions[..., 0]

    def score_fn(self):
        """The inter bias (scaled) of segment indices: ``bias(h, seg_q, seg_k)``."""
        return self.segment_bias.score_fn()

    def nearest_keys(self, q_pos, k_pos, *, first=None, last=None):
        return self.segment_bias.nearest_keys(q_pos, k_pos, first=first, last=last)

    def block_fn(self):
        return self.segment_bias.block_fn()

    def forward(self, q_positions: torch.Tensor, k_positions: torch.Tensor, *,
                dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[Lq, 2]``, ``[Lk, 2]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` batched): ``c · b(seg_q, seg_k)``."""
        q = as_working(self.segments(q_positions, "q_positions"), self.device)
        k = as_working(self.segments(k_positions, "k_positions"), self.device)
        check_position_batches(q, k)
        h = torch.arange(self.num_heads, device=self.device).view(-1, 1, 1)  # (H, 1, 1)
        out = self.score_fn()(h, q.unsqueeze(-1).unsqueeze(-3), k.unsqueeze(-2).unsqueeze(-3))
        return out.to(self.dtype if dtype is None else dtype)

    def reference(self, q_positions: Any, k_positions: Any):
        """Float64 NumPy bias: ``bias_scale`` times the inter scheme's reference at the segment indices."""
        (qs, _), (ks, _) = bipe_columns(q_positions), bipe_columns(k_positions)
        return self.bias_scale * np.asarray(self.inter.reference(qs, ks), dtype=np.float64)
