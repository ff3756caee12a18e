"""Tests of privbench.accounting: golden numbers (with their source), properties, bad input.

Golden sources:
- Dyn-D2P paper, eqs. (4), (6), (8), (9), solved independently (scipy brentq), and the PLD / RDP
  epsilons (dp-accounting 0.6.0) of the schedules its CLT (eq. (6)) calibrates;
- a reference table of ADP-VRSGP multipliers (`ADP_ROWS`: the paper's schedule alpha(T - t)
  sigma_hat of Sec. 4 and its Theorem 1 closed form, calibrated independently with dp-accounting
  0.6 RDP, Poisson q = 64 / |D_i|, delta 1e-5; they reproduce on TF Privacy's order grid,
  `TF_PRIVACY_RDP_ORDERS`);
- tensorflow/privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py
  (`test_compute_dp_sgd_example_privacy`: no microbatching, Poisson q = 1e-2, 1.2 epochs ->
  120 steps, noise 0.7, delta 1e-5: RDP 3.2392676, PLD 2.4612381; `test_compute_dp_sgd_privacy`
  Test0: n = 60000, batch 150, noise 1.3, 15 epochs, delta 1e-5: 0.7242234026109595 at order 19),
  which call dp-accounting;
- pytorch/opacus, opacus/tests/accountants_test.py (`test_rdp_accountant`: noise 1.5, q = 0.04,
  2250 steps, delta 1e-5 -> 7.32911117143 with Opacus's own RDP code).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

from defenses.dpdl.privacy import dpdl_joint_ratio, dpdl_noise_ratios
from privbench.accounting import (
    TF_PRIVACY_RDP_ORDERS,
    AccountantOptions,
    ApproximateAccountingWarning,
    EpsilonReport,
    GaussianEvent,
    LaplaceEvent,
    PrivacyLedger,
    RandomizedResponseEvent,
    account,
    adp_vrsgp_noise_factors,
    adp_vrsgp_paper_epsilon,
    adp_vrsgp_paper_sigma_hat,
    advanced_composition,
    bucket_terms,
    calibrate_noise_scale,
    clt_mu_total,
    dyn_d2p_growth,
    dyn_d2p_mu0,
    dyn_d2p_mu_bar,
    gaussian_epsilon,
    gaussian_schedule,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    node_ledgers,
    per_release_epsilon,
    rr_epsilon,
    rr_keep_prob,
    schedule_epsilon_fn,
    solve_monotone,
)
from privbench.errors import ConfigError, UnknownNameError
from tests.accounting.plan_functions import make_plan

FAST = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
TF_RDP = AccountantOptions(rdp_orders=TF_PRIVACY_RDP_ORDERS, max_distinct=None)


def dpsgd(q: float, z: float, steps: int) -> PrivacyLedger:
    return PrivacyLedger().record(GaussianEvent(z, q, steps))


# ============================================================== golden: Dyn-D2P (eqs. 4, 6, 8, 9)


@pytest.mark.parametrize(
    ("eps", "mu"), [(0.3, 0.107716), (0.7, 0.228828), (1.0, 0.313902), (3.0, 0.817556)]
)
def test_dyn_d2p_mu_tot_vectors(eps: float, mu: float) -> None:
    # mu_tot from (epsilon, delta = 1e-4) by the Dyn-D2P paper's eq. (4), 6 decimals.
    assert gdp_mu(eps, 1e-4) == pytest.approx(mu, abs=5e-7)
    assert gdp_epsilon(gdp_mu(eps, 1e-4), 1e-4) == pytest.approx(eps, rel=1e-9)


def test_dyn_d2p_other_gdp_vectors() -> None:
    # eq. (4) both ways, and delta(epsilon; mu) at a few points.
    assert gdp_delta(1.0, 1.0) == pytest.approx(0.126937, abs=5e-7)
    assert gdp_mu(1.0, 1e-5) == pytest.approx(0.268051, abs=5e-7)
    assert gdp_mu(8.0, 1e-5) == pytest.approx(1.666031, abs=5e-7)
    assert gdp_epsilon(0.313902, 1e-4) == pytest.approx(1.0, abs=5e-6)
    assert gdp_epsilon(1e-3, 0.5) == 0.0  # delta(0; mu) = 2 Phi(mu/2) - 1 <= delta


@pytest.mark.parametrize(
    ("j", "b", "k", "eps", "mu_bar", "mu0_rho2", "mu0_rho10"),
    [  # eq. (9) (mu_bar) and eq. (8) (mu_0 at rho_mu = 2, 10) for a few (J, B, K)
        (2500, 32, 4000, 1.0, 0.374257, 0.253065, None),
        (2500, 32, 4000, 0.3, 0.132474, 0.090000, 0.028413),
        (2500, 32, 4000, 3.0, 0.838478, 0.555333, 0.151494),
        (3000, 32, 3000, 1.0, 0.503602, 0.339072, 0.100664),
        (2500, 1, 10000, 0.3, 1.452728, 0.920526, 0.219913),
        (2500, 1, 10000, 1.0, 2.033842, 1.230867, 0.273655),
        (2500, 1, 10000, 3.0, 2.457086, 1.443623, 0.311614),
    ],
)
def test_dyn_d2p_budget_vectors(j, b, k, eps, mu_bar, mu0_rho2, mu0_rho10) -> None:
    mu_tot, p = gdp_mu(eps, 1e-4), b / j
    assert dyn_d2p_mu_bar(mu_tot, p, k) == pytest.approx(mu_bar, abs=5e-7)
    mu0 = dyn_d2p_mu0(mu_tot, p, k, 2.0)
    assert mu0 == pytest.approx(mu0_rho2, abs=5e-7)
    if mu0_rho10 is not None:
        assert dyn_d2p_mu0(mu_tot, p, k, 10.0) == pytest.approx(mu0_rho10, abs=5e-7)
    # eq. (8) is met to 1e-9 and mu_0 lies in the guaranteed bracket.
    with pytest.warns(ApproximateAccountingWarning):
        spent = clt_mu_total(mu0 * dyn_d2p_growth(k, 2.0), p)
    assert spent == pytest.approx(mu_tot, rel=1e-9)
    assert mu_bar / 2 < mu0 <= mu_bar


def test_dyn_d2p_rho_one_is_mu_bar_and_half_budget() -> None:
    # eq. (8) as rho -> 1 gives eq. (9)'s mu_bar; the CLT budget after K/2 steps: 0.17825,
    # 0.5285.
    mu_tot, p, k = gdp_mu(1.0, 1e-4), 32 / 2500, 4000
    assert dyn_d2p_mu0(mu_tot, p, k, 1.0) == dyn_d2p_mu_bar(mu_tot, p, k)
    assert dyn_d2p_mu0(mu_tot, p, k, 1.0 + 1e-9) == pytest.approx(dyn_d2p_mu_bar(mu_tot, p, k))
    mus = dyn_d2p_mu0(mu_tot, p, k, 2.0) * dyn_d2p_growth(k, 2.0)
    with pytest.warns(ApproximateAccountingWarning):
        half = clt_mu_total(mus[: k // 2], p)
    assert half == pytest.approx(0.17825, abs=5e-6)
    assert gdp_epsilon(half, 1e-4) == pytest.approx(0.5285, abs=5e-5)


@pytest.mark.parametrize(
    ("j", "b", "k", "idx", "pld", "rdp"),
    [  # rigorous epsilon (dp-accounting 0.6.0) of the Const schedule the CLT (eq. 6) calibrates
        (2500, 32, 4000, 0, 0.310, 0.340), (2500, 32, 4000, 1, 1.014, 1.128),
        (2500, 32, 4000, 2, 3.090, 3.424), (3000, 32, 3000, 1, 1.019, 1.136),
        (2500, 1, 10000, 0, 0.380, 1.149), (2500, 1, 10000, 2, 5.375, 6.998),
    ],
)
def test_dyn_d2p_clt_underreports_const(j, b, k, idx, pld, rdp) -> None:
    eps = (0.3, 1.0, 3.0)[idx]
    p = b / j
    mu_bar = dyn_d2p_mu_bar(gdp_mu(eps, 1e-4), p, k)
    ledger = dpsgd(p, 1 / mu_bar, k)
    # the reference values: PLD discretization 1e-3 (our default), 3 decimals
    assert account(ledger, 1e-4, "pld").epsilon == pytest.approx(pld, abs=5e-4)
    assert account(ledger, 1e-4, "rdp").epsilon == pytest.approx(rdp, abs=5e-4)
    with pytest.warns(ApproximateAccountingWarning):
        clt = account(ledger, 1e-4, "gdp_clt", mode="paper")
    assert clt.approximate and clt.epsilon == pytest.approx(eps, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("j", "k", "idx", "pld"),
    [(2500, 4000, 0, 0.313), (2500, 4000, 1, 1.024), (2500, 4000, 2, 3.175),
     (3000, 3000, 0, 0.311), (3000, 3000, 1, 1.033), (3000, 3000, 2, 3.367)],
)
def test_dyn_d2p_clt_underreports_dyn(j, k, idx, pld) -> None:
    # Dyn schedule (rho_mu = 2), PLD reference values to 3 decimals. Our schedule is bucketed (48
    # log-z bins charged at their smallest z), which can only raise epsilon: allow the reference's
    # rounding below, and the bucketing (at most 0.1% here) above.
    eps, p = (0.3, 1.0, 3.0)[idx], 32 / j
    mu0 = dyn_d2p_mu0(gdp_mu(eps, 1e-4), p, k, 2.0)
    ledger = PrivacyLedger().extend(gaussian_schedule(1 / (mu0 * dyn_d2p_growth(k, 2.0)), p))
    got = account(ledger, 1e-4, "pld").epsilon
    assert pld - 5e-4 <= got <= (pld + 5e-4) * 1.001


# ============================================================== golden: ADP-VRSGP (Sec. 4, Thm 1)

ADP_ROWS = [  # data, T, eps, z_const, sigma_hat, z_{t=0}, z_{t=T-1}, naive sigma_hat
    ("mnist", 1000, 2, 0.964, 0.512, 1.490, 0.811, 0.401),
    ("mnist", 1000, 4, 0.743, 0.377, 1.097, 0.597, 0.309),
    ("mnist", 1000, 6, 0.651, 0.321, 0.937, 0.509, 0.271),
    ("mnist", 1000, 8, 0.595, 0.290, 0.846, 0.460, 0.248),
    ("cifar", 1000, 2, 1.035, 0.527, 1.535, 0.835, 0.431),
    ("cifar", 1000, 4, 0.783, 0.390, 1.137, 0.618, 0.326),
    ("cifar", 1000, 6, 0.682, 0.334, 0.974, 0.530, 0.284),
    ("cifar", 1000, 8, 0.621, 0.303, 0.883, 0.480, 0.259),
    ("mnist", 300, 0.5, 1.597, 0.903, 2.113, 1.432, 0.792),
    ("mnist", 300, 1, 1.137, 0.684, 1.599, 1.083, 0.564),
    ("mnist", 300, 2, 0.869, 0.484, 1.132, 0.767, 0.431),
    ("cifar", 300, 0.5, 1.684, 0.965, 2.256, 1.529, 0.835),
    ("cifar", 300, 1, 1.178, 0.700, 1.636, 1.109, 0.584),
    ("cifar", 300, 2, 0.898, 0.503, 1.176, 0.797, 0.445),
]
ADP_Q = {"mnist": 64 / 7500, "cifar": 64 / 6250}
# Cells we cannot reproduce with dp-accounting 0.6.0 (on TF Privacy's, integer or the default
# order grid); the other cells of these rows, and all other rows, reproduce to 3 decimals.
ADP_IRREPRODUCIBLE = {
    ("mnist", 300, 0.5, "z_const"): "reference 1.597; dp-accounting gives 1.547",
    ("mnist", 300, 0.5, "naive"): "follows from z_const 1.547 (reference 1.597)",
    ("mnist", 300, 1, "z_const"): "reference 1.137; dp-accounting gives 1.119",
    ("mnist", 300, 1, "naive"): "follows from z_const 1.119 (reference 1.137)",
    ("mnist", 300, 1, "sigma_hat"): "reference 0.684 gives epsilon 0.911, not 1",
    ("cifar", 300, 0.5, "z_const"): "reference 1.684; dp-accounting gives 1.680",
    ("cifar", 300, 0.5, "naive"): "follows from z_const 1.680 (reference 1.684)",
    ("cifar", 300, 0.5, "sigma_hat"): "reference 0.965 gives epsilon 0.484, not 0.5",
    ("cifar", 300, 1, "sigma_hat"): "reference 0.700 gives epsilon 0.945, not 1",
}


def _adp_params(cell: str, fast_rows: set[int] | None = None) -> list:
    out = []
    for i, row in enumerate(ADP_ROWS):
        marks = []
        reason = ADP_IRREPRODUCIBLE.get((*row[:3], cell))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        if fast_rows is not None and i not in fast_rows:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(*row, marks=marks, id=f"{row[0]}-T{row[1]}-eps{row[2]}"))
    return out


@pytest.mark.parametrize(
    ("data", "t", "eps", "z_const", "sigma_hat", "z0", "zl", "naive"), _adp_params("z_const")
)
def test_adp_vrsgp_constant_multiplier(data, t, eps, z_const, sigma_hat, z0, zl, naive) -> None:
    z = calibrate_noise_scale(eps, 1e-5, np.ones(t), ADP_Q[data], "rdp", TF_RDP, rtol=1e-5)
    assert abs(z - z_const) <= 5e-4 + 1e-5  # the reference rounds to 3 decimals


@pytest.mark.parametrize(
    ("data", "t", "eps", "z_const", "sigma_hat", "z0", "zl", "naive"), ADP_ROWS
)
def test_adp_vrsgp_schedule_formulas(data, t, eps, z_const, sigma_hat, z0, zl, naive) -> None:
    # Pure arithmetic on the reference table's own numbers (no accountant):
    # - naive sigma_hat = Theorem 1 with c2 fitted at alpha == 1 = z_const sqrt(sum alpha^-2 / T);
    #   the table computed it from its rounded z_const, so both roundings are allowed for;
    # - z_t = alpha(T - t) sigma_hat at t = 0 and t = T - 1 (Sec. 4's decaying noise).
    factors = adp_vrsgp_noise_factors(t)
    ratio = math.sqrt(np.mean(factors**-2.0))
    assert abs(z_const * ratio - naive) <= 5e-4 * (1 + ratio) + 1e-12
    assert abs(factors[0] * sigma_hat - z0) <= 5e-4 * (1 + factors[0]) + 1e-12
    assert abs(factors[-1] * sigma_hat - zl) <= 5e-4 * (1 + factors[-1]) + 1e-12


@pytest.mark.parametrize(
    ("data", "t", "eps", "z_const", "sigma_hat", "z0", "zl", "naive"), _adp_params("naive")
)
def test_adp_vrsgp_naive_closed_form(data, t, eps, z_const, sigma_hat, z0, zl, naive) -> None:
    # Our paper-mode multiplier against the table's naive column (rounding of the table's z_const
    # propagates through the ratio sqrt(mean alpha^-2), hence the second term).
    factors = adp_vrsgp_noise_factors(t)
    ratio = math.sqrt(np.mean(factors**-2.0))
    got = adp_vrsgp_paper_sigma_hat(eps, 1e-5, ADP_Q[data], factors, TF_RDP)
    assert abs(got - naive) <= 5e-4 * (1 + ratio) + 1e-5
    assert adp_vrsgp_paper_epsilon(got, 1e-5, ADP_Q[data], factors, TF_RDP) == pytest.approx(
        eps, rel=2e-3)


@pytest.mark.parametrize(
    ("data", "t", "eps", "z_const", "sigma_hat", "z0", "zl", "naive"),
    _adp_params("sigma_hat", fast_rows=set()),
)
def test_adp_vrsgp_reference_sigma_hat(data, t, eps, z_const, sigma_hat, z0, zl, naive) -> None:
    # The table's sigma_hat is the calibrated root rounded to 3 decimals iff the exact RDP epsilon
    # crosses the target inside [sigma_hat - 0.0005, sigma_hat + 0.0005]. Exact heterogeneous RDP
    # (61-201 distinct multipliers) takes seconds per row: slow.
    f = schedule_epsilon_fn(adp_vrsgp_noise_factors(t), ADP_Q[data], 1e-5, "rdp", TF_RDP)
    assert f(sigma_hat + 5e-4) <= eps <= f(sigma_hat - 5e-4)


def test_adp_vrsgp_schedule_shape() -> None:
    # Sec. 4, alpha(k) = (floor(k / tau) + 10)^s: alpha(1000) = 210^0.2 = 2.914 at t = 0,
    # alpha(1) = 10^0.2 = 1.585 at t = T-1;
    # the level changes at t = 1, 6, 11, ... (tau = 5), and t = 0 is a block of one step.
    f = adp_vrsgp_noise_factors(1000)
    assert f[0] == pytest.approx(210**0.2) and f[-1] == pytest.approx(10**0.2)
    changes = np.flatnonzero(np.diff(f)) + 1
    assert list(changes[:3]) == [1, 6, 11]
    assert len(set(f.tolist())) == 201


# ============================================================== golden: DP-SGD (dp-accounting)


def test_dpsgd_tf_privacy_example_values() -> None:
    # tensorflow/privacy compute_dp_sgd_privacy_test.py, test_compute_dp_sgd_example_privacy,
    # cases no_microbatching_with_subsampling_{rdp,pld}: q = 1e-2, ceil(1.2 / q) = 120 steps,
    # noise 0.7, delta 1e-5 (TF Privacy builds the same dp-accounting events, PLD at 1e-4).
    ledger = dpsgd(0.01, 0.7, 120)
    assert account(ledger, 1e-5, "rdp").epsilon == pytest.approx(3.2392676, abs=1e-7)
    fine = AccountantOptions(pld_discretization=1e-4)
    assert account(ledger, 1e-5, "pld", options=fine).epsilon == pytest.approx(2.4612381, abs=1e-7)
    # our default grid (1e-3) is pessimistic and within 0.01% of it
    coarse = account(ledger, 1e-5, "pld").epsilon
    assert 2.4612381 <= coarse <= 2.4612381 * 1.0001


def test_dpsgd_tf_privacy_rdp_order_grid() -> None:
    # tensorflow/privacy compute_dp_sgd_privacy_test.py, Test0: n = 60000, batch 150, noise 1.3,
    # 15 epochs -> 6000 steps, delta 1e-5 -> 0.7242234026109595 on TF Privacy's order grid.
    eps = account(dpsgd(150 / 60000, 1.3, 6000), 1e-5, "rdp", options=TF_RDP).epsilon
    assert eps == pytest.approx(0.7242234026109595, abs=1e-9)


def test_dpsgd_opacus_value() -> None:
    # pytorch/opacus tests/accountants_test.py test_rdp_accountant: 7.32911117143 from Opacus's
    # own RDP implementation on its alphas. dp-accounting's log-A evaluation differs in the
    # 5th significant digit (7.32933), hence rel 1e-4: a cross-library check, not a pin.
    alphas = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
    opts = AccountantOptions(rdp_orders=alphas)
    eps = account(dpsgd(0.04, 1.5, int(90 / 0.04)), 1e-5, "rdp", options=opts).epsilon
    assert eps == pytest.approx(7.32911117143, rel=1e-4)


def _numpy_rdp_epsilon(q: float, z: float, steps: int, delta: float, orders) -> float:
    """Independent integer-order RDP of the subsampled Gaussian (Mironov et al. 2019, the
    binomial expansion of A_a over k = 0..a) + the conversion of Canonne et al. 2020 Prop. 12."""
    best = math.inf
    for a in orders:
        k = np.arange(a + 1)
        log_binom = gammaln(a + 1) - gammaln(k + 1) - gammaln(a - k + 1)
        terms = log_binom + (a - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * z * z)
        rdp = steps * logsumexp(terms) / (a - 1)
        best = min(best, rdp + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
    return best


def test_dpsgd_brief_setting_cross_checked() -> None:
    # q = 0.01, sigma = 1, T = 1000, delta = 1e-5. We found no published epsilon for exactly this
    # setting, so it is cross-checked instead of pinned: dp-accounting RDP on integer orders
    # equals an independent numpy implementation; PLD (tight) <= RDP; PLD at 1e-3 is within 0.1%
    # (and above) PLD at 1e-4; and it exceeds the Gaussian-DP lower bound used by TF Privacy's
    # test (sigma_eff = sigma sqrt(T) / q, delta(eps) of that Gaussian <= delta).
    ints = tuple(range(2, 65))
    ledger = dpsgd(0.01, 1.0, 1000)
    rdp_int = account(ledger, 1e-5, "rdp", options=AccountantOptions(rdp_orders=ints)).epsilon
    assert rdp_int == pytest.approx(_numpy_rdp_epsilon(0.01, 1.0, 1000, 1e-5, ints), rel=1e-9)
    rdp = account(ledger, 1e-5, "rdp").epsilon
    pld = account(ledger, 1e-5, "pld").epsilon
    pld_fine = account(ledger, 1e-5, "pld",
                       options=AccountantOptions(pld_discretization=1e-4)).epsilon
    assert pld_fine <= pld <= pld_fine * 1.001
    assert pld < rdp <= rdp_int
    sigma_eff = 1.0 * math.sqrt(1000) / 0.01
    low_delta = 0.5 * math.erfc((pld * sigma_eff - 0.5 / sigma_eff) / math.sqrt(2))
    low_delta -= math.exp(pld) * 0.5 * math.erfc((pld * sigma_eff + 0.5 / sigma_eff) / math.sqrt(2))
    assert low_delta <= 1e-5


# ============================================================== properties (hypothesis)

rates = st.floats(0.005, 0.3)
noises = st.floats(0.6, 4.0)
steps = st.integers(1, 60)
accountants = st.sampled_from(["pld", "rdp"])


@FAST
@given(q=rates, z=noises, t=steps, acc=accountants, factor=st.floats(1.05, 2.0))
def test_epsilon_decreases_in_noise(q, z, t, acc, factor) -> None:
    assert (gaussian_epsilon([GaussianEvent(z * factor, q, t)], 1e-5, acc)
            <= gaussian_epsilon([GaussianEvent(z, q, t)], 1e-5, acc))


@FAST
@given(q=rates, z=noises, t=steps, acc=accountants, extra=st.integers(1, 40))
def test_epsilon_increases_in_steps(q, z, t, acc, extra) -> None:
    assert (gaussian_epsilon([GaussianEvent(z, q, t + extra)], 1e-5, acc)
            >= gaussian_epsilon([GaussianEvent(z, q, t)], 1e-5, acc))


@FAST
@given(q=rates, z=noises, t=steps, acc=accountants, factor=st.floats(1.1, 3.0))
def test_epsilon_increases_in_sampling_rate(q, z, t, acc, factor) -> None:
    assert (gaussian_epsilon([GaussianEvent(z, min(1.0, q * factor), t)], 1e-5, acc)
            >= gaussian_epsilon([GaussianEvent(z, q, t)], 1e-5, acc))


@FAST
@given(
    eps=st.floats(0.3, 8.0), log_delta=st.floats(-7, -3), q=st.floats(0.005, 0.1),
    shape=st.lists(st.sampled_from([0.5, 0.8, 1.0, 1.7]), min_size=1, max_size=30),
    acc=accountants,
)
def test_calibrate_then_account_round_trips(eps, log_delta, q, shape, acc) -> None:
    delta = 10.0**log_delta
    scale = calibrate_noise_scale(eps, delta, shape, q, acc)
    ledger = PrivacyLedger().extend(gaussian_schedule(scale * np.asarray(shape), q))
    got = account(ledger, delta, acc).epsilon
    assert eps * 0.99 <= got <= eps  # never over budget, within 1% of it


@FAST
@given(q=rates, base=st.floats(0.5, 3.0), spread=st.floats(1.1, 10.0), k=st.integers(2, 8))
def test_bucketing_is_conservative(q, base, spread, k) -> None:
    zs = base * spread ** np.linspace(0, 1, 16)
    events = gaussian_schedule(zs, q)
    grid = tuple(range(2, 33))  # a small grid keeps this fast; the property holds on any grid
    exact = gaussian_epsilon(events, 1e-5, "rdp", AccountantOptions(rdp_orders=grid,
                                                                     max_distinct=None))
    bucketed = gaussian_epsilon(events, 1e-5, "rdp", AccountantOptions(rdp_orders=grid,
                                                                        max_distinct=k))
    assert len(bucket_terms(events, k)) <= k
    assert sum(t[2] for t in bucket_terms(events, k)) == 16
    assert bucketed >= exact


@FAST
@given(eps=st.floats(0.01, 50), releases=st.integers(1, 10**6), log_delta=st.floats(-9, -2),
       rule=st.sampled_from(["basic", "advanced"]))
def test_pure_per_release_round_trip(eps, releases, log_delta, rule) -> None:
    delta = 10.0**log_delta
    per = per_release_epsilon(eps, releases, rule, delta)
    ledger = PrivacyLedger(unit="node-level").record(LaplaceEvent(per, releases))
    got = account(ledger, delta, pure_composition=rule).epsilon
    assert got <= eps * (1 + 1e-9) and got == pytest.approx(eps, rel=1e-6)


def test_solve_monotone_increasing_and_errors() -> None:
    x = solve_monotone(lambda m: m**2, 4.0, 0.1, increasing=True, rtol=1e-6)
    assert 4.0 * (1 - 1e-6) <= x**2 <= 4.0
    with pytest.raises(ConfigError, match="not reachable"):
        solve_monotone(lambda m: 1.0 + 0 * m, 0.5, 1.0, increasing=False)


# ============================================================== pure mechanisms, GDP, ledgers


def test_pure_mechanisms() -> None:
    # DeFL-VP paper, Alg. 3: keep probability e^eps / (e^eps + 1): eps = 1 -> 0.73106,
    # 2p - 1 = tanh(eps / 2).
    assert rr_keep_prob(1.0) == pytest.approx(0.73106, abs=5e-6)
    assert 2 * rr_keep_prob(2.0) - 1 == pytest.approx(math.tanh(1.0))
    assert rr_epsilon(rr_keep_prob(0.37)) == pytest.approx(0.37)
    ev = RandomizedResponseEvent.from_keep_prob(rr_keep_prob(0.5), coordinates=10, count=3)
    assert ev.epsilon == pytest.approx(0.5) and ev.atoms[1] == 30
    assert LaplaceEvent.from_scale(scale=4.0, sensitivity=2.0).epsilon == 0.5
    # advanced composition: DRV formula, and never worse than basic
    k, e, d = 1000, 0.01, 1e-6
    drv = math.sqrt(2 * k * math.log(1 / d)) * e + k * e * math.expm1(e)
    assert advanced_composition([(e, k)], d) == pytest.approx(min(drv, k * e))
    assert advanced_composition([(1.0, 3)], d) == 3.0


def test_gaussian_without_sampling_matches_gdp() -> None:
    # q = 1: T Gaussian steps at z compose exactly to mu = sqrt(T) / z (eq. 3 + GDP composition);
    # PLD and the CLT path (exact for q = 1) agree with the GDP conversion.
    ledger = dpsgd(1.0, 4.0, 16)
    exact = gdp_epsilon(1.0, 1e-5)
    assert account(ledger, 1e-5, "gdp_clt").epsilon == pytest.approx(exact, rel=1e-9)
    assert account(ledger, 1e-5, "gdp_clt").approximate is False
    assert account(ledger, 1e-5, "pld").epsilon == pytest.approx(exact, rel=2e-3)


def test_ledgers_are_values_and_per_node() -> None:
    ledgers = node_ledgers(range(3), unit="sample-level", uncovered=["sensitivity"])
    assert set(ledgers) == {0, 1, 2}
    one = ledgers[0].record(GaussianEvent(1.0, 0.1)).record(GaussianEvent(1.0, 0.1))
    assert one.events == (GaussianEvent(1.0, 0.1, 2),) and ledgers[0].events == ()
    assert ledgers[1].uncovered == ("sensitivity",)
    mixed = one.record(LaplaceEvent(0.25, 2))
    report = account(mixed, 1e-5, "rdp")
    assert report.accountant == "rdp+basic"
    assert report.epsilon == pytest.approx(account(one, 1e-5, "rdp").epsilon + 0.5)


def test_report_to_dict() -> None:
    r = EpsilonReport(math.inf, 1e-5, "pld", "calibrated", "node-level", ["x"], False, "n")
    assert r.uncovered == ("x",)
    assert r.to_dict() == {"epsilon": "inf", "delta": 1e-5, "accountant": "pld",
                           "mode": "calibrated", "unit": "node-level", "uncovered": ["x"],
                           "approximate": False, "note": "n", "sampling": "none"}


# ============================================================== plans


def test_every_private_defense_declares_its_plan() -> None:
    from privbench.engine.trainer import provides
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    private = [DEFENSES.get(n) for n in DEFENSES.names() if DEFENSES.get(n).private]
    assert private and all(provides(cls, "privacy_plan") for cls in private)
    with pytest.raises(UnknownNameError, match="known: adp_vrsgp"):
        DEFENSES.get("nope")


@pytest.mark.parametrize("name", ["adp_vrsgp", "defl_vp", "dp_sgp", "dpdl", "dpps", "dyn_d2p",
                                  "partpsp", "pedfl"])
@pytest.mark.parametrize("mode", ["calibrated", "paper"])
def test_plans_hit_their_target_in_their_own_mode(name: str, mode: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        plan = make_plan(name, 2.0, 1e-5, 20, 0.05, "pld", calibrate_with=mode,
                         options=AccountantOptions(max_distinct=6))  # cheap; any options work
    assert plan.reports[0].mode == "paper" and plan.reports[1].mode == "calibrated"
    assert plan.calibrated_with == mode and plan.noise
    hit = plan.report(mode).epsilon
    assert 2.0 * 0.99 <= hit <= 2.0 * (1 + 1e-9)
    assert all(isinstance(v, float) for v in plan.noise.values())
    assert plan.to_dict()["reports"][1]["mode"] == "calibrated"


def test_plan_details() -> None:
    with pytest.warns(ApproximateAccountingWarning):
        dyn = make_plan("dyn_d2p", 1.0, 1e-4, 4000, 32 / 2500, "pld", calibrate_with="paper",
                        options=AccountantOptions(max_distinct=8))
    # eq. (8)'s mu_0 (J = 2500, B = 32, K = 4000); the CLT-calibrated Dyn schedule is ~1.024 by PLD
    assert dyn.noise["mu_0"] == pytest.approx(0.253065, abs=5e-7)
    assert dyn.report("paper").approximate and not dyn.report("calibrated").approximate
    assert dyn.report("calibrated").epsilon > 1.0
    defl = make_plan("defl_vp", 8.0, 1e-5, 200, 1.0, "basic", dim=1000)
    assert defl.report("calibrated").uncovered == ("control_variate",)
    assert defl.noise["coordinate_epsilon"] == pytest.approx(8.0 / (1000 * 200))
    clean = make_plan("defl_vp", 8.0, 1e-5, 200, 1.0, dim=10, order="rr_vr")
    assert clean.reports[1].uncovered == ()
    dpps = make_plan("dpps", 2.0, 1e-5, 100, 1.0, "basic", calibrate_with="paper")
    assert dpps.noise["b"] == pytest.approx(2.0 * 1e-3)  # Theorem 1: eps_round = b / gamma_n
    assert dpps.report("calibrated").epsilon == pytest.approx(200.0)
    assert dpps.report("calibrated").uncovered == ("sensitivity",)
    assert dpps.report("calibrated").unit == "node-level"
    dpdl = make_plan("dpdl", 2.0, 1e-5, 50, 0.05, "rdp")
    assert dpdl.report("paper").uncovered == ("cross_gradient",)
    assert dpdl.report("paper").epsilon < dpdl.report("calibrated").epsilon


def test_dpdl_ratios_on_a_complete_graph() -> None:
    # DPDL paper, eqs. (40), (53), fully connected, N = 10, alpha = 1: z_A = sigma/3, z_B = 0.76
    # sigma (paper), 0.24 sigma (strict).
    r = dpdl_noise_ratios(10, 10)
    assert r["A"] == pytest.approx(1 / 3)
    assert r["B_paper"] == pytest.approx(0.76, abs=5e-3)
    assert r["B_strict"] == pytest.approx(0.24, abs=5e-3)
    assert dpdl_joint_ratio(r, "strict") < min(r["A"], r["B_strict"])
    assert dpdl_joint_ratio(r, "paper") == r["B_paper"]


@pytest.mark.parametrize(("n", "degree", "alpha"), [(10, 10, 1.0), (8, 3, 0.5), (5, 1, 1.0)])
def test_dpdl_graph_accounting_reduces_to_the_uniform_closed_form(n, degree, alpha) -> None:
    """The per-node accounting the defense plans its graph with, on uniform weights 1/degree,
    is the closed form of the uniform plan (eqs. 40, 53), and the registry's plan is its own."""
    from defenses.dpdl.privacy import DPDLGraph, dpdl_node_parts, plan_dpdl_nodes

    graph = DPDLGraph.uniform(n, degree, alpha, 1.0)
    closed = dpdl_noise_ratios(n, degree, alpha)
    for parts in dpdl_node_parts(graph, graph.ws[0], np.ones(n)):
        assert parts == pytest.approx(closed, rel=1e-12)
    if degree > 1:
        nodes = plan_dpdl_nodes(graph, [0.05] * n, 2.0, 1e-5, 50, accountant="pld")
        plan = make_plan("dpdl", 2.0, 1e-5, 50, 0.05, "pld", n_agents=n, degree=degree,
                         alpha=alpha)
        assert set(nodes.sigma) == {plan.noise["sigma"]}


# ============================================================== bad input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon must be > 0"),
        ({"epsilon": -1.0}, "epsilon must be > 0"),
        ({"delta": 0.0}, r"delta must be in \(0, 1\)"),
        ({"delta": 1.0}, r"delta must be in \(0, 1\)"),
        ({"sample_rate": 0.0}, r"sample rate must be in \(0, 1\]"),
        ({"sample_rate": 1.5}, r"sample rate must be in \(0, 1\]"),
        ({"rounds": 0}, "rounds must be an integer >= 1"),
        ({"accountant": "moments"}, "unknown accountant 'moments'; accepted: pld, rdp"),
    ],
)
@pytest.mark.parametrize("name", ["dp_sgp", "dpps"])
def test_plans_reject_bad_input(name: str, kwargs: dict, match: str) -> None:
    args = {"epsilon": 1.0, "delta": 1e-5, "rounds": 10, "sample_rate": 0.1, "accountant": "pld"}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match) as err:
        make_plan(name, **args)
    assert "\n" not in str(err.value)


def test_functions_reject_bad_input() -> None:
    cases = [
        (lambda: gaussian_epsilon([GaussianEvent(1.0, 0.1)], 1e-5, "prv"), "unknown accountant"),
        (lambda: GaussianEvent(1.0, 0.0), "sampling rate"),
        (lambda: GaussianEvent(-1.0, 0.5), "noise multiplier"),
        (lambda: GaussianEvent(1.0, 0.5, 0), "event count"),
        (lambda: calibrate_noise_scale(-1, 1e-5, [1.0], 0.1), "epsilon must be > 0"),
        (lambda: calibrate_noise_scale(1, 2.0, [1.0], 0.1), "delta must be in"),
        (lambda: gdp_mu(1.0, 0.0), "delta must be in"),
        (lambda: account(PrivacyLedger(), 1e-5, pure_composition="fancy"), "pure composition"),
        (lambda: make_plan("dyn_d2p", 1, 1e-5, 10, 0.1, rho_mu=0.5), "rho_mu"),
        (lambda: make_plan("dp_sgp", 1, 1e-5, 10, 0.1, tau=3), "unknown option 'tau'"),
        (lambda: make_plan("dpps", 1, 1e-5, 10, 0.1, "rdp", gamma_n=0), "gamma_n"),
        (lambda: RandomizedResponseEvent.from_keep_prob(0.4), "keep probability"),
    ]
    for call, match in cases:
        with pytest.raises(ConfigError, match=match) as err:
            call()
        assert "\n" not in str(err.value)


# ============================================================== sampling models


def test_fixed_batches_are_accounted_without_replacement_with_twice_the_sensitivity() -> None:
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    from privbench.accounting.gaussian import WOR_RDP_ORDERS

    z, q, t = 1.5, 16 / 300, 60
    ledger = PrivacyLedger().record(GaussianEvent(z, q, t, "fixed_without_replacement"))
    rep = account(ledger, 1e-5, "pld")  # PLD has no such event: composed with RDP
    assert rep.accountant == "rdp" and rep.sampling == "fixed_without_replacement"
    ref = rdp.RdpAccountant(orders=WOR_RDP_ORDERS,
                            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    ref.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        300, 16, dp_accounting.GaussianDpEvent(z / 2)), t))
    assert rep.epsilon == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)
    poisson = account(PrivacyLedger().record(GaussianEvent(z, q, t)), 1e-5, "rdp")
    assert poisson.sampling == "poisson" and rep.epsilon > 1.5 * poisson.epsilon
    with pytest.raises(ConfigError, match="cannot mix"):
        account(ledger.record(GaussianEvent(z, q, 1)), 1e-5, "rdp")


@pytest.mark.slow  # without-replacement RDP: ~1 s per evaluation
def test_calibration_without_replacement_meets_the_target() -> None:
    z = calibrate_noise_scale(2.0, 1e-5, np.ones(30), 0.05, "pld",
                              sampling="fixed_without_replacement")
    led = PrivacyLedger().record(GaussianEvent(z, 0.05, 30, "fixed_without_replacement"))
    assert 0.99 * 2.0 <= account(led, 1e-5).epsilon <= 2.0
    assert z > 1.5 * calibrate_noise_scale(2.0, 1e-5, np.ones(30), 0.05, "rdp")


def test_infinite_epsilon_steps_toward_more_noise() -> None:
    # f = inf below x = 8 (an accountant that cannot answer there), finite and decreasing above:
    # the solver must move up from the guess, not down toward less noise (the --delta 1e-15 hang)
    def f(x: float) -> float:
        return math.inf if x < 8 else 64 / x**2

    x = solve_monotone(f, 0.5, 1.0, increasing=False)
    assert 0.5 * (1 - 1e-3) <= f(x) <= 0.5
    with pytest.raises(ConfigError, match="not reachable"):
        solve_monotone(lambda x: math.inf, 1.0, 1.0, increasing=False)


def test_pld_refuses_a_delta_it_cannot_resolve() -> None:
    with pytest.raises(ConfigError, match="PLD accountant resolves"):
        calibrate_noise_scale(1.0, 1e-15, np.ones(10), 0.1, "pld")
    with pytest.raises(ConfigError, match="PLD accountant resolves"):
        account(PrivacyLedger().record(GaussianEvent(1.0, 0.1, 10)), 1e-300, "pld")
    assert account(PrivacyLedger().record(GaussianEvent(1.0, 0.1, 10)), 1e-300, "rdp").epsilon > 0
