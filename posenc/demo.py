"""Why attention needs position: "dog bites man" vs "man bites dog".

One self-attention layer with fixed random weights reads the two sentences. Without a positional
encoding attention is permutation-equivariant: each word gets the same output in both sentences,
only in another place, so the layer cannot tell who bit whom. With a positional encoding the
outputs differ. The distance is compared per word ("dog" in one sentence against "dog" in the
other), so it is 0 exactly when the outputs are only permuted.

A reversal caveat the table makes visible: "man bites dog" is "dog bites man" reversed, so an
encoding whose score term depends only on |i − j| (ALiBi's bias) gives the same outputs without
a causal mask. Real models start every sequence with a start token; with "<s>" in front the two
sentences are no longer reversals of each other and every scheme tells them apart while NoPE
still cannot (the "with <s>" column). With a causal mask (the last column) every scheme, and NoPE
too, tells them apart: the mask itself leaks order (Haviv et al. 2022): the word at place t
attends to the t words up to it, so the same word first and last averages over different sets;
a causal decoder counts how many tokens precede it. Distances are not comparable across schemes
(each acts in its own units on fixed random weights): a row says whether a scheme tells the orders
apart, not how well.

Two rows need no positional encoding at all: a GRU (Cho et al. 2014) and the diagonal linear
state-space layer ``ssm`` (``posenc.ssm``, S4D/Mamba-style). Their outputs differ between the
sentences because the state at step t is built from the steps before it, in order
(h_t = f(h_{t−1}, x_t)): the same word after another prefix gets another state. A recurrence is
causal by construction, so its three columns are one number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from posenc import analysis, registry

WORDS = ("dog", "bites", "man", "<s>")
START = "<s>"
SENTENCES = (("dog", "bites", "man"), ("man", "bites", "dog"))
D_MODEL = 16
NUM_HEADS = 2
HEAD_DIM = D_MODEL // NUM_HEADS
TOLERANCE = 1e-9  # float64 rounding is ~1e-16 here
RECURRENT = ("gru", "ssm")
"""Layers that replace attention and read order without any positional encoding (not schemes)."""
WHY_RECURRENT = ("the state at step t is built from the steps before it in order (h_t = f(h_{t−1}, x_t)), so the "
                 "same word after another prefix gets another state: order is in the computation, not in the input")


def _weights(seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(len(WORDS), D_MODEL, generator=g, dtype=torch.float64)  # (V, D)
    proj = [torch.randn(D_MODEL, D_MODEL, generator=g, dtype=torch.float64) / math.sqrt(D_MODEL) for _ in range(3)]
    return emb, proj


def _outputs(sentence: tuple[str, ...], pe, emb, proj, *, causal: bool) -> dict[str, Any]:
    """The layer's output for each word of ``sentence``: ``{word: [D]}``."""
    import torch

    from posenc.attn import attention
    from posenc.positions import text_positions

    n = len(sentence)
    pos = torch.arange(n)
    x = emb[[WORDS.index(w) for w in sentence]]  # (L, D)
    x = pe.embed(x, text_positions(pos, getattr(pe, "axes", 1)))  # (L, D): an additive pe's output added
    q, k, v = (
        (x @ w).view(n, NUM_HEADS, HEAD_DIM).transpose(0, 1).unsqueeze(0)  # (1, H, L, hd)
        for w in proj
    )
    pos = text_positions(pos, getattr(pe, "axes", 1))  # a grid encoding reads words as text tokens
    use = pe if pe.attends else None  # additive, NoPE: nothing in attention
    given = use.attention_keywords(pos, x.unsqueeze(0)) if use is not None else {}  # a content pe: no positions
    # a scheme that counts from the query backwards (causal_only) is causal
    out = attention(q, k, v, use, causal=causal or pe.causal_only, **given)  # (1, H, L, hd)
    out = out[0].transpose(0, 1).reshape(n, D_MODEL)  # (L, D)
    return {w: out[i] for i, w in enumerate(sentence)}


def _distance(pe, emb, proj, *, causal: bool, start: bool = False) -> float:
    return _word_distance(lambda s: _outputs(s, pe, emb, proj, causal=causal), start=start)


def _word_distance(outputs, *, start: bool = False) -> float:
    """The largest distance between a word's outputs in the two sentences (``outputs(sentence)``)."""
    sentences = [((START,) if start else ()) + s for s in SENTENCES]
    a, b = (outputs(s) for s in sentences)
    return max(float((a[w] - b[w]).norm()) for w in a)


def _recurrent_layer(name: str, seed: int):
    """A GRU or the ``ssm`` layer of width ``D_MODEL`` in float64, weights drawn from ``seed``."""
    import torch

    from posenc.ssm import DiagonalSSM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = torch.nn.GRU(D_MODEL, D_MODEL, batch_first=True) if name == "gru" else DiagonalSSM(D_MODEL)
    return layer.double()


def _recurrent_outputs(sentence: tuple[str, ...], layer, emb) -> dict[str, Any]:
    """The recurrent layer's output for each word of ``sentence``: ``{word: [D]}``; no position anywhere."""
    x = emb[[WORDS.index(w) for w in sentence]].unsqueeze(0)  # (1, L, D)
    out = layer(x)
    out = out[0] if isinstance(out, tuple) else out  # a GRU also returns its last state
    return {w: out[0, i] for i, w in enumerate(sentence)}  # (D,) each


def _recurrent_row(name: str, emb, seed: int) -> dict[str, Any]:
    import torch

    layer = _recurrent_layer(name, seed)
    with torch.no_grad():
        dist = _word_distance(lambda s: _recurrent_outputs(s, layer, emb))
        start = _word_distance(lambda s: _recurrent_outputs(s, layer, emb), start=True)
    return {"scheme": name, "label": name, "kind": "recurrent", "distance": dist,
            "permutation_only": dist <= TOLERANCE, "distance_start": start, "distance_causal": dist}


def order_demo(specs: Iterable[Any] | None = None, *, seed: int = 0) -> list[dict[str, Any]]:
    """Runs the two sentences through one attention layer per scheme, and through the recurrent
    layers (by default every registered scheme, then ``RECURRENT``: a GRU and ``ssm``).

    Args:
        specs: SPEC strings, spec dicts or modules; sizes are filled for ``d_model=16``, 2 heads
            of 8 dimensions. The names in ``RECURRENT`` ("gru", "ssm") give the recurrent rows:
            no positional encoding, the layer in place of attention (kind ``"recurrent"``; a
            recurrence is causal, so its three distances are one).
        seed: seeds the embedding, the projections and any learned table.

    Returns:
        One row per scheme: ``scheme``, ``label``, ``kind``, ``distance`` (the largest distance
        between a word's outputs in the two sentences, bidirectional attention),
        ``permutation_only`` (``distance`` is rounding only), ``distance_start`` (both sentences
        after a start token ``<s>``), ``distance_causal`` (the same with a causal mask).
    """
    import torch

    emb, proj = _weights(seed)
    rows = []
    for spec in ([*registry.schemes(), *RECURRENT] if specs is None else list(specs)):
        if isinstance(spec, str) and spec in RECURRENT:
            rows.append(_recurrent_row(spec, emb, seed))
            continue
        pe = analysis.build(spec, dim=D_MODEL, head_dim=HEAD_DIM, num_heads=NUM_HEADS, length=len(WORDS), seed=seed)
        with torch.no_grad():
            dist = _distance(pe, emb, proj, causal=False)
            start = _distance(pe, emb, proj, causal=False, start=True)
            causal = _distance(pe, emb, proj, causal=True)
        rows.append({"scheme": pe.name, "label": analysis.label(pe), "kind": pe.kind, "distance": dist,
                     "permutation_only": dist <= TOLERANCE, "distance_start": start,
                     "distance_causal": causal})
    return rows


COLUMNS = (
    ("distance", "the largest distance (Euclidean norm) between one word's outputs in the two sentences, "
                 "attention without a mask (bidirectional)"),
    ("only permuted?", "yes when distance is float64 rounding (< 1e-9): the second sentence's outputs are the "
                       "first's in another order, so the layer cannot tell who bit whom"),
    ("with <s>", "the distance when both sentences start with a start token <s> (\"<s> dog bites man\" against "
                 "\"<s> man bites dog\"), bidirectional"),
    ("causal", "the distance with a causal mask (each word attends to itself and the words before it), no <s>"),
)
"""The columns of ``format_order_table``, defined in its output (and in docs/guide/cli.md)."""

WHY_CAUSAL = ("a causal mask tells the orders apart even without a positional encoding (NoPE): the word at place t "
              "attends to the t words up to it, so 'man' first attends to itself alone and 'man' last averages "
              "over all three: a causal decoder counts how many tokens precede it (Haviv et al. 2022)")
NOT_COMPARABLE = ("distances are not comparable across schemes: each scheme acts in its own units (a vector added "
                  "to the embeddings, a rotation of q and k, a bias on the scores) on fixed random weights, so a "
                  "distance says whether a scheme tells the orders apart (0 or not), not how well")


def format_order_table(rows: list[dict[str, Any]]) -> str:
    """The rows of ``order_demo`` as a small text table, its columns defined under it, with a note on
    any surprise."""
    head = ("scheme", "kind", *(name for name, _ in COLUMNS))
    body = [(r["label"], r["kind"], f"{r['distance']:.3g}", "yes" if r["permutation_only"] else "no",
             f"{r['distance_start']:.3g}", f"{r['distance_causal']:.3g}") for r in rows]
    lines = [analysis.text_table([head, *body]), ""]
    lines += [f"{name}: {meaning}." for name, meaning in COLUMNS]
    if any(r["kind"] == "none" and r["distance_causal"] > TOLERANCE for r in rows):
        lines += ["", f"Why nope's causal distance is not 0: {WHY_CAUSAL}."]
    lines += ["", f"Note: {NOT_COMPARABLE}."]
    blind = [r["label"] for r in rows if r["permutation_only"] and r["kind"] != "none"]
    if blind:
        lines.append("")
        lines.append(f"{', '.join(blind)}: the score term depends only on |i − j| and 'man bites dog' is "
                     "'dog bites man' reversed, so without a causal mask the outputs are only permuted; after a start "
                     "token <s> they differ.")
    recurrent = [r["label"] for r in rows if r["kind"] == "recurrent" and not r["permutation_only"]]
    if recurrent:
        lines.append("")
        lines.append(f"{', '.join(recurrent)}: no positional encoding, yet the outputs differ: {WHY_RECURRENT}.")
    return "\n".join(lines)


SUMMARY = ('One attention layer with fixed random weights reads "dog bites man" and "man bites dog"; so do a GRU '
           "and a diagonal state-space layer (ssm) in its place, without any positional encoding. Each number is "
           "the largest change of a word's output between the two sentences (0: only permuted); the columns are "
           "defined under the table.")

__all__ = ["order_demo", "format_order_table", "WORDS", "SENTENCES", "SUMMARY", "RECURRENT", "WHY_RECURRENT",
           "COLUMNS", "WHY_CAUSAL", "NOT_COMPARABLE"]
