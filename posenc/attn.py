"""``posenc.attention``: scaled dot-product attention that applies any built scheme.

    attention(q, k, v, pe, q_positions=..., k_positions=..., causal=..., document_ids=...)

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

**Shapes.** ``v`` may have a head size ``Dv`` other than q/k's on every backend (SDPA's fused CPU
kernel, which wants one, gets zero columns: ``posenc.blockwise._one_head_size``); empty inputs
(``B``, ``Lq`` or ``Lk`` zero) return what SDPA returns, with or without ``document_ids``.

**Logit cap and sinks.** ``softcap=c`` bounds the content score, ``c·tanh(q·k·scale / c)``, before
the scheme's bias and the mask are added (Gemma 2); ``sinks=[H]`` adds ``e^{sinks[h]}`` to each
row's softmax denominator, one more key of value 0 (GPT-OSS). Both on materialize, chunked and
blockwise; the cap also in flex's ``score_mod``. Content schemes take both in their own formula
(``posenc.rowwise``: the cap on the content score ``q·k``, the sink as one more column of their
softmax); stick-breaking, which has no softmax, takes the cap and refuses sinks.

**Packed documents.** With ``document_ids`` (``posenc.packing``, in ``posenc/documents.py``) a
query sees only the keys of its own document, on every backend, and default positions restart
at 0 in each document.

**FlexAttention policy.** The flex backend compiles ``flex_attention`` once per structural case
(scheme, causal, documents, device) with dynamic lengths, each case with its own recompile
budget (``FLEX_RECOMPILES``), so a loop over many lengths never recompiles per length. Scores and the bias added to
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
import math
import types
import warnings

import torch
import torch.nn.functional as F

from posenc._validate import check_choice, check_float
from posenc.blockwise import blockwise_attention
from posenc.encodings._base import BiasEncoding, check_batch, check_positions, check_qkv
from posenc.masking import AttentionMask, check_attention_mask
from posenc.positions import as_working, heads_hint, text_positions
from posenc.rowwise import cap_and_sink_keywords, check_cap_and_sinks

BACKENDS = ("auto", "materialize", "flex", "chunked", "blockwise")
MATERIALIZE_ELEMENTS = 1 << 22  # a bias map up to 4M scores (16 MB in float32) is built whole
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


def _default_positions(lq: int, lk: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys at 0..Lk-1; queries are the last Lq of them (a KV cache), or 0..Lq-1 if Lq > Lk."""
    k = torch.arange(lk, device=device)
    q = torch.arange(lk - lq, lk, device=device) if lq <= lk else torch.arange(lq, device=device)
    return q, k


def _causal_allowed(lq: int, lk: int, device) -> torch.Tensor:
    """``[Lq, Lk]`` True where query i may see key j: ``j <= i + (Lk - Lq)`` (bottom-right aligned)."""
    return torch.arange(lk, device=device) <= torch.arange(lq, device=device).unsqueeze(-1) + (lk - lq)


def _check_documents(document_ids, b: int, lq: int, lk: int, device) -> torch.Tensor:
    """``document_ids [Lk]`` or ``[B, Lk]``, non-decreasing along L -> ``[1 or B, Lk]`` int64."""
    from posenc.documents import check_document_ids

    docs = check_document_ids("document_ids", document_ids).to(device)
    check_batch("document_ids", docs, b, lk)
    if lq > lk:
        raise ValueError(f"document_ids needs Lq <= Lk (queries are the last Lq keys); got Lq={lq}, Lk={lk}")
    return docs.long().reshape(docs.shape[0] if docs.dim() == 2 else 1, lk)  # (1 or B, Lk), also when Lk = 0


def _sdpa(q, k, v, *, causal: bool, scale, mask=None):
    """SDPA; with grouped heads (``k``'s ``H_kv`` < ``q``'s ``H``) through ``enable_gqa``, which on the
    CPU's fused kernel (no mask) reads each key/value head for its group without repeating it."""
    lq, lk = q.shape[-2], k.shape[-2]
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    if causal and mask is None and lq == lk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, **gqa)
    if causal:
        allowed = _causal_allowed(lq, lk, q.device)
        mask = allowed if mask is None else mask.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **gqa)


def _fold(x: torch.Tensor, group: int) -> torch.Tensor:
    """``[B, H, c, X] -> [B, H/G, G·c, X]``: the ``G`` query heads that share a key/value head as one
    head of ``G·c`` rows (head ``h = kv·G + g``, row ``g·c + r``), so a product with ``k [B, H/G, X, n]``
    reads each key/value head once instead of repeating it ``G`` times (grouped-query attention)."""
    if group == 1:
        return x
    b, h, c = x.shape[:3]
    return x.reshape(b, h // group, group * c, *x.shape[3:])


def _unfold(x: torch.Tensor, group: int) -> torch.Tensor:
    """``[B, H/G, G·c, X] -> [B, H, c, X]``, the inverse of ``_fold``."""
    if group == 1:
        return x
    b, hk, gc = x.shape[:3]
    return x.reshape(b, hk * group, gc // group, *x.shape[3:])


def _repeat_kv(k: torch.Tensor, v: torch.Tensor, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``k, v [B, H_kv, Lk, ·]`` repeated to ``H`` heads (head ``h`` reads ``h // (H / H_kv)``), for
    the kinds whose scheme reads keys per query head (relative, content)."""
    group = h // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def _needs_grad(q, k, v, pe) -> bool:
    params = () if pe is None else tuple(pe.parameters())
    return torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *params))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe=None, *,
              q_positions: torch.Tensor | None = None, k_positions: torch.Tensor | None = None,
              causal: bool = False, scale: float | None = None, backend: str = "auto",
              document_ids: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
              attention_mask: torch.Tensor | None = None, softcap: float | None = None,
              sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of ``q [B, H, Lq, D]`` over ``k, v [B, H_kv, Lk, D]`` with positional encoding ``pe``.

    **Grouped heads** (GQA, MQA): ``k`` and ``v`` may have ``H_kv`` heads with ``H % H_kv == 0``;
    query head ``h`` reads key/value head ``h // (H / H_kv)`` (transformers' ``repeat_kv``). Kinds
    none, rotary and bias never repeat them, on every backend (the ``G = H / H_kv`` query heads
    of a group are folded into one head of ``G·c`` rows for each product, ``_fold``); relative and
    content schemes, whose terms read keys per query head, repeat them.

    Args:
        pe: a module from ``posenc.build`` (or None, the same as ``nope``).
        q_positions, k_positions: ``[L]`` or ``[B, L]`` (``[L, A]``/``[B, L, A]`` for a ``pe``
            with ``A`` axes; see ``posenc.positions``). By default keys are at ``0..Lk-1`` and
            queries at the last ``Lq`` of them, as when decoding with a KV cache (on every axis;
            with ``document_ids``: restarting at 0 in each document).
        causal: query ``i`` sees key ``j`` only when ``j <= i + (Lk - Lq)``.
        scale: multiplies ``q·k``; by default ``1/√D``, or the scheme's ``default_scale`` when it
            declares one (DeBERTa: ``1/√(D·f)``, ``f`` counting its terms).
        backend: for bias and relative kinds (and any kind with ``document_ids``),
            ``"materialize"`` the whole score bias, ``"flex"`` (FlexAttention ``score_mod``; bias
            kind, forward only on CPU, float16/bfloat16/float32), ``"chunked"`` (query blocks),
            ``"blockwise"`` (``posenc.blockwise``: query and key blocks with an online softmax,
            and a backward that recomputes them; trains at long context; no ``document_ids``),
            or ``"auto"`` (materialize when small; else, when no gradient is needed and the dtype
            allows, flex off the CPU, under ``torch.compile`` or with ``document_ids`` — but
            eagerly never for a scheme whose score_mod takes minutes to compile, FIRE's MLP
            (``_flex_cheap``); else blockwise, or chunked with ``document_ids``).
        document_ids: integer ``[Lk]`` or ``[B, Lk]``, non-decreasing: the document of each key
            (queries are the last ``Lq`` keys). A query sees only keys of its own document.
        hidden: ``[B, Lk, d_model]``, the layer's input at every key, for a ``content`` scheme that
            reads it (``pe.reads_hidden``: FoX's full gate, PaTH); refused otherwise. A content
            scheme owns the attention (``pe(q, k, v, ...)``, see ``posenc.rowwise``) and takes no
            positions; its backends are ``materialize``, ``chunked``, ``blockwise`` and, for FoX,
            ``flex``.
        attention_mask: a key padding mask ``[B, Lk]`` (bool or 0/1: False/0 marks padding) or a
            4D mask ``[B or 1, H or 1, Lq, Lk]``, bool (True: may see) or additive float (added to
            the scores; ``−inf`` or transformers' ``finfo.min`` masks), combined with ``causal``
            and ``document_ids`` on every backend (``posenc.masking``). A query that sees no key
            returns zeros (and zero gradients). Content schemes take bool and padding masks.
        softcap: a logit cap ``c > 0`` (Gemma 2's ``attn_logit_softcapping``; Gemma Team 2024,
            arXiv:2408.00118): the content score is bounded first, then the scheme's bias (or
            relative term) and the mask are added, ``s = c·tanh(q·k·scale / c) + bias + mask``,
            as transformers' Gemma 2 attention adds its mask after the cap (a position bias is
            added as the mask is; the cap bounds ``q·k`` only). Every backend: ``materialize``,
            ``chunked``, ``blockwise`` (its online-softmax loop, not the fused CPU kernel) and
            ``flex`` (in its ``score_mod``). A content scheme caps its own dot-product term and adds
            its positional term after (``posenc.rowwise``: FoX's gates, CoPE's ``q·e(p)``, DAPE's
            MLP reading the capped score; PaTH's whole transported score; stick-breaking's ``z``).
        sinks: ``[H]`` floating, one learned logit per query head (attention sinks: GPT-OSS's
            ``s_aux``; Xiao et al. 2023, arXiv:2309.17453): each row's softmax denominator gains
            ``e^{sinks[h]}``, as one more key of score ``sinks[h]`` and value 0, so
            ``out = softmax(s)·v · σ(lse − sinks[h])`` with ``lse`` the row's log-sum-exp;
            differentiable in q, k, v and ``sinks``. Backends ``materialize``, ``chunked`` and
            ``blockwise``; ``flex`` refuses it (``auto`` never picks it then). Content schemes take
            it as one more column of their softmax, but stick-breaking (no softmax: refused). A
            query that sees no key still returns zeros.

    Returns:
        ``[B, H, Lq, Dv]`` in the dtype of ``q``.
    """
    q, k, v = check_qkv(q, k, v, grouped=True)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    check_choice("backend", backend, BACKENDS)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    softcap, sinks = check_cap_and_sinks(softcap, sinks, h)
    mask = check_attention_mask(attention_mask, b=b, h=h, lq=lq, lk=lk, device=q.device)
    capped = softcap is not None or sinks is not None  # scores that SDPA does not form
    if scale is None:  # a scheme may fix its own (DeBERTa: 1/√(D·f)); else 1/√D
        scale = getattr(pe, "default_scale", None) or 1.0 / math.sqrt(d)
    else:
        scale = check_float("scale", scale)
    if causal and lq > lk:
        raise ValueError(f"causal attention needs Lq <= Lk (queries are the last Lq keys); got Lq={lq}, Lk={lk}")
    kind = "none" if pe is None else getattr(pe, "kind", None)
    if hidden is not None and not getattr(pe, "reads_hidden", False):
        raise ValueError(f"hidden= is read only by content schemes that declare it (fox with gate='full', path); "
                         f"pe {getattr(pe, 'name', None)!r} does not: pass hidden=None")
    if kind == "content":
        if q_positions is not None or k_positions is not None:
            raise ValueError(f"pe {pe.name!r} is a content scheme: its positions are counted from the tokens, "
                             "so it takes no q_positions/k_positions (pass None)")
        k, v = _repeat_kv(k, v, h)
        return _content(q, k, v, pe, hidden, document_ids, mask, causal=causal, scale=scale, backend=backend,
                        softcap=softcap, sinks=sinks)
    axes, check = getattr(pe, "axes", 1), getattr(pe, "check_positions", check_positions)  # the pe's positions model
    docs = None if document_ids is None else _check_documents(document_ids, b, lq, lk, q.device)
    if q_positions is None or k_positions is None:
        if docs is None:
            dq, dk = _default_positions(lq, lk, q.device)
        else:
            from posenc.documents import positions_in_documents

            dk = positions_in_documents(docs)  # (1 or B, Lk)
            dq = dk[:, lk - lq:]
        dq, dk = text_positions(dq, axes), text_positions(dk, axes)  # several axes: the same on each
    q_positions = dq if q_positions is None else check("q_positions", q_positions).to(q.device)
    k_positions = dk if k_positions is None else check("k_positions", k_positions).to(q.device)
    check_batch("q_positions", q_positions, b, lq, axes=axes, heads=h)
    check_batch("k_positions", k_positions, b, lk, axes=axes, heads=k.shape[1])
    form = getattr(pe, "attention_form", None)  # a scheme whose attention is another module at some columns
    if form is not None:  # (bipe_bias: its inter bias at the segment indices)
        pe, q_positions, k_positions = form(q_positions, k_positions)

    if kind == "additive":
        raise ValueError(f"pe {pe.name!r} is additive: add pe(positions) to the token embeddings before the "
                         "q/k/v projections; attention() applies rotary, bias and relative kinds")
    if kind not in ("none", "rotary", "bias", "relative"):  # content returned above
        raise TypeError(f"pe must be a module from posenc.build (with a kind), got {type(pe).__name__}")
    if kind == "bias" and pe.num_heads != h:
        raise ValueError(f"pe has num_heads={pe.num_heads} but q has {h} heads{heads_hint(pe.num_heads, q)}")
    if kind == "relative":
        k, v = _repeat_kv(k, v, h)
    if getattr(pe, "value_term", None) is not None and v.shape[-1] != pe.head_dim:
        raise ValueError(f"pe {pe.name!r} adds value embeddings of head_dim={pe.head_dim} to the output, so v must "
                         f"have last dimension {pe.head_dim}, got {v.shape[-1]} (shape {list(v.shape)})")
    if getattr(pe, "query_scale", None) is not None:  # a temperature per query position (Llama 4's NoPE layers)
        q = pe(q, q_positions)
    if kind == "rotary":  # one length for q and k (length-dependent scalings), then keys first
        observe = getattr(pe, "observe", None)
        if observe is not None:
            observe(q_positions)
        k = pe(k, k_positions, role="key")
        q = pe(q, q_positions, role="query")
    if lq == 0 or lk == 0:  # no scores to bias: what SDPA gives (empty, or zeros over no keys)
        return _sdpa(q, k, v, causal=False, scale=scale)
    if kind in ("none", "rotary"):
        if docs is None and mask is None and not capped:
            return _sdpa(q, k, v, causal=causal, scale=scale)
        pe = None  # the masks (and the cap, the sinks) are the only terms on the scores: dispatched like a bias

    backend = _choose_backend(backend, q, k, v, pe, docs, mask, sinks=sinks is not None)
    if backend == "flex" and docs is not None and lk < FLEX_BLOCK:
        # compiled CPU FlexAttention with a document mask_mod is wrong when all keys fit in one
        # block (torch 2.13: error 0.24 at Lk = 120, exact at 128, 256, 311); chunked is exact
        backend = "chunked"
    if backend == "blockwise":
        if docs is not None:
            raise ValueError("backend='blockwise' does not take document_ids yet; use backend='chunked' "
                             "(or 'auto', which picks it) for packed documents")
        if pe is None:
            raise ValueError("backend='blockwise' needs a bias or relative scheme; with only an attention_mask "
                             "use backend='chunked' (or 'auto', which picks it)")
        return blockwise_attention(q, k, v, pe, q_positions, k_positions, causal=causal, scale=scale, mask=mask,
                                   softcap=softcap, sinks=sinks)
    if backend == "flex":
        out = _flex(q, k, v, pe, q_positions, k_positions, docs, mask, causal=causal, scale=scale, softcap=softcap)
        if out is not None:
            return out
        backend = "chunked"  # compiling was unavailable for this case (warned once)
    chunk = lq if backend == "materialize" else max(1, CHUNK_ELEMENTS // max(1, b * h * lk))
    return _chunked(q, k, v, pe, q_positions, k_positions, docs, mask, causal=causal, scale=scale, chunk=chunk,
                    softcap=softcap, sinks=sinks)


def _content(q, k, v, pe, hidden, document_ids, mask, *, causal: bool, scale: float, backend: str,
             softcap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """A content scheme's attention: FlexAttention for a scheme whose score is an elementwise bias of
    per-token state (FoX: ``score_mod`` reads ``c[q] − c[kv]``, after the cap when there is one),
    else the scheme's own backends (which take ``softcap``/``sinks`` in its formula)."""
    if backend == "flex" and not pe.flex_ok:
        raise ValueError(f"backend='flex' needs a scheme whose score is elementwise; {pe.name!r} is not one "
                         f"(use 'blockwise', 'chunked' or 'materialize')")
    if backend == "flex" and mask is not None:
        raise ValueError(f"backend='flex' does not take an attention_mask for content scheme {pe.name!r} yet; use "
                         "'blockwise', 'chunked' or 'materialize' (or 'auto', which picks one)")
    if backend == "flex" and sinks is not None:
        raise ValueError(f"backend='flex' does not take sinks= (CPU FlexAttention cannot return the log-sum-exp the "
                         f"sink column needs); use 'blockwise', 'chunked' or 'materialize' for {pe.name!r}")
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if backend in ("flex", "auto") and pe.flex_ok and lq and lk and mask is None and sinks is None:
        needs_grad = _needs_grad(q, k, v, pe) or (torch.is_grad_enabled() and hidden is not None
                                                  and hidden.requires_grad)
        wanted = backend == "flex" or (b * h * lq * lk > MATERIALIZE_ELEMENTS and not needs_grad
                                       and q.dtype in FLEX_DTYPES and _flex_first(q))
        if wanted:
            _check_flex(q, needs_grad)
            hidden = pe.check_hidden(hidden, b, lk)
            if not causal:
                raise ValueError(f"scheme {pe.name!r} counts positions from each query backwards: it needs causal=True")
            docs = None if document_ids is None else _check_documents(document_ids, b, lq, lk, q.device)
            with torch.no_grad():
                bias, index = pe.flex_parts(k.float(), None if hidden is None else hidden.float(), docs)
            out = _flex(q, k, v, bias, index[:, lk - lq:], index, docs, causal=True,
                        scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale),
                        softcap=softcap)
            if out is not None:
                return out
        backend = "auto" if backend == "flex" else backend  # compiling was unavailable (warned once)
    extra = cap_and_sink_keywords(softcap, sinks)
    if mask is not None:
        extra["attention_mask"] = mask
    return pe(q, k, v, hidden=hidden, causal=causal, scale=scale, document_ids=document_ids, backend=backend, **extra)


def _flex_ok(pe) -> bool:
    return pe is None or (pe.kind == "bias" and pe.flex_ok)


def _flex_cheap(pe) -> bool:
    """Whether a first FlexAttention call of ``pe`` costs seconds, not minutes: ``auto`` takes flex
    only then, eagerly (under the caller's ``torch.compile`` the caller has chosen to compile, and
    flex is the route that compiles whole). A cold compile of ALiBi with a document mask took 27 s
    on the CPU (2 cores, loaded; 0.08 s a call afterwards, chunked 0.99 s, L = 2048, two documents);
    FIRE's score_mod unrolls its MLP and took 177–189 s at hidden = 128 (``flex_compiles_fast``)."""
    return pe is None or getattr(pe, "flex_compiles_fast", True) or torch.compiler.is_compiling()


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


def _choose_backend(backend: str, q, k, v, pe, docs=None, mask: AttentionMask | None = None, *,
                    sinks: bool = False) -> str:
    """``auto`` resolved, and an explicit ``flex`` checked against the scheme, dtype, grad mode and mask.

    ``auto`` never compiles FlexAttention for a mask alone on the CPU (``chunked`` is exact and
    bounded, with no minutes-long first call). With ``sinks`` flex is refused and ``auto`` never
    picks it (CPU FlexAttention returns no log-sum-exp to merge the sink with: torch 2.13's
    Inductor, "return_lse is not supported yet"); a ``softcap`` goes into flex's ``score_mod``."""
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    needs_grad = _needs_grad(q, k, v, pe)
    flex_mask_ok = mask is None or mask.bias is None  # flex reads a bool mask in its mask_mod
    if sinks and backend == "flex":
        raise ValueError("backend='flex' does not compute sinks= (FlexAttention on the CPU returns no log-sum-exp to "
                         "merge them with); use backend='materialize', 'chunked' or 'blockwise' (or 'auto')")
    if backend == "auto":
        if b * h * lq * lk <= MATERIALIZE_ELEMENTS:
            return "materialize"
        if (_flex_ok(pe) and not sinks and not needs_grad and q.dtype in FLEX_DTYPES and _flex_cheap(pe) and flex_mask_ok
                and (docs is not None or (pe is None and mask is None) or _flex_first(q))):
            return "flex"
        return "chunked" if docs is not None or pe is None else "blockwise"
    if backend == "flex":
        if not _flex_ok(pe):
            raise ValueError(f"backend='flex' needs a bias scheme with an elementwise score; {pe.name!r} is not one")
        if not flex_mask_ok:
            raise ValueError("backend='flex' takes a bool or key padding attention_mask; an additive float mask with "
                             "values other than 0 and -inf runs on 'chunked', 'materialize' or 'blockwise'")
        _check_flex(q, needs_grad)
    return backend


def _check_flex(q, needs_grad: bool) -> None:
    """FlexAttention takes float16/bfloat16/float32, and has no backward on the CPU."""
    if q.dtype not in FLEX_DTYPES:
        raise TypeError(f"backend='flex' takes q, k, v of dtype {', '.join(map(str, FLEX_DTYPES))}; got "
                        f"{q.dtype} (use backend='chunked' or 'materialize', or 'auto' which picks one)")
    if q.device.type == "cpu" and needs_grad:
        raise ValueError("backend='flex' has no backward on CPU; use backend='chunked' or "
                         "'materialize' when gradients are needed (or wrap the call in torch.no_grad())")


def _allowed(lq: int, lk: int, start: int, stop: int, docs, *, causal: bool, device):
    """Which keys queries ``start..stop-1`` may see: ``[c, Lk]`` or ``[1 or B, 1, c, Lk]``; None if all."""
    rows = torch.arange(start, stop, device=device).unsqueeze(-1)  # (c, 1): only this chunk's rows
    allowed = torch.arange(lk, device=device) <= rows + (lk - lq) if causal else None  # (c, Lk)
    if docs is not None:
        shift = lk - lq
        same = docs[:, None, start + shift:stop + shift, None] == docs[:, None, None, :]  # (1 or B, 1, c, Lk)
        allowed = same if allowed is None else same & allowed
    return allowed


def _visible(lq: int, lk: int, start: int, stop: int, docs, *, causal: bool, device):
    """The keys queries ``start..stop-1`` may see as index ranges ``first..last`` (inclusive, ``[c]`` or
    ``[1 or B, c]``; ``first`` None: from key 0): the causal and document masks, for
    ``BiasEncoding.nearest_keys``. Documents are contiguous, so a query's are one range."""
    own = torch.arange(start, stop, device=device) + (lk - lq)  # (c,) each query's own key
    last = own if causal else torch.full_like(own, lk - 1)
    if docs is None:
        return None, last
    ids = docs.contiguous()  # (1 or B, Lk), non-decreasing
    mine = ids[:, own]  # (1 or B, c)
    return torch.searchsorted(ids, mine), torch.minimum(last, torch.searchsorted(ids, mine, right=True) - 1)


def _chunked(q, k, v, pe, q_positions, k_positions, docs=None, mask: AttentionMask | None = None, *,
             causal: bool, scale: float, chunk: int, softcap: float | None = None, sinks: torch.Tensor | None = None):
    """Exact attention over query blocks of ``chunk`` rows; scores in float32 at least.
    ``pe`` None: no bias, only the causal, document and attention masks. Grouped heads are folded
    (``_fold``), never repeated; a query that sees no key gives zeros. With ``softcap`` or
    ``sinks`` a block's scores are formed explicitly (``_capped_weights``), then the softmax with
    the sink column."""
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    group = h // k.shape[1]
    outs = []
    for start in range(0, lq, chunk):
        stop = min(start + chunk, lq)
        qp = q_positions[..., start:stop]
        qc = q[:, :, start:stop]  # (B, H, c, D)
        allowed = _allowed(lq, lk, start, stop, docs, causal=causal, device=q.device)
        seen = added = None
        if mask is not None:
            own = mask.allowed(start, stop, 0, lk)  # (1 or B, 1 or H, c or 1, Lk)
            allowed = own if allowed is None else allowed & own
            seen = allowed.any(-1, keepdim=True)  # (.., c, 1): a query with no key gives zeros
            allowed = allowed | ~seen  # ... and sees every key meanwhile, so nothing is NaN
            added = mask.added(start, stop, 0, lk)
        if pe is None:
            bias = None
        elif isinstance(pe, BiasEncoding):  # float64 map cast once to the score dtype, not the module's
            first, last = _visible(lq, lk, start, stop, docs, causal=causal, device=q.device)
            near = pe.nearest_keys(qp, k_positions, first=first, last=last)  # (c,) or (B, c); None: no peak
            if near is None:
                bias = pe(qp, k_positions, dtype=work)  # (H, c, Lk) or (B, H, c, Lk)
            else:  # each row's peak removed in float64 first (far keys)
                bias = pe.peak_removed(as_working(qp), as_working(k_positions), near).to(work)
        elif pe.kind == "bias":
            bias = pe(qp, k_positions).to(work)
        else:
            bias = pe(qc, k, qp, k_positions).to(work)  # (B, H, c, Lk)
        if added is not None:
            bias = added.to(work) if bias is None else bias + added.to(work)
        if allowed is not None:
            bias = allowed if bias is None else torch.where(allowed, bias, float("-inf"))
        if softcap is not None or sinks is not None:
            p = _capped_weights(qc, k, bias, group, scale=scale, softcap=softcap, sinks=sinks)  # (B, H, c, Lk)
            out = _unfold(torch.matmul(_fold(p, group), v), group)  # (B, H, c, Dv)
            if getattr(pe, "value_term", None) is not None:
                out = out + pe.value_term(p, qp, k_positions)
        elif getattr(pe, "value_term", None) is None:
            if group > 1 and bias is not None:  # (.., c, Lk) -> (B or 1, H/G, G·c, Lk)
                bias = _fold(bias.expand(bias.shape[0] if bias.dim() == 4 else 1, h, stop - start, lk), group)
            out = _unfold(F.scaled_dot_product_attention(_fold(qc, group), k, v, attn_mask=bias, scale=scale), group)
        else:  # Shaw: the output also mixes relative value embeddings with the same weights
            p = torch.softmax(qc @ k.transpose(-1, -2) * scale + bias, dim=-1)  # (B, H, c, Lk)
            out = p @ v + pe.value_term(p, qp, k_positions)
        outs.append(out if seen is None else out * seen)
    return torch.cat(outs, dim=2).to(dtype)


def _capped_weights(qc, k, bias, group: int, *, scale: float, softcap: float | None, sinks: torch.Tensor | None):
    """The softmax weights ``[B, H, c, Lk]`` of one query block with a logit cap and/or sinks:
    ``s = c·tanh(q·k·scale / c) + bias`` (the cap on the content score only; ``bias`` the scheme's
    term plus the masks, ``−∞`` where masked, or a bool ``allowed``), then a column ``sinks[h]``
    joins each row's softmax and is dropped (its value is 0), so the weights sum to
    ``σ(lse − sinks[h])``."""
    b, h, c = qc.shape[:3]
    s = _unfold(torch.matmul(_fold(qc, group), k.transpose(-1, -2)), group) * scale  # (B, H, c, Lk)
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if bias is not None:
        s = s.masked_fill(~bias, float("-inf")) if bias.dtype == torch.bool else s + bias
    if sinks is None:
        return torch.softmax(s, dim=-1)
    sink = sinks.to(device=s.device, dtype=s.dtype).view(1, h, 1, 1).expand(b, h, c, 1)  # (B, H, c, 1)
    return torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]


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


def _block_mask(b: int, lq: int, lk: int, docs, mask_mod, *, causal: bool, device, masked: bool = False):
    """The ``BlockMask`` of the causal and/or document mask, built from ``FLEX_BLOCK`` blocks directly:
    ``[nq, nk]`` block tables, never the ``[Lq, Lk]`` mask (nor a compile of create_block_mask).
    ``masked``: an attention mask also applies, so no block is known whole (``mask_mod`` runs on each)."""
    from torch.nn.attention.flex_attention import BlockMask

    n = FLEX_BLOCK
    nq, nk = -(-lq // n), -(-lk // n)
    q_first = torch.arange(nq, device=device) * n  # (nq,) first query row of each block
    q_last = (q_first + n - 1).clamp(max=lq - 1)
    k_first = torch.arange(nk, device=device) * n  # (nk,)
    k_last = (k_first + n - 1).clamp(max=lk - 1)
    some = torch.ones(1, nq, nk, dtype=torch.bool, device=device)  # a block with at least one allowed pair
    every = torch.ones(1, nq, nk, dtype=torch.bool, device=device)  # a block whose pairs are all allowed
    shift = lk - lq
    if causal:
        some = some & (k_first <= q_last[:, None] + shift)
        every = every & (k_last <= q_first[:, None] + shift)
    if docs is not None:  # non-decreasing ids: a block's first and last rows hold its smallest and largest
        q_lo, q_hi = docs[:, q_first + shift], docs[:, q_last + shift]  # (1 or B, nq)
        k_lo, k_hi = docs[:, k_first], docs[:, k_last]  # (1 or B, nk)
        some = some & (q_lo[:, :, None] <= k_hi[:, None, :]) & (k_lo[:, None, :] <= q_hi[:, :, None])
        every = every & ((q_lo == q_hi)[:, :, None] & (k_lo == k_hi)[:, None, :]
                         & (q_lo[:, :, None] == k_lo[:, None, :]))
    if masked:
        every = every & False
    partial = some & ~every

    def table(m):  # (Bm, nq, nk) -> the count and the indices (allowed first) of each row's blocks
        m = m.unsqueeze(1)  # (Bm, 1, nq, nk)
        index = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return m.sum(-1, dtype=torch.int32), index

    return BlockMask.from_kv_blocks(*table(partial), *table(every), BLOCK_SIZE=n, mask_mod=mask_mod,
                                    seq_lengths=(lq, lk))


def _flex(q, k, v, pe, q_positions, k_positions, docs, mask: AttentionMask | None = None, *, causal: bool,
          scale: float, softcap: float | None = None):
    """FlexAttention: the bias is computed score by score in ``score_mod``, never a whole map; the
    masks are a block mask with a ``mask_mod``. None when compiling is unavailable for this case.
    ``softcap``: the ``score_mod`` caps ``q·k·scale`` first (``c·tanh(s / c)``), then adds the bias."""
    from torch.nn.attention.flex_attention import flex_attention

    dtype = q.dtype
    q, k, v = q.float(), k.float(), v.float()  # scores and bias in float32 (a float16 bias overflows)
    b, lq, lk = q.shape[0], q.shape[2], k.shape[2]
    gqa = k.shape[1] != q.shape[1]  # flex reads key/value head h // G for query head h, without a repeat
    score_mod = None
    if pe is not None:
        qpos = as_working(q_positions).expand(b, lq).contiguous()  # (B, Lq): int64, or float64 if real
        kpos = as_working(k_positions).expand(b, lk).contiguous()  # (B, Lk)
        bias = pe.score_fn()
        first, last = _visible(lq, lk, 0, lq, docs, causal=causal, device=q.device)
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
            capped = torch.tanh(score / cap) * cap
            return capped if inner is None else inner(capped, bi, hi, qi, ki)

    block_mask = None
    if causal or docs is not None or mask is not None:
        shift = lk - lq
        if not torch.compiler.is_compiling():  # a tensor, so that our compile does not specialize on it
            shift = torch.tensor(shift, device=q.device)  # (the caller's compile takes only inputs in a mask_mod)
        kdoc = None if docs is None else docs.expand(b, lk).contiguous()  # (B, Lk)
        keys = None if mask is None or mask.keys is None else mask.keys.expand(b, lk).contiguous()  # (B, Lk)
        pairs = None if mask is None else mask.pairs  # (1 or B, 1 or H, Lq, Lk)
        pair_b, pair_h = (False, False) if pairs is None else (pairs.shape[0] > 1, pairs.shape[1] > 1)

        def mask_mod(bi, hi, qi, ki):
            allowed = ki <= qi + shift if causal else ki >= 0
            if kdoc is not None:
                allowed = allowed & (kdoc[bi, qi + shift] == kdoc[bi, ki])
            if keys is not None:
                allowed = allowed & keys[bi, ki]
            if pairs is not None:
                allowed = allowed & pairs[bi if pair_b else 0, hi if pair_h else 0, qi, ki]
            return allowed

        if torch.compiler.is_compiling():  # the caller's compile fuses create_block_mask (no [Lq, Lk] mask)
            from torch.nn.attention.flex_attention import create_block_mask

            block_mask = create_block_mask(mask_mod, None if docs is None else b, None, lq, lk, device=q.device)
        else:
            block_mask = _block_mask(b, lq, lk, docs, mask_mod, causal=causal, device=q.device, masked=mask is not None)
    # CPU FlexAttention has no backward; elsewhere keep the caller's grad mode (never force it on)
    grad = torch.no_grad() if q.device.type == "cpu" else contextlib.nullcontext()
    if torch.compiler.is_compiling():  # the caller's compile captures flex_attention
        with grad:
            out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        return out.to(dtype)
    key = (None if pe is None else pe.name, causal, docs is not None, q.device.type, gqa,
           None if mask is None else ("keys" if mask.keys is not None else "pairs"), softcap)
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
