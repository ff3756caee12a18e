"""The mechanism audit holds a run to what it asked (ε, δ, rounds), not to its ledger's own
statement: broken ledgers that claim honestly what they composed, or state it for another δ,
fail the shipped rule `max_measured_ratio`; randomized response pooled over nodes and rounds
catches flips at d times the claimed per-coordinate ε; noise from a generator re-seeded each
round is reported as reused. Correct runs pass at ε = 1, 4 and 8."""

from __future__ import annotations

import pytest

from privbench.report import gate
from tests.mechanism.mutants import REQUEST_MUTANTS, RULES, cell, failed_rules

NAMED = {  # what the failed check names
    "calibrated at δ 1e-3": "the ledger claims ε = 1.55, the run asks 1",
    "calibrated over half the rounds": "the ledger claims ε = 1.42, the run asks 1",
    "δ 1e-3 in calibration and ledger": "stated for δ = 10⁻³, the run asks 10⁻⁵",
}


@pytest.mark.parametrize("mutant", list(REQUEST_MUTANTS))
def test_a_ledger_not_held_to_the_request_fails_naming_why(mutant):
    failed, res = failed_rules("dp_sgp", 1.0, mutant)
    ratio = [c for c in failed if c.name.endswith("max_measured_ratio")]
    assert ratio and NAMED[mutant] in ratio[0].detail, [c.detail for c in failed]
    e = res["epsilon"]
    # composed at the run's δ over its 60 rounds: above the ε asked whatever the ledger says
    assert e["delta"] == 1e-5 and e["composed_rounds"] == 60 and e["interval"][0] > 1.0


def test_randomized_response_at_d_times_its_coordinate_epsilon_is_caught_pooled():
    failed, res = failed_rules("d_psgd_rr", 1.0, "flips at d x ε per coordinate")
    e = res["epsilon"]
    assert e["nodes"] == list(range(6)) and e["flip_trials"] > 500_000  # every node and round
    assert any(c.name.endswith("max_measured_ratio") and "overspend" in c.detail
               for c in failed)


def test_a_correct_randomized_response_is_inconclusive_not_a_pass():
    failed, res = failed_rules("d_psgd_rr", 1.0, None)
    assert not failed, [c.detail for c in failed]
    ratio = next(c for c in gate.check_bound(RULES, cell("d_psgd_rr", 1.0, res))
                 if c.name.endswith("max_measured_ratio"))
    assert ratio.inconclusive and "INCONCLUSIVE" in ratio.detail and "needs about" in ratio.detail


def test_noise_reseeded_every_round_is_reported_reused_not_absent():
    failed, res = failed_rules("dp_sgp", 1.0, "noise re-seeded each round")
    assert any("reused across rounds" in f for f in res["findings"])
    assert not any("without noise" in f for f in res["findings"])
    assert any(c.name.endswith("require_mechanism") for c in failed)


def test_a_correct_run_at_eps_4_passes_with_what_it_resolved():
    failed, res = failed_rules("dp_sgp", 4.0, None)
    assert not failed, [c.detail for c in failed]
    checks = gate.check_bound(RULES, cell("dp_sgp", 4.0, res))
    ratio = next(c for c in checks if c.name.endswith("max_measured_ratio"))
    assert not ratio.inconclusive and "no evidence of overspend; rules out more than" in \
        ratio.detail
    assert not res["ledger_findings"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0])
@pytest.mark.parametrize("defense", ["dp_sgp", "dyn_d2p", "dpdl"])
def test_no_false_alarm_or_inconclusive_on_correct_gaussian_defenses(defense, eps, seed):
    failed, res = failed_rules(defense, eps, None, seed)
    assert not failed, [c.detail for c in failed]
    checks = gate.check_bound(RULES, cell(defense, eps, res))
    assert not any(c.inconclusive for c in checks), [c.detail for c in checks]
