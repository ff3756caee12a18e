"""Each paper's own privacy formula, as a named function (the `paper` mode).

Dyn-D2P's formulas (eqs. 4, 6, 8, 9) live in `privbench.accounting.gdp`. Here:

- ADP-VRSGP (Wu et al., Sec. 4 and 6, Theorem 1): noise factors alpha(k) =
  (floor(k/tau) + 10)^s applied as alpha(T - t) at step t, and the Theorem 1 closed form
  sigma_hat = c2 q sqrt(ln(1/delta)) / epsilon * sqrt(sum_t 1/alpha_t^2), with c2 unspecified by the
  paper and therefore fitted so that the closed form matches an RDP (moments) accountant at
  alpha == 1 (a choice of this implementation).
- DeFL-VP (Xiu et al., Sec. 4.2, Alg. 3 / Eq. 14, Theorem 1, Corollary 2): the
  per-coordinate and per-vector readings of the randomized-response budget.
- DPPS / PartPSP (Zhou et al., Sec. 4.1, Lemma 1, Theorem 1): each round is
  (b / gamma_n)-DP; the paper does not compose across rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privbench.accounting.calibrate import calibrate_noise_scale
from privbench.accounting.events import GaussianEvent
from privbench.accounting.gaussian import DEFAULT_OPTIONS, AccountantOptions, gaussian_epsilon
from privbench.accounting.validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_positive,
    check_sampling_rate,
)

# ---------------------------------------------------------------- ADP-VRSGP


def adp_vrsgp_alpha(k: int | np.ndarray, tau: int = 5, s: float = 0.2) -> np.ndarray:
    """Noise intensity alpha(k) = (floor(k / tau) + 10)^s (ADP-VRSGP Sec. 6)."""
    tau = check_count(tau, "tau")
    return (np.floor_divide(np.asarray(k), tau) + 10.0) ** float(s)


def adp_vrsgp_noise_factors(steps: int, tau: int = 5, s: float = 0.2) -> np.ndarray:
    """The applied factors alpha(T - t) for t = 0..T-1 (decreasing; Sec. 4)."""
    steps = check_count(steps, "steps")
    return adp_vrsgp_alpha(steps - np.arange(steps), tau, s)


def adp_vrsgp_theorem1_sigma_hat(
    epsilon: float, delta: float, sampling_rate: float, factors: Sequence[float], c2: float
) -> float:
    """Theorem 1: sigma_hat = c2 q sqrt(ln(1/delta)) / eps * sqrt(sum_t 1/alpha_t^2).

    sigma_hat is the base noise multiplier (per unit of the clip bound G); step t uses
    alpha_t * sigma_hat. Uses the factors actually applied (Theorem 1 sums
    1/alpha(t)^2 over t = 0..T-1, one index off the applied alpha(T - t)).
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    q = check_sampling_rate(sampling_rate)
    inv_sq = float(np.sum(np.asarray(factors, dtype=float) ** -2.0))
    return check_positive(c2, "c2") * q * math.sqrt(math.log(1 / delta) * inv_sq) / epsilon


def adp_vrsgp_fitted_c2(
    z_const: float, epsilon: float, delta: float, sampling_rate: float, steps: int
) -> float:
    """c2 making Theorem 1 at alpha == 1 equal the accountant's constant multiplier z_const."""
    return z_const * epsilon / (sampling_rate * math.sqrt(steps * math.log(1 / delta)))


def adp_vrsgp_paper_sigma_hat(
    epsilon: float,
    delta: float,
    sampling_rate: float,
    factors: Sequence[float],
    options: AccountantOptions = DEFAULT_OPTIONS,
) -> float:
    """The paper-mode base multiplier: Theorem 1 with c2 fitted to RDP at alpha == 1.

    Equals z_const * sqrt(sum_t alpha_t^-2 / T), the "naive" matching of sigma_hat, which
    under-noises by 11-22% against a heterogeneous accountant.
    """
    steps = len(factors)
    z_const = calibrate_noise_scale(
        epsilon, delta, np.ones(steps), sampling_rate, "rdp", options
    )
    c2 = adp_vrsgp_fitted_c2(z_const, epsilon, delta, sampling_rate, steps)
    return adp_vrsgp_theorem1_sigma_hat(epsilon, delta, sampling_rate, factors, c2)


def adp_vrsgp_paper_epsilon(
    sigma_hat: float,
    delta: float,
    sampling_rate: float,
    factors: Sequence[float],
    options: AccountantOptions = DEFAULT_OPTIONS,
) -> float:
    """The epsilon Theorem 1 (c2 fitted at alpha == 1) assigns to `sigma_hat`.

    The closed form depends on the schedule only through sum_t 1/z_t^2, so it is the RDP epsilon
    of T constant steps at z_eff = sigma_hat * sqrt(T / sum_t alpha_t^-2); this inverts
    `adp_vrsgp_paper_sigma_hat` exactly.
    """
    factors = np.asarray(factors, dtype=float)
    z_eff = check_positive(sigma_hat, "sigma_hat") * math.sqrt(len(factors) / np.sum(factors**-2))
    event = GaussianEvent(z_eff, sampling_rate, len(factors))
    return gaussian_epsilon([event], delta, "rdp", options)


# ---------------------------------------------------------------- DeFL-VP


def defl_vp_readings(coordinate_epsilon: float, dim: int, rounds: int) -> dict[str, float]:
    """The budgets that one per-coordinate RR epsilon implies (Alg. 3, Theorem 1,
    Corollary 2).

    Args:
        coordinate_epsilon: log(p / (1 - p)) of the keep probability p.
        dim: d, coordinates randomized per message.
        rounds: T.

    Returns:
        per_coordinate (Alg. 3 label), per_round (Theorem 1: d * eps) and total (Corollary 2,
        basic composition: T * d * eps).
    """
    eps = check_positive(coordinate_epsilon, "coordinate epsilon")
    d, t = check_count(dim, "dim"), check_count(rounds, "rounds")
    return {"per_coordinate": eps, "per_round": d * eps, "total": t * d * eps}


# ---------------------------------------------------------------- DPPS / PartPSP


def dpps_round_epsilon(b: float, gamma_n: float) -> float:
    """Theorem 1: each round (t > 0) is (b / gamma_n)-DP w.r.t. the L1 sensitivity S^(t)."""
    return check_positive(b, "b") / check_positive(gamma_n, "gamma_n")


def dpps_b(round_epsilon: float, gamma_n: float) -> float:
    """The privacy knob b = eps_round * gamma_n (Laplace scale gamma_n S / b = S / eps_round)."""
    return check_positive(round_epsilon, "round epsilon") * check_positive(gamma_n, "gamma_n")
