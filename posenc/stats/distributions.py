"""The distributions behind the benchmarks' tests, written out (NumPy and ``math`` only, no SciPy).

- the regularized incomplete beta ``I_x(a, b)`` (``beta_inc``; its continued fraction by the modified
  Lentz method, Press et al., *Numerical Recipes* §6.4), and from it
- Student's t: ``P(T > t) = ½ I_{df/(df+t²)}(df/2, ½)`` for ``t > 0`` (``t_sf``), its quantile
  (``t_quantile``, by bisection), the two-sided p-value and critical value (``t_two_sided_p``,
  ``t_critical``), the normal's quantile (``normal_quantile``: ``df = inf``);
- Fisher's F: ``P(F > f) = I_{d2/(d2+d1 f)}(d2/2, d1/2)`` (``f_sf``);
- the noncentral t's tail ``P(T' > c)`` (``noncentral_t_sf``), for the detectable effect
  (``posenc.stats.procedure.detectable``);
- McNemar's exact test on the discordant counts (``mcnemar_exact``), and Holm's step-down adjusted
  p-values (``holm``, Holm 1979).

One definition of each: the verdict procedure (``posenc.stats.procedure``), the estimates
(``posenc.stats.estimates``) and both benchmarks import them from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # the normal's 97.5% quantile


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta ``I_x(a, b)``."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with real ``df > 0`` (``inf``: the normal):
    ``½ I_{df/(df+t²)}(df/2, ½)`` for ``t > 0``."""
    if df <= 0 or math.isnan(df):
        raise ValueError(f"df must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if math.isinf(df) or df > 1e7:
        return 0.5 * math.erfc(t / math.sqrt(2))
    tail = 0.5 * beta_inc(df / 2, 0.5, df / (df + t * t))
    return tail if t > 0 else 1 - tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``0 < q < 1``), by bisection on ``t_sf``."""
    if not 0 < q < 1:
        raise ValueError(f"q must lie in (0, 1), got {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1 - q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, df) > 1 - q else (lo, mid)
    return (lo + hi) / 2


def noncentral_t_sf(c: float, df: float, delta: float) -> float:
    """``P(T' > c)`` for the noncentral t ``T' = (Z + δ)/√(V/df)``, ``V ~ χ²_df``: the normal tail
    averaged over ``V = y²`` (trapezoid on ``y``, whose density ``∝ y^{df−1} e^{−y²/2}`` is smooth)."""
    if math.isinf(df) or df > 1e6:
        return 0.5 * math.erfc((c - delta) / math.sqrt(2))
    y = np.linspace(1e-9, math.sqrt(df) + 12.0, 401)  # (401,): the integrand is smooth; 1e-4 of 4001 points
    log_density = (df - 1) * np.log(y) - y * y / 2 - (df / 2 - 1) * math.log(2) - math.lgamma(df / 2)
    tail = 0.5 * np.vectorize(math.erfc)((c * y / math.sqrt(df) - delta) / math.sqrt(2))
    return float(np.trapezoid(np.exp(log_density) * tail, y))


def normal_quantile(q: float) -> float:
    """The ``q`` quantile of the standard normal (Student's t with ``df = inf``)."""
    return t_quantile(q, math.inf)


def f_sf(f: float, d1: float, d2: float) -> float:
    """``P(F > f)`` for Fisher's F with ``(d1, d2)`` degrees of freedom: ``I_{d2/(d2+d1 f)}(d2/2, d1/2)``."""
    return beta_inc(d2 / 2, d1 / 2, d2 / (d2 + d1 * f)) if f > 0 else 1.0


def t_two_sided_p(t: float, df: float) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom, a positive integer or ``inf``
    (the normal): ``2·P(T > |t|)`` of the one t distribution, ``t_sf``
    (``½ I_{df/(df+t²)}(df/2, ½)``, the regularized incomplete beta)."""
    if not math.isinf(df) and (int(df) != df or df < 1):
        raise ValueError(f"df must be a positive integer or inf, got {df}")
    return min(1.0, 2 * t_sf(abs(float(t)), df))


def t_critical(df: float, level: float = 0.95) -> float:
    """The two-sided ``level`` quantile of Student's t (12.706 at df 1, 4.303 at 2, 1.960 at inf):
    ``t_quantile`` at ``1 − (1 − level)/2``."""
    if math.isinf(df) and level == 0.95:
        return Z95
    return t_quantile(1 - (1 - level) / 2, df)


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value from the discordant counts ``b`` (A right, B wrong) and
    ``c`` (A wrong, B right): ``min(1, 2·P(X <= min(b, c)))``, ``X ~ Binomial(b + c, 1/2)``."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order."""
    m = len(pvalues)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


__all__ = ["beta_inc", "t_sf", "t_quantile", "normal_quantile", "noncentral_t_sf", "f_sf", "t_two_sided_p",
           "t_critical", "mcnemar_exact", "holm", "Z95"]
