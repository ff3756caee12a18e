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
(q, z, count) terms up to float rounding (tests/accounting/test_fast_pld.py: the PMFs agree to
1e-12; epsilon to 2e-10 relative at delta = 1e-5, 1e-7 at 1e-8, where the connect-the-dots
differences of nearly equal deltas amplify the ulps) and stays an upper bound: the pessimistic
connect-the-dots PMF per term, convolved without truncation where the accountant truncates up to
1e-15 of tail mass per term and charges it.

**Bounded size.** A PLD's size is its privacy-loss range over the grid: one step of noise
multiplier z spans about 10 / z + 1 / (2 z^2) + log q (the loss at the Gaussian's truncation
point), 5,656 points at z = 1, q = 0.01 on a 1e-3 grid but 33.7 million at z = 0.004 (the
noise of epsilon ~ 10^5 in 60 steps), and a self-composition spans up to `count` times that.
Every PLD is sized before it is built or composed (the connect-the-dots bounds of a step;
dp-accounting's own Chernoff truncation bounds of a self-composition, computed on the step's PLD
on a grid of at most `PROBE_POINTS` points; the sum of the sizes of a convolution), and one over
`MAX_POINTS` raises `PLDTooLargeError` naming the size before its memory is taken: the caller
picks a coarser grid (`privbench.accounting.gaussian`, `composed_points`). Sizing computes
nothing the composition uses, so a composition that fits is the same, bit for bit, as without
the check.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_mechanism import (
    AdditiveNoisePrivacyLoss,
    AdjacencyType,
    GaussianPrivacyLoss,
)
from scipy import fft as sp_fft
from scipy import signal, special

MAX_POINTS = 1 << 21
"""Most points of any PLD (per adjacency direction) built or composed here: 16 MB a copy, so
a composition stays within a few hundred MB and an FFT of that size takes a fraction of a
second. Every plan at epsilon <= 20 over up to 4,000 steps stays below it (DP-SGP, ADP-VRSGP
and Dyn-D2P under 150,000 points; the largest, DPDL's full reading composed by PLD at epsilon
20 over 3,000 steps, between 1 and 2 million)."""

SELF_COMPOSE_TRUNCATION = 1e-15
"""dp-accounting's default tail truncation of `self_compose`, which its size bound assumes."""

BOUNDED_POINTS = 1 << 18
"""Points a composition refused at `MAX_POINTS` is sized to on its coarser grid
(`privbench.accounting.gaussian`): an eighth of the bound, so that a calibration's dozen
compositions stay within seconds. Their epsilon is in the thousands or more, where the coarser
grid costs little: +0.002 % at epsilon 10^5 in 60 steps, +1.4 % at epsilon 7,200 over 10^6
steps of 48 noise levels (each against a grid 8 times finer)."""

PROBE_POINTS = 4096
"""Most points of the step PLD that sizes a self-composition (`_self_compose_points`)."""

FEW_REPEATS = 32
"""A term repeated at most this often is composed by repeated squaring (at most 9 plain
convolutions) instead of `self_compose`, whose truncation bounds cost more than that."""


class PLDTooLargeError(Exception):
    """A PLD on the requested grid would have more than `MAX_POINTS` points.

    Attributes:
        points: how many it would have.
    """

    def __init__(self, points: float) -> None:
        super().__init__(f"a PLD of {points:.3g} points (more than {MAX_POINTS})")
        self.points = float(points)


def _check(points: float) -> None:
    if points > MAX_POINTS:
        raise PLDTooLargeError(points)


def _span(pmf: pld_pmf.PLDPmf) -> int:
    """Points between the smallest and largest loss of `pmf` (its dense size)."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = pmf._loss_probs.keys()
        return max(keys) - min(keys) + 1 if keys else 0
    return pmf.size


def _directions(pld: pld_lib.PrivacyLossDistribution) -> tuple[pld_pmf.PLDPmf, pld_pmf.PLDPmf]:
    """(remove, add) PMFs of `pld` (the same PMF twice for a symmetric one)."""
    return pld._pmf_remove, pld._pmf_add


def _check_compose(a: pld_lib.PrivacyLossDistribution,
                   b: pld_lib.PrivacyLossDistribution) -> None:
    """Refuse a convolution of two PLDs whose result would exceed `MAX_POINTS`."""
    for x, y in zip(_directions(a), _directions(b), strict=True):
        _check(_span(x) + _span(y) - 1)


@functools.lru_cache(maxsize=4096)
def _loss_width(z: float, q: float) -> float:
    """The privacy-loss range of the wider direction of one step's connect-the-dots PMF (inf
    when it overflows a float)."""
    most = 0.0
    for adjacency in (AdjacencyType.REMOVE, AdjacencyType.ADD)[: 1 if q == 1 else 2]:
        loss = _VectorizedGaussianLoss(z, sampling_prob=q, adjacency_type=adjacency)
        try:
            bounds = loss.connect_dots_bounds()
        except OverflowError:
            return math.inf
        most = max(most, bounds.epsilon_upper - bounds.epsilon_lower)
    return most


def _step_points(z: float, q: float, grid: float) -> float:
    """Points of the larger direction of one step's connect-the-dots PMF on `grid`."""
    return _loss_width(z, q) / grid + 3


def _convolve_bounds(probs: np.ndarray, count: int, truncation: float) -> tuple[int, int]:
    """dp-accounting's Chernoff truncation bounds of `count` self-convolutions of `probs`
    (`common.compute_self_convolve_bounds`: orders +-1..20 / len), one numpy pass per order
    instead of scipy's `logsumexp` (whose overhead dominates for short PMFs). The same bounds
    up to float rounding (any orders give valid bounds)."""
    n = probs.size
    index = np.arange(n, dtype=float)
    with np.errstate(divide="ignore"):
        logp = np.log(probs)
    upper, lower = (n - 1) * count, 0
    for k in (*range(-20, 0), *range(1, 21)):
        order = k / n
        x = index * order + logp
        top = float(np.max(x))
        log_mgf = top + math.log(float(np.sum(np.exp(x - top))))
        bound = (count * log_mgf + math.log(2 / truncation)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


@functools.lru_cache(maxsize=256)
def _probe(z: float, q: float, grid: float) -> tuple[float, pld_lib.PrivacyLossDistribution]:
    """(grid, PLD) of one step on `grid` or on the finest grid 2^k times coarser where it has
    at most about `PROBE_POINTS` points: what sizes a composition before it is built."""
    probe = grid * 2.0 ** max(0, math.ceil(math.log2(_step_points(z, q, grid) / PROBE_POINTS)))
    return probe, gaussian_pld(z, q, probe)


def _self_compose_points(z: float, q: float, count: int, grid: float) -> float:
    """Points of `count` self-composed steps (q, z) on `grid`, as dp-accounting's truncation
    bounds (`compute_self_convolve_bounds`) will size them: from the step's PLD itself when it
    has at most `PROBE_POINTS` points, else from the step's PLD on a coarser grid of about
    `PROBE_POINTS` points (the bounds are set in units of the step's loss range, so their width
    in privacy loss hardly depends on the grid)."""
    points = _step_points(z, q, grid)
    if points * count <= MAX_POINTS:  # count times a step's span bounds the result
        return points * count
    probe, pld = _probe(z, q, grid)
    most = 0.0
    for pmf in _directions(pld):
        probs = pmf.to_dense_pmf()._probs
        lower, upper = _convolve_bounds(probs, count, SELF_COMPOSE_TRUNCATION)
        most = max(most, max(upper - lower + 1, probs.size) * probe / grid)
    return most


_ORDERS = np.concatenate([-np.geomspace(1e3, 1e-6, 28), np.geomspace(1e-6, 1e3, 28)])
"""Chernoff orders, per unit of privacy loss, of `composed_points`' range of a composition."""


def _log_mgf(z: float, q: float, grid: float) -> np.ndarray:
    """(2, orders) log E[exp(order * loss)] of one step's PLD (remove, add), on a grid of at
    most about `PROBE_POINTS` points."""
    probe, pld = _probe(z, q, grid)
    out = []
    for pmf in _directions(pld):
        dense = pmf.to_dense_pmf()
        loss = (dense._lower_loss + np.arange(dense.size)) * probe  # (n,)
        with np.errstate(divide="ignore"):
            x = _ORDERS[:, None] * loss[None, :] + np.log(dense._probs)[None, :]  # (orders, n)
        top = np.max(x, axis=1, keepdims=True)
        out.append((top + np.log(np.sum(np.exp(x - top), axis=1, keepdims=True)))[:, 0])
    return np.array(out)


def composed_points(terms: Sequence[tuple[float, float, int]], grid: float) -> float:
    """An estimate of the largest PLD, in points on `grid`, that composing (q, z, count) terms
    builds (the fast way: `subsampled_gaussian_epsilon(..., fast=True)`): the larger of the
    largest term's (dp-accounting's truncation bounds, or count times a step's for few
    repeats) and twice the Chernoff range, at tail mass `SELF_COMPOSE_TRUNCATION`, of the
    whole composition (the last convolution of the balanced tree adds two partial sums)."""
    largest = 0.0
    mgf = np.zeros((2, _ORDERS.size))  # (directions, orders) log-MGF of the whole composition
    for q, z, count in terms:
        if q == 1:
            z, count = z / math.sqrt(count), 1
            largest = max(largest, _step_points(z, 1.0, grid))
        elif count > FEW_REPEATS:
            largest = max(largest, _self_compose_points(z, q, count, grid))
        else:
            largest = max(largest, count * _step_points(z, q, grid))
        mgf += count * _log_mgf(z, q, grid)
    with np.errstate(invalid="ignore", over="ignore"):
        bounds = (mgf + math.log(2 / SELF_COMPOSE_TRUNCATION)) / _ORDERS  # (2, orders)
    upper = np.nanmin(np.where(_ORDERS > 0, bounds, np.inf), axis=1)
    lower = np.nanmax(np.where(_ORDERS < 0, bounds, -np.inf), axis=1)
    return float(max(largest, 2 * np.max(upper - lower) / grid))


class _Normal:
    """The centred normal distribution of standard deviation `scale`: the three methods
    `GaussianPrivacyLoss` calls on its frozen `scipy.stats.norm(scale=...)`, computed as scipy
    computes them (`ndtr(x / scale)`, `log_ndtr(x / scale)`, `ndtri(p) * scale`) without the
    cost of freezing a distribution (3 ms, for every step PLD built)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def cdf(self, x: float | np.ndarray) -> np.floating | np.ndarray:
        return special.ndtr(np.asarray(x, dtype=float) / self.scale)[()]

    def logcdf(self, x: float | np.ndarray) -> np.floating | np.ndarray:
        return special.log_ndtr(np.asarray(x, dtype=float) / self.scale)[()]

    def ppf(self, p: float | np.ndarray) -> np.floating | np.ndarray:
        return (special.ndtri(np.asarray(p, dtype=float)) * self.scale)[()]


class _VectorizedGaussianLoss(GaussianPrivacyLoss):
    """dp-accounting's (subsampled) Gaussian privacy loss; the divergence at an array of
    epsilons inverts the privacy loss for the whole array at once."""

    def __init__(self, standard_deviation: float, sampling_prob: float = 1.0,
                 adjacency_type: AdjacencyType = AdjacencyType.REMOVE) -> None:
        """`GaussianPrivacyLoss(standard_deviation, sampling_prob=..., adjacency_type=...)`
        (sensitivity 1, pessimistic, log mass truncation -50: its defaults) with `_Normal`
        for the frozen normal."""
        if not standard_deviation > 0:
            raise ValueError(f"Standard deviation is not a positive real number: "
                             f"{standard_deviation}")
        self._standard_deviation = standard_deviation
        self._gaussian_random_variable = _Normal(standard_deviation)
        self._pessimistic_estimate = True
        self._log_mass_truncation_bound = -50
        AdditiveNoisePrivacyLoss.__init__(self, 1, False, sampling_prob, adjacency_type)

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
    adjacency), as `pld_lib.from_gaussian_mechanism(z, sampling_prob=q, ...)` builds it.

    Raises:
        PLDTooLargeError: when either direction's PMF would exceed `MAX_POINTS` on this grid.
    """

    def pmf(adjacency: AdjacencyType) -> pld_pmf.PLDPmf:  # dp-accounting's connect-the-dots
        loss = _VectorizedGaussianLoss(z, sampling_prob=q, adjacency_type=adjacency)
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=grid,
            use_connect_dots=True)

    _check(_step_points(z, q, grid))
    if q == 1:
        return pld_lib.PrivacyLossDistribution(pmf(AdjacencyType.REMOVE))
    return pld_lib.PrivacyLossDistribution(pmf(AdjacencyType.REMOVE), pmf(AdjacencyType.ADD))


def _compose(a: pld_lib.PrivacyLossDistribution, b: pld_lib.PrivacyLossDistribution,
             fast: bool = False) -> pld_lib.PrivacyLossDistribution:
    _check_compose(a, b)
    if not fast:
        return a.compose(b)
    parts = [_fast_compose(x.to_dense_pmf(), y.to_dense_pmf())
             for x, y in zip(_directions(a), _directions(b), strict=True)]
    return _pld(parts, a, b)


def _pld(parts: list[pld_pmf.DensePLDPmf], *sources: pld_lib.PrivacyLossDistribution,
         ) -> pld_lib.PrivacyLossDistribution:
    """A PLD of (remove, add) PMFs, symmetric when all its sources are."""
    if all(src._symmetric for src in sources):
        return pld_lib.PrivacyLossDistribution(parts[0])
    return pld_lib.PrivacyLossDistribution(*parts)


def _truncated(probs: np.ndarray, truncation: float) -> tuple[int, np.ndarray, float]:
    """dp-accounting's pessimistic `_truncate_tails` with cumulative sums instead of a Python
    loop: (prefix dropped, the kept probabilities with the left tail added to the first, the
    right tail, which goes to infinity)."""
    half = truncation / 2
    over = np.cumsum(probs) > half
    left = int(np.argmax(over)) if over.any() else probs.size
    over = np.cumsum(probs[::-1]) > half
    right = probs.size - (int(np.argmax(over)) if over.any() else probs.size)
    right = max(right, left + 1)
    kept = probs[left:right].copy()
    kept[0] += np.sum(probs[:left])
    return left, kept, float(np.sum(probs[right:]))


def _fast_compose(a: pld_pmf.DensePLDPmf, b: pld_pmf.DensePLDPmf,
                  truncation: float = SELF_COMPOSE_TRUNCATION) -> pld_pmf.DensePLDPmf:
    """`DensePLDPmf.compose` with the tails truncated by `_truncated` (pessimistic)."""
    probs = signal.fftconvolve(a._probs, b._probs)
    inf = a._infinity_mass + b._infinity_mass - a._infinity_mass * b._infinity_mass
    left, probs, right = _truncated(probs, truncation)
    return pld_pmf.DensePLDPmf(a._discretization, a._lower_loss + b._lower_loss + left, probs,
                               inf + right, a._pessimistic_estimate)


def _fast_self_compose(pmf: pld_pmf.DensePLDPmf, count: int,
                       truncation: float = SELF_COMPOSE_TRUNCATION) -> pld_pmf.DensePLDPmf:
    """`DensePLDPmf.self_compose` (`common.self_convolve`: FFT to the `count`-th power inside
    Chernoff truncation bounds, the truncated mass charged to infinity) with `_convolve_bounds`
    and a real FFT."""
    probs = pmf._probs
    lower, upper = _convolve_bounds(probs, count, truncation)
    size = upper - lower + 1
    length = sp_fft.next_fast_len(max(size, probs.size), real=True)
    out = np.roll(sp_fft.irfft(sp_fft.rfft(probs, length) ** count, length), -lower)[:size]
    inf = truncation - math.expm1(count * math.log1p(-pmf._infinity_mass))
    return pld_pmf.DensePLDPmf(pmf._discretization, pmf._lower_loss * count + lower, out, inf,
                               pmf._pessimistic_estimate)


def _repeated(one: pld_lib.PrivacyLossDistribution, count: int, fast: bool = False,
              ) -> pld_lib.PrivacyLossDistribution:
    if count == 1:
        return one
    if count > FEW_REPEATS and fast:
        return _pld([_fast_self_compose(p.to_dense_pmf(), count) for p in _directions(one)],
                    one)
    if count > FEW_REPEATS:
        return one.self_compose(count)
    out, power = None, one  # count in binary: out = product of the powers one^(2^k) it names
    while count:
        if count & 1:
            out = power if out is None else _compose(out, power, fast)
        count >>= 1
        if count:
            power = _compose(power, power, fast)
    assert out is not None  # count >= 1
    return out


def subsampled_gaussian_epsilon(terms: Sequence[tuple[float, float, int]], delta: float,
                                grid: float, fast: bool = False) -> float:
    """Epsilon at `delta` of the composition of (q, z, count) Poisson-subsampled Gaussian terms
    (add/remove-one), on the PLD grid `grid`; q = 1 terms compose exactly as one Gaussian of
    multiplier z / sqrt(count), as dp-accounting's accountant does.

    Args:
        terms: (q, z, count) terms.
        delta: target delta.
        grid: PLD value discretization interval.
        fast: compose the terms' PLDs pairwise (a balanced tree: about log2(terms) convolutions
            of the full size instead of one per term), with `_fast_self_compose` and
            `_fast_compose`: the same distributions and truncations, other float rounding.

    Raises:
        PLDTooLargeError: when a PLD of the composition would exceed `MAX_POINTS` on this grid
            (raised before it is built).
    """
    parts = []
    total: pld_lib.PrivacyLossDistribution | None = None
    for q, z, count in terms:
        term = _term_pld(q, z, count, grid, fast)
        if fast:
            parts.append(term)
        else:
            total = term if total is None else _compose(total, term)
    while len(parts) > 1:  # the balanced tree
        pairs = [parts[i:i + 2] for i in range(0, len(parts), 2)]
        parts = [_compose(*pair, fast=True) if len(pair) == 2 else pair[0] for pair in pairs]
    total = parts[0] if parts else total
    if total is None:
        return 0.0
    return max(float(total.get_epsilon_for_delta(delta)), 0.0)


def _term_pld(q: float, z: float, count: int, grid: float,
              fast: bool = False) -> pld_lib.PrivacyLossDistribution:
    """The PLD of `count` steps (q, z) on `grid`."""
    if q == 1:
        return gaussian_pld(z / math.sqrt(count), 1.0, grid)
    if count > FEW_REPEATS:
        _check(_self_compose_points(z, q, count, grid))
    return _repeated(gaussian_pld(z, q, grid), count, fast)
