"""Calibration: target (epsilon, delta) + the schedule's shape -> noise scale.

The shape is a per-step multiplier sequence m_t (ADP-VRSGP: alpha(T - t); Dyn-D2P:
rho_mu^(-k/K); constant noise: all ones); the calibrated noise multipliers are z_t = scale * m_t.
`solve_monotone` brackets the root geometrically from a cheap guess (the mu-GDP CLT, used here only
as a starting point, never as a reported number) and then runs Illinois false position in log
space, always keeping a bracket. It returns the SAFE end of the bracket (epsilon <= target) within
`rtol` of the target, so a calibrated schedule never over-spends. Where a card gives a guaranteed
bracket (Dyn-D2P eq. 8) that bracket is used directly (`privbench.accounting.gdp.dyn_d2p_mu0`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from privbench.accounting.events import gaussian_schedule
from privbench.accounting.gaussian import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    Term,
    _epsilon_cached,
    bucket_terms,
    clt_epsilon,
)
from privbench.accounting.gdp import gdp_mu
from privbench.accounting.validation import (
    GAUSSIAN_ACCOUNTANTS,
    check_choice,
    check_delta,
    check_epsilon,
    check_positive,
    check_sampling_rate,
)
from privbench.errors import ConfigError


def solve_monotone(
    f: Callable[[float], float],
    target: float,
    guess: float,
    *,
    increasing: bool,
    rtol: float = 1e-3,
    name: str = "noise scale",
) -> float:
    """Find x > 0 with f(x) within `rtol` (relative) below `target`, for a monotone f.

    Args:
        f: monotone function of x > 0 (e.g. epsilon as a function of the noise scale).
        target: the value to reach (> 0).
        guess: a starting point > 0.
        increasing: whether f increases with x.
        rtol: relative tolerance on f (the result satisfies target*(1-rtol) <= f(x) <= target,
            or x is pinned to 1e-12 relative precision).
        name: what x is, for the error message.

    Returns:
        x on the safe side: f(x) <= target.
    """
    guess = check_positive(guess, f"initial {name}")

    def g(u: float) -> float:  # > 0 means unsafe (over budget)
        return f(math.exp(u)) - target

    # Work in u = log x; the unsafe direction is +u if f increases, -u if it decreases.
    toward_safe = -1.0 if increasing else 1.0
    u0 = math.log(guess)
    g0 = g(u0)
    step = math.log(2.0)
    u1 = u0 + (toward_safe if g0 > 0 else -toward_safe) * step
    g1 = g(u1)
    for _ in range(80):
        if (g0 > 0) != (g1 > 0):
            break
        u0, g0 = u1, g1
        step *= 2 if abs(step) < 8 else 1
        u1 = u0 + (toward_safe if g0 > 0 else -toward_safe) * step
        if abs(u1) > 700:
            break
        g1 = g(u1)
    if (g0 > 0) == (g1 > 0):
        raise ConfigError(f"cannot calibrate the {name}: epsilon={target} is not reachable")
    (us, gs), (uu, gu) = ((u0, g0), (u1, g1)) if g0 <= 0 else ((u1, g1), (u0, g0))
    side = 0
    for _ in range(200):
        if -gs <= rtol * target or abs(uu - us) <= 1e-12 * max(1.0, abs(us)):
            break
        u = us - gs * (uu - us) / (gu - gs)
        if not min(us, uu) < u < max(us, uu):
            u = 0.5 * (us + uu)
        gx = g(u)
        if gx <= 0:
            us, gs = u, gx
            if side == -1:
                gu *= 0.5  # Illinois: halve the stale end so the bracket keeps shrinking
            side = -1
        else:
            uu, gu = u, gx
            if side == 1:
                gs *= 0.5
            side = 1
    return math.exp(us)


def _clt_guess(multipliers: np.ndarray, sampling_rate: float, mu_tot: float) -> float:
    """A cheap starting scale: the one at which the GDP CLT (or exact GDP, q = 1) spends mu_tot."""
    if sampling_rate == 1:
        return math.sqrt(float(np.sum(multipliers**-2.0))) / mu_tot
    target = (mu_tot / sampling_rate) ** 2

    def spent(scale: float) -> float:
        with np.errstate(over="ignore"):
            return float(np.sum(np.expm1((1.0 / (scale * multipliers)) ** 2)))

    lo, hi = 1e-3, 1.0
    while spent(hi) > target:
        hi *= 2
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if spent(mid) > target else (lo, mid)
    return hi


def schedule_epsilon_fn(
    multipliers: Sequence[float],
    sampling_rate: float,
    delta: float,
    accountant: str = "pld",
    options: AccountantOptions = DEFAULT_OPTIONS,
) -> Callable[[float], float]:
    """epsilon(scale) of the schedule z_t = scale * multipliers[t] (bucketed once, memoized)."""
    delta = check_delta(delta)
    accountant = check_choice(accountant, "accountant", GAUSSIAN_ACCOUNTANTS)
    q = check_sampling_rate(sampling_rate)
    unit = gaussian_schedule([check_positive(m, "multiplier") for m in multipliers], q)
    max_distinct = None if accountant == "gdp_clt" else options.max_distinct
    unit_terms: tuple[Term, ...] = bucket_terms(unit, max_distinct)

    def epsilon(scale: float) -> float:
        terms = tuple((qq, z * scale, c) for qq, z, c in unit_terms)
        if accountant == "gdp_clt":
            return clt_epsilon(terms, delta)
        return _epsilon_cached(terms, delta, accountant, options)

    return epsilon


def calibrate_noise_scale(
    epsilon: float,
    delta: float,
    multipliers: Sequence[float],
    sampling_rate: float,
    accountant: str = "pld",
    options: AccountantOptions = DEFAULT_OPTIONS,
    rtol: float = 1e-3,
) -> float:
    """The smallest-noise scale s (within `rtol` on epsilon) with epsilon(z_t = s m_t) <= target.

    Args:
        epsilon: target epsilon > 0.
        delta: target delta in (0, 1).
        multipliers: the schedule's shape m_t > 0, one per step (length = number of steps).
        sampling_rate: Poisson sampling rate q in (0, 1] of every step.
        accountant: "pld" (default), "rdp" or "gdp_clt".
        options: numerical accountant settings.
        rtol: relative tolerance on epsilon.

    Returns:
        The noise scale s; step t uses noise multiplier s * multipliers[t].
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    shape = np.asarray(multipliers, dtype=float)
    f = schedule_epsilon_fn(shape, sampling_rate, delta, accountant, options)
    guess = _clt_guess(shape, sampling_rate, gdp_mu(epsilon, delta))
    return solve_monotone(f, epsilon, guess, increasing=False, rtol=rtol)
