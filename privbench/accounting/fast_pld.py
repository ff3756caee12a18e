"""Poisson-subsampled Gaussian PLDs built by dp-accounting, faster, and composed directly.

Composing a decaying noise schedule (ADP-VRSGP, Dyn-D2P) costs one PLD construction per distinct
noise multiplier, and a calibration composes the schedule several times. Two costs of
dp-accounting's `PLDAccountant` dominate there, and neither is needed for its numbers:

* **Construction.** The connect-the-dots PLD of a subsampled Gaussian evaluates the hockey-stick
  divergence at every grid point of the privacy loss (thousands per term), and
  `AdditiveNoisePrivacyLoss.get_delta_for_epsilon` inverts the privacy loss one point at a time
  in Python (about 60 % of a term's construction). `_VectorizedGaussianLoss` computes the same
  inverse, log(1 + (e^{+-eps} - 1) / q) mapped through the Gaussian's linear inverse, for the
  whole grid in one numpy expression; everything else (the bounds, the connect-the-dots
  pessimistic rounding, the tail) is dp-accounting's own code.
* **Single steps.** The accountant wraps every term in `self_compose(count)`, whose truncation
  bounds cost more than a convolution; a term that occurs once (most buckets of a short decaying
  schedule) is used as built, up to 32 repeats are composed by repeated squaring.

`subsampled_gaussian_epsilon` therefore equals dp-accounting's `PLDAccountant` on the same
(q, z, count) terms up to float rounding (tests/test_fast_pld.py: the PMFs agree to 1e-12;
epsilon to 2e-10 relative at delta = 1e-5, 1e-7 at 1e-8, where the connect-the-dots differences
of nearly equal deltas amplify the ulps) and stays an upper bound: the pessimistic
connect-the-dots PMF per term, convolved without truncation where the accountant truncates up to
1e-15 of tail mass per term and charges it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

FEW_REPEATS = 32
"""A term repeated at most this often is composed by repeated squaring (at most 9 plain
convolutions) instead of `self_compose`, whose truncation bounds cost more than that."""


class _VectorizedGaussianLoss(GaussianPrivacyLoss):
    """dp-accounting's (subsampled) Gaussian privacy loss; the divergence at an array of
    epsilons inverts the privacy loss for the whole array at once."""

    def get_delta_for_epsilon(self, epsilon: float | Sequence[float]) -> float | np.ndarray:
        if isinstance(epsilon, numbers.Number) or self.adjacency_type == AdjacencyType.REPLACE:
            return super().get_delta_for_epsilon(epsilon)
        eps = np.asarray(epsilon, dtype=float)
        q = self.sampling_prob
        deltas = np.zeros_like(eps)
        if self.adjacency_type == AdjacencyType.ADD:
            # the divergence is 0 from eps = -log(1 - q) on (and everywhere inverted for q = 1)
            inside = eps < -math.log1p(-q) if q < 1 else np.ones(eps.shape, dtype=bool)
            x = self._inverse_add(eps[inside])
        else:
            inside = eps > math.log1p(-q) if q < 1 else np.ones(eps.shape, dtype=bool)
            deltas[~inside] = -np.expm1(eps[~inside])
            x = self._inverse_remove(eps[inside])
        deltas[inside] = (self.mu_upper_cdf(x)
                          - np.exp(eps[inside] + self.mu_lower_log_cdf(x)))
        return np.clip(deltas, 0, 1)

    def _inverse_add(self, eps: np.ndarray) -> np.ndarray:
        """x(eps) for ADD: the loss without subsampling is -log(1 + (e^{-eps} - 1) / q)."""
        q = self.sampling_prob
        if q == 1:
            return self._inverse_privacy_loss_without_subsampling_add(eps)
        with np.errstate(divide="ignore"):
            loss = eps + math.log(q) - np.log1p(-(1 - q) * np.exp(eps))
        edge = np.isclose(eps, -math.log(1 - q), rtol=1e-9, atol=0.0)
        return self._inverse_privacy_loss_without_subsampling_add(np.where(edge, math.inf, loss))

    def _inverse_remove(self, eps: np.ndarray) -> np.ndarray:
        """x(eps) for REMOVE: the loss without subsampling is log(1 + (e^{eps} - 1) / q)."""
        q = self.sampling_prob
        if q == 1:
            return self._inverse_privacy_loss_without_subsampling_remove(eps)
        with np.errstate(divide="ignore"):
            loss = eps - math.log(q) + np.log1p(-(1 - q) * np.exp(-eps))
        edge = np.isclose(eps, math.log(1 - q), rtol=1e-9, atol=0.0)
        return self._inverse_privacy_loss_without_subsampling_remove(
            np.where(edge, -math.inf, loss))


def gaussian_pld(z: float, q: float, grid: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one Poisson-subsampled Gaussian step (noise multiplier z, rate q; add/remove
    adjacency), as `pld_lib.from_gaussian_mechanism(z, sampling_prob=q, ...)` builds it."""

    def pmf(adjacency: AdjacencyType) -> pld_pmf.PLDPmf:  # dp-accounting's connect-the-dots
        loss = _VectorizedGaussianLoss(z, sampling_prob=q, adjacency_type=adjacency)
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=grid,
            use_connect_dots=True)

    if q == 1:
        return pld_lib.PrivacyLossDistribution(pmf(AdjacencyType.REMOVE))
    return pld_lib.PrivacyLossDistribution(pmf(AdjacencyType.REMOVE), pmf(AdjacencyType.ADD))


def _repeated(one: pld_lib.PrivacyLossDistribution, count: int,
              ) -> pld_lib.PrivacyLossDistribution:
    if count == 1:
        return one
    if count > FEW_REPEATS:
        return one.self_compose(count)
    out, power = None, one  # count in binary: out = product of the powers one^(2^k) it names
    while count:
        if count & 1:
            out = power if out is None else out.compose(power)
        count >>= 1
        if count:
            power = power.compose(power)
    assert out is not None  # count >= 1
    return out


def subsampled_gaussian_epsilon(terms: Sequence[tuple[float, float, int]], delta: float,
                                grid: float) -> float:
    """Epsilon at `delta` of the composition of (q, z, count) Poisson-subsampled Gaussian terms
    (add/remove-one), on the PLD grid `grid`; q = 1 terms compose exactly as one Gaussian of
    multiplier z / sqrt(count), as dp-accounting's accountant does."""
    total: pld_lib.PrivacyLossDistribution | None = None
    for q, z, count in terms:
        if q == 1:
            term = gaussian_pld(z / math.sqrt(count), 1.0, grid)
        else:
            term = _repeated(gaussian_pld(z, q, grid), count)
        total = term if total is None else total.compose(term)
    if total is None:
        return 0.0
    return max(float(total.get_epsilon_for_delta(delta)), 0.0)
