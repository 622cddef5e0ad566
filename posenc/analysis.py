"""What an encoding looks like, as numbers: the quantities courses draw and practitioners check.

Every function works from the registry and the module kinds, never from a scheme's name, so a
newly registered scheme is analysed without edits here:

- ``additive`` (``module(positions)``): the table, cosine similarity vs distance, the linear map
  ``PE(pos + k) = M_k · PE(pos)``, fingerprint distinctness;
- ``rotary`` (``module(x, positions)``, ``cos_sin``, ``inv_freq``): ``q·k`` vs relative distance,
  RoFormer's long-term decay bound, the frequency spectrum before and after scaling;
- ``bias`` (``module(q_positions, k_positions)``): the per-head bias maps;
- ``relative`` (``module(q, k, q_positions, k_positions)``): the term with ``q = k = 1``;
- ``none``: no positional signal (a flat zero where a curve is asked for).

Analyses that do not fit a kind raise ``NotApplicable`` (a ValueError) saying so. Results are
float64 NumPy arrays; modules run in float64.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import registry
from posenc._validate import check_int
from posenc.spec import as_spec, fill_sizes, label

DEFAULT_HEADS = 8


class NotApplicable(ValueError):
    """An analysis that does not apply to a scheme of this kind."""


# -- building ---------------------------------------------------------------------------------

def build(spec: Any, *, dim: int = 64, num_heads: int = DEFAULT_HEADS, length: int | None = None, seed: int = 0,
          head_dim: int | None = None):
    """A float64 module from a SPEC string, a spec dict or a module, sizes filled from ``dim``/``num_heads``.

    Learned tables are drawn with ``torch.manual_seed(seed)``, so figures are reproducible.
    """
    import torch

    if hasattr(spec, "kind") and hasattr(spec, "spec"):
        return copy.deepcopy(spec).double()
    full = fill_sizes(spec, dim=dim, num_heads=num_heads, length=length, head_dim=head_dim)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = registry.build(full)
    return module.double()


def untrained(module) -> str | None:
    """What a module drawn at its initialization shows, for ``show``/``compare`` and their figures
    (None when it has no trainable parameters: its numbers are the scheme's own).

    ``posenc show learned`` draws the table as ``posenc.build`` makes it, N(0, init_std²) noise, so its
    cosine similarity is about 0 at every distance; a trained table's structure comes from data
    (docs/guide/cli.md). So are the numbers of ``rope_mixed``'s learned frequencies. Tables and
    frequencies only (additive and rotary kinds): the learned biases of KERPLE and T5 start from their
    papers' initial values, and the explorer draws them (from seed 0) with the same numbers as ``show``."""
    if not KIND_ANALYSIS[module.kind].learned_signal or not any(p.requires_grad for p in module.parameters()):
        return None
    if getattr(module, "name", None) == "learned":
        std = module.spec.get("init_std")
        return (f"untrained: a random N(0, {std:g}²) table as at the start of training (cosine ≈ 0 at every "
                "distance); a trained table's structure comes from the data it is trained on")
    return "untrained: its learned parameters at their (seeded) initialization, not fitted to any data"  # rope_mixed


def shown_label(module) -> str:
    """``label(module)``, with `` (untrained)`` for a module whose learned parameters are at their
    initialization (``untrained``): the label of the text tables and the figures' titles."""
    return label(module) + (" (untrained)" if untrained(module) else "")


SAME_KERNEL = ("both are functions of cos(ω_i·r) over the same frequencies ω_i: the sinusoidal dot product "
               "PE(p)·PE(p+r) = Σ_i cos(ω_i·r) (sin·sin + cos·cos of each pair), which is RoPE's relative kernel "
               "(q·k/D with q = k = 1 is (2/D)·Σ_i cos(ω_i·r), the cosine similarity of the sinusoids)")
"""Why a sinusoidal and a rotary scheme of one base and width give the same row in ``posenc compare``."""
SAME_SIGNAL = "the same positional signal at these distances"
WHY_SAME = {frozenset({"additive", "rotary"}): SAME_KERNEL,  # when every scheme of the group has inv_freq
            frozenset({"rotary"}): "their frequencies are equal, and q·k of a rotary scheme depends only on them"}
"""Why the schemes of a group of kinds give the same row (``coinciding``); otherwise ``SAME_SIGNAL``."""


def coinciding(rows: Sequence[tuple[Any, ...]], modules: Sequence[Any]) -> list[str]:
    """Notes for ``posenc compare``: each group of schemes whose rows (every column after the label and
    kind) are equal, and why: an additive and a rotary scheme of the same frequencies (``SAME_KERNEL``),
    two rotary ones of the same frequencies, or, otherwise, the same signal at the distances shown."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(row[2:]), []).append(i)
    notes = []
    for members in groups.values():
        if len(members) < 2:
            continue
        names = " and ".join(str(rows[i][0]) for i in members)
        kinds = frozenset(modules[i].kind for i in members)
        frequencies = all(hasattr(modules[i], "inv_freq") for i in members)
        why = WHY_SAME.get(kinds, SAME_SIGNAL) if frequencies or len(kinds) == 1 else SAME_SIGNAL
        notes.append(f"{names}: the same row, because {why}.")
    return notes


def text_table(rows: list[Sequence[str]], *, width: int | None = None, wrap: Sequence[int] = (),
               min_wrap: int = 8) -> str:
    """Rows of strings (the first is the header) as aligned text columns, a rule under the header.

    ``width``: the line width to fit (a terminal's); when the table is wider, the columns ``wrap``
    (indices) are wrapped at spaces onto continuation lines, each given a share of the room the other
    columns leave in proportion to its natural width, and at least ``min_wrap`` characters."""
    import textwrap

    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    total = sum(widths) + 2 * (len(widths) - 1)
    if width is not None and wrap and total > width:
        fixed = sum(w for i, w in enumerate(widths) if i not in wrap) + 2 * (len(widths) - 1)
        room, natural = max(width - fixed, 0), sum(widths[i] for i in wrap)
        for i in wrap:
            widths[i] = min(widths[i], max(min_wrap, room * widths[i] // natural))
    else:
        wrap = ()

    def block(row: Sequence[str]) -> list[str]:
        cells = [textwrap.wrap(c, widths[i], break_on_hyphens=False) or [""] if i in wrap else [c]
                 for i, c in enumerate(row)]
        return ["  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)).rstrip()
                for k in range(max(len(c) for c in cells))]

    lines = [*block(rows[0]), "  ".join("-" * w for w in widths)]
    for r in rows[1:]:
        lines += block(r)
    return "\n".join(lines)


def progress(items, desc: str, *, big: bool = True):
    """A progress bar on stderr for long loops, when stderr is a terminal and tqdm is installed."""
    if not big:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the bench extra
        return items
    import sys

    return tqdm(items, desc=desc, file=sys.stderr, disable=None, leave=False)


def _positions(length: int, module=None):
    """``0 .. length-1``; for a module with several axes, as text tokens (the same on every axis)."""
    import torch

    from posenc.positions import text_positions

    return text_positions(torch.arange(check_int("length", length, min=1)), getattr(module, "axes", 1))


def _positions_on_axes(positions, module):
    """``[L]`` positions as text tokens of a module with several axes (the same on every axis)."""
    from posenc.positions import text_positions

    return text_positions(positions, getattr(module, "axes", 1))


def _numpy(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def _not_applicable(module, kinds: tuple[str, ...], what: str) -> NotApplicable:
    return NotApplicable(f"{what} applies to {' and '.join(kinds)} encodings, not to "
                         f"{module.name!r} ({module.kind}): not applicable")


def _ones_qk(module, length: int):
    """``q = k = 1`` of shape ``[1, H, L, D]`` for a module that rotates or scores queries and keys."""
    import torch

    d = getattr(module, "head_dim", None) or module.spec.get("head_dim")
    if d is None and module.spec.get("d_model") and getattr(module, "num_heads", None):
        d = module.spec["d_model"] // module.num_heads
    h = getattr(module, "num_heads", None) or module.spec.get("num_heads") or 1
    if not d:
        raise NotApplicable(f"cannot tell the head dimension of {module.name!r} (no head_dim)")
    return torch.ones(1, int(h), length, int(d), dtype=torch.float64)


# -- tables: one vector per position ----------------------------------------------------------

def table(spec: Any, *, length: int = 128, dim: int = 64) -> np.ndarray:
    """One vector per position, ``[L, d]`` float64 (``d = dim``, or ``rotary_dim`` for partial rotary).

    Additive: ``PE(pos)``. Rotary: ``[cos(pos·θ) | sin(pos·θ)]`` (``cos_sin``; or, for a module
    without it, the rotation of a vector of ones), the rotation each position applies.
    """
    m = build(spec, dim=dim, length=length)
    return _for_kind(m, "table", "a positions × dimensions table")(m, _positions(length, m))


def _additive_table(m, pos):
    return _numpy(m(pos))  # (L, d)


def _rotary_table(m, pos):
    import torch

    length = pos.shape[0]
    if hasattr(m, "cos_sin"):
        cos, sin = m.cos_sin(pos, dtype=torch.float64)  # (L, R) each, or (H, L, R) per head
        if cos.dim() == 3:
            cos, sin = (t.transpose(0, 1).reshape(length, -1) for t in (cos, sin))  # (L, H·R)
        return _numpy(torch.cat((cos, sin), dim=-1))
    return _numpy(m(_ones_qk(m, length)[:, :1], pos, role="query")[0, 0])  # (L, D)


def cosine_similarity_matrix(tab: np.ndarray) -> np.ndarray:
    """``S[p, q] = PE(p)·PE(q) / (|PE(p)| |PE(q)|)``: ``[L, d]`` -> ``[L, L]``."""
    tab = np.asarray(tab, dtype=np.float64)
    norms = np.linalg.norm(tab, axis=-1, keepdims=True)
    unit = tab / np.where(norms == 0, 1.0, norms)
    return unit @ unit.T


def similarity_vs_distance(tab: np.ndarray) -> np.ndarray:
    """Mean cosine similarity of all pairs ``(p, p + r)``, for ``r = 0 .. L-1``: ``[L]``.

    For the sinusoidal table it is independent of ``p``: ``(2/d) Σ_i cos(r θ_i)``.
    """
    tab = np.asarray(tab, dtype=np.float64)
    n = tab.shape[0]
    norms = np.linalg.norm(tab, axis=-1, keepdims=True)
    unit = tab / np.where(norms == 0, 1.0, norms)  # (L, d)
    # Σ_p u(p)·u(p + r) for every r at once: the autocorrelation, by FFT (O(L log L), no [L, L] matrix)
    f = np.fft.rfft(unit, n=2 * n, axis=0)  # (L + 1, d)
    sums = np.fft.irfft((f.real**2 + f.imag**2).sum(-1), n=2 * n)[:n]  # (L,)
    return sums / (n - np.arange(n))


ROTATION_ULPS = 8
"""``linear_map`` returns the closed-form per-pair rotation of a table of ``L`` positions when its residual
is at most ``ROTATION_ULPS · L · eps`` (relative to ``max |PE|``, eps = 2^-52): the rounding of a
rotation table whose angles ``p·θ`` are float64 products good to half an ulp of ``p`` (θ ≤ 1), a table
from elsewhere. posenc's own tables have exact angles (``posenc.rotary.angles``) and leave about
1.5e-15 at every length and width (1.2e-14 at L = 128, 4e-13 at 4096 and 1.8e-12 at 16384 when its
angles were rounded products); an SVD least-squares fit of the same tables leaves 1e-13 at 128 and
5e-12 at 4096."""


def _rotation_pairings(d: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The column layouts of rotated pairs ``(first, second)`` a rotation table may have: interleaved
    ``(2i, 2i+1)`` (sinusoidal's default), halves ``(i, i + d/2)`` (``table`` of a rotary scheme,
    ``layout="half"``), and halves within ``A`` equal blocks (a table of ``A`` axes, ``layout="half"``)."""
    if d % 2:
        return []
    idx = np.arange(d)
    out = [(idx[0::2], idx[1::2])]
    for blocks in range(1, d // 2):
        if d % (2 * blocks) == 0:
            b = idx.reshape(blocks, 2, -1)  # (A, 2, d/(2A))
            out.append((b[:, 0].ravel(), b[:, 1].ravel()))
    return out


def _rotation_fit(x: np.ndarray, y: np.ndarray, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, float]:
    """The least-squares scaled rotation per pair, in closed form: with ``w_p = x[p, first] + i·x[p, second]``,
    ``c = Σ_p conj(w_p)·w_{p+k} / Σ_p |w_p|²`` (``[d/2]`` complex; 0 for a pair that is 0 throughout), and the
    largest error ``max |c·w_p − w_{p+k}|`` over real and imaginary parts. NumPy's sums only (no BLAS, no
    threads): the same bits on every call and any thread count."""
    w = x[:, first] + 1j * x[:, second]  # (N, d/2)
    v = y[:, first] + 1j * y[:, second]
    den = (w.real**2 + w.imag**2).sum(0)
    num = (np.conj(w) * v).sum(0)
    c = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    err = c * w - v
    return c, float(max(np.abs(err.real).max(), np.abs(err.imag).max()))


def linear_map(tab: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """The least-squares ``M_k`` with ``PE(pos + k) ≈ M_k · PE(pos)`` over the table, and its residual.

    Vaswani et al. (2017, §3.5) chose sinusoids because ``PE(pos + k)`` is a linear function of
    ``PE(pos)``: per pair ``(sin, cos)`` at frequency ``θ``, ``M_k`` is the rotation
    ``[[cos kθ, sin kθ], [−sin kθ, cos kθ]]``, the same for every ``pos``. The residual is
    ``max |PE[k:] − PE[:-k] M_kᵀ| / max |PE|`` (0 for an exact linear map; large for a learned table).

    **Exact and deterministic.** Writing a pair as ``w_p = a_p + i·b_p``, a rotation table has
    ``w_{p+k} = c·w_p`` with ``c = e^{±ikθ}``; ``c`` is fitted per pair in closed form
    (``Σ conj(w_p)·w_{p+k} / Σ |w_p|²``, well conditioned at any frequency) for each column layout of
    ``_rotation_pairings``, and the first whose residual is the table's own rounding
    (``ROTATION_ULPS``) is returned: its ``M_k`` is block-diagonal, one ``[[Re c, −Im c], [Im c, Re c]]``
    per pair, and its residual a few ulps (about 1.5e-15 at every length: the table's angles ``p·θ`` are
    exact, ``posenc.rotary.angles``; when they were rounded products it grew as ``L·eps``, 1.8e-12 at 16384). Any other table gets the
    least squares of ``_least_squares`` (LAPACK ``gelsd``, SVD-based: the minimum-norm ``M_k``,
    deterministic on rank-deficient input, where the ``gelsy`` used before returned a different
    residual on each call: 1e-14 to 1.3 on one 128 × 64 sinusoidal table). The same bits on every
    call and any thread count (tests/test_determinism.py).

    Returns:
        ``(M_k [d, d], residual)``.
    """
    tab = np.asarray(tab, dtype=np.float64)
    k = check_int("k", k, min=1, max=tab.shape[0] - 1)
    n, d = tab.shape
    if n - k <= d:
        raise ValueError("linear_map needs more position pairs than dimensions (else any table fits): "
                         f"L - k = {n - k} must be > d = {d}; use a longer table")
    x, y = tab[:-k], tab[k:]  # (N, d) each
    scale = np.abs(tab).max() or 1.0
    for first, second in _rotation_pairings(d):
        c, worst = _rotation_fit(x, y, first, second)
        if worst / scale <= ROTATION_ULPS * n * np.finfo(np.float64).eps:
            m = np.zeros((d, d))
            m[first, first], m[first, second] = c.real, -c.imag
            m[second, first], m[second, second] = c.imag, c.real
            return m, worst / scale
    mt, worst = _least_squares(x, y)
    return mt.T, worst / scale


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """``mt`` minimising ``|x @ mt − y|`` (minimum norm), and ``max |x @ mt − y|``: LAPACK ``gelsd``
    (SVD-based, deterministic on rank-deficient input) on one thread. Threaded BLAS changes the last
    bits with the thread count (measured: torch's MKL and NumPy's OpenBLAS, ``gelsd`` and ``gesdd``
    alike, at 299 × 64); one thread costs 6-7 s at the largest fit ``posenc show`` accepts
    (4095 × 1024, on a loaded 2-core machine), where the table is not a rotation table."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        mt = torch.linalg.lstsq(xt, yt, driver="gelsd").solution  # (d, d): x @ mt ≈ y
        worst = float((xt @ mt - yt).abs().max())
    finally:
        torch.set_num_threads(threads)
    return mt.numpy(), worst


def nearest_neighbour_distances(tab: np.ndarray, *, chunk: int = 1024) -> np.ndarray:
    """Euclidean distance from each position's vector to the nearest other position's: ``[L]``.

    All positions are distinct (a unique fingerprint each) exactly when the minimum is > 0.
    """
    tab = np.asarray(tab, dtype=np.float64)
    n = tab.shape[0]
    if n < 2:
        raise ValueError(f"nearest-neighbour distances need at least 2 positions, got {n}")
    sq = (tab**2).sum(-1)
    out = np.empty(n)
    for start in progress(range(0, n, chunk), "fingerprints", big=n >= 8192):
        block = tab[start:start + chunk]  # (c, d)
        d2 = block @ tab.T  # (c, L), then |a|² + |b|² − 2 a·b in place
        d2 *= -2.0
        d2 += sq
        d2 += sq[start:start + chunk, None]
        d2[np.arange(block.shape[0]), np.arange(start, start + block.shape[0])] = np.inf
        out[start:start + chunk] = np.sqrt(np.maximum(d2.min(-1), 0.0))
    return out


FINGERPRINT_RTOL = 1e-6
"""Distances within this relative tolerance of the smallest count as ties. Sinusoidal and RoPE
tables have equal distances for every pair at the same ``|p − q|``; which one floating-point
noise makes smallest would change with the summation order (BLAS, another language), so a tie
goes to the first position: ``posenc show`` and ``posenc explore`` then name the same pair."""


def min_fingerprint_distance(tab: np.ndarray) -> tuple[float, int, int]:
    """The smallest distance between two positions' vectors, and the pair ``(p, q)``, ``p < q``.

    Ties (within ``FINGERPRINT_RTOL``) go to the smallest ``p``, then the smallest ``q``: ``p``
    is the first position whose nearest neighbour is that close, ``q`` the first position that
    close to ``p``. Distances come from the Gram expansion ``|a|² + |b|² − 2a·b`` (fast); where
    its rounding error could change the answer, the candidates' distances are recomputed
    directly as ``|a − b|``, and the distance returned is always a direct one.
    """
    tab = np.asarray(tab, dtype=np.float64)
    nn = nearest_neighbour_distances(tab)
    n, d = tab.shape
    sq = (tab**2).sum(-1)
    # |error of d²| from the expansion <= ~ (d + 2)·eps·(|a|² + |b|²): a generous bound
    err2 = 4.0 * (d + 2) * np.finfo(np.float64).eps * 2.0 * float(sq.max())
    low = float(nn.min())
    cut2 = ((np.sqrt(low**2 + err2) * (1 + FINGERPRINT_RTOL)) ** 2 + err2)
    candidates = np.flatnonzero(nn**2 <= cut2)
    # The expansion's distances are good to err2 / (2·low²), relatively. Far below the tolerance
    # (as for every table of default size: ~1e-12) they decide the ties; else (rows 1e-5 apart,
    # e.g. RoPE interpolated 1e5 times) the candidates' distances are recomputed directly, which
    # costs O(candidates · L · d).
    if low == 0 or err2 / (2 * low**2) > 1e-3 * FINGERPRINT_RTOL:
        exact = np.empty(len(candidates))
        for i, c in enumerate(candidates):
            row = np.linalg.norm(tab - tab[c], axis=-1)  # (L,)
            row[c] = np.inf
            exact[i] = row.min()
        best = float(exact.min())
        p = int(candidates[np.flatnonzero(exact <= best * (1 + FINGERPRINT_RTOL))[0]])
    else:
        p = int(candidates[np.flatnonzero(nn[candidates] <= low * (1 + FINGERPRINT_RTOL))[0]])
    dist = np.linalg.norm(tab - tab[p], axis=-1)  # (L,) direct
    dist[p] = np.inf
    best = float(dist.min())
    q = int(np.flatnonzero(dist <= best * (1 + FINGERPRINT_RTOL))[0])
    return best, min(p, q), max(p, q)


# -- frequencies ------------------------------------------------------------------------------

def wavelengths(inv_freq: np.ndarray) -> np.ndarray:
    """``λ_i = 2π / θ_i``: the number of positions one turn of pair ``i`` takes.

    A frequency of 0, or one so small that ``2π/θ`` is past float64's range (a linear scaling by
    1e308), never turns: its wavelength is ``inf``, without NumPy's overflow warning."""
    with np.errstate(divide="ignore", over="ignore"):
        return 2.0 * np.pi / np.asarray(inv_freq, dtype=np.float64)


def turns(inv_freq: np.ndarray, length: int) -> np.ndarray:
    """``length · θ_i / 2π``: how many full turns pair ``i`` makes within ``length`` positions.

    Pairs with fewer than one turn never repeat inside the context: they carry its coarse
    position, as the high bits of a binary counter do.
    """
    return length * np.asarray(inv_freq, dtype=np.float64) / (2.0 * np.pi)


def inv_freq(spec: Any, *, dim: int = 64) -> np.ndarray:
    """The frequencies θ an encoding uses (``module.inv_freq``), after any scaling."""
    m = build(spec, dim=dim, length=1)
    if not hasattr(m, "inv_freq"):
        raise NotApplicable(f"{m.name!r} has no frequencies (inv_freq): it is not a sinusoidal or rotary encoding")
    return _numpy(m.inv_freq)


@dataclass(frozen=True)
class Spectrum:
    """Frequencies of a rotary encoding before and after its scaling."""

    label: str
    before: np.ndarray  # θ_i without scaling, [R]
    after: np.ndarray  # θ_i with the spec's scaling, [R]
    attention_factor: float
    scaling: Mapping[str, Any] | None
    context: int | None = None  # the context the frequencies were trained for (original_max_positions)
    extended: int | None = None  # context × factor, when both are known

    @property
    def wavelengths_before(self) -> np.ndarray:
        return wavelengths(self.before)

    @property
    def wavelengths_after(self) -> np.ndarray:
        return wavelengths(self.after)


def spectrum(spec: Any, *, dim: int = 128) -> Spectrum:
    """θ per pair before and after a spec's ``scaling`` (any type ``posenc.scaling`` knows).

    "Before" is the same spec with ``scaling=None``; "after" is the built module's ``inv_freq``,
    or, for a length-dependent scaling (``module.scaling.at``), the frequencies at the extended
    context ``original_max_positions × factor``. A new scaling type needs no change here.
    """
    m = build(spec, dim=dim, length=1)
    after = inv_freq(m)
    full = m.spec
    scaling = full.get("scaling")
    before = inv_freq({**full, "scaling": None}) if scaling is not None else after
    context = extended = None
    if isinstance(scaling, Mapping):
        context = scaling.get("original_max_positions")
        factor = scaling.get("factor")
        if context and isinstance(factor, (int, float)) and not isinstance(factor, bool):
            extended = int(round(context * factor))
    scaled = getattr(m, "scaling", None)
    if extended and getattr(scaled, "length_dependent", False):
        after = np.asarray(scaled.at(extended), dtype=np.float64)  # dynamic, longrope: at the extended length
    return Spectrum(label(full), before, after, float(getattr(m, "attention_factor", 1.0)),
                    scaling, context, extended)


# -- scores -----------------------------------------------------------------------------------

def rotary_scores(spec: Any, *, max_distance: int = 256, dim: int = 64, q=None, k=None) -> np.ndarray:
    """``⟨R(0)q, R(r)k⟩ / D`` for ``r = 0 .. max_distance``, through ``module(x, positions)``.

    With ``q = k = 1`` (the default) and RoPE, it is ``(2/D) Σ_i cos(r θ_i) · a²`` (``a`` the
    attention factor): 1 at ``r = 0``, then decaying and oscillating.
    """
    n = check_int("max_distance", max_distance, min=0) + 1
    m = build(spec, dim=dim, length=n)
    return _for_kind(m, "qk", "q·k vs distance")(m, n, q, k)


def _rotary_qk(m, n: int, q, k) -> np.ndarray:
    import torch

    ones = _ones_qk(m, n)  # (1, H, N, D): every head for per-head frequencies (rope_mixed), else one
    ones = ones if getattr(m, "num_heads", None) else ones[:, :1]
    qx = ones if q is None else torch.as_tensor(q, dtype=torch.float64).expand_as(ones)
    kx = ones if k is None else torch.as_tensor(k, dtype=torch.float64).expand_as(ones)
    pos = _positions(n, m)
    rq, rk = m(qx, pos, role="query")[0], m(kx, pos, role="key")[0]  # (H, N, D)
    return _numpy((rk @ rq[:, 0].unsqueeze(-1)).squeeze(-1).mean(0)) / ones.shape[-1]


def rope_decay_bound(*, dim: int = 128, base: float = 10000.0, max_distance: int = 256,
                     inv_freq: np.ndarray | None = None) -> np.ndarray:
    """RoFormer's long-term decay bound (Su et al. 2021, §3.4.3, Fig. 2), ``r = 0 .. max_distance``.

        (1/(d/2)) · Σ_{j=1}^{d/2} |S_j|,   S_j = Σ_{i=0}^{j-1} e^{i·r·θ_i},   θ_i = base^(−2i/d)

    By Abel summation, ``|Σ_i h_i e^{i r θ_i}| ≤ max_i |h_{i+1} − h_i| · Σ_j |S_j|`` for the
    complex products ``h_i`` of query and key pairs (``h_{d/2} = 0``), so the score's envelope
    decays as this does. ``inv_freq`` overrides θ (e.g. a scaled spectrum).
    """
    from posenc.reference import rope_inv_freq

    dim = check_int("dim", dim, min=2)
    n = check_int("max_distance", max_distance, min=0) + 1
    theta = rope_inv_freq(dim, base) if inv_freq is None else np.asarray(inv_freq, dtype=np.float64)
    r = np.arange(n, dtype=np.float64)[:, None]  # (N, 1)
    s = np.cumsum(np.exp(1j * r * theta), axis=-1)  # (N, d/2): S_1 .. S_{d/2}
    return np.abs(s).sum(-1) / theta.size


def score_term(spec: Any, q_positions, k_positions, *, num_heads: int = DEFAULT_HEADS, dim: int = 64) -> np.ndarray:
    """``[H, Lq, Lk]``: the term a bias or relative scheme adds to the scores at these positions.

    Bias kind: ``module(q_positions, k_positions)``. Relative kind (query-dependent): the term
    with ``q = k = 1``, as one example of it.
    """
    import torch

    qp, kp = (torch.as_tensor(np.asarray(p, dtype=np.int64)) for p in (q_positions, k_positions))
    m = build(spec, dim=dim, num_heads=num_heads, length=int(max(qp.max(), kp.max())) + 1)
    if getattr(m, "axes", 1) > 1 and qp.dim() == 1:  # one-axis positions: the same on every axis
        qp, kp = _positions_on_axes(qp, m), _positions_on_axes(kp, m)
    return _for_kind(m, "term", "bias maps")(m, qp, kp)


def _bias_term(m, qp, kp) -> np.ndarray:
    return _numpy(m(qp, kp))  # (H, Lq, Lk)


def _relative_term(m, qp, kp) -> np.ndarray:
    return _numpy(m(_ones_qk(m, qp.numel()), _ones_qk(m, kp.numel()), qp, kp)[0])  # (H, Lq, Lk): q = k = 1


def bias_maps(spec: Any, *, length: int = 64, num_heads: int = DEFAULT_HEADS, dim: int = 64) -> np.ndarray:
    """``[H, L, L]``: the score term of each head for queries and keys at ``0 .. L-1`` (``score_term``)."""
    pos = np.arange(check_int("length", length, min=1))
    return score_term(spec, pos, pos, num_heads=num_heads, dim=dim)


@dataclass(frozen=True)
class Curve:
    """A positional score against relative distance ``r = 0 .. length-1``."""

    label: str
    kind: str
    distance: np.ndarray
    score: np.ndarray
    quantity: str = field(default="")


QUANTITY = {
    "additive": "cosine similarity of PE(p), PE(p + r)\n(mean over p)",
    "rotary": "q·k / D with q = k = 1",
    "bias": "bias added to the score\n(mean over heads)",
    "relative": "relative term with q = k = 1\n(mean over heads)",
    "none": "no positional term (0)",
    "content": "attention weight of the key r back from the last query\n(identical tokens, mean over heads)",
}


def content_weights(spec: Any, *, length: int = 128, dim: int = 64, num_heads: int = DEFAULT_HEADS) -> np.ndarray:
    """A content scheme's attention weights ``[H, L]`` of the last query on the key ``r`` tokens back
    (``[:, r]``), when every token is the same (q = k = 1/√D, hidden = 1): the positions the
    content gives when the content says nothing (FoX: ALiBi's decay; CoPE: a gate per token;
    stick-breaking: a geometric stick). The weights are the output for ``v = I`` (one-hot values);
    stick-breaking's leftover lands on the query's own key (r = 0)."""
    m = build(spec, dim=dim, num_heads=num_heads, length=length)
    return _for_kind(m, "weights", "content_weights")(m, length, dim, num_heads)


def _content_weights(m, length: int, dim: int, num_heads: int) -> np.ndarray:
    import torch

    h = getattr(m, "num_heads", None) or num_heads
    d = getattr(m, "head_dim", None) or dim
    q = torch.full((1, h, length, d), d ** -0.5, dtype=torch.float64)
    v = torch.eye(length, dtype=torch.float64).expand(1, h, length, length)
    hidden = torch.ones(1, length, m.d_model, dtype=torch.float64) if m.reads_hidden else None
    with torch.no_grad():
        w = m(q[:, :, -1:], q, v, hidden, causal=True)  # (1, H, 1, L)
    return _numpy(w[0, :, 0])[:, ::-1].copy()


def score_vs_distance(spec: Any, *, length: int = 256, dim: int = 64, num_heads: int = DEFAULT_HEADS) -> Curve:
    """How an encoding's positional signal changes with distance ``r``, by kind (see ``QUANTITY``).

    Additive: ``similarity_vs_distance``; rotary: ``rotary_scores``; bias and relative: the
    mean over heads of the term between the key at ``r`` and the query at 0 — for a causal model
    the query at ``r`` and the key at 0: ``map[:, r, 0]``; none: zeros.
    """
    length = check_int("length", length, min=2)
    m = build(spec, dim=dim, num_heads=num_heads, length=length)
    score = KIND_ANALYSIS[m.kind].signal(m, length, dim, num_heads)
    return Curve(shown_label(m), m.kind, np.arange(length), score, QUANTITY.get(m.kind, m.kind))


# -- grids: a 2D map of the positional signal -------------------------------------------------

GRID_QUANTITY = {
    "additive": "cosine similarity of PE vectors",
    "rotary": "q·k / D with q = k = 1 (mean over heads)",
    "bias": "bias added to the score (mean over heads)",
    "relative": "relative term with q = k = 1 (mean over heads)",
    "none": "no positional term (0)",
}


@dataclass(frozen=True)
class GridMap:
    """The positional signal between one patch and every patch of a grid, ``values [H, W]``."""

    label: str
    kind: str
    grid: tuple[int, int]
    patch: tuple[int, int]
    values: np.ndarray
    quantity: str = field(default="")


def grid_positions_for(module, grid: Sequence[int]):
    """The positions of an ``H × W`` grid's patches, row-major, as ``module`` takes them: ``(r, c)``
    for two axes, ``(0, …, 0, r, c)`` for more (the first frame of a clip), the flattened index
    ``r·W + c`` for one axis (a 1D encoding reading flattened patches, as the first ViTs did); a
    module with a ``grid_positions(grid)`` method places them itself (``dinov3``'s patch coordinates)."""
    import torch

    from posenc.positions import grid_positions

    own = getattr(module, "grid_positions", None)  # a scheme with its own placement (dinov3: coordinates in [−1, 1])
    if callable(own):
        return own(tuple(grid))
    pos = grid_positions(tuple(grid))  # (N, 2)
    axes = getattr(module, "axes", 1)
    if axes == 1:
        return pos[:, 0] * int(grid[1]) + pos[:, 1]
    return torch.cat((pos.new_zeros(pos.shape[0], axes - 2), pos), dim=-1)


def default_grid(module, grid: Sequence[int] | None = None) -> tuple[int, int]:
    """``grid``, else a learned grid's own last two sizes, else 14 × 14 (ViT-B/16 at 224 pixels)."""
    if grid is None:
        own = getattr(module, "grid", None)
        grid = own[-2:] if own else (14, 14)
    if isinstance(grid, (str, bytes)) or len(grid) != 2:
        raise ValueError(f"grid must be (H, W), got {grid!r}")
    return (check_int("grid[0]", grid[0], min=1), check_int("grid[1]", grid[1], min=1))


def grid_map(spec: Any, *, grid: Sequence[int] | None = None, patch: Sequence[int] | None = None, dim: int = 64,
             num_heads: int = DEFAULT_HEADS) -> GridMap:
    """Each patch's positional signal with ``patch`` (default: the centre), as ViT papers draw
    (Dosovitskiy et al. 2021, Fig. 7): ``values[r, c]`` by kind (``GRID_QUANTITY``). Works for
    every scheme: grid encodings (``axes``, a learned ``grid``) see ``(r, c)``, one-axis ones the
    flattened index."""
    if hasattr(spec, "kind") and hasattr(spec, "spec"):
        m = build(spec)
        h, w = default_grid(m, grid)
    else:
        own = as_spec(spec).get("grid")
        h, w = default_grid(type("Spec", (), {"grid": own})(), grid)
        m = build(spec, dim=dim, num_heads=num_heads, length=h * w)  # a 1D learned table: one row per patch
    pr, pc = (h // 2, w // 2) if patch is None else tuple(patch)
    if not (0 <= int(pr) < h and 0 <= int(pc) < w):
        raise ValueError(f"patch must lie inside the grid {h}×{w}, got ({pr}, {pc})")
    i = int(pr) * w + int(pc)
    values = KIND_ANALYSIS[m.kind].grid_signal(m, grid_positions_for(m, (h, w)), i, dim, num_heads)
    return GridMap(shown_label(m), m.kind, (h, w), (int(pr), int(pc)), np.asarray(values).reshape(h, w),
                   GRID_QUANTITY.get(m.kind, m.kind))


def grid_numbers(gm: GridMap) -> list[tuple[str, str]]:
    """Key numbers of a ``GridMap``: the signal at the patch, its neighbours and the far corner."""
    (h, w), (r, c), v = gm.grid, gm.patch, gm.values
    far = (0 if r >= h / 2 else h - 1, 0 if c >= w / 2 else w - 1)
    out = [("grid", f"{h} × {w} patches, signal with patch ({r}, {c}): {gm.quantity}")]
    picks = [("itself", (r, c)), ("right", (r, c + 1)), ("below", (r + 1, c)), ("far corner", far)]
    out.append(("signal at " + ", ".join(n for n, (a, b) in picks if a < h and b < w),
                ", ".join(f"{v[a, b]:.3g}" for _, (a, b) in picks if a < h and b < w)))
    return out


# -- key numbers ------------------------------------------------------------------------------

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


# -- the table from kind to quantity ----------------------------------------------------------

def _similarity_signal(m, length, dim, num_heads):
    return similarity_vs_distance(table(m, length=length))


def _qk_signal(m, length, dim, num_heads):
    return rotary_scores(m, max_distance=length - 1)


def _term_signal(m, length, dim, num_heads):
    return score_term(m, np.arange(length), [0])[:, :, 0].mean(0)  # query at r, key at 0


def _weights_signal(m, length, dim, num_heads):
    return content_weights(m, length=length, dim=dim, num_heads=num_heads).mean(0)


def _zero_signal(m, length, dim, num_heads):
    return np.zeros(length)


def _similarity_grid(m, pos, i, dim, num_heads):
    return cosine_similarity_matrix(_numpy(m(pos)))[i]


def _qk_grid(m, pos, i, dim, num_heads):
    ones = _ones_qk(m, pos.shape[0])
    if getattr(m, "num_heads", None) is None:
        ones = ones[:, :1]
    rq, rk = m(ones, pos, role="query")[0], m(ones, pos, role="key")[0]  # (H, N, D)
    return _numpy((rk @ rq[:, i].unsqueeze(-1)).squeeze(-1).mean(0)) / ones.shape[-1]


def _term_grid(m, pos, i, dim, num_heads):
    import torch

    flat = torch.arange(pos.shape[0])
    return score_term(m, flat[i:i + 1], flat, num_heads=num_heads, dim=dim)[:, 0].mean(0)


def _zero_grid(m, pos, i, dim, num_heads):
    return np.zeros(pos.shape[0])


@dataclass(frozen=True)
class KindAnalysis:
    """What the analysis and the figures read from a scheme of one kind (``KIND_ANALYSIS``): the
    functions of the module behind ``table``, ``rotary_scores``, ``score_term`` and
    ``content_weights`` (None where the quantity does not apply: ``NotApplicable``), the signal
    against distance (``score_vs_distance``) and on a grid (``grid_map``), and ``key_numbers``'
    rows (before the frequency rows when ``numbers_first``)."""

    signal: Any
    grid_signal: Any
    numbers: Any
    table: Any = None
    qk: Any = None
    term: Any = None
    weights: Any = None
    numbers_first: bool = False
    learned_signal: bool = False  # its learned parameters are its signal (``untrained``): tables, frequencies


KIND_ANALYSIS = {
    "additive": KindAnalysis(_similarity_signal, _similarity_grid, _additive_numbers, table=_additive_table,
                             numbers_first=True, learned_signal=True),
    "rotary": KindAnalysis(_qk_signal, _qk_grid, _rotary_numbers, table=_rotary_table, qk=_rotary_qk,
                           numbers_first=True, learned_signal=True),
    "bias": KindAnalysis(_term_signal, _term_grid, _term_numbers, term=_bias_term),
    "relative": KindAnalysis(_term_signal, _term_grid, _term_numbers, term=_relative_term),
    "none": KindAnalysis(_zero_signal, _zero_grid, _none_numbers),
    "content": KindAnalysis(_weights_signal, _zero_grid, _content_numbers, weights=_content_weights),
}
"""The one place the analysis says how each kind is read: kind -> ``KindAnalysis``."""


def _for_kind(m, quantity: str, what: str):
    """The function of ``KIND_ANALYSIS`` behind ``quantity`` for ``m``'s kind; ``NotApplicable`` naming
    the kinds it applies to when it has none."""
    fn = getattr(KIND_ANALYSIS[m.kind], quantity)
    if fn is None:
        raise _not_applicable(m, tuple(k for k, a in KIND_ANALYSIS.items() if getattr(a, quantity) is not None), what)
    return fn


def describe_params(name: str) -> str:
    """``key=default, ...`` of a registered scheme, required keys marked ``key=<required>``."""
    return ", ".join(f"{k}={v!r}" for k, v in registry.get(name).params.items()) or "(no parameters)"


__all__ = [
    "NotApplicable", "build", "table", "cosine_similarity_matrix", "similarity_vs_distance", "linear_map",
    "nearest_neighbour_distances", "min_fingerprint_distance", "FINGERPRINT_RTOL", "wavelengths", "turns", "inv_freq",
    "Spectrum", "spectrum", "rotary_scores", "rope_decay_bound", "score_term", "bias_maps", "Curve", "score_vs_distance",
    "key_numbers", "describe_params", "content_weights", "GridMap", "KIND_ANALYSIS", "KindAnalysis", "grid_map", "grid_numbers", "grid_positions_for", "default_grid",
]
