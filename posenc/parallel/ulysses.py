"""``method="ulysses"`` (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv:2309.14509): an all-to-all
turns the sequence shards of every head into the whole sequence of ``H / P`` heads, ``posenc.attention``
runs there (the core's own steps and visibility, any backend), and a second all-to-all brings each
rank its rows back. A bias scheme runs at its heads ``[r·H/P, (r+1)·H/P)`` (``_HeadSlice``).

Notation used for tensor shapes: B batch, H heads, L whole length, Ll local length, D head dim.
"""

from __future__ import annotations

import torch

from posenc.encodings._base import BiasEncoding
from posenc.parallel.checks import _Extras
from posenc.parallel.comm import _GatherSequence, _SwapShards
from posenc.parallel.ring import _fox_augmented
from posenc.scores import check_num_heads


class _HeadSlice(BiasEncoding):
    """Heads ``start … start + n − 1`` of a bias scheme: its ``score_fn`` at head ``h + start`` (the
    scheme's own function, so its parameters' gradients reach it through the slice)."""

    kind = "bias"

    def __init__(self, inner: BiasEncoding, start: int, n: int) -> None:
        super().__init__()
        self.inner, self.start, self.num_heads, self.name = inner, start, n, inner.name
        for flag in ("real_positions", "peak_at_nearest_key", "translation_invariant", "flex_ok",
                     "flex_compiles_fast"):
            setattr(self, flag, getattr(inner, flag))

    def score_fn(self):
        fn, start = self.inner.score_fn(), self.start

        def bias(h, q_pos, k_pos):
            return fn(h + start, q_pos, k_pos)

        return bias


def _ulysses(q, k, v, pe, *, all_positions, docs, pad, hidden, causal, scale, backend, group, all_k=None,
             extras: _Extras = _Extras()) -> torch.Tensor:
    """``method="ulysses"``: sequence shards to head shards (``_SwapShards``), ``posenc.attention`` on
    the whole sequence for this rank's ``H / P`` heads (its sinks' entries), and back. ``all_k``: the
    keys' positions (a cache: the queries are the last ``Lq`` of ``0..Lk−1``), else the queries'."""
    import torch.distributed as dist

    from posenc.attn import attention
    from posenc.scores import repeat_kv

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    h, h_kv = q.shape[1], k.shape[1]
    if h % world or h_kv % world:
        raise ValueError(f"method='ulysses' splits the heads over the {world} ranks: q's H={h} and k/v's H_kv={h_kv} "
                         f"must both be multiples of {world}; use method='ring' (any number of heads)")
    from posenc.encodings.fox import FoX

    dv = v.shape[-1]
    content = pe is not None and pe.counts_positions_from_tokens
    bias = pe is not None and pe.selects_heads and not content  # its score_fn at this rank's heads (_HeadSlice)
    if bias:
        check_num_heads(pe, q)
    all_k = all_positions if all_k is None else all_k
    order, k_order = torch.argsort(all_positions), torch.argsort(all_k)  # rank order -> sequence order
    q = _SwapShards.apply(q, group, True)[:, :, order]  # (B, H/P, Lq, D)
    k, v = (_SwapShards.apply(t, group, True)[:, :, k_order] for t in (k, v))  # (B, H_kv/P, Lk, ·)
    n, length = h // world, all_k.shape[0]
    first = length - all_positions.shape[0]  # the queries' first position (0 without a cache)
    docs = None if docs is None else docs[..., order]
    pad = None if pad is None else pad[..., k_order]
    if hidden is not None:  # (B, L, d_model) in sequence order, its gradient summed back to each rank's rows
        hidden = _GatherSequence.apply(hidden.unsqueeze(1), group)[:, 0, order]
    everywhere = torch.arange(length, device=q.device)
    if docs is not None:  # positions restart at 0 in each document, posenc.attention's default (no cache here)
        from posenc.documents import positions_in_documents

        everywhere = positions_in_documents(docs)  # (B or 1, L)
    where = {"q_positions": everywhere[..., first:], "k_positions": everywhere}
    if isinstance(pe, FoX):
        k, v = repeat_kv(k, v, n)
        c = pe.state(k, hidden, docs)[:, rank * n:(rank + 1) * n]  # (B or 1, H/P, L)
        q, k = _fox_augmented(q, k, c, scale)
        v = torch.nn.functional.pad(v, (0, 1))  # one head size D + 1 for SDPA's fused kernel; cut after
        pe = None
    elif content:
        where = {"hidden": hidden}
    elif bias and n != h:
        pe = _HeadSlice(pe, rank * n, n)
    sinks = None if extras.sinks is None else extras.sinks[rank * n:(rank + 1) * n]  # this rank's heads'
    out = attention(q, k, v, pe, causal=causal, scale=scale, backend=backend, document_ids=docs,
                    attention_mask=pad, softcap=extras.softcap, sinks=sinks, window=extras.window,
                    **where)[..., :dv]  # (B, H/P, Lq, Dv)
    return _SwapShards.apply(out[:, :, all_positions - first], group, False)  # (B, H, Ll, Dv), this rank's rows
