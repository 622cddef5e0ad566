"""``method="ring"`` (Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv:2310.01889).

Each rank keeps its queries; key/value shards travel rank to rank (``batch_isend_irecv``, the next
transfer overlapping the current tile). The scheme's step is the core's own
(``posenc.attn.scheme_step``: rotary schemes rotate q and k at their global positions before the
keys travel; relative schemes repeat the keys per query head); FoX carries ``c_j`` as one more
key column (``_fox_augmented``).

**Visibility.** One ``posenc.masking.Visibility`` of the whole sequence (causality, the window, the
documents and the key padding, by sequence index) is built once per call (``_RingPlan.vis``); a
tile, a run of query positions × a run of key positions, reads its own from it
(``Visibility.crop``) and is skipped when the whole's ``key_range`` of its queries misses its keys.
Nothing here derives causality, windows, documents or padding itself.

**Tiles.** A tile runs ``posenc.blockwise``'s public tile API (``tile_forward``: ``(o, lse)``; or
SDPA's fused CPU kernel for a plain tile), tiles merge by log-sum-exp (``posenc.scores.merge_lse``),
and the backward runs ``tile_backward`` given the global ``o`` and ``lse``, so each tile's ``p`` and
``δ`` are the whole softmax's; after ``P`` steps each shard's gradients are back with their owner.
Two changes make blockwise's tiles mergeable (``_RingTileBias``): no Toeplitz table where a
parameter trains, and each row's far-key peak taken at the query's own position.

Notation used for tensor shapes: B batch, H heads, L whole length, Ll local length, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.blockwise import TileBias, tile_backward, tile_forward
from posenc.masking import Visibility
from posenc.parallel.checks import _Extras
from posenc.parallel.comm import _GatherSequence, _Passing, _runs
from posenc.scores import merge_lse, merge_sinks, sinks_grad


class _RingTileBias(TileBias):
    """``posenc.blockwise.TileBias`` of one ring tile, made mergeable: a tile's log-sum-exp must be that
    of the true scores, or differ from it by one constant per row on every tile.

    - Toeplitz tiles (a translation-invariant scheme at contiguous positions, nothing to train):
      the table has a per-head constant removed that depends on the tile's keys; ``shift``
      ``[1, H, 1]`` is that constant (the scheme at the table's largest entry, in float64, minus the
      entry), added to the tile's ``lse`` and taken off the global one for its backward. With a
      parameter to train the tile uses the per-block path instead (the constant's gradient would
      not cancel within a tile).
    - Otherwise each row's far-key peak (``BiasEncoding.nearest_keys``) is taken at the query's own
      position, one constant per row on every tile."""

    def __init__(self, *args, trainable: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.toeplitz = self.toeplitz and not trainable
        self.shift = None

    def prepare(self) -> None:
        super().prepare()
        if self.toeplitz:
            e = self.table.argmax(-1)  # (H,): an entry at offset j − i = e − (Lq − 1)
            offset = e - (self.lq - 1)
            with torch.no_grad():
                b = self.fn(self.heads.view(-1), self.qpos[(-offset).clamp(min=0)], self.kpos[offset.clamp(min=0)])
            self.shift = (b - self.table.gather(-1, e[:, None]).squeeze(-1).double()).view(1, -1, 1)  # (1, H, 1)
        elif self.near is not None:
            self.near = self.qpos  # (c,): a query's own key is its nearest key of the whole sequence

    def lse_shift(self, dtype: torch.dtype) -> torch.Tensor | float:
        return 0.0 if self.shift is None else self.shift.to(dtype)


@dataclass
class _RingPlan:
    """What every ring step reads: the scheme after its step (a bias or relative module, or None),
    this rank's query positions, every rank's key positions (rank order, ``[P·Llk]``), the whole
    sequence's ``Visibility`` (queries at index ``position − (Lk − Lq)``), and per source rank the
    tiles (query run × key run) whose keys some of its queries see. ``scheme_q``, ``scheme_k``: the
    positions the scheme reads, ``[Ll]`` and ``[P·Llk]`` or with documents ``[B or 1, ·]`` restarting
    at 0 in each document (None: the sequence's)."""

    pe: object
    positions: torch.Tensor
    key_positions: torch.Tensor
    vis: Visibility
    scale: float
    group: object
    rank: int
    world: int
    local: int  # keys per rank
    trainable: bool = False  # the scheme has parameters to train (no per-tile Toeplitz table)
    softcap: float | None = None
    scheme_q: torch.Tensor | None = None
    scheme_k: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.scheme_q = self.positions if self.scheme_q is None else self.scheme_q
        self.scheme_k = self.key_positions if self.scheme_k is None else self.scheme_k
        shift = self.vis.shift
        self.tiles = []
        for src in range(self.world):
            keys, tiles = self.key_positions[src * self.local:(src + 1) * self.local], []
            for qa, qb in _runs(self.positions):
                qs, qe = int(self.positions[qa]) - shift, int(self.positions[qb - 1]) + 1 - shift
                k0, k1 = self.vis.key_range(qs, qe)
                for ka, kb in _runs(keys):
                    ks, ke = int(keys[ka]), int(keys[kb - 1]) + 1
                    if ks < k1 and ke > k0:  # some query of the run may see some key of the run
                        tiles.append((qa, qb, ka, kb, (qs, qe, ks, ke)))
            self.tiles.append(tiles)

    def crop(self, tile, device) -> Visibility:
        """The tile's visibility, read from the whole's."""
        return self.vis.crop(*tile[4], device=device)


def _plain(plan: _RingPlan, vis: Visibility, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether a tile is plain attention that SDPA's fused CPU kernel runs whole, with its log-sum-exp
    (and its backward given the global ones): no scheme left (none, rotary after its rotation, FoX
    after its key column), no mask beyond index causality, one head count and one head size."""
    return (plan.pe is None and vis.window is None and vis.docs is None and vis.mask is None
            and plan.softcap is None and q.device.type == "cpu" and k.shape[1] == q.shape[1]
            and k.shape[-1] == v.shape[-1] == q.shape[-1])


def _tile_bias(plan: _RingPlan, tile, vis: Visibility, src: int, work) -> _RingTileBias:
    qa, qb, ka, kb, _ = tile
    kpos = plan.scheme_k[..., src * plan.local:(src + 1) * plan.local][..., ka:kb]
    return _RingTileBias(plan.pe, plan.scheme_q[..., qa:qb], kpos, work, vis=vis, trainable=plan.trainable,
                         softcap=plan.softcap)


class _RingAttention(torch.autograd.Function):
    """Ring attention: the key/value shards travel, each tile is scored with ``tile_forward`` and merged
    by log-sum-exp. Saves q, k, v (this rank's shard), out and lse. Backward: the shards travel again
    with their key/value gradients; each tile runs ``tile_backward`` given the global ``out`` and
    ``lse``, and after ``P`` steps every shard's gradients are back with their owner."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, plan: _RingPlan, *params):  # noqa: D102
        b, h, ll = q.shape[:3]
        out = q.new_zeros(b, h, ll, v.shape[-1])  # (B, H, Ll, Dv)
        lse = q.new_full((b, h, ll), float("-inf"))  # (B, H, Ll)
        shard = (k, v)
        for step in range(plan.world):
            src = (plan.rank - step) % plan.world
            passing = _Passing(shard, plan.group, plan.rank, plan.world) if step + 1 < plan.world else None
            for tile in plan.tiles[src]:
                qa, qb, ka, kb, _ = tile
                qt, kt, vt = q[:, :, qa:qb], shard[0][:, :, ka:kb], shard[1][:, :, ka:kb]
                vis = plan.crop(tile, q.device)
                if _plain(plan, vis, q, kt, vt):  # SDPA's fused CPU kernel, which returns the log-sum-exp
                    o_t, lse_t = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                        qt, kt, vt, 0.0, vis.causal, scale=plan.scale)
                else:
                    bias = _tile_bias(plan, tile, vis, src, q.dtype)
                    bias.prepare()
                    o_t, lse_t = tile_forward(qt, kt, vt, bias, scale=plan.scale)
                    lse_t = lse_t + bias.lse_shift(lse_t.dtype)
                out[:, :, qa:qb], lse[:, :, qa:qb] = merge_lse(out[:, :, qa:qb], lse[:, :, qa:qb], o_t, lse_t)
            if passing is not None:
                shard = passing.wait()
        if sinks is not None:  # one more key of score sinks[h] and value 0, merged last (as posenc.blockwise)
            out, lse = merge_sinks(out, lse, sinks)
        lse.masked_fill_(torch.isneginf(lse), float("inf"))  # a query that sees no key: p = 0 in the backward
        ctx.save_for_backward(q, k, v, out, lse, sinks, *params)
        ctx.plan = plan
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):  # noqa: D102
        q, k, v, out, lse, sinks, *params = ctx.saved_tensors
        plan: _RingPlan = ctx.plan
        dout = dout.contiguous()
        dsinks = None if sinks is None else sinks_grad(sinks, lse, (dout * out).sum(-1))  # this rank's rows' part
        dq, dparams = torch.zeros_like(q), [torch.zeros_like(p) for p in params]
        shard, grads = (k, v), (torch.zeros_like(k), torch.zeros_like(v))
        for step in range(plan.world):
            src = (plan.rank - step) % plan.world
            last = step + 1 == plan.world
            passing = None if last else _Passing(shard, plan.group, plan.rank, plan.world)
            for tile in plan.tiles[src]:
                qa, qb, ka, kb, _ = tile
                qt, kt, vt = q[:, :, qa:qb], shard[0][:, :, ka:kb], shard[1][:, :, ka:kb]
                o_t, lse_t, do_t = out[:, :, qa:qb], lse[:, :, qa:qb], dout[:, :, qa:qb]
                vis = plan.crop(tile, q.device)
                if _plain(plan, vis, q, kt, vt):  # the fused backward, given the global o and lse
                    gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                        do_t, qt, kt, vt, o_t, lse_t, 0.0, vis.causal, scale=plan.scale)
                    gp = []
                else:
                    bias = _tile_bias(plan, tile, vis, src, q.dtype)
                    with torch.no_grad():
                        bias.prepare()
                    gq, gk, gv, gp = tile_backward(do_t, qt, kt, vt, o_t, lse_t - bias.lse_shift(q.dtype), bias,
                                                   scale=plan.scale, params=params)  # lse in the tile's frame
                dq[:, :, qa:qb] += gq
                grads[0][:, :, ka:kb] += gk
                grads[1][:, :, ka:kb] += gv
                for acc, g in zip(dparams, gp):
                    if g is not None:
                        acc += g
            if plan.world > 1:  # the gradients follow their shard; after the last step they reach its owner
                grads = _Passing(grads, plan.group, plan.rank, plan.world).wait()
            if passing is not None:
                shard = passing.wait()
        return dq, grads[0], grads[1], dsinks, None, *dparams


def _fox_state(pe, hidden: torch.Tensor | None, positions: torch.Tensor, all_positions: torch.Tensor,
               group) -> torch.Tensor:
    """FoX's ``c = cumsum(log f)`` at this rank's global positions, ``[B or 1, H, Ll]`` float64: a
    constant gate at its closed form ``log f·(t + 1)``; a full gate's ``log f`` of every rank
    all-gathered (``[B, H, L]``, differentiable: each rank's gates reach every later query), put in
    sequence order and summed."""
    if not pe.reads_hidden:
        return pe.log_gates(None) * (positions + 1).to(torch.float64)  # (1, H, Ll)
    log_f = pe.log_gates(hidden)  # (B, H, Ll)
    every = _GatherSequence.apply(log_f.unsqueeze(-1), group).squeeze(-1)  # (B, H, L), rank order
    return torch.cumsum(every[..., torch.argsort(all_positions)], dim=-1)[..., positions]


def _fox_augmented(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, scale: float):
    """FoX's score ``q_i·k_j·scale + c_i − c_j`` as a plain dot product: ``c_i`` is one constant per
    row, which softmax ignores, and ``−c_j`` is one more key column against a query column of 1:
    ``[q_i, 1]·[k_j, −c_j/scale]·scale = q_i·k_j·scale − c_j``. ``q [B, H, L, D]``, ``k`` with the
    same heads, ``c [B or 1, H, L]`` float64; returns ``q, k`` of head size ``D + 1``."""
    column = (-c / scale).to(k.dtype).unsqueeze(-1).expand(k.shape[0], -1, -1, -1)  # (B, H, L, 1)
    return torch.cat((q, torch.ones_like(q[..., :1])), -1), torch.cat((k, column), -1)


def _in_documents(docs, all_positions: torch.Tensor, positions: torch.Tensor, all_k: torch.Tensor):
    """The positions the scheme reads: this rank's queries' ``[Ll]`` and every rank's keys' ``[P·Llk]``
    (rank order) as given, or with ``docs`` (``[B or 1, P·Ll]`` in rank order; no cache) each token's
    position in its document, ``[B or 1, Ll]`` and ``[B or 1, P·Ll]``: ``positions_in_documents`` of
    the whole sequence, ``posenc.attention``'s default positions."""
    if docs is None:
        return positions, all_k
    from posenc.documents import positions_in_documents

    within = positions_in_documents(docs[..., torch.argsort(all_positions)])  # (B or 1, L), sequence order
    return within[..., positions], within[..., all_k]


def _ring(q, k, v, pe, *, positions, all_positions, docs, pad, hidden, causal, scale, group,
          k_positions=None, all_k=None, extras: _Extras = _Extras()) -> torch.Tensor:
    """``method="ring"``: the core's scheme step on this rank's shard (``posenc.attn.scheme_step``),
    FoX's ``c`` as a key column, the whole sequence's ``Visibility``, then ``_RingAttention``.
    ``docs`` ``[B or 1, P·Ll]`` and ``pad`` ``[B or 1, P·Llk]`` in rank order; ``k_positions``,
    ``all_k``: the keys' own (a cache), else the queries'. With documents the scheme reads positions
    that restart at 0 in each document, as ``posenc.attention``'s default (``_in_documents``)."""
    import torch.distributed as dist

    from posenc.attn import scheme_step
    from posenc.scores import repeat_kv

    k_positions = positions if k_positions is None else k_positions
    all_k = all_positions if all_k is None else all_k
    b, h, lq, lk = q.shape[0], q.shape[1], all_positions.shape[0], all_k.shape[0]
    if pe is not None and pe.counts_positions_from_tokens:  # FoX (others are refused): one more key column
        if not causal:
            raise ValueError(f"scheme {pe.name!r} counts positions from each query backwards: it needs causal=True")
        k, v = repeat_kv(k, v, h)
        q, k = _fox_augmented(q, k, _fox_state(pe, hidden, positions, all_positions, group), scale)
        dv = v.shape[-1]  # values padded to the head size D + 1 (the fused kernel wants one), cut after
        return _ring(q, k, torch.nn.functional.pad(v, (0, 1)), None, positions=positions, all_positions=all_positions,
                     docs=docs, pad=pad, hidden=None, causal=causal, scale=scale, group=group,
                     extras=extras)[..., :dv]
    scheme_q, scheme_k = _in_documents(docs, all_positions, positions, all_k)
    # this rank's keys are its queries' tokens where there are documents (a cache takes none)
    pe, q, k, v, _, _ = scheme_step(pe, q, k, v, scheme_q, k_positions if docs is None else scheme_q,
                                    observe=torch.arange(lk, device=q.device))  # one length on every rank
    vis = Visibility.build(b=b, h=h, lq=lq, lk=lk, device=q.device, causal=causal, window=extras.window,
                           document_ids=None if docs is None else docs[..., torch.argsort(all_positions)],
                           attention_mask=None if pad is None else pad[..., torch.argsort(all_k)])
    params = [p for p in pe.parameters() if p.requires_grad] if pe is not None and torch.is_grad_enabled() else []
    work = torch.promote_types(q.dtype, torch.float32)
    plan = _RingPlan(pe, positions, all_k, vis, scale, group, dist.get_rank(group), dist.get_world_size(group),
                     k.shape[2], trainable=bool(params), softcap=extras.softcap, scheme_q=scheme_q, scheme_k=scheme_k)
    sinks = None if extras.sinks is None else extras.sinks.to(work)
    return _RingAttention.apply(q.to(work), k.to(work), v.to(work), sinks, plan, *params).to(q.dtype)
