"""Tables, one vector per position (additive and rotary kinds): cosine similarity against distance, the linear map ``PE(pos + k) = M_k · PE(pos)``, fingerprint distinctness.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc._validate import check_int
from posenc.analysis.base import _for_kind, _numpy, _ones_qk, _positions, build, progress


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
