"""The figures of "Why positions" (docs/guide/why-positions.md), drawn from its own examples.

``render(page)`` runs the page's Python examples in order, each in a fresh namespace as
tests/test_readme.py runs them, and draws each ``<!-- generated: figure NAME -->`` with
``FIGURES[NAME]`` from the names the examples above it defined (the latest definition of each):
the figure shows what the examples computed (the trained table is the one the example
trained), so the two cannot drift.
A figure answers one question; no two lines share colour and marker; legends sit outside the
data (posenc.plot's colour-blind-safe palette).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import numpy as np

PAGE = "guide/why-positions.md"
MARKER = re.compile(r"<!-- generated: figure (\w+) -->")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DPI = 130
FIGURES: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {}


def figure(name: str, caption: str):
    def register(draw):
        FIGURES[name] = (caption, draw)
        return draw
    return register


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _style(i: int) -> dict[str, Any]:
    from posenc.plot import LINESTYLES, OKABE_ITO

    return {"color": OKABE_ITO[i], "marker": MARKERS[i], "linestyle": LINESTYLES[i % len(LINESTYLES)]}


def _legend_outside(fig, **kw) -> None:
    fig.legend(loc="outside right upper", frameon=False, fontsize="small", **kw)


def render(markdown: str) -> dict[str, bytes]:
    """``{NAME: PNG bytes}`` for every figure marker of the page ``markdown``."""
    import torch

    namespace: dict[str, Any] = {}
    pngs = {}
    threads = torch.get_num_threads()  # an example may set it; the build keeps its own
    for piece in re.finditer(f"{BLOCK.pattern}|{MARKER.pattern}", markdown, flags=re.S):
        if piece.group(1) is not None:  # an example, run alone; its names serve the figures below it
            names = {"__name__": "why_positions"}
            try:
                exec(compile(piece.group(1), f"{PAGE} (python block)", "exec"), names)  # noqa: S102 - our docs
            finally:
                torch.set_num_threads(threads)
            namespace.update(names)
            continue
        name = piece.group(2)
        if name not in FIGURES:
            raise KeyError(f"{PAGE}: no figure {name!r}; the figures are {', '.join(FIGURES)}")
        fig = FIGURES[name][1](namespace)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
        pngs[name] = buffer.getvalue()
    return pngs


@figure("permutation", "Attention's outputs for five tokens, then for the same tokens shuffled: "
                       "the same rows, moved with their tokens")
def permutation(ns: dict[str, Any]):
    x, perm, attend = ns["x"], ns["perm"], ns["attend"]
    plain, shuffled = attend(x).numpy(), attend(x[perm]).numpy()  # (L, d) each
    top = float(np.abs(plain).max())
    fig = _figure(7.0, 2.6)
    axes = fig.subplots(1, 2, sharex=True)
    for ax, out, order, title in ((axes[0], plain, range(len(x)), "tokens in order"),
                                  (axes[1], shuffled, perm.tolist(), "tokens shuffled")):
        image = ax.imshow(out, cmap="RdBu_r", vmin=-top, vmax=top, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(x)), [f"token {t}" for t in order])
        ax.set(title=title, xlabel="output dimension")
    fig.colorbar(image, ax=list(axes), label="output value")
    return fig


@figure("counting", "A causal mask without positions: the share of the first token in each "
                    "output is 1/(t + 1), so every token knows how many precede it")
def counting(ns: dict[str, Any]):
    import torch

    posenc, s, w, share = ns["posenc"], ns["s"], ns["w"], ns["share"]
    length = 24
    x = torch.stack([s] + [w] * (length - 1))[None, None]  # (1, 1, L, d)
    q = torch.zeros(1, 1, length, s.numel(), dtype=torch.float64)
    t = np.arange(length)
    fig = _figure(7.0, 3.0)
    ax = fig.add_subplot()
    ax.plot(t, share(posenc.attention(q, x, x, causal=True)), label="causal: 1/(t + 1)", **_style(0))
    ax.plot(t, share(posenc.attention(q, x, x)), label=f"bidirectional: 1/{length}", **_style(1))
    ax.set(xlabel="position t", ylabel="share of <s> in the output", ylim=(0, 1.05),
           title="NoPE, uniform attention over '<s> w w w ...'")
    ax.grid(alpha=0.3)
    _legend_outside(fig)
    return fig


@figure("order", "How far each word's output in 'dog bites man' is from its output in 'man bites dog' "
                 "(relative to its size): 0 means that word cannot tell the sentences apart")
def order(ns: dict[str, Any]):
    import torch

    from posenc.ssm import DiagonalSSM

    posenc, embed, d = ns["posenc"], ns["embed"], ns["d"]
    Wq, Wk, Wv = ns["Wq"], ns["Wk"], ns["Wv"]
    first, second = "dog bites man", "man bites dog"

    def attention(pe=None, causal=False, add=None):
        def run(sentence):
            x = embed(sentence) + (add(torch.arange(3)) if add is not None else 0)
            q, k, v = (t[None, None] for t in (x @ Wq, x @ Wk, x @ Wv))  # (1, 1, L, d)
            return posenc.attention(q, k, v, pe, causal=causal)[0, 0]
        return run

    torch.manual_seed(0)
    ssm = DiagonalSSM(d)
    models = {
        "attention, no positions": attention(),
        "no positions, causal": attention(causal=True),
        "ALiBi, no mask": attention(posenc.build({"scheme": "alibi", "num_heads": 1})),
        "ALiBi, causal": attention(posenc.build({"scheme": "alibi", "num_heads": 1}), causal=True),
        "+ sinusoidal": attention(add=posenc.build({"scheme": "sinusoidal", "d_model": d})),
        "RoPE": attention(posenc.build({"scheme": "rope", "head_dim": d})),
        "SSM (recurrent)": lambda sentence: ssm(embed(sentence)[None])[0],
    }
    words = first.split()
    gaps = np.zeros((len(models), len(words)))
    with torch.no_grad():
        for m, run in enumerate(models.values()):
            a, b = run(first), run(second)
            for i, word in enumerate(words):
                j = second.split().index(word)
                gaps[m, i] = float((a[i] - b[j]).norm() / a[i].norm())
    from posenc.plot import OKABE_ITO

    fig = _figure(7.0, 3.6)
    ax = fig.add_subplot()
    y, height = np.arange(len(models)), 0.26
    for i, (word, hatch) in enumerate(zip(words, ("", "//", ".."))):
        ax.barh(y + (i - 1) * height, gaps[:, i], height, label=f'"{word}"', color=OKABE_ITO[i],
                hatch=hatch, edgecolor="white")
    ax.set_yticks(y, list(models))
    ax.invert_yaxis()
    ax.set(xlabel="|output in one sentence − output in the other| / |output|")
    ax.grid(alpha=0.3, axis="x")
    _legend_outside(fig, title="word")
    return fig


@figure("sinusoidal", "The sinusoidal table (left) and binary counting (right): the low "
                      "dimensions, like the low bits, change at every step, the high ones rarely")
def sinusoidal(ns: dict[str, Any]):
    pe = ns["pe"][:64]  # (64, 64)
    bits = (np.arange(64)[:, None] >> np.arange(6)[None, :]) & 1  # (64, 6): bit 0 first
    fig = _figure(7.0, 3.6)
    left, right = fig.subplots(1, 2, width_ratios=[3, 1])
    image = left.imshow(pe, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    left.set(title="PE(pos, i), d = 64", xlabel="dimension i", ylabel="position pos")
    fig.colorbar(image, ax=left, label="value")
    right.imshow(bits, cmap="Greys", vmin=0, vmax=1.6, aspect="auto", interpolation="nearest")
    right.set(title="pos in binary", xlabel="bit (low first)", yticks=[])
    right.set_xticks(range(6))
    return fig


@figure("fingerprints", "Distance from position 100's vector to every position's, for three widths: "
                        "0 only at 100 itself, so every position has its own fingerprint")
def fingerprints(ns: dict[str, Any]):
    import posenc.reference as ref

    length, anchor = 512, 100
    fig = _figure(7.0, 3.0)
    ax = fig.add_subplot()
    for i, d in enumerate((16, 32, 64)):
        tab = ref.sinusoidal(np.arange(length), d_model=d)  # (L, d)
        dist = np.linalg.norm(tab - tab[anchor], axis=-1)  # (L,)
        ax.plot(np.arange(length), dist, markevery=32, label=f"d = {d}", **_style(i))
    ax.set(xlabel="position", ylabel=f"|PE(pos) − PE({anchor})|", ylim=(0, None),
           title=f"sinusoidal, positions 0..{length - 1}")
    ax.grid(alpha=0.3)
    _legend_outside(fig)
    return fig


@figure("linear_map", "Left: M_5, one 2 × 2 rotation per pair (the first 8 pairs). Right: how far "
                      "M_k·PE(pos) is from PE(pos + k) at each position, against the best linear map "
                      "of a random table")
def linear_map(ns: dict[str, Any]):
    M, near, k, table, fit = ns["M"], ns["near"], ns["k"], ns["table"], ns["fit"]
    exact = np.abs(near[:-k] @ M.T - near[k:]).max(-1)  # (L - k,)
    random = np.abs(table[:-k] @ fit - table[k:]).max(-1) / np.abs(table).max()
    floor = 1e-17  # an exact 0 on a log axis
    fig = _figure(7.0, 3.2)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.6])
    image = left.imshow(M[:16, :16], cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    left.set(title=f"M_{k}, dims 0..15", xlabel="column", ylabel="row")
    fig.colorbar(image, ax=left, shrink=0.8)
    right.semilogy(np.arange(exact.size), np.maximum(exact, floor), markevery=10,
                   label="sinusoidal, M_k", **_style(0))
    right.semilogy(np.arange(random.size), np.maximum(random, floor), markevery=20,
                   label="random table,\nbest linear map", **_style(1))
    right.set(xlabel="position pos", ylabel="max error / max |PE|", title=f"PE(pos + {k}) vs M·PE(pos)")
    right.grid(alpha=0.3, which="major")
    _legend_outside(fig)
    return fig


@figure("learned", "A learned table before training (noise: every other position at cosine ≈ 0) and "
                   "after the example's 300 steps of predicting the previous token (neighbours alike)")
def learned(ns: dict[str, Any]):
    analysis = ns["analysis"]
    tables = {"untrained: N(0, 0.02)": ns["untrained"].double().numpy(),
              "trained: previous token": ns["pe"].weight.detach().double().numpy()}
    fig = _figure(7.0, 3.1)
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.25])
    for ax, (label, tab) in zip(axes, tables.items()):
        image = ax.imshow(analysis.cosine_similarity_matrix(tab), cmap="RdBu_r", vmin=-1, vmax=1,
                          interpolation="nearest")
        ax.set(title=label.replace(": ", "\n"), xlabel="position q", ylabel="position p")
    fig.colorbar(image, ax=list(axes[:2]), label="cosine", shrink=0.85)
    curves = axes[2]
    for i, (label, tab) in enumerate(tables.items()):
        sim = analysis.similarity_vs_distance(tab)[:16]
        curves.plot(np.arange(sim.size), sim, label=label.split(":")[0], markevery=3, **_style(i))
    curves.set(title="mean cosine", xlabel="distance", ylim=(-0.3, 1.05))
    curves.grid(alpha=0.3)
    _legend_outside(fig)
    return fig


@figure("rope", "Left: RoPE rotates a query's first pair by m radians at position m. Right: "
                "q_m·k_n is constant along every diagonal: it depends on m − n only")
def rope(ns: dict[str, Any]):
    Q, S = ns["Q"].numpy(), ns["S"].numpy()
    half = Q.shape[1] // 2  # layout "half": pair 0 is (dim 0, dim half)
    fig = _figure(7.0, 3.4)
    left, right = fig.subplots(1, 2)
    from posenc.plot import OKABE_ITO

    for m in range(6):
        x, y = Q[m, 0], Q[m, half]
        left.annotate("", xy=(x, y), xytext=(0, 0),
                      arrowprops={"arrowstyle": "->", "color": OKABE_ITO[m], "linewidth": 1.6})
        left.plot([x], [y], linestyle="none", marker=MARKERS[m], color=OKABE_ITO[m], label=f"m = {m}")
    r = float(np.hypot(Q[0, 0], Q[0, half])) * 1.15
    left.set(xlim=(-r, r), ylim=(-r, r), aspect="equal", title="pair 0 of q at position m",
             xlabel="dimension 0", ylabel=f"dimension {half}")
    left.grid(alpha=0.3)
    top = float(np.abs(S).max())
    image = right.imshow(S, cmap="RdBu_r", vmin=-top, vmax=top, interpolation="nearest")
    right.set(title="q_m · k_n", xlabel="key position n", ylabel="query position m")
    fig.colorbar(image, ax=right, shrink=0.85)
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize="small")
    return fig


@figure("alibi", "ALiBi's bias: left, what the last query adds to each key's score, per head; "
                 "right, head 0's whole map")
def alibi(ns: dict[str, Any]):
    import torch

    module = ns["alibi"]
    length = 32
    bias = module(torch.arange(length), torch.arange(length)).numpy()  # (H, L, L)
    slopes = ns["posenc"].reference.alibi_slopes(bias.shape[0])
    fig = _figure(7.0, 3.2)
    left, right = fig.subplots(1, 2, width_ratios=[1.5, 1])
    for h in range(bias.shape[0]):
        left.plot(np.arange(length), bias[h, -1], markevery=4, label=f"head {h}: m = 1/{1 / slopes[h]:g}",
                  **_style(h))
    left.set(xlabel="key position j", ylabel="bias added to the score",
             title=f"query i = {length - 1}: −m·|i − j|")
    left.grid(alpha=0.3)
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize="x-small")
    image = right.imshow(bias[0], cmap="viridis", interpolation="nearest")
    right.set(title="head 0 (m = 1/2)", xlabel="key position j", ylabel="query position i")
    fig.colorbar(image, ax=right, shrink=0.85)
    return fig
