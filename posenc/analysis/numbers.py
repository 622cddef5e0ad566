"""Key numbers: the rows ``posenc show`` prints, per kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.analysis.base import _numpy, build, DEFAULT_HEADS, KIND_ANALYSIS, untrained
from posenc.analysis.curves import bias_maps, content_weights, rotary_scores, score_term
from posenc.analysis.frequencies import turns, wavelengths
from posenc.analysis.grids import grid_map, grid_numbers
from posenc.analysis.tables import linear_map, min_fingerprint_distance, similarity_vs_distance, table


def key_numbers(spec: Any, *, length: int = 128, dim: int = 64, num_heads: int = DEFAULT_HEADS,
                text: str | None = None) -> list[tuple[str, str]]:
    """The numbers ``posenc show`` prints: ``[(name, value), ...]`` by kind; a content scheme adds its
    own (``describe(text=...)``: CoPE's positions of a typed sentence)."""
    length = check_int("length", length, min=2)
    m = build(spec, dim=dim, num_heads=num_heads, length=length)
    out = [("scheme", m.name), ("kind", m.kind),
           ("spec", ", ".join(f"{k}={v}" for k, v in m.spec.items() if k != "scheme") or "(no parameters)")]
    if untrained(m):
        out.append(("weights", untrained(m)))
    if getattr(m, "axes", 1) > 1 and not getattr(m, "structured", False):  # a grid encoding: its 2D map
        out += grid_numbers(grid_map(m, num_heads=num_heads, dim=dim))
        if hasattr(m, "inv_freq"):
            lam = wavelengths(_numpy(m.inv_freq))
            out.append(("wavelengths (positions)", f"{lam.min():.4g} .. {lam.max():.4g} over {lam.size} pairs"))
        return out
    kind = KIND_ANALYSIS[m.kind]
    own = kind.numbers(m, length, dim, num_heads)
    out += own + _frequency_numbers(m, length) if kind.numbers_first else _frequency_numbers(m, length) + own
    if hasattr(m, "describe"):  # a content scheme's own, or positions from structure (bipe): a typed sentence's
        out += m.describe(text=text)
    return out


def _frequency_numbers(m, length: int) -> list[tuple[str, str]]:
    if not hasattr(m, "inv_freq"):
        return []
    theta = _numpy(m.inv_freq)
    lam, t = wavelengths(theta), turns(theta, length)
    return [("wavelengths (positions)", f"{lam.min():.4g} .. {lam.max():.4g} over {theta.size} pairs"),
            (f"pairs with < 1 turn in L={length}", f"{int((t < 1).sum())} of {theta.size}")]


def _fingerprint_numbers(tab: np.ndarray) -> list[tuple[str, str]]:
    d, p, q = min_fingerprint_distance(tab)
    return [("table (positions × dims)", f"{tab.shape[0]} × {tab.shape[1]}"),
            ("closest two positions", f"{p} and {q}, distance {d:.4g} "
                                      f"({'all distinct' if d > 1e-9 else 'NOT all distinct'})")]


def _additive_numbers(m, length: int, dim: int, num_heads: int) -> list[tuple[str, str]]:
    tab = table(m, length=length)
    out = _fingerprint_numbers(tab)
    sim = similarity_vs_distance(tab)
    out.append(("cosine similarity at r=1, 10, L-1",
                ", ".join(f"{sim[r]:.3f}" for r in (1, min(10, length - 1), length - 1))))
    if length - 1 > tab.shape[1]:
        _, res = linear_map(tab, 1)
        # below 1e-6 the residual is float64 noise (~1e-13 for sinusoids), not a property to print
        out.append(("PE(p+1) = M·PE(p) residual", "< 1e-6 (linear)" if res < 1e-6 else f"{res:.2e} (not linear)"))
    else:
        out.append(("PE(p+1) = M·PE(p) residual", f"needs --length > {tab.shape[1] + 1}"))
    return out


def _rotary_numbers(m, length: int, dim: int, num_heads: int) -> list[tuple[str, str]]:
    out = _fingerprint_numbers(table(m, length=length))
    sc = rotary_scores(m, max_distance=length - 1)
    out.append(("q·k/D (q=k=1) at r=0, 1, 10, L-1",
                ", ".join(f"{sc[r]:.3f}" for r in (0, 1, min(10, length - 1), length - 1))))
    out.append(("attention factor", f"{getattr(m, 'attention_factor', 1.0):.4g}"))
    return out


def _term_numbers(m, length: int, dim: int, num_heads: int) -> list[tuple[str, str]]:
    col = score_term(m, [0, 1, length - 1], [0])[:, :, 0]  # (H, 3): queries at r = 0, 1, L-1, key at 0
    maps = bias_maps(m, length=min(length, 64))  # (H, l, l)
    return [("heads", str(col.shape[0])),
            ("term at r=1 per head", ", ".join(f"{v:.3g}" for v in col[:, 1])),
            (f"term at r={length - 1} per head", ", ".join(f"{v:.3g}" for v in col[:, -1])),
            (f"symmetric in i−j (first {maps.shape[-1]} positions)",
             "yes" if np.allclose(maps, maps.transpose(0, 2, 1)) else "no")]


def _none_numbers(m, length: int, dim: int, num_heads: int) -> list[tuple[str, str]]:
    if hasattr(m, "query_scale"):  # Llama 4's NoPE temperature
        tau = m.reference(np.ones((1, 1, 2, 1)), np.array([0, length - 1])).ravel()  # τ at the two ends
        return [("positional signal", f"query temperature only: ×{float(tau[0]):.4g} at 0, "
                                      f"×{float(tau[1]):.4g} at {length - 1}")]
    return [("positional signal", "none: attention is permutation-equivariant without a causal mask")]


def _content_numbers(m, length: int, dim: int, num_heads: int) -> list[tuple[str, str]]:
    w = content_weights(m, length=length, dim=dim, num_heads=num_heads)  # (H, L)
    return [("positions", "counted from the tokens (no position input); causal only" if m.causal_only
             else "counted from the tokens (no position input)"),
            ("reads the layer's input (hidden=)", "yes" if m.reads_hidden else "no"),
            ("weight at r=0, 1, L-1 (identical tokens)", ", ".join(f"{w.mean(0)[r]:.3g}" for r in (0, 1, length - 1)))]
