"""The smallest difference a seed study could have detected: the minimum detectable difference of two means.

For ``n1`` and ``n2`` seeds with sample standard deviations ``s1`` and ``s2``, a two-sided Welch t-test at level
``alpha`` detects a true difference of mean BLEU with probability ``power`` when the difference is at least

    (t[1 - alpha/2, nu] + t[power, nu]) * sqrt(s1^2 / n1 + s2^2 / n2)

with ``nu`` the Welch–Satterthwaite degrees of freedom (the usual power approximation for a two-sample t-test, e.g.
Cohen 1988, ch. 2; Dror et al. 2018 on seeds in NLP). A difference below it that the study did not find says
little; one above it would very likely have been seen. Student's t quantiles come from the regularized incomplete
beta function (a continued fraction, Lentz's method) inverted by bisection: no SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        for numerator in (even, odd):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0 (got p={p}, df={df})")
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def welch_df(s1: float, n1: int, s2: float, n2: int) -> float:
    """Welch–Satterthwaite degrees of freedom of the difference of two means."""
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    if v1 + v2 == 0:
        return float(n1 + n2 - 2)
    return (v1 + v2) ** 2 / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1))


def detectable_difference(baseline: Sequence[float], system: Sequence[float], power: float = 0.8,
                          alpha: float = 0.05) -> dict[str, Any] | None:
    """The minimum detectable difference of mean BLEU between two sets of seeds (module doc); None with fewer than
    two seeds on a side.

    Returns:
        ``{"difference", "power", "alpha", "df", "standard_error", "n": [n1, n2]}``.
    """
    n1, n2 = len(baseline), len(system)
    if n1 < 2 or n2 < 2:
        return None

    def sd(values: Sequence[float]) -> float:
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))

    s1, s2 = sd(baseline), sd(system)
    se = math.sqrt(s1 * s1 / n1 + s2 * s2 / n2)
    df = welch_df(s1, n1, s2, n2)
    factor = t_quantile(1 - alpha / 2, df) + t_quantile(power, df)
    return {"difference": factor * se, "power": power, "alpha": alpha, "df": df, "standard_error": se,
            "n": [n1, n2]}
