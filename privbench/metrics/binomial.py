"""The exact (Clopper-Pearson) interval of a binomial rate, on `scipy.special` alone.

`scipy.stats.beta.ppf(q, a, b)` is `scipy.special.betaincinv(a, b, q)`; calling the special
function directly gives the same numbers without importing `scipy.stats` (about a second), so
that reading results (the gate, `privbench check`) stays light.
"""

from __future__ import annotations

from scipy.special import betaincinv

CI_LEVEL = 0.95


def clopper_pearson(k: int, n: int, level: float = CI_LEVEL) -> list[float]:
    """Exact (Clopper-Pearson) two-sided interval [lo, hi] of a binomial rate k / n at
    confidence `level` (`exact_interval` at alpha = 1 - level)."""
    return list(exact_interval(k, n, 1 - level))


def exact_interval(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The Clopper-Pearson 1 - alpha interval of k / n: lower = Beta^-1(alpha/2; k, n - k + 1)
    (0 when k = 0), upper = Beta^-1(1 - alpha/2; k + 1, n - k) (1 when k = n)."""
    lo = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, alpha / 2))
    hi = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - alpha / 2))
    return lo, hi
