"""mu-Gaussian DP formulas, as used by Dyn-D2P (Zhu et al., Sec. 3, eqs. (3)-(9)).

- eq. (3) (Prop. 1): the Gaussian mechanism with sensitivity S and std sigma is (S / sigma)-GDP.
- eq. (4) (Prop. 2, Dong-Roth-Su): mu-GDP <=> (epsilon, delta(epsilon))-DP for all epsilon with
  delta(epsilon; mu) = Phi(-epsilon/mu + mu/2) - e^epsilon Phi(-epsilon/mu - mu/2).
- eq. (6) (Prop. 3, Bu et al. CLT): K Poisson(p)-subsampled mu_k-GDP steps compose to about
  mu_tot = p sqrt(sum_k (exp(mu_k^2) - 1))-GDP. This is asymptotic, NOT an upper bound
  (it is asymptotic, and rigorous PLD / RDP accountants give larger epsilons for the same
  schedules); every function that uses it warns with `ApproximateAccountingWarning`.
- eq. (8): mu_0 of the schedule mu_k = mu_0 rho_mu^(k/K) that spends exactly mu_tot, solved by
  bisection in the guaranteed bracket (mu_bar / rho_mu, mu_bar].
- eq. (9): the constant per-step budget mu_bar = sqrt(log((mu_tot/p)^2 / K + 1)).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

from privbench.accounting.report import ApproximateAccountingWarning
from privbench.accounting.validation import (
    check_count,
    check_delta,
    check_greater_equal_one,
    check_positive,
    check_sampling_rate,
)
from privbench.errors import ConfigError

CLT_WARNING = (
    "the mu-GDP central-limit composition (Dyn-D2P eq. 6) is an asymptotic approximation, "
    "not an upper bound; it can under-report epsilon"
)


def gdp_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon; mu) of a mu-GDP mechanism, Dyn-D2P eq. (4), computed in log space.

    Args:
        epsilon: epsilon >= 0.
        mu: the GDP parameter, > 0.

    Returns:
        The smallest delta such that the mechanism is (epsilon, delta)-DP.
    """
    mu = check_positive(mu, "mu")
    if epsilon < 0:
        raise ConfigError(f"epsilon must be >= 0, got {epsilon!r}")
    a = -epsilon / mu + mu / 2
    b = -epsilon / mu - mu / 2
    second = epsilon + log_ndtr(b)  # <= log_ndtr(a) exactly; beyond a float only by rounding
    value = math.exp(log_ndtr(a)) - (math.exp(second) if second < 700 else math.inf)
    return max(value, 0.0)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu such that mu-GDP is exactly (epsilon, delta)-DP: eq. (4) solved for mu.

    Args:
        epsilon: target epsilon > 0.
        delta: target delta in (0, 1).

    Returns:
        mu_tot (e.g. 0.313902 for epsilon = 1, delta = 1e-4).
    """
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_delta(delta)
    lo, hi = 1e-8, 1.0
    while gdp_delta(epsilon, hi) < delta:
        hi *= 2
        if hi > 1e4:
            raise ConfigError(f"no mu reaches delta={delta} at epsilon={epsilon}")
    return float(brentq(lambda m: gdp_delta(epsilon, m) - delta, lo, hi, xtol=1e-15, rtol=1e-14))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at which mu-GDP gives delta: eq. (4) solved for epsilon (0 if delta(0) <= delta).

    Args:
        mu: the GDP parameter, > 0 (math.inf gives math.inf).
        delta: delta in (0, 1).

    Returns:
        epsilon >= 0.
    """
    delta = check_delta(delta)
    mu = check_positive(mu, "mu", allow_inf=True)
    if math.isinf(mu * mu):  # a composition beyond a float (e^(mu_k^2) overflowed)
        return math.inf
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(hi, mu) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-13, rtol=1e-13))


def clt_mu_total(mus: np.ndarray | list[float], sampling_rate: float) -> float:
    """Dyn-D2P eq. (6): mu_tot = p sqrt(sum_k (exp(mu_k^2) - 1)); warns that it is approximate.

    Args:
        mus: per-step GDP budgets mu_k = sensitivity / noise std = 1 / noise multiplier.
        sampling_rate: the Poisson sampling probability p (paper: 1/J; mini-batch: B/J).

    Returns:
        The (approximate) total GDP parameter; math.inf if a term overflows.
    """
    p = check_sampling_rate(sampling_rate)
    warnings.warn(CLT_WARNING, ApproximateAccountingWarning, stacklevel=2)
    mus = np.asarray(mus, dtype=float)
    with np.errstate(over="ignore"):
        total = float(np.sum(np.expm1(mus**2)))
    return p * math.sqrt(total) if math.isfinite(total) else math.inf


def dyn_d2p_mu_bar(mu_tot: float, sampling_rate: float, steps: int) -> float:
    """Dyn-D2P eq. (9): the constant per-step budget mu_bar = sqrt(log((mu_tot/p)^2 / K + 1)).

    Args:
        mu_tot: total GDP budget from eq. (4).
        sampling_rate: p (1/J in the paper, B/J with mini-batches).
        steps: K, the number of iterations.

    Returns:
        mu_bar (e.g. 0.374257 for J = 2500, B = 32, K = 4000, epsilon = 1, delta = 1e-4).
    """
    mu_tot = check_positive(mu_tot, "mu_tot")
    p = check_sampling_rate(sampling_rate)
    k = check_count(steps, "steps")
    return math.sqrt(math.log1p((mu_tot / p) ** 2 / k))


def dyn_d2p_growth(steps: int, rho_mu: float) -> np.ndarray:
    """The per-step factors rho_mu^(k/K), k = 0..K-1, of Dyn-D2P eq. (7)."""
    k = check_count(steps, "steps")
    rho = check_greater_equal_one(rho_mu, "rho_mu")
    return rho ** (np.arange(k, dtype=float) / k)


def dyn_d2p_mu0(mu_tot: float, sampling_rate: float, steps: int, rho_mu: float) -> float:
    """Dyn-D2P eq. (8): mu_0 with (mu_tot/p)^2 = sum_k (exp((mu_0 rho_mu^(k/K))^2) - 1).

    Solved by bisection in the guaranteed bracket (mu_bar / rho_mu, mu_bar] (exp(mu^2) is
    convex, so a growing schedule has mu_0 <= mu_bar < rho_mu mu_0); the
    right-hand side is strictly increasing in mu_0. rho_mu = 1 gives mu_bar (eq. 9).

    Args:
        mu_tot: total GDP budget from eq. (4).
        sampling_rate: p.
        steps: K.
        rho_mu: budget growth factor rho_mu >= 1.

    Returns:
        mu_0 (e.g. 0.253065 for J = 2500, B = 32, K = 4000, epsilon = 1, rho_mu = 2).
    """
    mu_bar = dyn_d2p_mu_bar(mu_tot, sampling_rate, steps)
    growth = dyn_d2p_growth(steps, rho_mu)
    if rho_mu == 1:
        return mu_bar
    target = (mu_tot / sampling_rate) ** 2

    def excess(mu0: float) -> float:
        with np.errstate(over="ignore"):
            return float(np.sum(np.expm1((mu0 * growth) ** 2))) - target

    lo, hi = mu_bar / rho_mu, mu_bar
    for _ in range(200):  # bisection: the bracket is guaranteed, so it always converges
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-15 * hi:
            break
    mu0 = 0.5 * (lo + hi)
    residual = abs(excess(mu0)) / target
    if residual > 1e-9:  # eq. (8) must hold to 1e-9 relative
        raise ConfigError(f"Dyn-D2P eq. (8) did not converge (relative residual {residual:.2e})")
    return mu0
