"""The best ROC any membership attack can reach against an (ε, δ)-DP or μ-GDP mechanism.

Hypothesis-testing view of DP (Kairouz, Oh, Viswanath 2015; Dong, Roth, Su 2022): every test of
"member" vs "non-member" on the output of an (ε, δ)-DP mechanism has

    TPR <= e^ε FPR + δ    and    1 - FPR <= e^ε (1 - TPR) + δ,

so its ROC lies under TPR_max(FPR) = min(1, e^ε FPR + δ, 1 - e^-ε (1 - δ - FPR)). For μ-GDP the
curve is tighter: TPR_max(FPR) = Φ(Φ^-1(FPR) + μ).

How close an attack comes (`closeness`) is measured in AUC: the fraction of the way from chance
(AUC 0.5) to the bound's AUC, (AUC_attack - 0.5) / (AUC_bound - 0.5). 0 is chance, 1 is the best
any attack could do under the claim, above 1 the claim is contradicted (the empirical-ε audit
decides that with a confidence bound). Pure numpy; no training code.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_GRID = np.linspace(0.0, 1.0, 20001)  # FPR grid for the bound's AUC (trapezoid, error < 1e-6)
_NORMAL = NormalDist()


def eps_delta_tpr(fpr: np.ndarray, eps: float, delta: float) -> np.ndarray:
    """TPR_max(FPR) of the (ε, δ)-DP trade-off region (elementwise over `fpr` in [0, 1])."""
    fpr = np.asarray(fpr, dtype=float)
    if math.isinf(eps):
        return np.ones_like(fpr)
    e = math.exp(min(eps, 700.0))
    tpr = np.minimum(e * fpr + delta, 1.0 - (1.0 - delta - fpr) / e)
    return np.clip(tpr, fpr, 1.0)


def gdp_tpr(fpr: np.ndarray, mu: float) -> np.ndarray:
    """TPR_max(FPR) = Φ(Φ^-1(FPR) + μ) of μ-GDP (elementwise over `fpr` in [0, 1])."""
    fpr = np.asarray(fpr, dtype=float)
    inner = np.clip(fpr, 1e-300, 1 - 1e-16)
    out = np.array([_NORMAL.cdf(_NORMAL.inv_cdf(f) + mu) for f in inner.ravel()])
    out = out.reshape(fpr.shape)
    return np.where(fpr <= 0, 0.0, np.where(fpr >= 1, 1.0, out))


def eps_delta_auc(eps: float, delta: float) -> float:
    """AUC of the (ε, δ)-DP bound curve."""
    return float(np.trapezoid(eps_delta_tpr(_GRID, eps, delta), _GRID))


def gdp_auc(mu: float) -> float:
    """AUC of the μ-GDP bound curve, Φ(μ / √2) (closed form)."""
    return _NORMAL.cdf(mu / math.sqrt(2.0))


def closeness(auc: float, bound_auc: float) -> float | None:
    """(AUC - 0.5) / (AUC_bound - 0.5): the fraction of the way from chance to the bound (None
    when the bound is chance itself, e.g. ε = 0, δ = 0)."""
    if bound_auc - 0.5 <= 1e-12:
        return None
    return (auc - 0.5) / (bound_auc - 0.5)
