"""What every scheme module shares: its spec, float64 tables that follow ``.to(device)`` but never
``.to(dtype)``, the checks on positions (``posenc.positions``, with the module's ``axes`` and
``real_positions``) and tensors, and one base class per kind that declares the kind's calls:

    AdditiveEncoding   module(positions) -> [..., L, d_model]
    RotaryEncoding     module(x, positions, *, role=None) -> x rotated;  cos_sin(positions, dtype)
    BiasEncoding       module(q_positions, k_positions, *, dtype=None) -> [H, Lq, Lk];  score_fn()
    RelativeEncoding   module(q, k, q_positions, k_positions) -> [B, H, Lq, Lk];  value_term (or None)
    ContentEncoding    module(q, k, v, hidden=None, *, causal=..., scale=..., document_ids=...,
                       backend=...) -> [B, H, Lq, Dv];  rows(...), the formula for a block of queries

``@register(name, kind)`` checks that a scheme subclasses its kind's base (``KIND_BASES``).

**The kind protocol** (each class's block "kind protocol"): one way to apply each kind, so that a
model, the benchmark and the analysis call the scheme instead of testing its ``.kind``
(``tests/test_kind_dispatch.py`` keeps such tests out of them): ``model_sizes`` (the sizes a model
must share with it), ``attends`` (whether a model passes it to ``posenc.attention``), ``embed(x,
positions)`` (what it adds to the token embeddings), ``attention_keywords(positions, hidden)``
(what attention gets beside it), ``check_runs_at(positions, head_dim=, num_heads=)`` (whether it
can run at a length: a learned table past its rows) and the classmethod ``fit_to_training(given,
length)`` (its settings that follow the training length: T5's ``max_distance``, FIRE's
``L_threshold``); and the attributes ``needs_axes``, ``causal_only``, ``position_table`` (a learned
table), ``text_structure`` (BiPE's segments, HiRoPE's lines), and what context parallelism asks:
``counts_positions_from_tokens`` (the content kind) and ``selects_heads`` (a bias scheme, FoX: a
rank of Ulysses runs a subset of the heads); what the chunked and blockwise kernels and the
transformers patch ask: ``scores_from_positions`` (the bias kind) and ``rotates`` (the rotary
kind). The defaults, on
``PositionalEncoding``, are the ``none`` kind's; a scheme with a rule of its own overrides them.

Notation used for tensor shapes:
    B: batch, H: heads, L: sequence length (Lq queries, Lk keys), D: head dimension.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from posenc._validate import check_choice
from posenc.positions import (INDEX_DTYPES, as_working, check_batch, check_position_batches,  # noqa: F401
                              check_positions, relative_distance)


class PositionalEncoding(nn.Module):
    """Base class of every registered scheme.

    ``name`` and ``kind`` are set by ``@register``. Tables that depend on position are computed in
    float64: they are registered with ``register_float64`` and keep float64 when the module is
    cast with ``.to(dtype)`` (they do follow the device). The module's working dtype, which
    ``.to(dtype)`` does change, is ``self.dtype`` (float32 by default).
    """

    name: str = "?"
    kind: str = "?"
    _spec: dict[str, Any]
    axes: int = 1
    """How many axes a position has (``posenc.positions``): 1 for text; set from the spec's ``axes``
    (or a learned ``grid``). Positions are ``[L]``/``[B, L]`` for 1, ``[L, A]``/``[B, L, A]`` above."""
    real_positions: bool = False
    """True for schemes that are functions of position and so accept real-valued positions."""
    structured: bool = False
    """True when the axes are positions from a sequence's structure (``posenc.segment_positions``:
    bipe's ``(segment, offset)``, hirope's ``(level, token)``), not a grid: ``posenc show`` then
    gives the one-axis numbers at text positions (the same on every axis)."""

    def __init__(self) -> None:
        super().__init__()
        self._float64: list[str] = []
        # An empty buffer that records the dtype and device the module was moved to.
        self.register_buffer("_probe", torch.empty(0), persistent=False)

    # -- spec -------------------------------------------------------------------------------
    @property
    def spec(self) -> dict[str, Any]:
        """The dict ``posenc.build`` takes to make an equivalent module."""
        return copy.deepcopy(self._spec)

    def extra_repr(self) -> str:
        spec = getattr(self, "_spec", {})
        return ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "scheme")

    def check_positions(self, name: str, positions: Any, **kw: Any) -> torch.Tensor:
        """``posenc.positions.check_positions`` with this module's ``axes`` and ``real_positions``."""
        return check_positions(name, positions, axes=self.axes, real=self.real_positions, scheme=self.name, **kw)

    # -- dtype and device -------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self._probe.dtype

    @property
    def device(self) -> torch.device:
        return self._probe.device

    def register_float64(self, name: str, value: torch.Tensor, persistent: bool = False) -> None:
        """A float64 table that follows the module's device and keeps float64 under ``.to(dtype)``."""
        self.register_buffer(name, value.to(torch.float64), persistent=persistent)
        self._float64.append(name)

    def _apply(self, fn, recurse=True):  # noqa: D401 - torch's hook for .to()/.cuda()/.half()
        kept = {n: getattr(self, n) for n in self._float64}
        out = super()._apply(fn, recurse)
        for n, t in kept.items():
            setattr(self, n, t.to(device=self._probe.device, dtype=torch.float64))
        return out

    # -- attention hooks: how ``posenc.attention`` prepares a call with this scheme ----------------
    # Declared here with defaults that do nothing; a scheme overrides the one it needs. The kind
    # base classes declare their own (``RotaryEncoding.rotate``, ``ContentEncoding.flex_bias``).
    reads_hidden: bool = False
    """The scheme reads the layer's input ``hidden [B, Lk, d_model]`` (content schemes that declare it)."""
    default_scale: float | None = None
    """The scale of ``q·k`` when the caller gives none (None: ``1/√D``; DeBERTa: ``1/√(D·f)``)."""
    value_term: Callable[..., torch.Tensor] | None = None
    """``value_term(p, q_positions, k_positions) -> [B, H, Lq, D]``: a term the attention weights ``p``
    also mix into the output (Shaw's relative value embeddings); None for every other scheme."""

    def attention_form(self, q_positions: torch.Tensor, k_positions: torch.Tensor):
        """``(module, q_positions, k_positions)``: what ``posenc.attention`` runs for this scheme at these
        positions. By default the scheme itself; a scheme whose attention is another module at some of
        its position columns returns that (``bipe_bias``: its inter-segment bias at the segment indices)."""
        return self, q_positions, k_positions

    def temper_queries(self, q: torch.Tensor, q_positions: torch.Tensor) -> torch.Tensor:
        """The queries ``[B, H, Lq, D]`` before their scores: by default unchanged; a scheme with a
        temperature per query position scales them (Llama 4's NoPE layers, ``nope_temperature``)."""
        return q

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes: tuple[str, ...] = ()
    """The sizes a model must share with the scheme, as the scheme's attributes (``d_model``,
    ``head_dim``, ``num_heads``): the benchmark's model refuses a mismatch by name."""
    needs_axes: bool = False
    """Whether a model must give the scheme positions of exactly ``axes`` axes (every kind but
    ``none``, whose positions carry no signal: the image part gives it ``(row, col)`` as they are)."""
    causal_only: bool = False
    """True for a scheme that counts from the query backwards: only causal attention (content schemes)."""
    text_structure: str | None = None
    """For a ``structured`` scheme, the structure of a text its positions come from: ``"segments"``
    (BiPE: ``(segment, offset)`` of the lines) or ``"lines"`` (HiRoPE: ``(line, token)``); None
    for text positions ``0..L-1``. The benchmark's language models read it
    (``posenc.extrapolate.structured_positions.for_spec``)."""
    position_table: bool = False
    """True for a table with a row per position (the learned table): it cannot run past its rows,
    and on an image it takes the training grid's size and is resized to another grid."""
    counts_positions_from_tokens: bool = False
    """True for a scheme whose positions are counted from the tokens (the content kind): it takes no
    positions, and its weight of a key can depend on the keys around it. Context parallelism reads it
    (all-gather attention passes positions; the keys of a cache are not the queries' tokens)."""
    rotates: bool = False
    """True for the rotary kind: its positions turn queries and keys (``RotaryEncoding.rotate``).
    The transformers patch reads it where it rotates a part of each head itself (MLA's rope part)."""
    scores_from_positions: bool = False
    """True for the bias kind: its term of the scores is a function of the positions alone,
    ``pe(q_positions, k_positions)``; a relative scheme's reads the queries and keys too,
    ``pe(q, k, q_positions, k_positions)``. The chunked and blockwise kernels read it."""
    selects_heads: bool = False
    """True for a scheme with parameters per head that can run a subset of its heads (a bias scheme:
    its ``score_fn`` at head ``h + start``; FoX: its state's heads). Ulysses' head-sharded attention
    reads it: a rank runs ``H / P`` of the heads."""

    @property
    def attends(self) -> bool:
        """Whether a model passes the scheme to ``posenc.attention`` (default: no, NoPE; every
        rotary, bias, relative and content scheme does, and NoPE with a query temperature)."""
        return False

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x [B, L, C]`` plus what the kind adds to the token embeddings before the first layer
        (default: nothing; an additive scheme adds ``module(positions)``)."""
        return x

    def attention_keywords(self, positions: torch.Tensor | None, hidden: torch.Tensor | None) -> dict[str, Any]:
        """The keywords a model gives ``posenc.attention`` for the scheme in self-attention over
        ``positions`` with the layer's input ``hidden [B, L, d_model]``: the positions of the queries
        and keys (default); a content scheme takes ``hidden`` instead, when it reads it."""
        return {"q_positions": positions, "k_positions": positions, "hidden": None}

    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        """Raises ValueError when the scheme cannot run over ``positions`` (``[L]`` or ``[L, A]``, one
        sequence; a learned table past its rows, PaTH past its bound): one call of the kind's own
        form for the last query over every key, in a model of ``num_heads`` heads of ``head_dim``
        (default: ``module(x, positions)``, NoPE's)."""
        self(torch.zeros(1, 1, 1, head_dim, device=positions.device), positions[-1:])

    @classmethod
    def fit_to_training(cls, given: dict[str, Any], length: int) -> dict[str, Any]:
        """The settings of the spec ``given`` (of this scheme) that follow the training length
        ``length`` (the longest training sequence), for the keys ``given`` leaves out (default:
        none; T5's ``max_distance``, FIRE's ``L_threshold``). The benchmark's plan fills them in."""
        return {}


# -- checks -----------------------------------------------------------------------------------
# Positions are checked in one place, ``posenc.positions``; these names stay importable from here.

def check_tensor(name: str, x: Any, *, ndim: int, last_dim: int | None = None, floating: bool = True) -> torch.Tensor:
    """A tensor of rank ``ndim`` whose last dimension is ``last_dim``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.dim() != ndim:
        layout = {4: "[B, H, L, D]", 3: "[B, L, D]", 2: "[L, D]"}.get(ndim, f"rank {ndim}")
        raise ValueError(f"{name} must have shape {layout}, got shape {list(x.shape)}")
    if last_dim is not None and x.shape[-1] != last_dim:
        raise ValueError(f"{name} must have last dimension {last_dim}, got {x.shape[-1]} (shape {list(x.shape)})")
    return x


def check_qkv(q: Any, k: Any, v: Any, *, grouped: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention's inputs: ``q [B, H, Lq, D]``, ``k [B, H, Lk, D]``, ``v [B, H, Lk, Dv]``, one dtype.

    ``grouped``: k and v may have ``H_kv`` heads with ``H % H_kv == 0`` (grouped-query attention,
    Ainslie et al. 2023; MQA when ``H_kv = 1``): query head ``h`` reads key/value head ``h // (H / H_kv)``,
    as transformers' ``repeat_kv`` pairs them."""
    q = check_tensor("q", q, ndim=4)
    if q.shape[-1] == 0:  # the default scale 1/√D is undefined, and q·k is 0 for every pair
        raise ValueError(f"q and k must have a head dimension D >= 1, got q of shape {list(q.shape)}")
    k = check_tensor("k", k, ndim=4, last_dim=q.shape[-1])
    v = check_tensor("v", v, ndim=4)
    h, h_kv = q.shape[1], k.shape[1]
    heads_ok = h_kv == h or (grouped and h_kv > 0 and h % h_kv == 0)
    if k.shape[0] != q.shape[0] or not heads_ok or v.shape[:3] != k.shape[:3]:
        layout = ("[B, H, Lq, D], [B, H_kv, Lk, D], [B, H_kv, Lk, Dv] with the same B and H_kv dividing H"
                  if grouped else "[B, H, Lq, D], [B, H, Lk, D], [B, H, Lk, Dv] with the same B and H")
        raise ValueError(f"q, k, v must be {layout}; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return q, k, v


def check_same_batch_and_heads(q: torch.Tensor, k: torch.Tensor) -> None:
    """``q [B, H, Lq, D]`` and ``k [B, H, Lk, D]`` share ``B`` and ``H``."""
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k must have the same batch and heads [B, H, ...], "
                         f"got shapes {list(q.shape)} and {list(k.shape)}")


def to_numpy(x: Any) -> Any:
    """A tensor as a NumPy array for the reference (floating point as float64); anything else as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    x = x.detach().cpu()
    return (x.double() if x.is_floating_point() else x).numpy()


class AdditiveEncoding(PositionalEncoding):
    """Base of the ``additive`` kind: ``module(positions) -> [..., L, d_model]``, added to the token
    embeddings before the first layer (``posenc.attention`` refuses it)."""

    d_model: int

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes = ("d_model",)
    needs_axes = True

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x + module(positions)`` in ``x``'s dtype: ``[B, L, C]``."""
        return x + self(positions).to(x.dtype)  # (B, L, C)

    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        self(positions[-1:])


class RotaryEncoding(PositionalEncoding):
    """Base of the ``rotary`` kind: ``module(x, positions, *, role=None, out=None) -> x`` rotated,
    for ``x [B, H, L, D]``; ``cos_sin(positions, dtype)`` gives the unscaled cos and sin of the angles.

    Every rotary call takes ``role`` ("query", "key" or None); ``posenc.attention`` passes it
    (only xPos needs it). ``out`` is ``posenc.apply_rotary``'s: a preallocated result, or ``x``
    itself to rotate in place.
    """

    head_dim: int
    ROLES = (None, "query", "key")
    rotates = True

    def forward(self, x: torch.Tensor, positions: torch.Tensor, *, role: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        raise NotImplementedError

    def observe(self, positions: torch.Tensor) -> None:
        """Records the positions a call will rotate, before the keys are (a length-dependent scaling
        picks its frequencies from the longest length seen, so q and k of one call share them).
        By default nothing."""

    def rotate(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
               k_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q, k)`` rotated for attention (``posenc.attention``'s and ``posenc.interop``'s one
        sequence): the query positions observed first (one length for q and k), then the keys
        rotated (``role="key"``), then the queries (``role="query"``)."""
        self.observe(q_positions)
        k = self(k, k_positions, role="key")
        return self(q, q_positions, role="query"), k

    def check_call(self, x: Any, positions: Any, role: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The checks of a rotary call: ``x [B, H, L, head_dim]``, positions for ``B`` and ``L``, ``role``."""
        x = check_tensor("x", x, ndim=4, last_dim=self.head_dim)
        positions = self.check_positions("positions", positions)
        check_batch("positions", positions, x.shape[0], x.shape[2], axes=self.axes, heads=x.shape[1])
        check_choice("role", role, self.ROLES)
        return x, positions.to(x.device)

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes = ("head_dim",)
    needs_axes = True

    @property
    def attends(self) -> bool:
        return True


class RelativeEncoding(PositionalEncoding):
    """Base of the ``relative`` kind: ``module(q, k, q_positions, k_positions) -> [B, H, Lq, Lk]``,
    a query/key-dependent term added to the scaled scores. A scheme whose output also mixes
    relative value vectors (Shaw) defines ``value_term(p, q_positions, k_positions) -> [B, H, Lq, D]``;
    the others leave it None."""

    head_dim: int
    value_term: Callable[..., torch.Tensor] | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor,
                k_positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def check_inputs(self, q: Any, k: Any, q_positions: Any, k_positions: Any, *, q_name: str = "q",
                     k_name: str = "k") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The one relative-input check: ``q [B, H, Lq, ·]``, ``k [B, H, Lk, ·]`` (last dimension
        ``head_dim`` unless ``q_name`` is "p", the attention weights ``[B, H, Lq, Lk]``), and
        positions for their batch and lengths; positions come back on q's device."""
        if q_name == "p":
            q = check_tensor("p", q, ndim=4)
            lq, lk = q.shape[2], q.shape[3]
        else:
            q = check_tensor(q_name, q, ndim=4, last_dim=self.head_dim)
            k = check_tensor(k_name, k, ndim=4, last_dim=self.head_dim)
            check_same_batch_and_heads(q, k)
            lq, lk = q.shape[2], k.shape[2]
        q_positions = self.check_positions("q_positions", q_positions).to(q.device)
        k_positions = self.check_positions("k_positions", k_positions).to(q.device)
        heads = None if q_name == "p" else q.shape[1]  # q [B, H, L, D]: a [B, L, H, D] one gets a layout hint
        check_batch("q_positions", q_positions, q.shape[0], lq, axes=self.axes, heads=heads)
        check_batch("k_positions", k_positions, q.shape[0], lk, axes=self.axes, heads=heads)
        return q, k, q_positions, k_positions

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes = ("head_dim", "num_heads")
    needs_axes = True

    @property
    def attends(self) -> bool:
        return True

    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        q = torch.zeros(1, num_heads, 1, head_dim, device=positions.device)  # (1, H, 1, D)
        k = torch.zeros(1, num_heads, positions.shape[0], head_dim, device=positions.device)  # (1, H, L, D)
        self(q, k, positions[-1:], positions)


KIND_BASES = {"additive": AdditiveEncoding, "rotary": RotaryEncoding, "relative": RelativeEncoding}


class BiasEncoding(PositionalEncoding):
    """Base of the ``bias`` kind: a per-head bias on the attention scores.

    Subclasses define ``score_fn()``, which returns an elementwise function
    ``bias(h, q_pos, k_pos)`` of broadcastable position tensors (int64, or float64 for real positions) (head index, query position, key
    position). The same function serves ``forward`` (a whole ``[H, Lq, Lk]`` map) and
    FlexAttention's ``score_mod`` (one score at a time), so the two paths cannot drift. The
    function reads parameters and buffers themselves (gathering by index inside it), never tensors
    computed from them in ``score_fn``: under the caller's ``torch.compile``, FlexAttention takes
    only graph inputs in a ``score_mod``.
    """

    num_heads: int
    scores_from_positions = True
    flex_ok: bool = True  # score_fn() can run inside FlexAttention's score_mod
    # score_fn()'s one-score form compiles in seconds; False where compiling it costs minutes
    # (FIRE unrolls its MLP), so ``posenc.attention``'s auto takes another exact route
    flex_compiles_fast: bool = True
    # The bias falls as |k − q| grows (ALiBi, KERPLE): a row's largest value is at its nearest key
    # (``nearest_keys``), which the backends remove from the row before the cast (far keys).
    # T5 (a bounded table) and FIRE (an MLP of a log ratio) have no term that grows with position.
    peak_at_nearest_key: bool = False
    # The bias depends on k_pos - q_pos only, so at contiguous positions it is a Toeplitz map of
    # one table over the differences (posenc.blockwise reads blocks as views of it).
    translation_invariant: bool = False

    def score_fn(self) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    def nearest_keys(self, q_pos: torch.Tensor, k_pos: torch.Tensor, *, first: torch.Tensor | None = None,
                     last: torch.Tensor | None = None) -> torch.Tensor | None:
        """Each query's nearest key position, ``[Lq]`` (``[B, Lq]``), for a scheme whose rows peak there
        (``peak_at_nearest_key``); None for the others. Query ``i`` sees the keys of index
        ``first[i] … last[i]`` (``[Lq]`` or ``[B, Lq]`` int64, inclusive; all keys by default):
        the causal and document masks are such ranges.

        **Far keys.** Softmax sees only differences along a row, so the backends subtract each
        row's peak ``bias(h, q_i, near_i)`` from the row in float64 before the cast to the score
        dtype (``peak_removed``): exact, and what survives the cast is the part that matters (at
        keys ``10^12`` away, ALiBi's float32 bias is ``−m·10^12`` rounded to multiples of
        ``2^16·m``, which erases every key-to-key difference; after the subtraction they are
        ``−m·|Δ|`` again). Keys sorted within each row's range (positions restarting in each
        document included): a binary search per row, ``O(Lq log Lk)``; otherwise (and under
        ``torch.compile``, which cannot branch on the keys' order) the smallest ``|q − k|`` over
        the pairs, ``2^22`` at a time (no head factor).
        """
        if not self.peak_at_nearest_key:
            return None
        q, k = as_working(q_pos), as_working(k_pos)
        lq, lk = q.shape[-1], k.shape[-1]
        bounds = [t for t in (first, last) if t is not None]
        batch = torch.broadcast_shapes(q.shape[:-1], k.shape[:-1], *(t.shape[:-1] for t in bounds))
        q, k = q.expand(*batch, lq).contiguous(), k.expand(*batch, lk).contiguous()  # (..., Lq), (..., Lk)
        if lq == 0 or lk == 0:
            return q
        lo = torch.zeros_like(q, dtype=torch.long) if first is None else first.expand(*batch, lq)
        hi = torch.full_like(q, lk - 1, dtype=torch.long) if last is None else last.expand(*batch, lq)
        falls = torch.cumsum(torch.nn.functional.pad((k[..., 1:] < k[..., :-1]).long(), (1, 0)), -1)  # descents up to j
        if not torch.compiler.is_compiling() and bool((falls.gather(-1, hi) == falls.gather(-1, lo)).all()):
            a, b = lo.clone(), hi + 1  # the first key >= q in [lo, hi] (hi + 1 if none): binary search
            for _ in range(lk.bit_length() + 1):
                mid = (a + b) // 2
                less = (a < b) & (k.gather(-1, mid.clamp(max=lk - 1)) < q)
                a, b = torch.where(less, mid + 1, a), torch.where((a < b) & ~less, mid, b)
            k_lo, k_hi = k.gather(-1, (a - 1).maximum(lo)), k.gather(-1, a.minimum(hi))  # the two candidates
            return torch.where((q - k_lo).abs() <= (k_hi - q).abs(), k_lo, k_hi)
        near = torch.empty_like(q)
        step = max(1, (1 << 22) // lk)
        cols = torch.arange(lk, device=q.device)
        for s in range(0, lq, step):  # (..., c, Lk) distances, keys a query may not see excluded
            d = (q[..., s:s + step, None] - k[..., None, :]).abs()
            hidden = (cols < lo[..., s:s + step, None]) | (cols > hi[..., s:s + step, None])
            d = d.masked_fill(hidden, torch.inf if d.is_floating_point() else torch.iinfo(d.dtype).max)
            near[..., s:s + step] = k.gather(-1, d.argmin(-1))
        return near

    def peak_removed(self, q_pos: torch.Tensor, k_pos: torch.Tensor, near: torch.Tensor,
                     fn: Callable | None = None) -> torch.Tensor:
        """``bias(h, q_i, k_j) − bias(h, q_i, near_i)``, float64 ``[H, c, n]`` (``[B, H, c, n]``), for
        ``q_pos [c]``, ``k_pos [n]``, ``near [c]`` (or ``[B, ·]``; ``nearest_keys``), ``fn`` the
        scheme's ``score_fn()`` (made once per pass by the caller; by default here).

        With a parameter to train, one call of ``fn`` over the keys and each row's nearest one, so
        that the parameter's gradient is ``Σ_j ds_ij (∂b_ij − ∂b_i*)/∂θ``, summed in float64: two
        calls would each round their ``Σ_j ds_ij ∂b/∂θ`` to the parameter's float32, and at keys
        10^12 away (KERPLE's ``∂b/∂r2 ~ 10^12``) their difference to nothing. Without one, the
        block and its peaks separately, the peaks subtracted in place (one pass more than the
        bias alone)."""
        fn = self.score_fn() if fn is None else fn
        heads = torch.arange(self.num_heads, device=q_pos.device).view(-1, 1, 1)  # (H, 1, 1)
        q = q_pos.unsqueeze(-1).unsqueeze(-3)  # (..., 1, c, 1)
        near = near.unsqueeze(-1)  # (..., c, 1)
        if not (torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())):
            b = fn(heads, q, k_pos.unsqueeze(-2).unsqueeze(-3))  # (..., H, c, n)
            peak = fn(heads, q, near.unsqueeze(-3))  # (..., H, c, 1)
            same = torch.broadcast_shapes(b.shape, peak.shape) == b.shape
            return b.sub_(peak) if same else b - peak
        keys = torch.cat([k_pos.unsqueeze(-2).expand(*near.shape[:-1], k_pos.shape[-1]), near], -1)  # (..., c, n + 1)
        b = fn(heads, q, keys.unsqueeze(-3))  # (..., H, c, n + 1)
        return b[..., :-1] - b[..., -1:]

    def block_fn(self) -> Callable[[torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]:
        """``bias(q_pos [c] or [B, c], k_pos [n] or [B, n], dtype) -> [H, c, n]`` (``[B, H, c, n]``)
        without gradient: the block of the bias that ``posenc.blockwise``'s forward adds to its scores.

        By default ``score_fn`` at every head, in float64, cast to ``dtype``. A scheme may override
        it with a faster form that is equal up to rounding in ``dtype`` (FIRE: its MLP as one matrix
        product over the block's pieces); the backward, which needs the bias's graph, keeps
        ``score_fn``. Made once per pass, like ``score_fn``.
        """
        fn = self.score_fn()
        heads = torch.arange(self.num_heads, device=self.device).view(-1, 1, 1)  # (H, 1, 1)

        def bias(q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            with torch.no_grad():
                return fn(heads, q_pos.unsqueeze(-1).unsqueeze(-3), k_pos.unsqueeze(-2).unsqueeze(-3)).to(dtype)

        return bias

    def forward(self, q_positions: torch.Tensor, k_positions: torch.Tensor, *,
                dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[Lq]``, ``[Lk]`` -> ``[H, Lq, Lk]`` (``[B, H, Lq, Lk]`` if positions are ``[B, L]``).

        The map is computed in float64 and returned in ``dtype`` (default: the module's dtype);
        ``posenc.attention`` asks for its float32 score dtype, so that a bfloat16 module does not
        round away the bias differences between neighbouring keys.
        """
        q_positions = as_working(self.check_positions("q_positions", q_positions), self.device)
        k_positions = as_working(self.check_positions("k_positions", k_positions), self.device)
        check_position_batches(q_positions, k_positions)
        h = torch.arange(self.num_heads, device=self.device).view(-1, 1, 1)  # (H, 1, 1)
        q = q_positions.unsqueeze(-1).unsqueeze(-3)  # (..., 1, Lq, 1)
        k = k_positions.unsqueeze(-2).unsqueeze(-3)  # (..., 1, 1, Lk)
        return self.score_fn()(h, q, k).to(self.dtype if dtype is None else dtype)

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes = ("num_heads",)
    needs_axes = True
    selects_heads = True

    @property
    def attends(self) -> bool:
        return True

    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        self(positions[-1:], positions)


KIND_BASES["bias"] = BiasEncoding
KIND_BASES["none"] = PositionalEncoding


class ContentEncoding(PositionalEncoding):
    """Base of the ``content`` kind: positions that depend on the tokens (FoX, CoPE, DAPE,
    stick-breaking, PaTH). The scheme owns the attention itself, because its weights are no longer
    ``softmax(q·k + f(i − j))``: ``module(q, k, v, hidden=None, *, causal=True, scale=None,
    document_ids=None, backend="auto") -> [B, H, Lq, Dv]`` (``posenc.attention`` calls it).

    What a scheme reads beyond q, k and v is declared: ``reads_hidden`` (FoX's full gate, PaTH)
    means it needs the layer's input ``hidden [B, Lk, d_model]`` (that of every key; queries are
    the last Lq keys); a scheme that does not declare it refuses one. Content schemes take no
    positions: their positions are counted from the content (token order only orders the keys).

    A scheme defines ``rows(q, k, v, state, q0, allowed, scale) -> [B, H, c, Dv]``: its formula for
    ``c`` query rows (the queries at key indices ``q0 … q0 + c − 1``) over the keys ``0 … n − 1``
    they may see (``allowed [1 or B, 1 or H, c, n]`` bool: causality, window, documents and mask,
    never None: ``Visibility.tile``), and
    ``state(k, hidden, docs)``, the per-token tensors ``rows`` reads (FoX's cumulative log gates).
    A scheme that takes Gemma 2's logit cap and GPT-OSS's sinks declares ``takes_softcap`` and
    ``takes_sinks`` (every built-in scheme; stick-breaking has no softmax and refuses sinks), and
    its ``rows`` takes ``softcap=`` and ``sinks=`` keywords, passed only when set
    (``posenc.rowwise``'s docstring says where each scheme's cap enters); one that takes attention
    dropout declares ``takes_dropout`` and its ``rows`` a ``dropout=`` keyword, a callable its
    weights pass through before ``v`` (every built-in scheme).
    Every content scheme is row-local: a query's weights need only its own row of scores
    (CoPE's gate sums and stick-breaking's survival run from the query backwards along its row),
    so ``posenc.rowwise.RowwiseEncoding`` (the base the schemes subclass) runs ``rows`` over blocks
    of queries, recomputed in the backward (``backend="blockwise"``), and never holds an
    ``[Lq, Lk]`` tensor.
    """

    reads_hidden: bool = False
    causal_only: bool = True  # the formula counts from the query backwards: only causal attention
    flex_ok: bool = False  # FoX: an elementwise score bias FlexAttention can run
    takes_softcap: bool = False  # rows(..., softcap=): Gemma 2's logit cap (posenc.rowwise)
    takes_sinks: bool = False  # rows(..., sinks=): GPT-OSS's attention sinks
    no_sinks_reason: str = "its rows do not declare takes_sinks"
    takes_window: bool = True  # window=: a sliding window is one more mask on the keys of each row
    takes_dropout: bool = False  # rows(..., dropout=): attention dropout on its weights (posenc.dropout)
    no_window_reason: str = "its rows do not take a window"
    BACKENDS = ("auto", "materialize", "chunked", "blockwise")
    d_model: int | None = None
    num_heads: int | None = None  # the heads its parameters are per (None: any)
    head_dim: int | None = None  # the head size its parameters take (None: any)

    def state(self, k: torch.Tensor, hidden: torch.Tensor | None, docs: torch.Tensor | None) -> Any:
        """Per-token tensors computed once for the whole sequence (default: nothing); ``docs`` is
        ``[1 or B, Lk]`` document ids or None."""
        return None

    def flex_bias(self, k: torch.Tensor, hidden: torch.Tensor | None, docs: torch.Tensor | None):
        """``(bias, index)`` for a scheme whose score is an elementwise bias of per-token state
        (``flex_ok``: FoX): a ``BiasEncoding`` whose ``score_fn`` reads query and key indices, and the
        keys' indices ``[B, Lk]``, so that ``posenc.attention`` runs it on FlexAttention as any bias
        (the queries are the last ``Lq`` keys). Schemes without ``flex_ok`` have none."""
        raise NotImplementedError(f"scheme {self.name!r} has no elementwise score for FlexAttention (flex_ok=False)")

    def describe(self, *, text: str | None = None) -> list[tuple[str, str]]:
        """Extra ``(name, value)`` rows for ``posenc show`` (CoPE: the positions of a typed sentence)."""
        return []

    def check_length(self, lq: int, lk: int) -> None:
        """Raises ValueError when the scheme cannot run at these lengths (default: it always can)."""

    def rows(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: Any, q0: int,
             allowed: torch.Tensor | None, scale: float) -> torch.Tensor:
        raise NotImplementedError

    def check_hidden(self, hidden: Any, b: int, lk: int) -> torch.Tensor | None:
        """``hidden [B, Lk, d_model]`` when the scheme reads it; None (and must be None) otherwise."""
        if not self.reads_hidden:
            if hidden is not None:
                raise ValueError(f"scheme {self.name!r} does not read hidden= (the layer's input); pass hidden=None "
                                 f"(schemes that read it: those with reads_hidden, e.g. fox with gate='full')")
            return None
        if hidden is None:
            raise ValueError(f"scheme {self.name!r} reads the layer's input: pass hidden= of shape "
                             f"[B, Lk, d_model={self.d_model}] (the input of every key)")
        hidden = check_tensor("hidden", hidden, ndim=3, last_dim=self.d_model)
        if hidden.shape[:2] != (b, lk):
            raise ValueError(f"hidden must have shape [B={b}, Lk={lk}, {self.d_model}], got {list(hidden.shape)}")
        return hidden

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hidden: torch.Tensor | None = None, *,
                causal: bool = True, scale: float | None = None, document_ids: torch.Tensor | None = None,
                backend: str = "auto") -> torch.Tensor:
        """Attention of ``q [B, H, Lq, D]`` over ``k [B, H, Lk, D]``, ``v [B, H, Lk, Dv]`` (see the class);
        ``posenc.rowwise.RowwiseEncoding`` runs ``rows`` over blocks of queries."""
        raise NotImplementedError

    # -- kind protocol: how a model and the benchmark apply this kind (see the module docstring) --
    model_sizes = ("d_model", "head_dim", "num_heads")
    needs_axes = True
    counts_positions_from_tokens = True

    @property
    def attends(self) -> bool:
        return True

    def attention_keywords(self, positions: torch.Tensor | None, hidden: torch.Tensor | None) -> dict[str, Any]:
        """No positions (they are counted from the tokens); ``hidden`` when the scheme reads it."""
        return {"q_positions": None, "k_positions": None, "hidden": hidden if self.reads_hidden else None}

    def check_runs_at(self, positions: torch.Tensor, *, head_dim: int, num_heads: int) -> None:
        self.check_length(positions.shape[0], positions.shape[0])


KIND_BASES["content"] = ContentEncoding
