"""The attention of the ``content`` kind, block of queries by block of queries, with bounded memory.

A content scheme (``posenc.encodings._base.ContentEncoding``) gives its formula for a block of
query rows, ``rows(q, k, v, state, q0, allowed, scale)``. Each of its weights needs only the
query's own row of scores: FoX adds ``c_i − c_j`` to it, CoPE counts gates from the query
backwards along it (a reverse cumulative sum), stick-breaking multiplies survivals along it (a
reverse cumulative sum of log-sigmoids), DAPE's MLP reads each pair of it across heads. So the
rows split into blocks of ``c`` queries without any carry between blocks, and

- ``materialize``: one block, every row (what the references compute);
- ``chunked``: blocks of ``c = ROW_ELEMENTS / (B·H·Lk)`` rows, forward only (no gradient kept
  beyond what autograd keeps for each block);
- ``blockwise``: the same blocks, each a ``torch.autograd.Function`` (``_Rows``) whose forward
  runs without a graph and keeps only the block's inputs (views of q, k, v and the per-token
  state); its backward recomputes the block's scores, gates and weights under ``enable_grad``
  and differentiates them (``torch.autograd.grad``), so the gradients into q, k, v, ``hidden`` and every parameter
  are those of the materialized path (the same operations, in the same order, on the same values)
  and at most one block's ``[B, H, c, Lk]`` temporaries are alive at a time.

**Attention dropout** (``posenc.attention(..., dropout_p=)``, ``posenc.dropout``): a block's
``rows`` get ``dropout=``, a callable bound to the block's origin that multiplies its weights by
the call's mask (from the seed and each pair's coordinates) and ``1/(1 − p)`` before ``v``; the
softmax schemes apply it in ``softmax_rows``, stick-breaking to its stick shares (the leftover
``1 − Σ_j a_ij`` on the query's own value is computed from the shares before dropout). The
backward's recomputation calls ``rows`` with the same callable: the same mask, never stored.

**Logit cap and sinks** (``softcap=``, ``sinks=``, as ``posenc.attention`` takes them for the other
kinds: Gemma 2, GPT-OSS). The cap bounds the dot-product term of the score, ``c·tanh(q·k·scale / c)``
(``cap_scores``), and the scheme's positional term is added after it, as a bias is after the cap:
FoX's ``c_i − c_j``, CoPE's ``q_i·e(p_ij)`` (its gates still read the uncapped ``q·k``: they are
the scheme's own sigmoid, not the softmax's logits), DAPE's bias and MLP (the MLP reads the capped
score, as it reads the score the softmax gets); PaTH's score is its transported ``q·k`` whole, so
the cap bounds all of it; stick-breaking caps its ``z``. A sink is one more column of the softmax
with score ``sinks[h]`` and value 0 (``softmax_rows``); stick-breaking, which has no softmax,
refuses sinks. A scheme declares what its ``rows`` take (``takes_softcap``, ``takes_sinks``:
every built-in scheme both, stick-breaking the cap only; a plugin's scheme neither unless it
says). Each block's gradient reaches ``sinks`` through the recomputed rows like any parameter.

With causal attention a block of rows ending at query ``qe`` reads keys ``0 … qe + Lk − Lq − 1``
only. Packed documents (``document_ids``) are a mask on the block: a key of another document is
absent for the scheme (no gate, no survival factor, no weight), so gates and positions restart at
each document's first token.

Memory: ``blockwise`` holds q, k, v, the per-token state, the output and one block's
temporaries (``ROW_ELEMENTS`` scores, times the scheme's handful of temporaries); ``Lk`` enters
only through ``c`` (down to one row when ``B·H·Lk`` exceeds ``ROW_ELEMENTS``).

Notation used for tensor shapes: B batch, H heads, Lq/Lk query/key lengths, D head dim, c the
rows of a block, n the keys it reads.
"""

from __future__ import annotations

import sys

import torch

from posenc import scores as _scores
from posenc._validate import check_bool, check_choice
from posenc.encodings._base import ContentEncoding, check_qkv
from posenc.masking import Visibility
from posenc.scores import MATERIALIZE_ELEMENTS, cap_scores, check_cap_and_sinks, sink_softmax  # noqa: F401

# Scores per block of rows: 4M (16 MB in float32; 64 rows at Lk = 8192 with 8 heads), as the
# chunked bias backend's CHUNK_ELEMENTS / 2 (a content block holds several such temporaries).
ROW_ELEMENTS = 1 << 22
# Blocks grow with causal attention (block t reads t·c keys), so glibc cannot reuse a freed block's
# memory for the next, larger one and the heap fragments: FoX fwd+bwd at L=4096 (8 heads) rose
# by 0.56 GB (0.53 GB of it in the forward, which keeps nothing). With glibc's malloc_trim(0) after
# each block's forward and backward (it returns the free heap pages) the rise was 0.29 GB and the
# pass took 56 s instead of 95 s (fewer page faults; one run each on a loaded 2-core machine).
ROW_TRIM = True
# ... but only after blocks of at least this many scores: a trim costs about a millisecond, more
# than a whole small block (FoX fwd+bwd at B=16, H=4, L=32 took 2.5 ms with a trim per block and
# 1.0 ms without), and a heap of small blocks has little to give back.
TRIM_ELEMENTS = 1 << 20


def check_takes(pe, *, softcap: bool = False, sinks: bool = False, window: bool = False,
                dropout: bool = False) -> None:
    """Raises ValueError when content scheme ``pe`` is asked for a cap, sinks, a window or attention
    dropout its ``rows`` do not take (``takes_softcap``, ``takes_sinks``, ``takes_window``,
    ``takes_dropout``; ``no_sinks_reason`` and ``no_window_reason`` say why, as stick-breaking's)."""
    if softcap and not pe.takes_softcap:
        raise ValueError(f"scheme {pe.name!r} takes no softcap= (its rows do not declare takes_softcap)")
    if sinks and not pe.takes_sinks:
        raise ValueError(f"scheme {pe.name!r} takes no sinks= ({pe.no_sinks_reason})")
    if window and not pe.takes_window:
        raise ValueError(f"scheme {pe.name!r} takes no window= ({pe.no_window_reason})")
    if dropout and not pe.takes_dropout:
        raise ValueError(f"scheme {pe.name!r} takes no attention dropout (dropout_p > 0): its rows do not declare "
                         "takes_dropout (a rows(..., dropout=) keyword applied to its weights before v)")


def cap_and_sink_keywords(softcap: float | None, sinks: torch.Tensor | None, dropout=None) -> dict:
    """The keywords ``softcap=``/``sinks=``/``dropout=`` for a content scheme's call or ``rows``, only
    those set (a plugin's scheme that takes none keeps working)."""
    terms = {} if softcap is None else {"softcap": softcap}
    if sinks is not None:
        terms["sinks"] = sinks
    if dropout is not None:
        terms["dropout"] = dropout
    return terms


class RowwiseEncoding(ContentEncoding):
    """A content scheme whose attention is its ``rows`` over blocks of queries (every scheme of the kind)."""

    def forward(self, q, k, v, hidden=None, *, causal: bool = True, scale=None, document_ids=None,
                backend: str = "auto", attention_mask=None, softcap=None, sinks=None, window=None):
        return content_attention(self, q, k, v, hidden=hidden, causal=causal, scale=scale,
                                 document_ids=document_ids, backend=backend, attention_mask=attention_mask,
                                 softcap=softcap, sinks=sinks, window=window)


def content_attention(pe, q, k, v, *, hidden=None, causal: bool = True, scale=None, document_ids=None,
                      backend: str = "auto", attention_mask=None, softcap=None, sinks=None, window=None,
                      visibility: Visibility | None = None, dropout=None) -> torch.Tensor:
    """``pe``'s attention (see the module docstring); ``pe.forward`` and ``posenc.attention`` call it.

    ``attention_mask`` (``posenc.masking``: a key padding mask or a bool 4D mask) removes keys
    from every query's row as the causal and document masks do; a query that sees no key gives
    zeros. An additive 4D mask is refused: a content scheme's scores are its own formula.
    ``softcap`` and ``sinks [H]``: the logit cap and the attention sinks (module docstring), passed
    to ``pe.rows`` only when set; a scheme without ``takes_softcap``/``takes_sinks`` refuses them.
    ``window``: the sliding window (``posenc.masking``), one more mask on each row's keys; refused by
    a scheme without ``takes_window`` (stick-breaking). ``visibility``: ``posenc.attention``'s own,
    already built (then ``causal``, ``document_ids``, ``attention_mask`` and ``window`` are its).
    ``dropout``: ``posenc.attention``'s ``posenc.dropout.AttentionDropout`` (``dropout_p`` > 0): each
    block's rows get ``dropout=`` bound to the block's origin (``AttentionDropout.at``), a callable
    their weights pass through before ``v``; the blockwise backward recomputes the block, and so the
    same mask, from the seed. A scheme without ``takes_dropout`` refuses it."""
    q, k, v = check_qkv(q, k, v)
    _scores.check_causal(causal)
    check_choice("backend", backend, type(pe).BACKENDS)
    b, h, lq, d = q.shape
    lk = k.shape[2]
    _scores.check_num_heads(pe, q)
    if pe.head_dim is not None and pe.head_dim != d:
        raise ValueError(f"pe has head_dim={pe.head_dim} but q has last dimension {d}")
    if pe.causal_only and not causal:
        raise ValueError(f"scheme {pe.name!r} counts positions from each query backwards: it needs causal=True")
    vis = visibility if visibility is not None else Visibility.build(
        b=b, h=h, lq=lq, lk=lk, device=q.device, causal=causal, window=window, document_ids=document_ids,
        attention_mask=attention_mask)
    scale = _scores.scale_of(scale, pe, d)
    softcap, sinks = check_cap_and_sinks(softcap, sinks, h)
    check_takes(pe, softcap=softcap is not None, sinks=sinks is not None, window=vis.window is not None,
                dropout=dropout is not None)
    hidden = pe.check_hidden(hidden, b, lk)
    docs, mask = vis.docs, vis.mask
    if mask is not None and mask.bias is not None:
        raise ValueError(f"content scheme {pe.name!r} takes a key padding or bool attention_mask; an additive mask "
                         "with values other than 0 and -inf cannot enter its own scores")
    pe.check_length(lq, lk)
    if lq == 0 or lk == 0:
        return q.new_zeros(b, h, lq, v.shape[-1])
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)
    q, k, v = q.to(work), k.to(work), v.to(work)
    state = pe.state(k, None if hidden is None else hidden.to(work), docs)
    sink_logits = None if sinks is None else sinks.to(device=q.device, dtype=work)  # (H,)
    if backend == "auto":  # the one rule (posenc.scores.content_backend, as posenc.attn._choose_backend)
        backend = _scores.content_backend(b * h * lq * lk, torch.is_grad_enabled())
    rows = lq if backend == "materialize" else max(1, ROW_ELEMENTS // max(1, b * h * lk))
    keep = backend == "blockwise" and torch.is_grad_enabled()
    outs = []
    for qs in range(0, lq, rows):
        qe = min(qs + rows, lq)
        n = vis.key_range(qs, qe)[1]  # keys 0 … n − 1: a scheme's row runs from its first key
        allowed = vis.tile(qs, qe, 0, n, device=q.device)  # (1 or B, 1 or H, c, n), never None
        seen = None
        if vis.hides_rows:  # (.., c, 1): a query with no key gives zeros (posenc.scores)
            allowed, seen = _scores.unmask_empty_rows(allowed)
        args = (q[:, :, qs:qe], k[:, :, :n], v[:, :, :n], state, qs + vis.shift, allowed, scale)
        drop = None if dropout is None else dropout.at(qs, 0)  # this block's part of the call's mask
        out = (_recomputed(pe, *args, softcap, sink_logits, drop) if keep
               else pe.rows(*args, **cap_and_sink_keywords(softcap, sink_logits, drop)))
        outs.append(out if seen is None else out * seen)
        _trim(b * h * (qe - qs) * n)
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)).to(dtype)


def _libc():
    """glibc, for ``malloc_trim``; None elsewhere."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _libc() if sys.platform.startswith("linux") else None


def trim_rows(on: bool) -> None:
    """Whether the content kind gives a large block's freed memory back after it (``ROW_TRIM``, on
    by default): a process that keeps its freed memory for the next block instead
    (``posenc.extrapolate.driver.keep_heap``, the benchmark's) turns it off."""
    global ROW_TRIM
    ROW_TRIM = check_bool("on", on)


def _trim(elements: int) -> None:
    """Gives the freed pages of a block of ``elements`` scores back to the system (glibc's
    ``malloc_trim``, see ROW_TRIM and TRIM_ELEMENTS)."""
    if ROW_TRIM and elements >= TRIM_ELEMENTS and _LIBC is not None and not torch.compiler.is_compiling():
        _LIBC.malloc_trim(0)


def _tensors(state) -> list[torch.Tensor]:
    if state is None:
        return []
    return [state] if isinstance(state, torch.Tensor) else list(state)


def _recomputed(pe, q, k, v, state, q0, allowed, scale, softcap=None, sinks=None, dropout=None):
    """``pe.rows(...)`` whose backward recomputes the block (``_Rows``): the forward keeps nothing of it.
    ``sinks`` rides after the state's tensors (so its gradient comes back as theirs does)."""
    parts = _tensors(state) + ([] if sinks is None else [sinks])
    params = [p for p in pe.parameters() if p.requires_grad]
    return _Rows.apply({"pe": pe, "q0": q0, "allowed": allowed, "scale": scale, "tuple": not isinstance(state, torch.Tensor),
                        "n": len(parts), "sinks": sinks is not None, "softcap": softcap, "dropout": dropout},
                       q, k, v, *parts, *params)


class _Rows(torch.autograd.Function):
    """One block of rows: the forward runs ``pe.rows`` without a graph and saves only its inputs; the
    backward runs it again under ``enable_grad`` and differentiates it (``autograd.grad``) into
    q, k, v, the per-token state (and so ``hidden``) and the scheme's parameters."""

    @staticmethod
    def forward(ctx, args, q, k, v, *rest):
        ctx.args = args
        ctx.save_for_backward(q, k, v, *rest)
        with torch.no_grad():
            return _call(args, q, k, v, rest[:args["n"]])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        args = ctx.args
        q, k, v, *rest = ctx.saved_tensors
        n = args["n"]
        needs = ctx.needs_input_grad[1:]
        leaves = [t.detach().requires_grad_(need) for t, need in zip((q, k, v, *rest[:n]), needs)]
        params = rest[n:]
        with torch.enable_grad():
            out = _call(args, *leaves[:3], leaves[3:])
            inputs = [t for t in (*leaves, *params) if t.requires_grad]
            grads = iter(torch.autograd.grad(out, inputs, dout, allow_unused=True)) if inputs else iter(())
        del out
        _trim(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])
        return (None, *(next(grads) if t.requires_grad else None for t in (*leaves, *params)))


def _call(args, q, k, v, parts):
    parts = list(parts)
    sinks = parts.pop() if args["sinks"] else None
    if not parts:
        state = None
    else:
        state = tuple(parts) if args["tuple"] else parts[0]
    return args["pe"].rows(q, k, v, state, args["q0"], args["allowed"], args["scale"],
                           **cap_and_sink_keywords(args["softcap"], sinks, args["dropout"]))


def softmax_rows(scores: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                 sinks: torch.Tensor | None = None, dropout=None) -> torch.Tensor:
    """``softmax(scores)`` over the allowed keys of a block, times ``v``: ``[B, H, c, n] -> [B, H, c, Dv]``.
    ``sinks [H]``: one more column of score ``sinks[h]`` and value 0 in every row's softmax.
    ``dropout``: the block's ``posenc.dropout.TileDropout``, applied to the weights before ``v``."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = sink_softmax(scores, sinks)
    return torch.matmul(weights if dropout is None else dropout(weights), v)
