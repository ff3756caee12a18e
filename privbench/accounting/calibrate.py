"""Calibration: target (epsilon, delta) + the schedule's shape -> noise scale.

The shape is a per-step multiplier sequence m_t (ADP-VRSGP: alpha(T - t); Dyn-D2P:
rho_mu^(-k/K); constant noise: all ones); the calibrated noise multipliers are z_t = scale * m_t.
`solve_monotone` brackets the root geometrically from a cheap guess (the mu-GDP CLT, used here only
as a starting point, never as a reported number) and then runs Illinois false position in log
space, always keeping a bracket. It returns the SAFE end of the bracket (epsilon <= target) within
`rtol` of the target, so a calibrated schedule never over-spends. Where a paper's equation gives a
guaranteed bracket (Dyn-D2P eq. 8) that bracket is used directly
(`privbench.accounting.gdp.dyn_d2p_mu0`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from privbench.accounting.gaussian import (
    DEFAULT_OPTIONS,
    LONG_RUN_STEPS,
    AccountantOptions,
    Term,
    _epsilon_cached,
    check_accountant_delta,
    clt_epsilon,
    effective_accountant,
    schedule_terms,
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

COARSE = AccountantOptions(pld_discretization=1e-2, max_distinct=12)
"""Settings of the stage-1 proxy used to bracket expensive calibrations."""


def solve_monotone(
    f: Callable[[float], float],
    target: float,
    guess: float,
    *,
    increasing: bool,
    rtol: float = 1e-3,
    slope: float | None = None,
    name: str = "noise scale",
    max_evals: int = 100,
) -> float:
    """Find x > 0 with target * (1 - rtol) <= f(x) <= target, for a monotone f > 0.

    Works on log f against log x, which is close to linear for privacy curves: extrapolate with
    the (secant-updated) slope until the root is bracketed, then false position aimed at the middle
    of the acceptance band, with a bisection step whenever one end goes stale.

    Args:
        f: monotone function of x > 0 (e.g. epsilon as a function of the noise scale).
        target: the value to reach (> 0).
        guess: a starting point > 0.
        increasing: whether f increases with x.
        rtol: relative tolerance on f below the target.
        slope: initial estimate of d log f / d log x (default +-2, the Gaussian-DP rate).
        name: what x is, for the error message.
        max_evals: evaluation budget.

    Returns:
        x on the safe side: f(x) <= target (or the safe end of a bracket of relative width
        1e-12 when f jumps across the band, e.g. a discretized accountant).
    """
    guess = check_positive(guess, f"initial {name}")
    target = check_positive(target, "target")
    sign = 1.0 if increasing else -1.0
    slope = 2.0 * sign if slope is None else float(slope)
    if not slope * sign > 0:
        raise ConfigError(f"slope must have the sign of the monotonicity, got {slope!r}")
    aim, accept = math.log1p(-rtol / 2), math.log1p(-rtol)

    def h(u: float) -> float:  # log f - log target; > 0 is over budget
        v = f(math.exp(u))
        return math.log(v / target) if v > 0 else -math.inf

    safe: tuple[float, float] | None = None
    unsafe: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    sides: list[bool] = []  # which end each bracketed update moved (True = safe end)
    u = math.log(guess)
    for _ in range(max_evals):
        hu = h(u)
        if accept <= hu <= 0:
            return math.exp(u)
        if last is not None and math.isfinite(hu) and math.isfinite(last[1]) and u != last[0]:
            secant = (hu - last[1]) / (u - last[0])
            slope = secant if secant * sign > 0 else slope
        last = (u, hu)
        if safe is not None and unsafe is not None:
            sides.append(hu <= 0)
        if hu <= 0:
            safe = (u, hu)
        else:
            unsafe = (u, hu)
        if safe is not None and unsafe is not None:
            (us, hs), (uu, hv) = safe, unsafe
            if abs(uu - us) <= 1e-12 * max(1.0, abs(us)):
                return math.exp(us)
            stale = len(sides) >= 2 and sides[-1] == sides[-2]
            if stale or not (math.isfinite(hs) and math.isfinite(hv)):
                u = 0.5 * (us + uu)  # one end went stale: bisect
                sides.clear()
            else:
                u = us + (aim - hs) * (uu - us) / (hv - hs)
        else:
            u0, h0 = safe or unsafe  # type: ignore[misc]
            if math.isfinite(h0):
                step = (aim - h0) / slope
            else:  # f = inf (over budget) or 0: a fixed step toward the band
                step = (-sign if h0 > 0 else sign) * math.log(4.0)
            u = u0 + max(-math.log(16.0), min(math.log(16.0), step))
            if abs(u) > 700:
                break
    raise ConfigError(f"cannot calibrate the {name}: epsilon={target} is not reachable")


def _clt_guess(multipliers: np.ndarray, sampling_rate: float, mu_tot: float) -> float:
    """A cheap starting scale: the one at which the GDP CLT (or exact GDP, q = 1) spends mu_tot."""
    if sampling_rate == 1:
        return math.sqrt(float(np.sum(multipliers**-2.0))) / mu_tot
    target = (mu_tot / sampling_rate) ** 2
    weights: np.ndarray | None = None
    if multipliers.size > LONG_RUN_STEPS:  # a long run: at most LONG_RUN_STEPS groups, counted
        multipliers, weights = np.unique(multipliers, return_counts=True)  # ascending
        if multipliers.size > LONG_RUN_STEPS:  # each group at its smallest multiplier
            cut = np.linspace(0, multipliers.size, LONG_RUN_STEPS + 1).astype(int)[:-1]
            multipliers, weights = multipliers[cut], np.add.reduceat(weights, cut)

    def spent(scale: float) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            terms = np.expm1((1.0 / (scale * multipliers)) ** 2)
            return float(np.sum(terms if weights is None else terms * weights))

    lo, hi = 1e-3, 1.0
    while spent(hi) > target:
        hi *= 2
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if spent(mid) > target else (lo, mid)
    return hi


def _positive_array(values: Sequence[float], name: str) -> np.ndarray:
    """`values` as a float array when every one is a finite number > 0 (checked in one numpy
    pass for a numeric array), else the `check_positive` error of the first that is not."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iuf" and arr.ndim == 1 and bool(np.all(np.isfinite(arr) & (arr > 0))):
        return arr.astype(float)
    return np.asarray([check_positive(m, name) for m in values], dtype=float)


def schedule_epsilon_fn(
    multipliers: Sequence[float],
    sampling_rate: float,
    delta: float,
    accountant: str = "pld",
    options: AccountantOptions = DEFAULT_OPTIONS,
    sampling: str = "poisson",
) -> Callable[[float], float]:
    """epsilon(scale) of the schedule z_t = scale * multipliers[t] (memoized).

    Each evaluation buckets the scaled schedule `scale * multipliers` (a numpy product) exactly
    as `gaussian_epsilon` buckets a ledger of those events (`schedule_terms`), so a plan whose
    ledger is built from the same product reuses the calibration's last composition instead of
    paying for it again.
    """
    delta = check_delta(delta)
    accountant = check_choice(accountant, "accountant", GAUSSIAN_ACCOUNTANTS)
    q = check_sampling_rate(sampling_rate)
    shape = _positive_array(multipliers, "multiplier")
    if shape.size == 0:
        raise ConfigError("a noise schedule needs at least 1 step, got 0")
    check_accountant_delta(delta, effective_accountant((sampling,), accountant))
    max_distinct = None if accountant == "gdp_clt" else options.max_distinct

    def epsilon(scale: float) -> float:
        terms: tuple[Term, ...] = schedule_terms(scale * shape, q, sampling, max_distinct)
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
    sampling: str = "poisson",
) -> float:
    """The smallest-noise scale s (within `rtol` on epsilon) with epsilon(z_t = s m_t) <= target.

    Args:
        epsilon: target epsilon > 0.
        delta: target delta in (0, 1).
        multipliers: the schedule's shape m_t > 0, one per step (length = number of steps).
        sampling_rate: sampling rate q in (0, 1] of every step.
        accountant: "pld" (default), "rdp" or "gdp_clt" (without-replacement schedules are
            composed with RDP, see `privbench.accounting.gaussian`).
        options: numerical accountant settings.
        rtol: relative tolerance on epsilon.
        sampling: "poisson" (default) or "fixed_without_replacement" (replace-one, 2C).

    Returns:
        The noise scale s; step t uses noise multiplier s * multipliers[t].
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    shape = np.asarray(multipliers, dtype=float)
    f = schedule_epsilon_fn(shape, sampling_rate, delta, accountant, options, sampling)
    guess = _clt_guess(shape, sampling_rate, gdp_mu(epsilon, delta))
    if sampling != "poisson":
        guess *= 2.0  # replace-one: twice the sensitivity needs about twice the noise
    coarse = replace(
        options,
        pld_discretization=max(options.pld_discretization, COARSE.pld_discretization),
        max_distinct=min(options.max_distinct or len(shape), COARSE.max_distinct),
    )
    slope = None
    finer = accountant == "pld" and options.pld_discretization < coarse.pld_discretization
    if accountant != "gdp_clt" and (len(set(shape.tolist())) > coarse.max_distinct or finer):
        # Stage 1: a cheap, more pessimistic proxy (coarser PLD grid, fewer buckets) lands on the
        # safe side within a few percent; stage 2 refines with the requested settings.
        proxy = schedule_epsilon_fn(shape, sampling_rate, delta, accountant, coarse, sampling)
        guess = solve_monotone(proxy, epsilon, guess, increasing=False, rtol=1e-2)
        slope = _local_slope(proxy, guess)
    return solve_monotone(f, epsilon, guess, increasing=False, rtol=rtol, slope=slope)


def _local_slope(f: Callable[[float], float], x: float, step: float = 1.01) -> float | None:
    """d log f / d log x at x by a one-sided difference (None if not usable)."""
    a, b = f(x), f(x * step)
    if 0 < a < math.inf and 0 < b < math.inf and a != b:
        return math.log(b / a) / math.log(step)
    return None


def calibrate_max_node(epsilon: float, delta: float, rounds: int, rates: Sequence[float],
                       ratios: Sequence[float], accountant: str, options: AccountantOptions,
                       sampling: str = "poisson") -> float:
    """Smallest sigma with eps(z = sigma * ratios[i], q = rates[i], T rounds) <= epsilon for
    every node i: sigma = max_i z*(q_i) / r_i (eps_i falls with z and rises with q, so per
    distinct ratio only the largest rate needs calibrating). `sampling`: an accounting
    sampling model (`SAMPLINGS`)."""
    worst: dict[float, float] = {}
    for q, r in zip(rates, ratios, strict=True):
        worst[r] = max(worst.get(r, 0.0), q)
    return max(calibrate_noise_scale(epsilon, delta, np.ones(rounds), q, accountant, options,
                                     sampling=sampling) / r
               for r, q in worst.items())
