"""DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", ICLR, arXiv:2006.03654, §3.1; DeBERTa-v2/v3's log buckets and shared
projections, as transformers' ``DebertaV2`` attention).

    A_ij = (q_i·k_j + q_i·K^r_δ(i,j) + k_j·Q^r_δ(i,j)) / √(D·f),   f = 1 + (terms in pos_att_type)
             content   c2p              p2c

    K^r = E W_k^r + b_k^r,  Q^r = E W_q^r + b_q^r  ([2s, H·D]),  δ(i, j) = clip(bucket(p_i − p_j) + s, 0, 2s − 1)

``E`` is a learned table of ``2s`` rows (``s = position_buckets``, or ``max_relative_positions``
when ``position_buckets = 0``); ``bucket`` is DeBERTa-v2's ``make_log_bucket_position``
(``posenc.reference.deberta``). With ``share_att_key=True`` the position projections are the
layer's own query and key projections (DeBERTa-v3): ``pe.tie(layer.query_proj, layer.key_proj)``
makes them so; until tied the module's ``query_proj``/``key_proj`` stand in for them. Otherwise
it has its own ``pos_key_proj`` (c2p) and ``pos_query_proj`` (p2c).

**Scale.** ``posenc.attention`` adds a relative term to ``q·k·scale``; DeBERTa divides all three
terms by ``√(D·f)`` (``√(3D)`` with both terms), not ``√D``. The module returns c2p + p2c already
divided by ``√(D·f)`` and declares ``default_scale = 1/√(D·f)``, which ``posenc.attention`` uses
for ``q·k`` when its ``scale`` is not given: ``posenc.attention(q, k, v, pe)`` is DeBERTa's
attention. A ``scale=`` given to ``posenc.attention`` replaces the content term's only.

Neither term builds a ``[Lq, Lk, D]`` tensor: c2p gathers ``q K^rᵀ`` (``[B, H, Lq, n]``) at each
pair's row; p2c gathers ``(k Q^rᵀ)ᵀ`` (``[B, H, n, Lk]``) at row ``δ(i, j)`` of column ``j``. Only the
``n`` rows between the call's smallest and largest ``δ`` are projected and multiplied: a block of the
blockwise backend reads a band of the table (at most ~half of it for a block on the diagonal, a few
log buckets far from it): forward + backward, causal, 8 heads of 64, one thread, 1.38x faster at
L = 1024 and 1.52x at 2048 than projecting all 2s rows (interleaved medians, shared machine).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posenc import reference as ref
from posenc._validate import check_bool, check_int
from posenc.encodings._base import RelativeEncoding, relative_distance, to_numpy as _numpy
from posenc.limits import Buckets, Dim, Distance, Heads, check_memory
from posenc.registry import register

TERMS = ("c2p", "p2c")


def parse_pos_att_type(value) -> tuple[str, ...]:
    """``"c2p|p2c"`` (transformers' string form) or a list such as ``["p2c", "c2p"]`` -> the terms, in TERMS order."""
    if isinstance(value, str):
        items = [t.strip() for t in value.lower().split("|")]
    elif isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        items = [t.strip().lower() for t in value]
    else:
        raise TypeError(f"pos_att_type must be a string like 'c2p|p2c' or a list of 'c2p'/'p2c', got {value!r}")
    bad = [t for t in items if t not in TERMS]
    if bad or not items or len(set(items)) != len(items):
        raise ValueError(f"pos_att_type must name each of 'c2p', 'p2c' at most once and at least one of them "
                         f"(e.g. 'c2p|p2c'), got {value!r}")
    return tuple(t for t in TERMS if t in items)


@register("deberta", kind="relative")
class DeBERTa(RelativeEncoding):
    """Disentangled attention: content-to-position and position-to-content terms over log buckets (He et al. 2021)."""

    def __init__(self, *, num_heads: Heads, head_dim: Dim, d_model: Dim, position_buckets: Buckets = 256,
                 max_relative_positions: Distance = 512, pos_att_type: str | list[str] = "c2p|p2c",
                 share_att_key: bool = False) -> None:
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, min=1)
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.d_model = check_int("d_model", d_model, min=1)
        self.position_buckets = check_int("position_buckets", position_buckets, min=0)
        self.max_relative_positions = check_int("max_relative_positions", max_relative_positions, min=1)
        if self.position_buckets == 1:
            raise ValueError("position_buckets must be 0 (no buckets: distances clipped at max_relative_positions) "
                             "or >= 2, got 1")
        mid = self.position_buckets // 2
        if self.position_buckets and self.max_relative_positions < mid + 2:
            raise ValueError(f"max_relative_positions must be >= position_buckets // 2 + 2 = {mid + 2} (the log "
                             f"buckets span distances {mid} to max_relative_positions - 1), "
                             f"got {self.max_relative_positions}")
        self.terms = parse_pos_att_type(pos_att_type)
        self.share_att_key = check_bool("share_att_key", share_att_key)
        self.span = ref.deberta_span(self.position_buckets, self.max_relative_positions)
        width = self.num_heads * self.head_dim
        check_memory("d_model", self.d_model, self.d_model * (2 * self.span + 2 * width),
                     what=f"its table of 2·{self.span} × d_model and projections of d_model × {width}")
        self.rel_embeddings = nn.Parameter(torch.randn(2 * self.span, self.d_model))  # (2s, d_model): E
        if self.share_att_key:  # the layer's projections (pe.tie); these stand in until tied
            self.query_proj = nn.Linear(self.d_model, width)
            self.key_proj = nn.Linear(self.d_model, width)
        else:
            if "c2p" in self.terms:
                self.pos_key_proj = nn.Linear(self.d_model, width)
            if "p2c" in self.terms:
                self.pos_query_proj = nn.Linear(self.d_model, width)

    @property
    def default_scale(self) -> float:
        """``1/√(D·f)``: the scale of ``q·k`` in DeBERTa (``posenc.attention``'s default for this scheme)."""
        return 1.0 / math.sqrt(self.head_dim * (1 + len(self.terms)))

    def tie(self, query_proj: nn.Linear, key_proj: nn.Linear) -> DeBERTa:
        """``share_att_key=True``: project positions with the layer's own ``query_proj`` and ``key_proj``
        (``nn.Linear(d_model, num_heads·head_dim)``), shared, not copied. Returns the module."""
        if not self.share_att_key:
            raise ValueError("tie() is for share_att_key=True; this module has its own position projections "
                             "(pos_key_proj, pos_query_proj)")
        for name, proj in (("query_proj", query_proj), ("key_proj", key_proj)):
            if not isinstance(proj, nn.Linear):
                raise TypeError(f"{name} must be a torch.nn.Linear, got {type(proj).__name__}")
            want = (self.num_heads * self.head_dim, self.d_model)
            if tuple(proj.weight.shape) != want:
                raise ValueError(f"{name} must map d_model={self.d_model} to num_heads·head_dim={want[0]}, "
                                 f"got weight of shape {list(proj.weight.shape)}")
        self.query_proj, self.key_proj = query_proj, key_proj
        return self

    def projections(self) -> dict[str, nn.Linear]:
        """The projection of each term: ``{"c2p": K^r's, "p2c": Q^r's}`` (the enabled ones)."""
        if self.share_att_key:
            return {t: self.key_proj if t == "c2p" else self.query_proj for t in self.terms}
        return {t: self.pos_key_proj if t == "c2p" else self.pos_query_proj for t in self.terms}

    def index(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """``δ(i, j)``: ``[Lq, Lk]`` or ``[B, Lq, Lk]`` int64, the table row of each pair (float64 logs)."""
        rel = -relative_distance(q_positions, k_positions).to(self.rel_embeddings.device)  # p_i − p_j
        if self.position_buckets:
            m = self.position_buckets // 2
            a = rel.abs()
            a_log = a.clamp(min=m).to(torch.float64)  # |r| <= m keep r: the log is read for |r| > m only
            base = torch.tensor((self.max_relative_positions - 1) / m, dtype=torch.float64, device=a.device)
            far = torch.ceil(torch.log(a_log / m) / torch.log(base) * (m - 1)) + m
            rel = torch.where(a <= m, rel, rel.sign() * far.to(torch.int64))
        return (rel + self.span).clamp(0, 2 * self.span - 1)

    def _table(self, proj: nn.Linear, work: torch.dtype, lo: int, hi: int) -> torch.Tensor:
        """Rows ``lo..hi`` of ``E Wᵀ + b`` in heads: ``[H, hi − lo + 1, D]`` in ``work``."""
        bias = None if proj.bias is None else proj.bias.to(work)
        out = F.linear(self.rel_embeddings[lo:hi + 1].to(work), proj.weight.to(work), bias)  # (n, H·D)
        return out.view(hi - lo + 1, self.num_heads, self.head_dim).transpose(0, 1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
                k_positions: torch.Tensor) -> torch.Tensor:
        """c2p + p2c over ``√(D·f)``: ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]`` -> ``[B, H, Lq, Lk]`` in q's dtype."""
        q, k, q_positions, k_positions = self.check_inputs(q, k, q_positions, k_positions)
        if q.shape[1] != self.num_heads:
            raise ValueError(f"q and k must have num_heads={self.num_heads} heads, "
                             f"got shapes {list(q.shape)} and {list(k.shape)}")
        dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k = q.to(work), k.to(work)
        shape = (*q.shape[:3], k.shape[2])  # (B, H, Lq, Lk)
        out = q.new_zeros(shape)
        if out.numel() == 0:
            return out.to(dtype)
        rows = self.index(q_positions, k_positions)  # (Lq, Lk) or (B, Lq, Lk): δ(i, j)
        # only the rows this call reads are projected (a block of queries and keys reads a band of them);
        # under torch.compile the whole table, as a band's size would be data-dependent
        if torch.compiler.is_compiling():
            lo, hi = 0, 2 * self.span - 1
        else:
            lo, hi = int(rows.min()), int(rows.max())
        rows = (rows - lo).unsqueeze(-3).expand(shape)  # (B, H, Lq, Lk)
        for term, proj in self.projections().items():
            table = self._table(proj, work, lo, hi)  # (H, n, D)
            if term == "c2p":  # q_i · K^r_δ(i,j)
                out = out + (q @ table.transpose(-1, -2)).gather(-1, rows)
            else:  # k_j · Q^r_δ(i,j): row δ(i, j) of column j of (k Q^rᵀ)ᵀ
                out = out + (table @ k.transpose(-1, -2)).gather(-2, rows)  # (B, H, n, Lk) -> (B, H, Lq, Lk)
        return (out * self.default_scale).to(dtype)

    def _tables_numpy(self) -> dict[str, object]:
        tables = {}
        for term, proj in self.projections().items():
            bias = torch.zeros(proj.out_features) if proj.bias is None else proj.bias
            table = ref.deberta_project(_numpy(self.rel_embeddings), _numpy(proj.weight), _numpy(bias), self.num_heads)
            tables["pos_key" if term == "c2p" else "pos_query"] = table
        return tables

    def reference(self, q, k, q_positions, k_positions):
        return ref.deberta(_numpy(q), _numpy(k), _numpy(q_positions), _numpy(k_positions), **self._tables_numpy(),
                           position_buckets=self.position_buckets, max_relative_positions=self.max_relative_positions)

    def reference_attention(self, q, k, v, q_positions, k_positions, *, causal: bool = False, scale=None):
        """Float64 ``posenc.attention(q, k, v, self, ...)``: DeBERTa's whole attention."""
        return ref.deberta_attention(_numpy(q), _numpy(k), _numpy(v), _numpy(q_positions), _numpy(k_positions),
                                     **self._tables_numpy(), position_buckets=self.position_buckets,
                                     max_relative_positions=self.max_relative_positions, causal=causal, scale=scale)

