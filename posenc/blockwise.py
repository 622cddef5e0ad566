"""Blockwise attention with a positional bias: exact, trainable, and never an ``[Lq, Lk]`` map.

``posenc.attention(..., backend="blockwise")`` (and ``"auto"`` when gradients are needed and the
map is large). It serves every bias scheme (``pe(q_positions, k_positions)``: ALiBi, T5, KERPLE,
FIRE) and every relative scheme (``pe(q, k, q_positions, k_positions)``: Transformer-XL, Shaw
with its value term), and its gradients reach q, k, v and the scheme's parameters.

Forward: the online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867; FlashAttention, Dao et
al. 2022, arXiv:2205.14135). Query rows ``i`` of a block visit the key blocks ``J_1, J_2, ...``
in turn; with scores ``s_ij = scale · q_i·k_j + b_ij`` (``b`` the bias block, ``−∞`` where causal
masks) the running maximum, normaliser and unnormalised output after block ``t`` are

    m_i ← max(m_i, max_{j∈J_t} s_ij)
    l_i ← e^{m_i^old − m_i} l_i + Σ_{j∈J_t} e^{s_ij − m_i}
    a_i ← e^{m_i^old − m_i} a_i + Σ_{j∈J_t} e^{s_ij − m_i} v'_ij

and at the end ``o_i = a_i / l_i`` and ``lse_i = m_i + log l_i``. By induction ``l_i = Σ_j
e^{s_ij − m_i}`` over the keys seen so far, so ``o_i = Σ_j p_ij v'_ij`` with ``p_ij = e^{s_ij −
lse_i}``, the softmax, exactly. ``v'_ij = v_j`` except for Shaw, where ``v'_ij = v_j + a^V_ij``:
its value term is linear in the weights, so it takes the unnormalised ``e^{s − m}`` as ``v``
does. Only ``o`` and ``lse`` are saved (``[B, H, Lq, Dv]`` and ``[B, H, Lq]``).

Backward: recomputing ``s`` and ``p = e^{s − lse}`` block by block gives every gradient. With
``dO`` the output's gradient, ``dp_ij = dO_i · v'_ij`` and, since ``o_i = Σ_j p_ij v'_ij`` under
the softmax ``p_i = softmax(s_i)``,

    ds_ij = p_ij (dp_ij − Σ_j' p_ij' dp_ij') = p_ij (dp_ij − dO_i · o_i)

because ``Σ_j' p_ij' dp_ij' = dO_i · Σ_j' p_ij' v'_ij' = dO_i · o_i``: the row term ``δ_i =
rowsum(dO ∘ O)`` is computed once, before the loop, from the saved output. Then ``dv_j += Σ_i
p_ij dO_i``, ``dq_i += scale Σ_j ds_ij k_j``, ``dk_j += scale Σ_i ds_ij q_i``, and the bias gets
``ds`` itself (``∂s/∂b = 1``): the block's bias is recomputed under ``enable_grad`` and
``torch.autograd.grad(b, inputs, ds)`` carries ``ds`` into the scheme's parameters (T5's table,
KERPLE's r1/r2, FIRE's MLP, c and L; Transformer-XL's W_R, u, v and Shaw's w^K), and into q and k
for a relative scheme, one block at a time. Shaw's value term adds ``dO_i · a^V_ij`` to ``dp``
and its own gradient to w^V, both from ``autograd.grad`` of the block's value term.

Translation-invariant biases (ALiBi, T5, KERPLE) at contiguous positions are one table read
through strided views (see ``TileBias``): the forward is SDPA's fused CPU kernel per query block with
the view as its mask, and when the bias has nothing to train (ALiBi) so is the backward
(``_scaled_dot_product_flash_attention_for_cpu_backward``, given the global ``o`` and ``lse``);
otherwise the backward is the loop above, whose ``ds`` sums along diagonals into the table.
Every other scheme without a value term (FIRE, the others at batched or gapped positions,
Transformer-XL) runs its CPU forward through the same fused kernel tile by tile, the tile's bias
its mask, and merges the tiles' ``(o, lse)`` (``_forward_fused``): the loop above makes ~6 passes
over each block of scores where the kernel makes one (measured on a block of 256 x 512 keys, 8
heads, one thread: 21 ns per score and head against 9.6 ns).

Far keys: a bias that grows with distance (ALiBi, KERPLE) has each row's peak removed in float64
before the cast to the score dtype (``BiasEncoding.nearest_keys``): per row from its nearest key
on the per-block path, per head from the table's largest value on the Toeplitz path (a constant
for every row of the head); both stay in the graph, so parameters' gradients sum ``ds·(∂b −
∂b*)`` in float64. A value head size ``Dv`` other than ``D`` reaches the fused CPU kernel padded
with zero columns (``_one_head_size``); the backward's loop takes any ``Dv``.

Dropout (``dropout_p`` > 0; ``posenc.dropout``): the forward's loop multiplies each block's
``e^{s − m}`` by ``z_ij = keep_ij / (1 − p)`` before ``v`` (and Shaw's value term), while the
normaliser ``l_i`` sums the weights undropped, so ``o_i = Σ_j p_ij z_ij v'_ij``. Nothing of the
mask is saved: the backward recomputes each block's ``keep`` from the call's seed and the block's
position (as flash-attention replays its Philox mask from ``(seed, offset)``). With ``P' = P ∘ Z``,
``dv_j = Σ_i p_ij z_ij dO_i``, ``dp_ij = z_ij (dO_i · v'_ij)``, and ``δ_i = Σ_j p_ij dp_ij = dO_i ·
Σ_j p_ij z_ij v'_ij = dO_i · o_i`` as before, so ``ds = p ∘ (dp − δ)`` is unchanged. The fused CPU
kernels (Toeplitz and per tile) drop only with a mask of their own from the global generator, which
no backward here could replay, so dropout always runs the loop.

Memory: besides q, k, v, o, lse and the gradients, one block of scores and its bias (``B·H·
BLOCK_Q·BLOCK_K`` elements, with the scheme's temporaries for that block) lives at a time.
Causal (and windowed) attention skips the key blocks no query of a block can see
(``Visibility.key_range``) and masks only those that cross the diagonal (or the window's edge). The bias is computed per block by the scheme's own ``score_fn`` (the function that also
builds the full map and FlexAttention's ``score_mod``), in float64 and then cast, so the three
paths cannot drift; the forward, which needs no graph, asks the scheme's ``block_fn``, which is
``score_fn`` too except where a scheme has a faster form held to the same reference (FIRE).

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, D head dim, Dv value
head dim, c/n the rows/columns of a block.
"""

from __future__ import annotations

import torch

from posenc.masking import Visibility
from posenc.positions import as_working
from posenc.scores import (cap_scores, capped, empty_rows_lse, fold as _fold, merge_sinks, sinks_grad,
                           unfold as _unfold)

# Blocks of 256 queries x 512 keys: 8 heads' scores are 4 MB in float32 and the largest float64
# temporary (a bias block) 8 MB, under glibc's 32 MB mmap threshold, so every block reuses warm
# heap memory. On this 2-core machine a fresh 34 MB float64 result cost 135 ms (page faults)
# against 14 ms for the same op into warm memory, which made FIRE's per-pair MLP blocks 6x
# slower at 256x512 than at 64x128. FIRE's (piecewise-linear) bias now costs the same per pair at
# 128x256 and 256x512 (0.53 us, on a loaded machine); the larger block spends less in Python.
BLOCK_Q = 256
BLOCK_K = 512
FUSED_BLOCK_Q = 512  # query rows per call of SDPA's fused kernel (Toeplitz forward): causal wastes ~c/2 rows' keys


class TileBias:
    """The bias of one block, ``bias(qs, qe, ks, ke, q, k)``, broadcastable to ``[B, H, c, n]``.

    ``q``/``k`` are the block's (work dtype) queries and keys, used by relative schemes only. The
    bias kind's ``score_fn`` is made once per pass (it gathers learned tables outside the
    elementwise function); call ``prepare()`` under the grad mode the pass needs.

    Toeplitz mode (``self.table`` is set): a bias scheme that depends on ``k − q`` only
    (``translation_invariant``) at contiguous positions ``qpos = q0 + i``, ``kpos = k0 + j`` has
    ``b_ij = f(j − i + k0 − q0)``: one float64 table ``u[e] = f(e − (Lq − 1) + k0 − q0)`` over
    ``e = j − i + Lq − 1 ∈ [0, Lq + Lk − 1)``, with causality's and the window's ``−∞`` folded in
    (the index offset ``j − (i + Lk − Lq)`` is ``e − Lk + 1``: causal masks ``e ≥ Lk``). A block
    whose query rows are taken in reverse order (``r = qe − 1 − i``) reads
    ``u[ks + (Lq − qe) + r + c]`` at row ``r``, column ``c``: a view of ``u`` with strides
    ``(T, 1, 1)`` over ``[H, c, n]``, never materialized, which SDPA's fused CPU kernel takes as
    its ``attn_mask``. The gradient of ``u`` is the block's ``ds`` summed along those
    anti-diagonals (``r + c`` constant).
    """

    def __init__(self, pe, q_positions: torch.Tensor, k_positions: torch.Tensor, work: torch.dtype, *,
                 vis: Visibility, softcap: float | None = None, sinks: bool = False, dropout=None) -> None:
        self.pe, self.work, self.vis, self.lq, self.lk = pe, work, vis, vis.lq, vis.lk
        self.dropout = dropout  # a posenc.dropout.AttentionDropout (dropout_p > 0): the loop, never a fused kernel
        # a tile may hide some of its rows whole (a window, documents, an attention mask)
        self.partial = vis.window is not None or vis.docs is not None or vis.mask is not None
        self.softcap = softcap  # scores formed here: no fused kernel (which adds the bias inside)
        # the scheme after the core's step (posenc.attn.scheme_step): a bias, a relative scheme, or None
        self.relative = pe is not None and not pe.scores_from_positions
        self.bias = pe is not None and not self.relative
        self.value_fn = None if pe is None else pe.value_term  # (None: no scheme, only the masks)
        # (L) or (B, L): int64, or float64 for real-valued positions (never rounded)
        self.qpos, self.kpos = as_working(q_positions), as_working(k_positions)
        self.fn = self.block = self.table = self.near = None
        # SDPA's fused kernel that returns the log-sum-exp exists for the CPU only; the table of
        # differences needs integer positions
        self.toeplitz = (self.bias and pe.translation_invariant and self.qpos.device.type == "cpu"
                         and not self.qpos.is_floating_point() and not self.kpos.is_floating_point()
                         and _contiguous(self.qpos) and _contiguous(self.kpos) and vis.mask is None
                         and vis.docs is None and softcap is None and not sinks and dropout is None)

    def prepare(self) -> None:
        if not self.bias:
            return
        self.fn = self.pe.score_fn()
        self.block = self.pe.block_fn()
        self.heads = torch.arange(self.pe.num_heads, device=self.qpos.device).view(-1, 1, 1)  # (H, 1, 1)
        if self.toeplitz:
            lq, lk = self.lq, self.lk
            e = torch.arange(lq + lk - 1, device=self.qpos.device)  # (T,)
            d = e - (lq - 1) + (self.kpos.reshape(-1)[0] - self.qpos.reshape(-1)[0])  # k − q at each e
            base = (-d.min()).clamp(min=0)  # evaluate at non-negative positions (base, base + d)
            u = self.fn(self.heads.view(-1, 1), base.view(1), base + d)  # (H, T) float64
            u = u - u.amax(-1, keepdim=True)  # one constant per head, so per row: exact (far keys), in the graph
            if self.vis.bounded:  # causality and the window, at the index offset e − Lk + 1
                u = u.masked_fill(~self.vis.offsets_allowed(e - (lk - 1)), float("-inf"))
            self.table = u.to(self.work).contiguous()
            return
        # each row's nearest visible key, where its bias peaks: removed from every block before the cast
        first, last = self.vis.row_ranges(0, self.lq, device=self.qpos.device)
        self.near = self.pe.nearest_keys(self.qpos, self.kpos, first=first, last=last)

    def view(self, qs: int, qe: int, ks: int, ke: int, group: int = 1, g: int = 0) -> torch.Tensor:
        """Toeplitz mode: the ``[1, H, c, n]`` bias of rows ``qe − 1 … qs`` (reversed), keys ``ks … ke − 1``;
        with ``group`` > 1, that of heads ``g, g + G, …`` only (``[1, H/G, c, n]``: grouped heads)."""
        h, t = self.table.shape
        return self.table.as_strided((1, h // group, qe - qs, ke - ks), (0, group * t, 1, 1),
                                     self.table.storage_offset() + g * t + ks + self.lq - qe)

    def masked(self, s: torch.Tensor, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor:
        """Scores (or an additive bias tile) ``[.., c, n]`` with the tile's visibility applied
        (``posenc.masking.Visibility``): the attention mask's additive values added, ``−∞`` where a
        pair is not visible; ``s`` itself when the whole tile is."""
        added = self.vis.added(qs, qe, ks, ke)
        if added is not None:
            s = s + added.to(s.dtype)
        allowed = self.vis.allowed(qs, qe, ks, ke, device=s.device)
        return s if allowed is None else s.masked_fill(~allowed, float("-inf"))

    def __call__(self, qs: int, qe: int, ks: int, ke: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        qp, kp = self.qpos[..., qs:qe], self.kpos[..., ks:ke]
        if self.pe is None:  # no scheme: only the masks and the score terms
            return torch.zeros(1, 1, qe - qs, ke - ks, dtype=self.work, device=q.device)
        if self.relative:
            return self.pe(q, k, qp, kp).to(self.work)  # (B, H, c, n)
        if self.fn is not None and self.near is not None:  # the row's peak removed in float64, then the cast
            return self.pe.peak_removed(qp, kp, self.near[..., qs:qe], self.fn).to(self.work)
        if self.fn is not None:  # float64 bias, cast once to the score dtype (not the module's)
            return self.fn(self.heads, qp.unsqueeze(-1).unsqueeze(-3), kp.unsqueeze(-2).unsqueeze(-3)).to(self.work)
        return self.pe(qp, kp).to(self.work)  # (H, c, n) or (B, H, c, n)

    def values(self, qs: int, qe: int, ks: int, ke: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The block's bias without a graph: with each row's peak removed where the scheme has one
        (far keys), else the scheme's ``block_fn`` for a bias kind (the same values up to rounding
        in the score dtype, faster for FIRE), else as ``__call__``."""
        if self.near is not None:  # the row's peak removed in float64, then the cast
            with torch.no_grad():
                return self(qs, qe, ks, ke, q, k)
        if self.block is not None:
            return self.block(self.qpos[..., qs:qe], self.kpos[..., ks:ke], self.work)
        return self(qs, qe, ks, ke, q, k)

    def value_term(self, p: torch.Tensor, qs: int, qe: int, ks: int, ke: int) -> torch.Tensor | None:
        """Shaw's ``Σ_j p_ij a^V_ij`` for the block's weights ``p [B, H, c, n]``; None for other schemes."""
        if self.value_fn is None:
            return None
        return self.value_fn(p, self.qpos[..., qs:qe], self.kpos[..., ks:ke])


def _contiguous(positions: torch.Tensor) -> bool:
    """Positions ``[L]`` or ``[1, L]`` that step by exactly 1."""
    if positions.dim() == 2 and positions.shape[0] != 1:
        return False
    flat = positions.reshape(-1)
    return flat.numel() < 2 or bool((flat[1:] - flat[:-1] == 1).all())


def _antidiagonal_sums(x: torch.Tensor) -> torch.Tensor:
    """``[..., R, N] -> [..., R + N − 1]``: entry ``m`` sums ``x[..., r, c]`` over ``r + c = m``.

    Padding each row with ``R`` zeros and reading the flat buffer with rows of ``N + R − 1``
    shifts row ``r`` right by ``r`` (element ``(r, c)`` sits at flat ``r(N + R) + c = r(N + R − 1)
    + (r + c)``); the column sums are then the anti-diagonal sums.
    """
    r, n = x.shape[-2:]
    padded = torch.nn.functional.pad(x, (0, r)).flatten(-2)  # (..., R(N+R))
    return padded[..., : r * (n + r - 1)].unflatten(-1, (r, n + r - 1)).sum(-2)


def _one_head_size(q, k, v):
    """``q, k, v`` with one head size, as SDPA's fused CPU kernel wants it (the "Q/K/V should have the
    same head size" error otherwise): zero columns added to ``v`` (``Dv < D``; the output's extra
    columns are 0, cut off after) or to ``q`` and ``k`` (``Dv > D``; ``q·k`` unchanged, and ``scale``
    is explicit). For the kernel only: a relative scheme's bias takes the original ``q, k``."""
    d, dv = q.shape[-1], v.shape[-1]
    pad = torch.nn.functional.pad
    if dv < d:
        return q, k, pad(v, (0, d - dv))
    if dv > d:
        return pad(q, (0, dv - d)), pad(k, (0, dv - d)), v
    return q, k, v


def _forward_toeplitz(q, k, v, bias: TileBias, *, scale: float, block_q: int):
    """Toeplitz mode: SDPA's fused CPU kernel per query block (rows reversed), the bias a view; with
    grouped heads, per member ``g`` of each group (query heads ``g, g + G, …`` against every key/value
    head, and the table's rows of those heads), so keys and values are never repeated."""
    dv = v.shape[-1]
    q, k, v = _one_head_size(q, k, v)
    b, h, lq, _ = q.shape
    group = h // k.shape[1]
    out = q.new_empty(b, h, lq, v.shape[-1])
    lse = q.new_empty(b, h, lq)
    q_g = q.view(b, h // group, group, lq, q.shape[-1])  # (B, H/G, G, Lq, D): head kv·G + g
    out_g, lse_g = out.view(b, h // group, group, lq, out.shape[-1]), lse.view(b, h // group, group, lq)
    for g in range(group):
        for qs in range(0, lq, block_q):
            qe = min(qs + block_q, lq)
            k0, k1 = bias.vis.key_range(qs, qe)
            o, m = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q_g[:, :, g, qs:qe].flip(2), k[:, :, k0:k1], v[:, :, k0:k1], 0.0, False,
                attn_mask=bias.view(qs, qe, k0, k1, group, g), scale=scale)  # (B, H/G, c, Dv), rows reversed
            out_g[:, :, g, qs:qe] = o.flip(2)
            lse_g[:, :, g, qs:qe] = m.flip(2)
    return out[..., :dv].contiguous(), lse


def _key_tiles(vis: Visibility, qs: int, qe: int, block_k: int) -> list[tuple[int, int]]:
    """The key ranges ``[ks, ke)`` of query rows ``qs … qe − 1`` (``vis.key_range``): blocks of
    ``block_k`` keys, then (causal) the diagonal ``[qs + shift, qe + shift)``, whose first key every
    row sees; causal alone, every row sees the blocks before it whole (so no row of a tile is
    masked whole; with a window, documents or a mask one may be: ``TileBias.partial``)."""
    k0, k1 = vis.key_range(qs, qe)
    whole = max(k0, qs + vis.shift) if vis.causal else k1
    tiles = [(ks, min(ks + block_k, whole)) for ks in range(k0, whole, block_k)]
    if vis.causal and whole < k1:
        tiles.append((whole, k1))
    return tiles


def _forward_fused(q, k, v, bias: TileBias, *, scale: float, block_q: int, block_k: int):
    """SDPA's fused CPU kernel per tile of ``block_q`` queries x ``block_k`` keys (``_key_tiles``), the
    tile's bias (``bias.values``, with the attention mask) its mask. Each tile gives the softmax over
    its keys, ``o_t`` and ``lse_t``; two tiles' results combine exactly as

        lse = log(e^{lse_1} + e^{lse_2}),   o = e^{lse_1 − lse} o_1 + e^{lse_2 − lse} o_2

    (each ``o_t`` is ``Σ_{j∈t} e^{s_j − lse_t} v_j``), which costs ``O(c·Dv)`` per tile against the
    tile's ``O(c·n·D)``. Grouped heads are folded into the tile's rows (``_fold``). The kernel returns
    ``o = 0, lse = 0`` for a row its mask hides whole, which only an attention mask makes: such rows
    get ``lse_t = −∞`` (no mass) before they combine (also those a window or documents hide in a tile)."""
    dv = v.shape[-1]
    qp, kp, vp = _one_head_size(q, k, v)  # the kernel's
    b, h, lq, _ = q.shape
    group = h // k.shape[1]
    out = q.new_empty(b, h, lq, vp.shape[-1])
    lse = q.new_empty(b, h, lq)
    for qs in range(0, lq, block_q):
        qe = min(qs + block_q, lq)
        o = m = None
        for ks, ke in _key_tiles(bias.vis, qs, qe, block_k):
            mask = bias.values(qs, qe, ks, ke, q[:, :, qs:qe], k[:, :, ks:ke])  # (H, c, n) or (B, H, c, n)
            mask = bias.masked(mask, qs, qe, ks, ke).expand(b, h, qe - qs, ke - ks)
            o_t, m_t = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                _fold(qp[:, :, qs:qe], group), kp[:, :, ks:ke], vp[:, :, ks:ke], 0.0, False,
                attn_mask=_fold(mask, group), scale=scale)
            o_t, m_t = _unfold(o_t, group), _unfold(m_t, group)  # (B, H, c, Dv), (B, H, c)
            if bias.partial:  # a row the tile hides whole carries no mass
                m_t = m_t.masked_fill(torch.isneginf(mask).all(-1), float("-inf"))
            if o is None:
                o, m = o_t, m_t
                continue
            m_new = torch.logaddexp(m, m_t)
            safe = m_new.masked_fill(torch.isneginf(m_new), 0.0) if bias.partial else m_new
            o = o.mul_((m - safe).exp_().unsqueeze(-1)).add_(o_t.mul_((m_t - safe).exp_().unsqueeze(-1)))
            m = m_new
        out[:, :, qs:qe] = o
        lse[:, :, qs:qe] = m
    if bias.vis.hides_rows:
        empty_rows_lse(lse.clone(), out, lse)
    return out[..., :dv].contiguous(), lse


def _fused_forward(q, bias: TileBias) -> bool:
    """Whether the forward runs SDPA's fused CPU kernel per tile (the CPU, no value term, a batch);
    else the online-softmax loop below (other devices, Shaw)."""
    return (q.device.type == "cpu" and bias.value_fn is None and q.shape[0] > 0 and bias.softcap is None
            and bias.dropout is None)


def _forward(q, k, v, bias: TileBias, *, scale: float, block_q: int, block_k: int):
    """Online softmax over key blocks: ``o [B, H, Lq, Dv]`` and ``lse [B, H, Lq]``."""
    if bias.toeplitz:
        return _forward_toeplitz(q, k, v, bias, scale=scale, block_q=FUSED_BLOCK_Q)
    if _fused_forward(q, bias):
        return _forward_fused(q, k, v, bias, scale=scale, block_q=block_q, block_k=block_k)
    b, h, lq, _ = q.shape
    dv, group = v.shape[-1], h // k.shape[1]
    out = q.new_empty(b, h, lq, dv)
    lse = q.new_empty(b, h, lq)
    kt = k.transpose(-1, -2)  # (B, H_kv, D, Lk)
    masked = bias.partial  # a tile may hide a row whole: guard its −∞ maximum
    for qs in range(0, lq, block_q):
        qe = min(qs + block_q, lq)
        qb = q[:, :, qs:qe]  # (B, H, c, D)
        qb_scaled = qb * scale
        m = l = acc = None
        k0, k1 = bias.vis.key_range(qs, qe)
        for ks in range(k0, k1, block_k):
            ke = min(ks + block_k, k1)
            s = _unfold(torch.matmul(_fold(qb_scaled, group), kt[..., ks:ke]), group)  # (B, H, c, n)
            s = cap_scores(s, bias.softcap, inplace=True)  # c·tanh(q·k·scale / c), before the bias (Gemma 2)
            s += bias.values(qs, qe, ks, ke, qb, k[:, :, ks:ke])
            s = bias.masked(s, qs, qe, ks, ke)
            block_max = s.amax(-1, keepdim=True)  # (B, H, c, 1)
            m_new = block_max if m is None else torch.maximum(m, block_max)
            sub = m_new.masked_fill(torch.isneginf(m_new), 0.0) if masked else m_new  # no key yet: e^{−∞ − 0} = 0
            p = s.sub_(sub).exp_()  # e^{s - m}, in place of s
            kept = p if bias.dropout is None else bias.dropout.apply(p, qs, ks)  # e^{s − m}·z: l sums p, a sums this
            pv = _unfold(torch.matmul(_fold(kept, group), v[:, :, ks:ke]), group)  # (B, H, c, Dv)
            extra = bias.value_term(kept, qs, qe, ks, ke)
            if extra is not None:
                pv = pv + extra
            if m is None:
                l, acc = p.sum(-1, keepdim=True), pv
            else:
                alpha = torch.exp(m - sub)  # (B, H, c, 1)
                l = l * alpha + p.sum(-1, keepdim=True)
                acc = acc * alpha + pv
            m = m_new
        out[:, :, qs:qe] = acc / l
        lse[:, :, qs:qe] = (m + torch.log(l)).squeeze(-1)
    if bias.vis.hides_rows:  # rows with no key: l = 0, so acc / l is NaN and log l is −∞
        empty_rows_lse(lse.clone(), out.nan_to_num_(0.0), lse)
    return out, lse


def _backward_toeplitz(dout, q, k, v, out, lse, bias: TileBias, *, scale: float, block_q: int):
    """Toeplitz mode without parameters to train: SDPA's fused CPU backward per query block, given
    the saved ``o`` and ``lse`` (the global ones, so each block's ``p`` and ``δ`` are the true
    softmax's), rows reversed as in the forward; the blocks' ``dk, dv`` add up (and, with grouped
    heads, those of the group's members, run one after the other as in the forward)."""
    b, h, lq = q.shape[:3]
    group = h // k.shape[1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dout = dout.contiguous()
    with torch.no_grad():
        bias.prepare()

    def member(t, g):  # (B, H, Lq, ·) -> (B, H/G, Lq, ·): query heads g, g + G, …
        return t.view(b, h // group, group, lq, *t.shape[3:])[:, :, g]

    for g in range(group):
        for qs in range(0, lq, block_q):
            qe = min(qs + block_q, lq)
            k0, k1 = bias.vis.key_range(qs, qe)
            rows = slice(qs, qe)
            gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                member(dout, g)[:, :, rows].flip(2), member(q, g)[:, :, rows].flip(2), k[:, :, k0:k1],
                v[:, :, k0:k1], member(out, g)[:, :, rows].flip(2), member(lse, g)[:, :, rows].flip(2), 0.0, False,
                attn_mask=bias.view(qs, qe, k0, k1, group, g), scale=scale)
            member(dq, g)[:, :, rows] = gq.flip(2)
            dk[:, :, k0:k1] += gk
            dv[:, :, k0:k1] += gv
    return dq, dk, dv


class _BlockwiseAttention(torch.autograd.Function):
    """``o = softmax(scale · q kᵀ + bias) v`` (plus Shaw's value term) saving only ``o`` and ``lse``.

    ``apply(q, k, v, ctx_args, *params)``: ``params`` are the scheme's parameters that require a
    gradient, listed so that autograd routes theirs here; the module itself rides in ``ctx_args``.
    """

    @staticmethod
    def forward(ctx, q, k, v, sinks, args: dict, *params):
        bias = args["bias"]
        bias.prepare()
        out, lse = _forward(q, k, v, bias, scale=args["scale"], block_q=args["block_q"], block_k=args["block_k"])
        if sinks is not None:  # one more key of score sinks[h] and value 0: merged as a last tile
            out, lse = merge_sinks(out, lse, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks, *params)
        ctx.args = args
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        """``tile_backward`` over the whole call, then the sinks' gradient."""
        q, k, v, out, lse, sinks, *params = ctx.saved_tensors
        args, needs = ctx.args, ctx.needs_input_grad
        dq, dk, dv, dparams = tile_backward(dout, q, k, v, out, lse, args["bias"], scale=args["scale"],
                                            params=params, needs=needs[:3], block_q=args["block_q"],
                                            block_k=args["block_k"])
        dsinks = None
        if sinks is not None and needs[3]:  # the sink column's weight e^{σ − lse}, its ds = −e^{σ − lse} δ
            dsinks = sinks_grad(sinks, lse, (dout * out).sum(-1))
        return (dq, dk, dv, dsinks, None, *(g if needs[5 + i] else None for i, g in enumerate(dparams)))


def tile_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: TileBias, *,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One tile's (or a whole call's) forward, ``(o [B, H, c, Dv], lse [B, H, c])`` of the keys it
    holds, the module docstring's online softmax; ``bias`` a ``TileBias`` (``prepare()`` called).
    A row the tile hides whole gives ``o = 0`` and ``lse = +∞``. Tiles combine by their log-sum-exp
    (``posenc.scores.merge_lse``): context parallelism's ring runs on this."""
    return _forward(q, k, v, bias, scale=scale, block_q=BLOCK_Q, block_k=BLOCK_K)


def tile_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, bias: TileBias, *, scale: float, params=(), needs=(True, True, True),
                  block_q: int | None = None, block_k: int | None = None):
    """The module docstring's backward, line by line, for one tile given the softmax's ``out`` and
    ``lse`` (the global ones: the tile's ``p = e^{s − lse}`` and ``δ = rowsum(dO ∘ O)`` are then the
    whole softmax's): ``ds = p ∘ (dp − δ)`` per block and what it feeds (q, k, v, the bias's
    ``params``, Shaw's value term, the Toeplitz table). Returns ``(dq, dk, dv, dparams)`` (None where
    ``needs`` is False). Over 80 lines because it is one derivation that reads as one piece: its
    block loop shares the row state (``dq``, ``δ``, ``lse``) with every term."""
    block_q = BLOCK_Q if block_q is None else block_q
    block_k = BLOCK_K if block_k is None else block_k
    params = list(params)
    if bias.toeplitz and not params and v.shape[-1] == q.shape[-1]:  # nothing to learn in the bias:
        # SDPA's fused backward per block (one head size; else the loop below); never with sinks
        return (*_backward_toeplitz(dout, q, k, v, out, lse, bias, scale=scale, block_q=FUSED_BLOCK_Q), [])
    b, h, lq, _ = q.shape
    group = h // k.shape[1]
    rev = bias.toeplitz  # rows reversed: the bias is a view of one table, causality and window folded in
    dout = dout.contiguous()
    delta = (dout * out).sum(-1, keepdim=True)  # (B, H, Lq, 1): rowsum(dO ∘ O)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dparams = [torch.zeros_like(p) for p in params]
    # The bias needs its graph when its inputs want a gradient: parameters, or q/k (relative).
    with_graph = bool(params) or (bias.relative and (needs[0] or needs[1]))
    has_value_term = bias.value_fn is not None
    with torch.enable_grad() if with_graph or has_value_term else torch.no_grad():
        bias.prepare()
    dtable = torch.zeros_like(bias.table) if rev and with_graph else None  # (H, T)

    def add(grads, start=0):
        for acc, g in zip(dparams, grads[start:start + len(params)]):
            if g is not None:
                acc += g

    for qs in range(0, lq, block_q):
        qe = min(qs + block_q, lq)
        flip = (lambda t: t.flip(2)) if rev else (lambda t: t)
        qb = flip(q[:, :, qs:qe])  # (B, H, c, D)
        qb_scaled = qb * scale
        dob = flip(dout[:, :, qs:qe])  # (B, H, c, Dv)
        lse_b = flip(lse[:, :, qs:qe].unsqueeze(-1))  # (B, H, c, 1)
        delta_b = flip(delta[:, :, qs:qe])
        dqb = torch.zeros_like(qb)
        k0, k1 = bias.vis.key_range(qs, qe)
        for ks in range(k0, k1, block_k):
            ke = min(ks + block_k, k1)
            kb, vb = k[:, :, ks:ke], v[:, :, ks:ke]  # (B, H, n, D), (B, H, n, Dv)
            graph_inputs = list(params)
            bias_b = None
            if rev:
                bias_value = bias.view(qs, qe, ks, ke).detach()
            elif with_graph:
                with torch.enable_grad():
                    if bias.relative:
                        qb_leaf, kb_leaf = qb.detach().requires_grad_(), kb.detach().requires_grad_()
                        graph_inputs += [qb_leaf, kb_leaf]
                        bias_b = bias(qs, qe, ks, ke, qb_leaf, kb_leaf)
                    else:
                        bias_b = bias(qs, qe, ks, ke, qb, kb)
                bias_value = bias_b.detach()
            else:
                bias_value = bias.values(qs, qe, ks, ke, qb, kb)
            s = _unfold(torch.matmul(_fold(qb_scaled, group), kb.transpose(-1, -2)), group)  # (B, H, c, n)
            dcap = None
            if bias.softcap is not None:  # s = c·tanh(r / c) + b: ∂s/∂r = 1 − tanh²
                s, dcap = capped(s, bias.softcap)
            s = s + bias_value
            if not rev:  # (the Toeplitz view has causality and the window folded in, and nothing else)
                s = bias.masked(s, qs, qe, ks, ke)  # (B, H, c, n)
            p = s.sub_(lse_b).exp_()  # softmax weights of the block, in place of s
            z = None if bias.dropout is None else bias.dropout.factor(qs, ks, p.shape, p.dtype)  # replayed
            kept = p if z is None else p * z  # the weights the forward multiplied v with
            dv[:, :, ks:ke] += torch.matmul(_fold(kept, group).transpose(-1, -2), _fold(dob, group))
            dp = _unfold(torch.matmul(_fold(dob, group), vb.transpose(-1, -2)), group)  # (B, H, c, n)
            if has_value_term:  # dp += dO_i · a^V_ij, and w^V's gradient, from the block's value term
                with torch.enable_grad():
                    p_leaf = kept.detach().requires_grad_()
                    term = bias.value_term(p_leaf, qs, qe, ks, ke)
                    grads = torch.autograd.grad(term, [p_leaf, *params], dob, allow_unused=True,
                                                retain_graph=True)
                dp = dp + grads[0]
                add(grads, 1)
            if z is not None:  # the gradient of the kept weights, back through z: ∂(p·z)/∂p = z
                dp = dp.mul_(z)
            ds = p.mul_(dp.sub_(delta_b))  # (B, H, c, n): p ∘ (dp − δ), in place of p
            dr = ds if dcap is None else ds * dcap  # the gradient of q·k·scale (through the cap)
            dqb += _unfold(torch.matmul(_fold(dr, group), kb), group) * scale
            dk[:, :, ks:ke] += torch.matmul(_fold(dr, group).transpose(-1, -2), _fold(qb_scaled, group))
            if dtable is not None:  # view at offset ks + Lq − qe: anti-diagonal r + c reads u[offset + r + c]
                offset = ks + lq - qe
                dtable[:, offset:offset + (qe - qs) + (ke - ks) - 1] += _antidiagonal_sums(ds.sum(0))
            elif bias_b is not None:  # score_fn's tables serve every block: keep the graph
                grads = torch.autograd.grad(bias_b, graph_inputs, ds.sum_to_size(bias_b.shape),
                                            allow_unused=True, retain_graph=True)
                add(grads)
                if bias.relative:
                    gq, gk = grads[len(params):]
                    if gq is not None:
                        dqb += gq
                    if gk is not None:
                        dk[:, :, ks:ke] += gk
        dq[:, :, qs:qe] = flip(dqb)
    if dtable is not None and params:
        add(torch.autograd.grad(bias.table, params, dtable, allow_unused=True))
    return dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None, dparams


def blockwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe, q_positions: torch.Tensor,
                        k_positions: torch.Tensor, *, vis: Visibility, scale: float,
                        softcap: float | None = None, sinks: torch.Tensor | None = None,
                        dropout=None) -> torch.Tensor:
    """Exact attention of ``q [B, H, Lq, D]`` over ``k, v [B, H_kv, Lk, D|Dv]`` with the bias or
    relative scheme ``pe`` (or None: the masks and score terms alone), block by block (see the module docstring); checked inputs, as
    ``posenc.attention`` passes them (``vis`` the call's ``posenc.masking.Visibility``: causality, a
    window, documents, an attention mask; key tiles outside a query block's ``key_range`` are skipped).
    Grouped heads (``H_kv < H``, bias kind) are folded into each product's rows, never repeated.
    Scores in float32 at least; returns q's dtype. ``softcap``: ``c·tanh(q·k·scale / c)`` before the
    bias (the loop, never a fused kernel); ``sinks [H]``: merged after the key blocks as one more
    key of score ``sinks[h]`` and value 0 (``lse ← log(e^{lse} + e^{σ})``, ``o ← o·e^{lse_old − lse}``),
    its gradient ``−Σ_i e^{σ − lse_i} δ_i``. ``dropout``: a ``posenc.dropout.AttentionDropout``
    (``dropout_p`` > 0), applied to each block's weights in the loop and replayed in the backward
    from its seed (module docstring)."""
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)
    params = [p for p in pe.parameters() if p.requires_grad] if torch.is_grad_enabled() and pe is not None else []
    bias = TileBias(pe, q_positions, k_positions, work, vis=vis, softcap=softcap, sinks=sinks is not None,
                    dropout=dropout)
    args = {"bias": bias, "scale": scale,
            "block_q": BLOCK_Q, "block_k": BLOCK_K}
    out = _BlockwiseAttention.apply(q.to(work), k.to(work), v.to(work), None if sinks is None else sinks.to(
        device=q.device, dtype=work), args, *params)
    return out.to(dtype)
