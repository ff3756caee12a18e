"""The mechanism audit (`privbench.audit.mechanism`) and its gate rules, tried on broken defenses.

A privacy check is trusted once it has caught a deliberately broken defense: each mutant of
`tests/mechanism/mutants.py` keeps the ledger's claim while drawing less privacy, and must fail
the shipped mechanism rules; the correct defense must pass them. The default run covers DP-SGP at
ε = 1 (every mutant) and ε = 8; the `slow` tests cover every audited defense at ε = 1 and 8 and
three seeds of each correct one. A correct run fails a rule only when an interval misses (each
at level 1e-5 per node and quantity).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbench.audit.mechanism import audit_mechanism
from privbench.audit.mechanism_epsilon import gaussian_epsilon
from privbench.audit.mechanism_replay import audited_rounds
from privbench.report import gate
from privbench.seeding import noise_off
from tests.mechanism.mutants import AUDITED, MUTANTS, RULES, cell, failed_rules, quick_run

EXPECTED = {  # the rule each mutant must fail, at least
    "noise x0.5": "max_measured_ratio", "clip x2": "max_measured_ratio",
    "rate x2": "require_sampling_rate", "reused noise": "require_mechanism",
    "node unnoised": "require_mechanism", "kind unnoised": "require_mechanism",
}


def _names(failed: list[gate.Check]) -> set[str]:
    return {c.name.split(" ", 1)[1] for c in failed}


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_a_correct_defense_passes_and_its_measured_epsilon_is_its_claim(eps):
    failed, res = failed_rules("dp_sgp", eps, None)
    assert not failed, [c.detail for c in failed]
    e = res["epsilon"]
    assert e["interval"][0] <= e["claimed"] <= e["interval"][1]
    assert e["ledger_recomputed"] == pytest.approx(e["claimed"], rel=0.02)
    assert 0.95 < e["z_ratio"] < 1.05  # the noise drawn is the noise the ledger accounts
    assert res["replay_exact"] is True and not res["findings"]


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_every_mutant_of_dp_sgp_is_caught(mutant):
    failed, _ = failed_rules("dp_sgp", 1.0, mutant)
    assert EXPECTED[mutant] in _names(failed), [c.detail for c in failed]


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1.0, 8.0])
@pytest.mark.parametrize("mutant", list(MUTANTS))
@pytest.mark.parametrize("defense", AUDITED)
def test_every_mutant_of_every_audited_defense_is_caught(defense, mutant, eps):
    failed, _ = failed_rules(defense, eps, mutant)
    assert EXPECTED[mutant] in _names(failed), [c.detail for c in failed]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", [1.0, 8.0])
@pytest.mark.parametrize("defense", AUDITED)
def test_no_false_alarm_on_correct_defenses(defense, eps, seed):
    failed, _ = failed_rules(defense, eps, None, seed)
    assert not failed, [c.detail for c in failed]


def test_a_defense_without_any_noise_multiplier_is_not_applicable_with_its_reason():
    res = audit_mechanism(quick_run(1.0), "pedfl", {})
    assert res["applicable"] and not res["epsilon"]["applicable"]
    assert res["epsilon"]["reason"]
    failed = [c for c in gate.check_bound(RULES, cell("pedfl", 1.0, res)) if not c.passed]
    assert any("max_measured_ratio" in c.name and "not measured" in c.detail for c in failed)


def test_dpdl_is_recomposed_from_its_reported_joint_multiplier():
    failed, res = failed_rules("dpdl", 1.0, None)
    assert not failed, [c.detail for c in failed]
    e = res["epsilon"]
    assert e["accountant"] == "dp_accounting RDP"  # as its ledger composes
    assert e["ledger_recomputed"] == pytest.approx(e["claimed"], rel=0.02)
    assert e["z_ratio"] >= 1  # it measures at least the noise the strict reading trusts


def test_randomized_response_flip_rate_is_measured_and_its_absence_caught():
    failed, res = failed_rules("d_psgd_rr", 1.0, None)
    assert not failed, [c.detail for c in failed]
    assert res["epsilon"]["flip_interval"][0] <= 0.5 <= res["epsilon"]["flip_interval"][1]
    with noise_off():  # no flip at all, the claim kept
        broken = audit_mechanism(quick_run(1.0), "d_psgd_rr", {})
    assert broken["epsilon"]["flip_rate"] == 0 and math.isinf(broken["epsilon"]["epsilon"])
    checks = gate.check_bound(RULES, cell("d_psgd_rr", 1.0, broken))
    assert "max_measured_ratio" in _names([c for c in checks if not c.passed])


def test_an_unbounded_contribution_voids_the_claim():
    res = audit_mechanism(quick_run(1.0), "partpsp", {})
    assert any("unbounded" in f for f in res["findings"])
    assert math.isinf(res["epsilon"]["epsilon"])


def test_a_non_private_defense_has_no_ledger_to_measure():
    res = audit_mechanism(quick_run(1.0), "sgp", {})
    assert not res["applicable"] and "not private" in res["reason"]


def test_a_cell_without_the_audit_fails_the_rules_saying_why():
    checks = gate.check_bound(RULES, {"defense": "dp_sgp", "epsilon": 1.0, "attacks": {}})
    assert len(checks) == 3 and not any(c.passed for c in checks)
    assert all("no mechanism audit" in c.detail for c in checks)


def test_private_selector_selects_every_claimed_cell():
    bound = {"eps": "private", "require_mechanism": True}
    assert gate._selects(bound, {"defense": "a", "epsilon": 8.0})
    assert gate._selects(bound, {"defense": "a", "epsilon": None, "setting": {"name": "paper"}})
    assert not gate._selects(bound, {"defense": "a", "epsilon": None})


def test_audited_rounds_spread_over_the_run():
    assert audited_rounds(60, 12)[:2] == [0, 1] and audited_rounds(60, 12)[-1] == 59
    assert len(audited_rounds(60, 12)) == 12 and audited_rounds(5, 12) == [0, 1, 2, 3, 4]


def test_gaussian_epsilon_grows_with_less_noise_and_more_sampling():
    z = np.full(60, 4.0)
    base = gaussian_epsilon(z, 0.1, 1e-5, "poisson", 120)
    assert gaussian_epsilon(z / 2, 0.1, 1e-5, "poisson", 120) > base
    assert gaussian_epsilon(z, 0.2, 1e-5, "poisson", 120) > base
    assert gaussian_epsilon(np.zeros(60), 0.1, 1e-5, "poisson", 120) == 0.0  # no release
    assert math.isinf(gaussian_epsilon(np.full(60, np.nan), 0.1, 1e-5, "poisson", 120))
