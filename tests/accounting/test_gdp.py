"""privbench.accounting.gdp: the mu-GDP formulas of Dyn-D2P (Zhu et al., Sec. 3), each checked
against the equation it implements."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from privbench.accounting.gdp import (
    clt_mu_total,
    dyn_d2p_growth,
    dyn_d2p_mu0,
    dyn_d2p_mu_bar,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
)
from privbench.accounting.report import ApproximateAccountingWarning
from privbench.errors import ConfigError


@pytest.mark.parametrize(("eps", "mu"), [(0.0, 1.0), (1.0, 0.3), (2.0, 1.5), (8.0, 3.0)])
def test_delta_is_eq_4(eps: float, mu: float) -> None:
    expected = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    assert gdp_delta(eps, mu) == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-4), (0.3, 1e-5), (8.0, 1e-6)])
def test_mu_and_epsilon_invert_eq_4(eps: float, delta: float) -> None:
    mu = gdp_mu(eps, delta)
    assert gdp_delta(eps, mu) == pytest.approx(delta, rel=1e-8)
    assert gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-8)


def test_epsilon_is_zero_when_delta_at_zero_suffices_and_infinite_for_infinite_mu() -> None:
    assert gdp_epsilon(1e-3, 0.5) == 0.0
    assert gdp_epsilon(math.inf, 1e-5) == math.inf


def test_clt_total_is_eq_6_and_warns_that_it_is_approximate() -> None:
    mus = np.array([0.2, 0.4, 0.6])
    with pytest.warns(ApproximateAccountingWarning):
        total = clt_mu_total(mus, 0.1)
    assert total == pytest.approx(0.1 * math.sqrt(np.sum(np.exp(mus**2) - 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        assert clt_mu_total([40.0], 0.5) == math.inf  # exp(1600) overflows


def test_the_constant_budget_of_eq_9_spends_mu_total_under_eq_6() -> None:
    mu_tot, p, k = 0.5, 0.02, 400
    mu_bar = dyn_d2p_mu_bar(mu_tot, p, k)
    assert mu_bar == pytest.approx(math.sqrt(math.log((mu_tot / p) ** 2 / k + 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        assert clt_mu_total(np.full(k, mu_bar), p) == pytest.approx(mu_tot, rel=1e-12)


@pytest.mark.parametrize("rho", [1.5, 2.0, 10.0])
def test_the_growing_schedule_of_eq_8_spends_mu_total_and_starts_below_mu_bar(rho) -> None:
    mu_tot, p, k = 0.4, 0.05, 300
    mu0 = dyn_d2p_mu0(mu_tot, p, k, rho)
    growth = dyn_d2p_growth(k, rho)
    assert growth[0] == 1.0 and growth[-1] == pytest.approx(rho ** ((k - 1) / k))
    assert np.all(np.diff(growth) > 0)
    spent = p * math.sqrt(np.sum(np.expm1((mu0 * growth) ** 2)))
    assert spent == pytest.approx(mu_tot, rel=1e-9)
    mu_bar = dyn_d2p_mu_bar(mu_tot, p, k)
    assert mu_bar / rho < mu0 < mu_bar
    assert dyn_d2p_mu0(mu_tot, p, k, 1.0) == mu_bar


@pytest.mark.parametrize(("call", "needle"), [
    (lambda: gdp_delta(-1.0, 1.0), "epsilon must be >= 0"),
    (lambda: gdp_mu(1.0, 1.5), "delta must be in"),
    (lambda: dyn_d2p_growth(10, 0.5), "rho_mu must be a finite number >= 1"),
    (lambda: dyn_d2p_mu_bar(0.5, 0.0, 10), "sampling rate"),
])
def test_bad_input_is_one_line(call, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        call()
