"""``posenc.attention``: scaled dot-product attention that applies any built scheme.

    attention(q, k, v, pe, q_positions=..., k_positions=..., causal=..., document_ids=..., window=...)

**Shape.** One call is three steps: ``_prepare`` checks every input, fills in the scale and the
default positions and builds the call's ``posenc.masking.Visibility`` (causality, a sliding
``window``, documents, the attention mask: the one definition every backend reads);
``scheme_step`` (public: context parallelism runs it too) lets the scheme prepare its call
through the hooks its kind base class declares with defaults (``attention_form``: BiPE's inner
bias; ``temper_queries``: Llama 4's query temperature; ``RotaryEncoding.rotate``: observe, keys,
queries; ``default_scale``: DeBERTa's; ``ContentEncoding.flex_bias``: FoX's bias for FlexAttention,
a real ``BiasEncoding``); then one backend of ``BACKEND_RUNS`` (``{name: function of the prepared
call}``), picked by the one chooser ``_choose_backend`` (every kind), which can say why. What every backend does to its scores (the cap,
the sinks, grouped heads, the size budget) is written once, in ``posenc.scores``.

- ``rotary``: rotates q at q_positions and k at k_positions, then SDPA;
- ``bias``: adds ``pe(q_positions, k_positions)`` to the scores. Small maps are materialized;
  long ones run block by block (``posenc.blockwise``, with its backward) or, off the CPU and
  without gradient, through FlexAttention with a ``score_mod`` (``_flex_first``), so
  ``[H, Lq, Lk]`` never exists whole;
- ``relative``: adds ``pe(q, k, q_positions, k_positions)`` (and Shaw's value term), in blocks;
- ``none``: plain SDPA (``nope_temperature`` first scales each query by its temperature,
  ``pe(q, q_positions)``). ``additive`` encodings belong to the token embeddings, not here;
- a scheme whose attention is another module at some of its position columns declares
  ``pe.attention_form(q_positions, k_positions) -> (module, q_positions, k_positions)`` and the
  call runs that (``bipe_bias``: its inter-segment bias at the segment indices of ``[.., L, 2]``
  positions); ``bipe`` and ``hirope`` read their ``[.., L, 2]`` positions in their rotary call.

**Far keys.** Scores and biases are float32 at least; a bias scheme whose bias grows with distance
(ALiBi, KERPLE) has each query row's peak (its value at the row's nearest visible key) removed in
float64 before the cast, on every backend: softmax sees only differences along a row, so this is
exact, and keys 10^12 away keep their key-to-key differences (``BiasEncoding.nearest_keys``).

**Grouped heads** (GQA, MQA): ``k`` and ``v`` may have ``H_kv`` heads with ``H % H_kv == 0``;
query head ``h`` reads key/value head ``h // (H / H_kv)`` (transformers' ``repeat_kv``). Kinds
none, rotary and bias never repeat them, on every backend (the ``G = H / H_kv`` query heads of a
group are folded into one head of ``G·c`` rows for each product, ``posenc.scores.fold``);
relative and content schemes, whose terms read keys per query head, repeat them.

**Shapes.** ``v`` may have a head size ``Dv`` other than q/k's on every backend (SDPA's fused CPU
kernel, which wants one, gets zero columns: ``posenc.blockwise._one_head_size``); empty inputs
(``B``, ``Lq`` or ``Lk`` zero) return what SDPA returns, with or without ``document_ids``.

**Logit cap and sinks.** ``softcap=c`` bounds the content score, ``c·tanh(q·k·scale / c)``, before
the scheme's bias and the mask are added (Gemma 2's ``attn_logit_softcapping``; Gemma Team 2024,
arXiv:2408.00118), as transformers' Gemma 2 adds its mask after the cap; ``sinks=[H]`` adds
``e^{sinks[h]}`` to each row's softmax denominator, one more key of value 0 (GPT-OSS's ``s_aux``;
Xiao et al. 2023, arXiv:2309.17453), so ``out = softmax(s)·v · σ(lse − sinks[h])``, differentiable
in q, k, v and ``sinks``; a query that sees no key still returns zeros. Both on materialize,
chunked and blockwise (its online-softmax loop, not the fused CPU kernel); the cap also in flex's
``score_mod`` (flex refuses sinks, and ``auto`` never picks it then). Content schemes take both in their own formula
(``posenc.rowwise``: the cap on the content score ``q·k``, the sink as one more column of their
softmax); stick-breaking, which has no softmax, takes the cap and refuses sinks.

**Attention dropout.** ``dropout_p=p`` (``posenc.dropout``; Srivastava et al. 2014, as
transformers' ``attention_dropout``): ``o_i = Σ_j p_ij · keep_ij / (1 − p) · v_j`` after the
softmax, its normaliser unchanged. ``keep_ij`` is a hash of the call's seed (drawn once from
``generator``) and ``(b, h, i, j)``, so each backend's tiles compute their own part and the
blockwise backward replays it, as flash-attention replays its mask from ``(seed, offset)``; every
backend drops the same pairs for one seed. ``materialize``, ``chunked``, ``blockwise`` and the
content schemes' rows take it; ``flex`` (a ``score_mod`` acts before the softmax) is refused and
never chosen, and the plain-SDPA shortcut is skipped. ``dropout_p=0`` is the call it was.

**Sliding window.** ``window=W``: query ``i`` sees keys at most ``W − 1`` positions back (by key
index, ``j ≥ i + Lk − Lq − (W − 1)``; without ``causal`` as far forward too), on every backend and
every kind with a softmax; the backends skip the key blocks outside it (``Visibility.key_range``).

**Packed documents.** With ``document_ids`` (``posenc.packing``, in ``posenc/documents.py``) a
query sees only the keys of its own document, on every backend, and default positions restart
at 0 in each document.

**FlexAttention policy.** The flex backend compiles ``flex_attention`` once per structural case
(scheme, causal, documents, device) with dynamic lengths, each case with its own recompile
budget (``FLEX_RECOMPILES``), so a loop over many lengths never recompiles per length (queries
are made contiguous first: a decoding step's queries, rows of a longer tensor, would otherwise
compile their case once more for their strides). Scores and the bias added to
them are float32 whatever the input dtype (inputs are upcast; the output takes the input dtype
again), as on the other backends. Dynamo, past its recompile limit, would run ``flex_attention``
eagerly, which builds the whole ``[B, H, Lq, Lk]`` score tensor; posenc never lets that happen:
when compiling is unavailable, fails, or a case runs out of recompiles, the call (and later calls
of that case) runs on the chunked backend, exact and bounded in memory, with one
``FlexFallbackWarning``. Under the caller's own ``torch.compile`` the flex path calls
``flex_attention`` directly and the caller's compile captures it.

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, D head dim.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc import scores
from posenc._validate import check_choice
from posenc.blockwise import blockwise_attention
from posenc.chunked import chunked_attention as _chunked  # a module global: tests replace it
from posenc.dropout import AttentionDropout, check_dropout
from posenc.encodings._base import (BiasEncoding, ContentEncoding, PositionalEncoding, RelativeEncoding, RotaryEncoding, check_batch,
                                    check_positions, check_qkv)
from posenc.masking import Visibility
from posenc.positions import as_working, text_positions
from posenc.rowwise import check_takes, content_attention
from posenc.scores import cap_scores, check_cap_and_sinks, repeat_kv

BACKENDS = ("auto", "materialize", "flex", "chunked", "blockwise")
CHUNK_ELEMENTS = 1 << 23  # scores per query chunk on the chunked path
FLEX_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # flex runs these in float32; CPU flex has no float64
FLEX_BLOCK = 128  # FlexAttention's block size (create_block_mask's default BLOCK_SIZE)
# Compiles allowed per structural case (dynamo's own limit is 8 per code object). A case compiles
# once statically, then with dynamic lengths; dynamo still specializes sizes of 1 (a decoding step,
# one 128-token block) and equal lengths (Lq == Lk): lengths 64..1000 with and without decoding
# steps took 6 compiles of one case, the later ones ~2 s each from Inductor's cache.
FLEX_RECOMPILES = 16


class FlexFallbackWarning(UserWarning):
    """The flex backend could not compile a case and ran it on the chunked backend (still exact)."""


@dataclass
class _Call:
    """One prepared call: checked tensors, the module the backends run (``pe``: a bias or relative
    scheme, or None for none/rotary after their step), positions, the visibility, the score terms."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    pe: PositionalEncoding | None
    q_positions: torch.Tensor | None
    k_positions: torch.Tensor | None
    vis: Visibility
    scale: float
    softcap: float | None = None
    sinks: torch.Tensor | None = None
    dropout: AttentionDropout | None = None  # dropout_p > 0: the call's rate and seed (posenc.dropout)


def _default_positions(lq: int, lk: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys at 0..Lk-1; queries are the last Lq of them (a KV cache), or 0..Lq-1 if Lq > Lk."""
    k = torch.arange(lk, device=device)
    q = torch.arange(lk - lq, lk, device=device) if lq <= lk else torch.arange(lq, device=device)
    return q, k


def _sdpa(q, k, v, *, scale, vis: Visibility | None = None):
    """SDPA under causality alone (or nothing); with grouped heads (``k``'s ``H_kv`` < ``q``'s ``H``)
    through ``enable_gqa``, which on the CPU's fused kernel (no mask) reads each key/value head for
    its group without repeating it."""
    lq, lk = q.shape[-2], k.shape[-2]
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    if vis is not None and vis.causal and lq == lk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, **gqa)
    mask = None if vis is None else vis.allowed(0, lq, 0, lk, device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **gqa)


def _needs_grad(q, k, v, pe) -> bool:
    params = () if pe is None else tuple(pe.parameters())
    return torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *params))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe=None, *,
              q_positions: torch.Tensor | None = None, k_positions: torch.Tensor | None = None,
              causal: bool = False, scale: float | None = None, backend: str = "auto",
              document_ids: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
              attention_mask: torch.Tensor | None = None, softcap: float | None = None,
              sinks: torch.Tensor | None = None, window: int | None = None, dropout_p: float = 0.0,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """Attention of ``q [B, H, Lq, D]`` over ``k, v [B, H_kv, Lk, D]`` with positional encoding ``pe``.

    Three steps: ``_prepare`` (validate, default positions, build the ``posenc.masking.Visibility``),
    the scheme's own step through the hooks its kind declares (``scheme_step``: a content scheme's
    attention, BiPE's inner module, a query temperature, the rotation), then one backend from
    ``BACKEND_RUNS`` (``_choose_backend`` says which and why).

    ``k`` and ``v`` may have ``H_kv`` heads with ``H % H_kv == 0`` (grouped heads: module docstring).

    Args:
        pe: a module from ``posenc.build`` (or None, the same as ``nope``).
        q_positions, k_positions: ``[L]`` or ``[B, L]`` (``[L, A]``/``[B, L, A]`` for a ``pe``
            with ``A`` axes; see ``posenc.positions``). By default keys are at ``0..Lk-1`` and
            queries at the last ``Lq`` of them, as when decoding with a KV cache (on every axis;
            with ``document_ids``: restarting at 0 in each document).
        causal: query ``i`` sees key ``j`` only when ``j <= i + (Lk - Lq)``.
        scale: multiplies ``q·k``; by default ``1/√D``, or the scheme's ``default_scale`` when it
            declares one (DeBERTa: ``1/√(D·f)``, ``f`` counting its terms).
        backend: for bias and relative kinds (and any kind with ``document_ids``, a ``window``, an
            ``attention_mask``, ``softcap`` or ``sinks``), ``"materialize"`` the whole score bias,
            ``"flex"`` (FlexAttention ``score_mod``; bias kind, forward only on CPU,
            float16/bfloat16/float32), ``"chunked"`` (query blocks), ``"blockwise"``
            (``posenc.blockwise``: query and key blocks with an online softmax, and a backward that
            recomputes them; trains at long context), or ``"auto"`` (materialize when small; else,
            when no gradient is needed and the dtype allows, flex off the CPU, under
            ``torch.compile`` or with ``document_ids`` — but eagerly never for a scheme whose
            score_mod takes minutes to compile, FIRE's MLP (``_flex_cheap``); else blockwise, or
            chunked with ``document_ids`` or without a scheme, but blockwise again with
            ``dropout_p`` under gradient).
        document_ids: integer ``[Lk]`` or ``[B, Lk]``, non-decreasing: the document of each key
            (queries are the last ``Lq`` keys). A query sees only keys of its own document.
        hidden: ``[B, Lk, d_model]``, the layer's input at every key, for a ``content`` scheme that
            reads it (``pe.reads_hidden``: FoX's full gate, PaTH); refused otherwise. A content
            scheme owns the attention (``pe(q, k, v, ...)``, see ``posenc.rowwise``) and takes no
            positions; its backends are ``materialize``, ``chunked``, ``blockwise`` and, for FoX,
            ``flex``.
        attention_mask: a key padding mask ``[B, Lk]`` (bool or 0/1: False/0 marks padding) or a
            4D mask ``[B or 1, H or 1, Lq, Lk]``, bool (True: may see) or additive float (added to
            the scores; ``−inf`` or transformers' ``finfo.min`` masks), combined with ``causal``,
            ``window`` and ``document_ids`` on every backend (``posenc.masking``). A query that sees
            no key returns zeros (and zero gradients). Content schemes take bool and padding masks.
        softcap: a logit cap ``c > 0`` (Gemma 2; module docstring): ``s = c·tanh(q·k·scale / c) +
            bias + mask``, the cap on the content score only, on every backend; a content scheme
            caps its own dot-product term (``posenc.rowwise``).
        sinks: ``[H]`` floating, one learned logit per query head (GPT-OSS's ``s_aux``; module
            docstring): one more key of score ``sinks[h]`` and value 0 in each row's softmax,
            differentiable; ``materialize``, ``chunked``, ``blockwise`` and content schemes but
            stick-breaking (``flex`` refuses it).
        window: an int ``W >= 1``, sliding-window (local) attention as Mistral's and Gemma's local
            layers: query ``i`` sees key ``j`` only when ``j >= i + (Lk − Lq) − (W − 1)`` (at most
            ``W − 1`` positions back, by key index; without ``causal`` also at most ``W − 1``
            forward); needs ``Lq <= Lk``. Every backend skips the key blocks outside the window.
            Every kind with a softmax: none, rotary, bias, relative and the content schemes but
            stick-breaking (refused: no softmax; its leftover mass goes to the query's own value).
        dropout_p: attention dropout, a float in ``[0, 1)`` (module docstring; ``posenc.dropout``):
            each weight after the softmax times ``keep_ij / (1 − p)``, the normaliser unchanged, so
            the mean over masks is the output without dropout. Every kind (content schemes on
            their own weights: ``takes_dropout``) on ``materialize``, ``chunked`` and
            ``blockwise``; ``flex`` refuses it and ``auto`` never picks flex then; the plain-SDPA
            shortcut is not taken (SDPA's own dropout cannot replay its mask). ``0`` (the default)
            draws nothing and is the call it was, bit for bit.
        generator: a ``torch.Generator`` on q's device, or None (torch's default generator of that
            device): one seed is drawn from it per call with ``dropout_p > 0``, and the mask is a
            function of that seed and each pair's ``(b, h, i, j)``, so the blockwise backward
            replays it rather than storing it, and the same generator state gives the same output.

    Returns:
        ``[B, H, Lq, Dv]`` in the dtype of ``q``.
    """
    call, hidden, kind = _prepare(q, k, v, pe, q_positions=q_positions, k_positions=k_positions, causal=causal,
                                  scale=scale, backend=backend, document_ids=document_ids, hidden=hidden,
                                  attention_mask=attention_mask, softcap=softcap, sinks=sinks, window=window,
                                  dropout_p=dropout_p, generator=generator)
    if kind == "content":
        return _content(call, hidden, backend)
    run, q, k, v, qp, kp = scheme_step(call.pe, call.q, call.k, call.v, call.q_positions, call.k_positions)
    call = _Call(q, k, v, run, qp, kp, call.vis, call.scale, call.softcap, call.sinks, call.dropout)
    if call.q.shape[2] == 0 or call.k.shape[2] == 0:  # no scores to bias: what SDPA gives (empty, or zeros)
        return _sdpa(call.q, call.k, call.v, scale=call.scale)
    if call.pe is None and call.vis.docs is None and call.vis.mask is None and call.vis.window is None \
            and call.softcap is None and call.sinks is None and call.dropout is None:
        return _sdpa(call.q, call.k, call.v, scale=call.scale, vis=call.vis)
    name = _choose_backend(backend, call.q, call.k, call.v, call.pe, call.vis.docs, call.vis.mask,
                           sinks=call.sinks is not None, window=call.vis.window, dropout=call.dropout is not None)
    return BACKEND_RUNS[name](call)


def _kind_of(pe) -> str:
    """``pe``'s kind (None: ``none``); anything not from ``posenc.build`` refused."""
    if pe is None:
        return "none"
    if not isinstance(pe, PositionalEncoding):
        raise TypeError(f"pe must be a module from posenc.build (with a kind), got {type(pe).__name__}")
    if pe.kind == "additive":
        raise ValueError(f"pe {pe.name!r} is additive: add pe(positions) to the token embeddings before the "
                         "q/k/v projections; attention() applies rotary, bias, relative and content kinds")
    return pe.kind


def _prepare(q, k, v, pe, *, q_positions, k_positions, causal, scale, backend, document_ids, hidden,
             attention_mask, softcap, sinks, window, dropout_p=0.0,
             generator=None) -> tuple[_Call, torch.Tensor | None, str]:
    """Step 1: every input checked (before anything is allocated), the scale and default positions
    filled in, and the call's ``Visibility`` built; with ``dropout_p`` > 0 the call's dropout seed
    drawn last, once (``posenc.dropout``). Returns ``(call, hidden, kind)``."""
    q, k, v = check_qkv(q, k, v, grouped=True)
    scores.check_causal(causal)
    check_choice("backend", backend, BACKENDS)
    dropout_p = check_dropout(dropout_p, generator, q.device)
    if dropout_p and backend == "flex":
        raise ValueError(f"backend='flex' cannot apply dropout_p={dropout_p!r}: FlexAttention's score_mod acts before "
                         "the softmax and attention dropout acts on its weights after; use backend='materialize', "
                         "'chunked' or 'blockwise' (or 'auto', which picks one)")
    b, h, lq, d = q.shape
    lk = k.shape[2]
    softcap, sinks = check_cap_and_sinks(softcap, sinks, h)
    kind = _kind_of(pe)
    vis = Visibility.build(b=b, h=h, lq=lq, lk=lk, device=q.device, causal=causal, window=window,
                           document_ids=document_ids, attention_mask=attention_mask)
    scale = scores.scale_of(scale, pe, d)  # a scheme may fix its own (DeBERTa: 1/√(D·f)); else 1/√D
    if hidden is not None and (pe is None or not pe.reads_hidden):
        raise ValueError(f"hidden= is read only by content schemes that declare it (fox with gate='full', path); "
                         f"pe {None if pe is None else pe.name!r} does not: pass hidden=None")
    if kind == "content":
        if q_positions is not None or k_positions is not None:
            raise ValueError(f"pe {pe.name!r} is a content scheme: its positions are counted from the tokens, "
                             "so it takes no q_positions/k_positions (pass None)")
        return _Call(q, k, v, pe, None, None, vis, scale, softcap, sinks,
                     AttentionDropout.draw(dropout_p, generator, q.device)), hidden, kind
    q_positions, k_positions = _positions(pe, q_positions, k_positions, vis, b=b, heads=(q.shape[1], k.shape[1]), device=q.device)
    return _Call(q, k, v, pe, q_positions, k_positions, vis, scale, softcap, sinks,
                 AttentionDropout.draw(dropout_p, generator, q.device)), hidden, kind


def _positions(pe, q_positions, k_positions, vis: Visibility, *, b: int, heads: tuple[int, int], device):
    """Checked positions, by default keys at ``0..Lk-1`` and queries the last ``Lq`` of them
    (restarting at 0 in each document), on every axis of the scheme's positions model."""
    axes = 1 if pe is None else pe.axes
    check = check_positions if pe is None else pe.check_positions
    lq, lk = vis.lq, vis.lk
    if q_positions is None or k_positions is None:
        if vis.docs is None:
            dq, dk = _default_positions(lq, lk, device)
        else:
            from posenc.documents import positions_in_documents

            dk = positions_in_documents(vis.docs)  # (1 or B, Lk)
            dq = dk[:, lk - lq:]
        dq, dk = text_positions(dq, axes), text_positions(dk, axes)  # several axes: the same on each
    q_positions = dq if q_positions is None else check("q_positions", q_positions).to(device)
    k_positions = dk if k_positions is None else check("k_positions", k_positions).to(device)
    check_batch("q_positions", q_positions, b, lq, axes=axes, heads=heads[0])
    check_batch("k_positions", k_positions, b, lk, axes=axes, heads=heads[1])
    return q_positions, k_positions


def scheme_step(pe, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_positions, k_positions, *,
                observe: torch.Tensor | None = None):
    """Step 2: the scheme prepares its call through the hooks its kind declares
    (``PositionalEncoding.attention_form``, ``.temper_queries``, ``RotaryEncoding.rotate``), for
    ``posenc.attention`` and every context-parallel method alike. ``observe``: positions a rotary
    scheme records first (context parallelism's whole length, so every rank picks one scaling).

    Returns:
        ``(run, q, k, v, q_positions, k_positions)``: ``run`` a bias or relative scheme for the
        backends, or None (none and rotary kinds: only the masks and the score terms remain);
        keys repeated per query head for a relative scheme, q and k rotated for a rotary one.
    """
    if pe is None:
        return None, q, k, v, q_positions, k_positions
    h = q.shape[1]
    pe, qp, kp = pe.attention_form(q_positions, k_positions)
    if isinstance(pe, BiasEncoding):
        scores.check_num_heads(pe, q)
    if isinstance(pe, RelativeEncoding):
        k, v = repeat_kv(k, v, h)
    if pe.value_term is not None and v.shape[-1] != pe.head_dim:
        raise ValueError(f"pe {pe.name!r} adds value embeddings of head_dim={pe.head_dim} to the output, so v must "
                         f"have last dimension {pe.head_dim}, got {v.shape[-1]} (shape {list(v.shape)})")
    q = pe.temper_queries(q, qp)  # a temperature per query position (Llama 4's NoPE layers)
    if isinstance(pe, RotaryEncoding):  # one length for q and k (length-dependent scalings), then keys first
        if observe is not None:
            pe.observe(observe)
        q, k = pe.rotate(q, k, qp, kp)
    run = pe if isinstance(pe, (BiasEncoding, RelativeEncoding)) else None
    return run, q, k, v, qp, kp


# -- step 3: the backends ---------------------------------------------------------------------

def _run_materialize(call: _Call) -> torch.Tensor:
    return _chunked(call, chunk=call.q.shape[2])


def _run_chunked(call: _Call) -> torch.Tensor:
    b, h, lk = call.q.shape[0], call.q.shape[1], call.k.shape[2]
    return _chunked(call, chunk=max(1, CHUNK_ELEMENTS // max(1, b * h * lk)))


def _run_blockwise(call: _Call) -> torch.Tensor:
    return blockwise_attention(call.q, call.k, call.v, call.pe, call.q_positions, call.k_positions, vis=call.vis,
                               scale=call.scale, softcap=call.softcap, sinks=call.sinks, dropout=call.dropout)


def _run_flex(call: _Call) -> torch.Tensor:
    if call.vis.docs is not None and call.k.shape[2] < FLEX_BLOCK:
        # compiled CPU FlexAttention with a document mask_mod is wrong when all keys fit in one
        # block (torch 2.13: error 0.24 at Lk = 120, exact at 128, 256, 311); chunked is exact
        return _run_chunked(call)
    out = _flex(call.q, call.k, call.v, call.pe, call.q_positions, call.k_positions, call.vis, scale=call.scale,
                softcap=call.softcap)
    return _run_chunked(call) if out is None else out  # None: compiling was unavailable (warned once)


# The backend table: every backend is a function of one prepared call (``_choose_backend`` picks).
BACKEND_RUNS = {"materialize": _run_materialize, "chunked": _run_chunked, "blockwise": _run_blockwise,
                "flex": _run_flex}


def _content(call: _Call, hidden, backend: str) -> torch.Tensor:
    """A content scheme's attention: FlexAttention for a scheme whose score is an elementwise bias of
    per-token state (``flex_ok``, FoX: ``score_mod`` reads ``c[q] − c[kv]`` through its
    ``flex_bias``, after the cap when there is one), else the scheme's own backends
    (``posenc.rowwise``, which take ``softcap``/``sinks`` in the scheme's formula)."""
    q, pe, vis, softcap, sinks = call.q, call.pe, call.vis, call.softcap, call.sinks
    k, v = repeat_kv(call.k, call.v, q.shape[1])
    if backend == "flex":
        _check_content_flex(pe, vis, sinks)
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    backend = _choose_backend(backend, q, k, v, pe, vis.docs, vis.mask, sinks=sinks is not None, hidden=hidden,
                              dropout=call.dropout is not None)
    if backend == "flex" and lq and lk:
        needs_grad = _needs_grad(q, k, v, pe) or (torch.is_grad_enabled() and hidden is not None
                                                  and hidden.requires_grad)
        _check_flex(q, needs_grad)
        hidden = pe.check_hidden(hidden, b, lk)
        if not vis.causal:
            raise ValueError(f"scheme {pe.name!r} counts positions from each query backwards: it needs causal=True")
        check_takes(pe, softcap=softcap is not None, window=vis.window is not None)
        with torch.no_grad():
            bias, index = pe.flex_bias(k.float(), None if hidden is None else hidden.float(), vis.docs)
        out = _flex(q, k, v, bias, index[:, lk - lq:], index, vis, scale=call.scale, softcap=softcap)
        if out is not None:
            return out
        # compiling was unavailable (warned once): the scheme's own rows
        backend = scores.content_backend(b * h * lq * lk, torch.is_grad_enabled())
    return content_attention(pe, q, k, v, hidden=hidden, causal=vis.causal, scale=call.scale, backend=backend,
                             softcap=softcap, sinks=sinks, visibility=vis, dropout=call.dropout)


def _check_content_flex(pe, vis: Visibility, sinks) -> None:
    """An explicit ``backend="flex"`` for a content scheme: one whose score is elementwise, without a
    mask or sinks."""
    if not pe.flex_ok:
        raise ValueError(f"backend='flex' needs a scheme whose score is elementwise; {pe.name!r} is not one "
                         f"(use 'blockwise', 'chunked' or 'materialize')")
    if vis.mask is not None:
        raise ValueError(f"backend='flex' does not take an attention_mask for content scheme {pe.name!r} yet; use "
                         "'blockwise', 'chunked' or 'materialize' (or 'auto', which picks one)")
    if sinks is not None:
        raise ValueError(f"backend='flex' does not take sinks= (CPU FlexAttention cannot return the log-sum-exp the "
                         f"sink column needs); use 'blockwise', 'chunked' or 'materialize' for {pe.name!r}")


def _flex_ok(pe) -> bool:
    return pe is None or (isinstance(pe, BiasEncoding) and pe.flex_ok)


def _flex_cheap(pe) -> bool:
    """Whether a first FlexAttention call of ``pe`` costs seconds, not minutes: ``auto`` takes flex
    only then, eagerly (under the caller's ``torch.compile`` the caller has chosen to compile, and
    flex is the route that compiles whole). A cold compile of ALiBi with a document mask took 27 s
    on the CPU (2 cores, loaded; 0.08 s a call afterwards, chunked 0.99 s, L = 2048, two documents);
    FIRE's score_mod unrolls its MLP and took 177–189 s at hidden = 128 (``flex_compiles_fast``)."""
    return pe is None or pe.flex_compiles_fast or torch.compiler.is_compiling()


def _flex_first(q) -> bool:
    """Whether ``auto`` prefers FlexAttention to ``blockwise`` for a bias forward without gradient:
    off the CPU (FlexAttention's kernels are the fast path there), and under the caller's own
    ``torch.compile`` (which fuses ``flex_attention``; ``blockwise`` is eager code).

    On the CPU, eager, ``blockwise`` was faster for every bias scheme at every length measured
    (time ÷ causal SDPA without a bias, flex / blockwise; causal, B=1, 8 heads, head_dim 64,
    float32, one thread, on a shared 2-core machine; up to 8192 in one process, interleaved,
    flex after its compiling call; 32768 in fresh processes, as ``posenc bench`` runs them, the
    range over a quiet and a loaded run):

        L        ALiBi             T5                KERPLE            FIRE
        1024     2.37 / 1.09       2.37 / 1.12       3.03 / 1.08        8.69 / 2.08
        2048     2.87 / 1.19       3.12 / 1.09       3.70 / 1.24        9.99 / 2.39
        8192     3.00 / 1.19       3.27 / 1.17       4.19 / 1.09       10.96 / 1.73
        32768    2.5–2.9 / 1.1–1.2 2.6–2.9 / 1.2–1.3 3.6–4.2 / 0.8–1.4  10–14 / 1.5–1.7

    so ``auto`` takes no length threshold there.
    """
    return q.device.type != "cpu" or torch.compiler.is_compiling()


def _choose_backend(backend: str, q, k, v, pe, docs=None, mask=None, *, sinks: bool = False,
                    window: int | None = None, explain: bool = False, hidden=None, dropout: bool = False):
    """The one chooser: ``auto`` resolved, and an explicit ``flex`` checked against the scheme, dtype,
    grad mode and mask. Returns the backend's name (``explain``: ``(name, why)``).

    ``auto``: ``materialize`` up to ``posenc.scores.MATERIALIZE_ELEMENTS`` scores; else ``flex``
    for a forward without gradient in a flex dtype when the scheme's score is elementwise and
    compiles fast, and there are documents (or nothing but the score terms) or flex is the fast
    path (off the CPU, under the caller's compile); else ``chunked`` with documents or without a
    scheme, ``blockwise`` otherwise. ``auto`` never compiles FlexAttention for a mask (or a window)
    alone on the CPU (``chunked`` is exact and bounded, with no minutes-long first call). With
    ``sinks`` flex is refused and ``auto`` never picks it (CPU FlexAttention returns no log-sum-exp
    to merge the sink with: torch 2.13's Inductor, "return_lse is not supported yet"); a
    ``softcap`` goes into flex's ``score_mod``. With ``dropout`` (``dropout_p`` > 0) flex is refused
    and ``auto`` never picks it: its ``score_mod`` acts on the scores before the softmax, and
    attention dropout multiplies the weights after it; every other backend forms those weights.
    Past the budget, dropout under gradient takes ``blockwise`` for every kind but content (its
    backward replays the mask; ``chunked`` would keep each block's weights for autograd)."""
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    needs_grad = _needs_grad(q, k, v, pe)
    if isinstance(pe, ContentEncoding):  # the scheme's own rows, or FoX's bias on FlexAttention
        return _choose_content(backend, q, k, pe, mask, sinks=sinks, explain=explain, dropout=dropout,
                               needs_grad=needs_grad or (torch.is_grad_enabled() and hidden is not None
                                                         and hidden.requires_grad))
    flex_mask_ok = mask is None or mask.bias is None  # flex reads a bool mask in its mask_mod
    if dropout and backend == "flex":
        raise ValueError("backend='flex' cannot apply attention dropout (dropout_p > 0): FlexAttention's score_mod "
                         "acts before the softmax; use backend='materialize', 'chunked' or 'blockwise' (or 'auto')")
    if sinks and backend == "flex":
        raise ValueError("backend='flex' does not compute sinks= (FlexAttention on the CPU returns no log-sum-exp to "
                         "merge them with); use backend='materialize', 'chunked' or 'blockwise' (or 'auto')")
    if backend == "auto":
        n = b * h * lq * lk
        if n <= scores.MATERIALIZE_ELEMENTS:
            name, why = "materialize", f"B·H·Lq·Lk = {n} scores fit MATERIALIZE_ELEMENTS"
        elif (_flex_ok(pe) and not sinks and not dropout and not needs_grad and q.dtype in FLEX_DTYPES and _flex_cheap(pe)
              and flex_mask_ok and (docs is not None or (pe is None and mask is None and window is None)
                                    or _flex_first(q))):
            name, why = "flex", "a forward without gradient that FlexAttention's score_mod and block mask serve"
        elif dropout and needs_grad:
            name, why = "blockwise", ("dropout under gradient: blocks whose backward replays the mask from the seed "
                                      "(chunked would keep every block's weights for autograd)")
        elif docs is not None or pe is None:
            name, why = "chunked", "documents or no scheme: query blocks with the masks (exact, bounded)"
        else:
            name, why = "blockwise", "query and key blocks with an online softmax (exact, bounded, trainable)"
        return (name, why) if explain else name
    if backend == "flex":
        if not _flex_ok(pe):
            raise ValueError(f"backend='flex' needs a bias scheme with an elementwise score; {pe.name!r} is not one")
        if not flex_mask_ok:
            raise ValueError("backend='flex' takes a bool or key padding attention_mask; an additive float mask with "
                             "values other than 0 and -inf runs on 'chunked', 'materialize' or 'blockwise'")
        _check_flex(q, needs_grad)
    return (backend, "asked for") if explain else backend


def _choose_content(backend: str, q, k, pe, mask, *, sinks: bool, explain: bool, needs_grad: bool,
                    dropout: bool = False):
    """``_choose_backend`` for a content scheme: ``auto`` takes flex for FoX's elementwise score (a forward
    without gradient past the budget, no mask or sinks, where ``_flex_first``), else the scheme's own
    rows (``posenc.scores.content_backend``); an explicit name is checked by ``_content``."""
    if backend != "auto":
        if dropout and backend == "flex":
            raise ValueError(f"backend='flex' cannot apply attention dropout (dropout_p > 0) for {pe.name!r}: "
                             "FlexAttention's score_mod acts before the softmax; use 'materialize', 'chunked' or "
                             "'blockwise' (or 'auto')")
        return (backend, "asked for") if explain else backend
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    n = b * h * lq * lk
    if (pe.flex_ok and lq and lk and mask is None and not sinks and not dropout and n > scores.MATERIALIZE_ELEMENTS
            and not needs_grad and q.dtype in FLEX_DTYPES and _flex_first(q)):
        name, why = "flex", "FoX's score is an elementwise bias of per-token state: FlexAttention's score_mod"
    else:
        name = scores.content_backend(n, torch.is_grad_enabled())
        why = "the scheme's own rows (posenc.rowwise): whole when small, else blocks (recomputed under grad)"
    return (name, why) if explain else name


def _check_flex(q, needs_grad: bool) -> None:
    """FlexAttention takes float16/bfloat16/float32, and has no backward on the CPU."""
    if q.dtype not in FLEX_DTYPES:
        raise TypeError(f"backend='flex' takes q, k, v of dtype {', '.join(map(str, FLEX_DTYPES))}; got "
                        f"{q.dtype} (use backend='chunked' or 'materialize', or 'auto' which picks one)")
    if q.device.type == "cpu" and needs_grad:
        raise ValueError("backend='flex' has no backward on CPU; use backend='chunked' or "
                         "'materialize' when gradients are needed (or wrap the call in torch.no_grad())")


# -- FlexAttention ----------------------------------------------------------------------------

def _flex_call(q, k, v, score_mod, block_mask, scale, enable_gqa):
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)


_FLEX: dict[tuple, object] = {}  # structural case -> its compiled flex_attention (None: use chunked)


def _compiled_flex(key: tuple):
    """``torch.compile(flex_attention)`` for one structural case, or None (use chunked).

    Dynamo compiles the first call's shapes, then on the next length recompiles with dynamic
    lengths (``dynamic=True`` from the start fails to lower T5's table gathers, torch 2.13). It
    keeps its graphs, and counts recompiles against its limit, per code object; each case gets its
    own copy of ``_flex_call``'s code, so cases never share one budget."""
    if key not in _FLEX:
        if not torch._dynamo.is_dynamo_supported():
            _flex_unavailable(key, "torch.compile is not supported on this platform")
        else:
            code = _flex_call.__code__.replace(co_name=f"_flex_call_{len(_FLEX)}")
            fn = types.FunctionType(code, _flex_call.__globals__, code.co_name)
            _FLEX[key] = torch.compile(fn, dynamic=None)
    return _FLEX[key]


def _flex_unavailable(key: tuple, why: str) -> None:
    _FLEX[key] = None
    warnings.warn(f"posenc.attention: FlexAttention is unavailable for {key} ({why}); this case runs on "
                  "the chunked backend from now on (exact, memory bounded)", FlexFallbackWarning, stacklevel=4)


def _flex(q, k, v, pe, q_positions, k_positions, vis: Visibility, *, scale: float, softcap: float | None = None):
    """FlexAttention: the bias is computed score by score in ``score_mod``, never a whole map; the
    masks are ``vis``'s block mask and ``mask_mod``. None when compiling is unavailable for this case.
    ``softcap``: the ``score_mod`` caps ``q·k·scale`` first (``c·tanh(s / c)``), then adds the bias."""
    from torch.nn.attention.flex_attention import flex_attention

    dtype = q.dtype
    # scores and bias in float32 (a float16 bias overflows); q contiguous, so that a decoding step's
    # strides never recompile the case (the policy above; tests/flex_loop.py: 4 compiles, not 5)
    q, k, v = q.float().contiguous(), k.float(), v.float()
    b, lq, lk = q.shape[0], q.shape[2], k.shape[2]
    gqa = k.shape[1] != q.shape[1]  # flex reads key/value head h // G for query head h, without a repeat
    score_mod = None
    if pe is not None:
        qpos = as_working(q_positions).expand(b, lq).contiguous()  # (B, Lq): int64, or float64 if real
        kpos = as_working(k_positions).expand(b, lk).contiguous()  # (B, Lk)
        bias = pe.score_fn()
        first, last = vis.row_ranges(0, lq, device=q.device)
        near = pe.nearest_keys(qpos, kpos, first=first, last=last)  # (B, Lq) or None

        if near is None:
            def score_mod(score, bi, hi, qi, ki):
                return score + bias(hi, qpos[bi, qi], kpos[bi, ki]).to(torch.float32)
        else:  # the row's peak removed in float64 before the cast (BiasEncoding.nearest_keys)
            # a query's position and its nearest key's in one (B, Lq, 2) table: Inductor's CPU
            # template with dynamic lengths fails to compile a second buffer read by qi (torch 2.13)
            rows = torch.stack(torch.broadcast_tensors(*(t.to(torch.promote_types(qpos.dtype, near.dtype))
                                                         for t in (qpos, near))), -1)

            def score_mod(score, bi, hi, qi, ki):
                q = rows[bi, qi, 0]
                return score + (bias(hi, q, kpos[bi, ki]) - bias(hi, q, rows[bi, qi, 1])).to(torch.float32)

    if softcap is not None:  # the cap on q·k·scale (score_mod's score), then the bias as above
        inner, cap = score_mod, float(softcap)

        def score_mod(score, bi, hi, qi, ki):
            capped = cap_scores(score, cap)
            return capped if inner is None else inner(capped, bi, hi, qi, ki)

    block_mask = None
    mask_mod = vis.mask_mod(b, q.device)
    if mask_mod is not None:
        if torch.compiler.is_compiling():  # the caller's compile fuses create_block_mask (no [Lq, Lk] mask)
            from torch.nn.attention.flex_attention import create_block_mask

            batched = vis.docs is not None or vis.mask is not None
            block_mask = create_block_mask(mask_mod, b if batched else None, None, lq, lk, device=q.device)
        else:
            block_mask = vis.flex_block_mask(b, mask_mod, block=FLEX_BLOCK, device=q.device)
    # CPU FlexAttention has no backward; elsewhere keep the caller's grad mode (never force it on)
    grad = torch.no_grad() if q.device.type == "cpu" else contextlib.nullcontext()
    if torch.compiler.is_compiling():  # the caller's compile captures flex_attention
        with grad:
            out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        return out.to(dtype)
    mask = vis.mask
    key = (None if pe is None else pe.name, vis.causal, vis.docs is not None, q.device.type, gqa,
           None if mask is None else ("keys" if mask.keys is not None else "pairs"), softcap, vis.window is not None)
    run = _compiled_flex(key)
    if run is None:
        return None
    from torch._dynamo.exc import BackendCompilerFailed, FailOnRecompileLimitHit
    from torch._inductor.exc import InductorError

    try:  # past the recompile limit raise, rather than run flex_attention eagerly (a whole score map)
        with grad, torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=FLEX_RECOMPILES):
            out = run(q, k, v, score_mod, block_mask, scale, gqa)
    except FailOnRecompileLimitHit:
        _flex_unavailable(key, "dynamo's recompile limit is reached")
        return None
    except (BackendCompilerFailed, InductorError) as error:
        _flex_unavailable(key, f"compiling failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
        return None
    return out.to(dtype)
