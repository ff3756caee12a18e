"""privbench.accounting.compose: a ledger's Gaussian and pure parts are composed by their own
rules and added (basic composition of the two), and a schedule accounts as its ledger does."""

from __future__ import annotations

import pytest

from privbench.accounting.compose import account, account_schedule
from privbench.accounting.events import (
    GaussianEvent,
    LaplaceEvent,
    PrivacyLedger,
    RandomizedResponseEvent,
    gaussian_schedule,
)
from privbench.accounting.pure import compose_pure
from privbench.accounting.report import ApproximateAccountingWarning
from privbench.errors import ConfigError

GAUSS = GaussianEvent(1.2, 0.05, 40)
DELTA = 1e-5


def test_a_pure_ledger_under_basic_composition_sums_and_reports_delta_zero() -> None:
    ledger = PrivacyLedger(uncovered=("weights",)).extend(
        [LaplaceEvent(0.1, 5), RandomizedResponseEvent(0.01, coordinates=10, count=3)])
    report = account(ledger, DELTA, mode="paper")
    assert report.epsilon == pytest.approx(0.1 * 5 + 0.01 * 30)
    assert (report.delta, report.accountant, report.mode) == (0.0, "basic", "paper")
    assert (report.uncovered, report.sampling, report.approximate) == (("weights",), "none",
                                                                        False)


def test_a_mixed_ledger_adds_the_gaussian_and_the_pure_epsilons() -> None:
    gauss = account(PrivacyLedger(events=(GAUSS,)), DELTA)
    mixed = account(PrivacyLedger(events=(GAUSS, LaplaceEvent(0.2, 2))), DELTA)
    assert mixed.epsilon == pytest.approx(gauss.epsilon + 0.4, rel=1e-9)
    assert (mixed.accountant, mixed.delta, mixed.sampling) == ("pld+basic", DELTA, "poisson")
    # advanced composition takes half of delta for its own delta'
    adv = account(PrivacyLedger(events=(GAUSS, LaplaceEvent(0.2, 2))), DELTA,
                  pure_composition="advanced")
    half = account(PrivacyLedger(events=(GAUSS,)), DELTA / 2)
    assert adv.epsilon == pytest.approx(half.epsilon + compose_pure([(0.2, 2)], "advanced",
                                                                    DELTA / 2), rel=1e-9)


def test_the_clt_is_approximate_only_for_subsampled_steps() -> None:
    with pytest.warns(ApproximateAccountingWarning):
        sampled = account(PrivacyLedger(events=(GAUSS,)), DELTA, "gdp_clt")
    full = account(PrivacyLedger(events=(GaussianEvent(3.0, 1.0, 10),)), DELTA, "gdp_clt")
    assert sampled.approximate and not full.approximate


def test_a_schedule_accounts_as_the_ledger_of_its_events() -> None:
    zs = [1.5] * 20 + [1.1] * 30 + [0.9] * 10
    ledger = PrivacyLedger().extend(gaussian_schedule(zs, 0.1))
    for accountant in ("pld", "rdp"):
        by_ledger = account(ledger, DELTA, accountant)
        by_schedule = account_schedule(zs, 0.1, DELTA, accountant)
        assert by_schedule.epsilon == pytest.approx(by_ledger.epsilon, rel=1e-12)
        assert by_schedule.accountant == by_ledger.accountant


def test_more_steps_spend_more() -> None:
    few = account(PrivacyLedger(events=(GaussianEvent(1.2, 0.05, 10),)), DELTA)
    many = account(PrivacyLedger(events=(GaussianEvent(1.2, 0.05, 100),)), DELTA)
    assert 0 < few.epsilon < many.epsilon


@pytest.mark.parametrize(("call", "needle"), [
    (lambda: account(PrivacyLedger(events=(RandomizedResponseEvent(0.1),)), DELTA,
                     pure_composition="laplace_pld"), "composes Laplace events only"),
    (lambda: account(PrivacyLedger(), DELTA, "prv"), "unknown accountant"),
    (lambda: account(PrivacyLedger(), 2.0), "delta must be in"),
    (lambda: account_schedule([1.0], 0.1, DELTA, mode="exact"), "unknown mode"),
])
def test_bad_input_is_one_line(call, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        call()
