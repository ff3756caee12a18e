"""The mechanism audit (`privbench.audit.mechanism`) and its gate rules
(`privbench.report.gate_mechanism`), tried on broken defenses.

A privacy check is trusted once it has caught a deliberately broken defense: each mutant of
`tests/mechanism/mutants.py` keeps the ledger's claim while drawing less privacy, and must fail
the shipped mechanism rules; the correct defense must pass them. The default run covers DP-SGP at
ε = 1 (every mutant) and ε = 8, and how each mutant class breaks each mechanism family
(Gaussian, Laplace, randomized response) without an audit; the `slow` tests cover every
registered DP defense at ε = 1 and 8 with every mutant class that applies to it, and three seeds
of each correct one. A correct run fails a rule only when an interval misses (each at level 1e-5
per node and quantity).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
from importlib import import_module
from unittest import mock

import numpy as np
import pytest
import torch

from attacks.mechanism import MechanismConfig
from defenses.defl_vp import privatize_sign, randomized_response
from defenses.dpps import laplace
from privbench.audit.mechanism import audit_mechanism
from privbench.audit.mechanism_coverage import blocks
from privbench.audit.mechanism_epsilon import (
    PartlyMeasured,
    gaussian_epsilon,
    measured_epsilon,
    observed_share,
    rr_epsilon,
)
from privbench.audit.mechanism_replay import MechanismSettings, audited_rounds
from privbench.engine.trainer import Context
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.report import gate
from privbench.seeding import Streams, noise_off
from tests.mechanism.mutants import (
    DP_DEFENSES,
    EPSILONS,
    EXPECTED,
    MECHANISMS,
    MUTANTS,
    RULES,
    SEED_EPSILONS,
    Mechanism,
    NotApplicableError,
    amplified,
    cell,
    dp_defenses,
    expected_rule,
    failed_rules,
    flips_at,
    quick_run,
)


def _names(failed: list[gate.Check]) -> set[str]:
    return {c.name.split(" ", 1)[1] for c in failed}


def _applies(defense: str, mutant: str) -> bool:
    try:
        MUTANTS[mutant](defense)
    except NotApplicableError:
        return False
    return True


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_a_correct_defense_passes_and_its_measured_epsilon_is_its_claim(eps):
    failed, res = failed_rules("dp_sgp", eps, None)
    assert not failed, [c.detail for c in failed]
    e = res["epsilon"]
    assert e["interval"][0] <= e["claimed"] <= e["interval"][1]
    assert e["ledger_recomputed"] == pytest.approx(e["claimed"], rel=0.02)
    assert 0.95 < e["z_ratio"] < 1.05  # the noise drawn is the noise the ledger accounts
    assert res["replay_exact"] is True and not res["findings"]
    # the canary probes reach the per-sample clip bound
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(1.0, abs=0.05)
    # every parameter tensor of every model message tested, every kind replayed on a neighbour
    assert res["coverage"]["messages"] >= 8 and len(res["coverage"]["blocks"]) == 6
    assert res["kinds"]["neighbour_rounds"] == 6  # each node's data, once
    kinds = res["kinds"]["kinds"]
    assert set(kinds) == {"model", "weight"} and kinds["weight"]["data_dependent"] is False
    assert kinds["weight"]["change"] == 0.0  # declared data-independent, and it is


# the mutants whose dp_sgp case has its own test below (what the finding names, what it reads)
DETAILED = ("block unnoised", "sized weights", "clip x1.2", "batch clipped")


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m not in DETAILED])
def test_every_mutant_of_dp_sgp_is_caught(mutant):
    failed, _ = failed_rules("dp_sgp", 1.0, mutant)
    assert EXPECTED[mutant] in _names(failed), [c.detail for c in failed]


def test_an_unnoised_parameter_tensor_is_caught_and_named_with_its_share():
    """The biases (202 of 17,226 coordinates) without noise move the whole message's noise by
    under 1 %; each tensor's own test finds them."""
    failed, res = failed_rules("dp_sgp", 1.0, "block unnoised")
    assert "require_mechanism" in _names(failed), [c.detail for c in failed]
    assert any(f.startswith("model noise on 1.bias (0.74 % of the message)")
               for f in res["findings"]), res["findings"]
    assert {b["block"] for b in res["coverage"]["blocks"] if b["below"]} == \
        {"1.bias", "3.bias", "5.bias"}
    assert math.isinf(res["epsilon"]["epsilon"])


def test_a_data_independent_kind_that_carries_the_data_size_is_caught():
    """Push-sum weights proportional to |D_i| (the models train as before): the weight kind is
    declared data-independent, and changes on the dataset without one member."""
    failed, res = failed_rules("dp_sgp", 1.0, "sized weights")
    assert "require_mechanism" in _names(failed), [c.detail for c in failed]
    assert any(f.startswith("weight messages, declared data-independent, change with the data")
               for f in res["findings"]), res["findings"]


def test_the_probe_reads_twice_the_bound_where_the_batch_is_clipped_as_a_whole():
    """A per-sample defense clipping its batch sum as a whole: one added record moves the
    clipped sum by up to 2C, and the canary pair reaches it."""
    failed, res = failed_rules("dp_sgp", 1.0, "batch clipped")
    assert "max_measured_ratio" in _names(failed), [c.detail for c in failed]
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(2.0, rel=0.05)


def test_a_clip_bound_x12_is_caught_where_the_probe_reaches_the_bound():
    """DPPS clips each node's batch gradient in L1 as a whole: one real sample moves it by
    about 83 % of the bound, two opposite canaries by all of it, so 1.2x the bound reads 1.2x."""
    failed, res = failed_rules("dpps", 1.0, "clip x1.2")
    assert "max_measured_ratio" in _names(failed), [c.detail for c in failed]
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(1.2, rel=0.03)


def test_dp_cga_is_held_to_the_releases_its_probe_sees():
    """DP-CGA's ledger composes n_i releases of one batch per round (its n_i - 1 cross-gradients
    and the self-gradient, which leaves the node only inside the next model): the probe sees
    n_i - 1 of them, so the ledger's joint multiplier is taken for those (x sqrt(n_i / (n_i -
    1))). The correct run then reads its bound and passes; a clip bound x1.2 reads 1.2x and is
    caught."""
    failed, res = failed_rules("dp_cga", 1.0, None)
    assert not failed, [c.detail for c in failed]
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(1.0, rel=0.03)
    assert {p["releases"] for p in res["probes"] if p["measured"]} == {3}  # of the ledger's 4
    failed, res = failed_rules("dp_cga", 1.0, "clip x1.2")
    assert "max_measured_ratio" in _names(failed), [c.detail for c in failed]
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(1.2, rel=0.03)


def test_a_ledger_counting_releases_the_probe_cannot_see_is_scaled_only_up():
    row = {"releases": 3}
    assert observed_share(row, 4) == pytest.approx(math.sqrt(4 / 3))
    assert observed_share(row, None) == observed_share(row, 2) == 1.0  # fewer: never looser
    assert observed_share({"releases": 0}, 4) == observed_share(row, True) == 1.0


APPLICABLE = [(d, m) for d in DP_DEFENSES for m in MUTANTS if _applies(d, m)]
CORRECT = list(DP_DEFENSES)


@pytest.mark.slow
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize(("defense", "mutant"), APPLICABLE)
def test_every_applicable_mutant_of_every_dp_defense_is_caught(defense, mutant, eps):
    failed, _ = failed_rules(defense, eps, mutant)
    rule = expected_rule(defense, mutant)  # None: any rule (Laplace, randomized response)
    assert (rule in _names(failed)) if rule else failed, [c.detail for c in failed]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", SEED_EPSILONS)
@pytest.mark.parametrize("defense", CORRECT)
def test_no_false_alarm_on_correct_defenses(defense, eps, seed):
    failed, res = failed_rules(defense, eps, None, seed)
    assert not failed, [c.detail for c in failed]
    if seed == 0 and not MECHANISMS[defense].epoch:
        # the rate mutant applies exactly where the ledger claims amplification by sampling
        assert amplified(res) == MECHANISMS[defense].sampled


def test_every_registered_dp_defense_has_its_mechanism_family():
    assert sorted(dp_defenses()) == sorted(MECHANISMS) == list(DP_DEFENSES)
    for defense, spec in MECHANISMS.items():
        assert spec.family in ("gaussian", "laplace", "rr"), defense
        if spec.clip is not None:  # the clipping function is there and takes a bound
            path, name = spec.clip.split(":")
            assert "bound" in inspect.signature(getattr(import_module(path), name)).parameters


@pytest.mark.parametrize(("defense", "mutant", "why"), [
    ("pedfl", "clip x2", "sensitivity"), ("dp_cga", "batch clipped", "already clips"),
    ("dpdl", "sized weights", "no push-sum weight"),
    ("defl_vp", "clip x2", "sign"), ("defl_vp", "rate x2", "local epoch"),
    ("partpsp", "rate x2", "no amplification by sampling")])
def test_a_mutant_class_that_does_not_apply_says_why(defense, mutant, why):
    with pytest.raises(NotApplicableError, match=why):
        MUTANTS[mutant](defense)


def _noise() -> torch.Generator:
    return Streams(0).get("noise")


def test_noise_x05_halves_each_family_and_only_the_noise_streams():
    with MUTANTS["noise x0.5"]("dp_sgp"):
        assert 0.45 < float(torch.randn(20000, generator=_noise()).std()) < 0.55
        assert 0.95 < float(torch.randn(20000, generator=torch.Generator()).std()) < 1.05
    with MUTANTS["noise x0.5"]("dpps"):  # Lap(b): E|x| = b
        assert 0.45 < float(laplace((20000,), 1.0, _noise(), "cpu").abs().mean()) < 0.55
    ones = torch.ones(200000, dtype=torch.float64)
    with MUTANTS["noise x0.5"]("defl_vp"):  # flip probability 0.4 -> 0.2, on the defense's path
        flips = float((privatize_sign(ones, math.log(1.5), _noise()) < 0).double().mean())
    assert flips == pytest.approx(0.2, abs=0.01)


def test_node_unnoised_silences_the_first_row_of_each_family():
    with MUTANTS["node unnoised"]("dp_sgp"):
        u = torch.randn(3, 50, generator=_noise())
    with MUTANTS["node unnoised"]("dpps"):
        lap = laplace((3, 50), 1.0, _noise(), "cpu")
    with MUTANTS["node unnoised"]("defl_vp"):
        rr = randomized_response(torch.ones(3, 50, dtype=torch.float64), 0.5, _noise())
    for rows in (u, lap, rr - 1):
        assert not rows[0].any() and rows[1:].abs().sum(dim=1).min() > 0


class _Draws:
    """A stand-in defense: two noise draws of each family a round."""

    def __init__(self) -> None:
        self.out: list[list[torch.Tensor]] = []
        self.gen = _noise()

    def round(self, t: int) -> None:
        self.out.append([torch.randn(4, generator=self.gen),
                         torch.rand(4, generator=self.gen),
                         torch.empty(4).exponential_(1.0, generator=self.gen)])


@pytest.mark.parametrize("family", ["gaussian", "laplace", "rr"])
def test_reusednoise_draws_round_zeros_noise_again_in_order(family):
    column = {"gaussian": 0, "rr": 1, "laplace": 2}[family]
    stub = _Draws()
    with mock.patch.dict(DEFENSES._items, {"stub": _Draws}), \
            mock.patch.dict(MECHANISMS, {"stub": Mechanism(family, None)}), \
            MUTANTS["reused noise"]("stub"):
        for t in range(3):
            _Draws.round(stub, t)
    first, *later = [r[column] for r in stub.out]
    assert all(torch.equal(first, r) for r in later)
    other = [r[(column + 1) % 3] for r in stub.out]  # another family's draws stay fresh
    assert not torch.equal(other[0], other[1])


def test_rate_x2_doubles_poisson_rates_and_fixed_batches_not_the_ledger():
    calls = []

    def record(self, t, rates=None, batch_size=None):
        calls.append((rates, batch_size))

    run = type("Run", (), {"batch_size": 16})()
    stub = type("Ctx", (), {"run": run})()
    with mock.patch.object(Context, "draw", record), MUTANTS["rate x2"]("dp_sgp"):
        Context.draw(stub, 0, rates=torch.tensor([0.3, 0.7]))
        Context.draw(stub, 0)
        Context.draw(stub, 0, batch_size=1)
    assert torch.equal(calls[0][0], torch.tensor([0.6, 1.0]))
    assert [c[1] for c in calls[1:]] == [32, 2]


def test_clip_x2_doubles_the_bound_the_defense_clips_with():
    import defenses.dp_cga as dp_cga

    g = torch.tensor([[30.0, 40.0]])
    with MUTANTS["clip x2"]("dp_cga"):
        assert float(dp_cga.clip_l2(g, 1.0)[0].norm()) == pytest.approx(2.0)
    assert float(dp_cga.clip_l2(g, 1.0)[0].norm()) == pytest.approx(1.0)


def test_a_node_level_ledger_is_measured_by_its_sensitivity_and_laplace_scale():
    failed, res = failed_rules("pedfl", 1.0, None)
    assert not failed, [c.detail for c in failed]
    e = res["epsilon"]
    assert e["interval"][0] <= e["claimed"] <= e["interval"][1]
    for row in e["rounds"]:  # the exposed sensitivity is the one the ledger realized
        assert row["sensitivity"] == pytest.approx(row["ledger_sensitivity"], rel=1e-3)
    with mock.patch("torch.Tensor.exponential_", _halved_exponential()):  # Laplace scale x0.5
        failed, res = failed_rules("pedfl", 1.0, None)
    assert "max_measured_ratio" in _names(failed)
    assert res["epsilon"]["ratio_interval"][0] > 1.5


def _halved_exponential():
    from privbench.seeding import is_noise_generator

    exponential = torch.Tensor.exponential_

    def patched(self, *args, **kwargs):
        out = exponential(self, *args, **kwargs)
        return out.mul_(0.5) if is_noise_generator(kwargs.get("generator")) else out

    return patched


def test_a_diverged_node_level_run_is_not_measured_and_the_gate_says_why():
    # Eq. 22's estimate diverges at this setting (its noise feeds back into S)
    res = audit_mechanism(quick_run(1.0), "partpsp", {"sensitivity_mode": "estimated"})
    assert res["applicable"] and not res["epsilon"]["applicable"]
    assert res["epsilon"]["reason"]
    failed = [c for c in gate.check_bound(RULES, cell("partpsp", 1.0, res)) if not c.passed]
    assert any("max_measured_ratio" in c.name and "not measured" in c.detail for c in failed)


def test_a_clip_bound_node_level_ledger_is_measured_by_its_probes():
    """PartPSP calibrated (the clip bound): the sensitivity two opposite canaries expose reaches
    the bound 2 gamma_s CLIP (its lower end, float32 rounding allowed for, within it), the
    measured ε's interval holds the claim; drawing the noise for half the clip actually applied
    (clip x2) is caught by the measured ratio."""
    run = dataclasses.replace(quick_run(1.0), rounds=12)
    res = audit_mechanism(run, "partpsp", {})
    e = res["epsilon"]
    assert res["findings"] == [] and e["applicable"], e
    assert e["ratio_interval"][0] <= 1.0 <= e["ratio_interval"][1]
    assert all(0 <= r["sensitivity_low"] <= r["ledger_sensitivity"] for r in e["rounds"])
    assert res["sensitivity"]["measured_over_bound"] == pytest.approx(1.0, abs=0.02)
    with MUTANTS["clip x2"]("partpsp"):
        e = audit_mechanism(run, "partpsp", {})["epsilon"]
    assert e["ratio_interval"][0] > 1.2


def test_dpdl_is_recomposed_from_its_reported_joint_multiplier():
    failed, res = failed_rules("dpdl", 1.0, None)
    assert not failed, [c.detail for c in failed]
    e = res["epsilon"]
    assert e["accountant"] == "dp_accounting RDP"  # as its ledger composes
    assert e["ledger_recomputed"] == pytest.approx(e["claimed"], rel=0.02)
    # the noise drawn against one sample's direct effect is what the strict reading's probe
    # multiplier predicts (its bound's calibration term is not reached in one round)
    assert 0.9 < e["z_ratio"] < 1.1
    failed, _ = failed_rules("dpdl", 1.0, "noise x0.5")  # so half the noise is caught
    assert "max_measured_ratio" in _names(failed)


def test_randomized_response_flip_rate_is_measured_and_its_absence_caught():
    failed, res = failed_rules("d_psgd_rr", 1.0, None)
    assert not failed, [c.detail for c in failed]
    assert res["epsilon"]["flip_interval"][0] <= 0.5 <= res["epsilon"]["flip_interval"][1]
    with noise_off():  # no flip at all, the claim kept
        broken = audit_mechanism(quick_run(1.0), "d_psgd_rr", {})
    assert math.isinf(broken["epsilon"]["epsilon"])
    assert any("without noise" in f for f in broken["findings"])  # one member's removal probed
    checks = gate.check_bound(RULES, cell("d_psgd_rr", 1.0, broken))
    assert "max_measured_ratio" in _names([c for c in checks if not c.passed])


def test_an_unbounded_contribution_voids_the_claim():
    import defenses._noisy_sum as module

    clipped = module.clipped_grad_sum

    def unclipped(fm, params, x, y, mask, bound, *args, **kwargs):
        return clipped(fm, params, x, y, mask, bound * 1e12, *args, **kwargs)

    with mock.patch.object(module, "clipped_grad_sum", unclipped):
        res = audit_mechanism(quick_run(1.0), "dp_sgp", {})
    assert any("unbounded" in f for f in res["findings"])
    assert math.isinf(res["epsilon"]["epsilon"])


def test_a_non_private_defense_has_no_ledger_to_measure():
    with pytest.raises(NotApplicable, match="not private"):
        audit_mechanism(quick_run(1.0), "sgp", {})


def test_a_cell_without_the_audit_fails_the_rules_saying_why():
    checks = gate.check_bound(RULES, {"defense": "dp_sgp", "epsilon": 1.0, "attacks": {}})
    assert len(checks) == 3 and not any(c.passed for c in checks)
    assert all("no mechanism audit" in c.detail for c in checks)


def test_private_selector_selects_every_claimed_cell():
    from privbench.results.records import as_cell

    bound = {"eps": "private", "require_mechanism": True}
    assert gate._selects(bound, as_cell({"defense": "a", "epsilon": 8.0}))
    assert gate._selects(bound, as_cell({"defense": "a", "epsilon": None,
                                         "setting": {"name": "paper"}}))
    assert not gate._selects(bound, as_cell({"defense": "a", "epsilon": None}))


def test_blocks_follow_the_model_layout_or_split_the_message():
    layout = [("w", 0, 90), ("b", 90, 100), ("w2", 100, 1000)]
    assert blocks(1000, layout) == layout
    assert blocks(100, layout) == layout[:2]  # a shared first layer
    parts = blocks(640, layout)
    assert len(parts) == 8 and parts[0][1:] == (0, 80) and parts[-1][2] == 640
    assert len(blocks(50, layout)) == 1


def test_audited_rounds_spread_over_the_run():
    assert audited_rounds(60, 12)[:4] == [0, 1, 2, 3] and audited_rounds(60, 12)[-1] == 59
    assert len(audited_rounds(60, 12)) == 12 and audited_rounds(5, 12) == [0, 1, 2, 3, 4]
    for total in range(9, 80):  # distinct, the first four consecutive, the last run's last
        got = audited_rounds(total, 8)
        assert len(set(got)) == 8 and got[:4] == [0, 1, 2, 3] and got[-1] == total - 1


def test_a_run_that_goes_non_finite_early_still_shows_reused_noise():
    """PEDFL at the quick defaults goes non-finite in round 5: the first audited rounds are
    consecutive, so its noisy rounds 1-3 are compared and noise reused across them is found."""
    failed, res = failed_rules("pedfl", 1.0, "reused noise")
    assert "require_mechanism" in _names(failed)
    assert any("reused across rounds" in f for f in res["findings"])


def test_gaussian_epsilon_grows_with_less_noise_and_more_sampling():
    z = np.full(60, 4.0)
    base = gaussian_epsilon(z, 0.1, 1e-5, "poisson", 120)
    assert gaussian_epsilon(z / 2, 0.1, 1e-5, "poisson", 120) > base
    assert gaussian_epsilon(z, 0.2, 1e-5, "poisson", 120) > base
    assert gaussian_epsilon(np.zeros(60), 0.1, 1e-5, "poisson", 120) == 0.0  # no release
    assert math.isinf(gaussian_epsilon(np.full(60, np.nan), 0.1, 1e-5, "poisson", 120))


def test_a_change_rate_above_one_half_is_not_read_as_a_flip_rate():
    """Four coordinates in five change where the ledger flips one in ten: the changes are more
    than the flips, so no ε is read; the flips measured stay with the reason."""
    noise = [{"node": i, "live": 1000, "kind": "sign", "changed_live": 800} for i in range(3)]
    ledgers: list[dict | None] = [{"keep_prob": 0.9, "epsilon": 2.0}] * 3
    with pytest.raises(PartlyMeasured, match="above 1/2") as why:
        rr_epsilon(noise, ledgers, 0.05)
    assert why.value.measured["flips"]["flip_rate"] == pytest.approx(0.8)
    fewer = [{**r, "changed_live": 100} for r in noise]  # the ledger's own flip rate
    assert rr_epsilon(fewer, ledgers, 0.05)["ratio_interval"][0] <= 1.0


def test_a_ledger_without_a_finite_claim_or_multiplier_is_not_measured():
    sampling = [{"scheme": "poisson", "rate": 0.1, "members": 50}] * 2
    with pytest.raises(NotApplicable, match="no finite ε"):
        measured_epsilon([], [], sampling, [None, None], None, 10, False, 0.05)
    ledgers: list[dict | None] = [{"epsilon": 1.0, "delta": 1e-5, "sampling": "poisson",
                                   "sample_rate": 0.1}] * 2
    with pytest.raises(NotApplicable, match="no per-release noise multiplier"):
        measured_epsilon([], [], sampling, ledgers, None, 10, False, 0.05)
    assert measured_epsilon([], [], sampling, ledgers, None, 10, True, 0.05)["ratio"] == math.inf


def test_a_randomized_response_that_rarely_flips_is_no_false_alarm():
    """DeFL-VP under the paper's reading at ε = 8 per coordinate flips about one value of a
    message in 3,000: a message without a flip, or two with one flip each at the same place,
    is what the claim predicts, not missing or reused noise."""
    res = audit_mechanism(quick_run(8.0), "defl_vp", {"eps_mode": "per_coordinate"})
    failed = [c for c in gate.check_bound(RULES, cell("defl_vp", 8.0, res, paper=True))
              if not c.passed]
    assert not failed, [c.detail for c in failed]
    assert any(p.get("unflipped") for p in res["probes"])  # the case happened, and was read


def _log(t, payloads):
    """A message log of broadcast records: {kind: (n, d) payload, one row per sender}."""
    from privbench.engine.messages import MessageLog, Record

    log = MessageLog()
    for kind, rows in payloads.items():
        senders = torch.arange(len(rows))
        log.add(Record(t, kind, torch.stack([senders, senders]).T, rows, senders, None, False))
    return log


def test_every_kind_is_checked_against_its_declaration_from_the_trainer_contract_alone():
    """A replay on the neighbouring dataset: a kind declared data-independent that changes and a
    kind never declared are findings; a data-dependent kind may change."""
    from privbench.audit.mechanism_coverage import declared_kinds
    from privbench.audit.mechanism_replay import RoundReplays
    from privbench.engine.messages import MessageKind

    kinds = {k.name: k for k in (MessageKind("model", covered=True),
                                 MessageKind("weight", covered=True, data_dependent=False))}
    model, weight = torch.ones(2, 5), torch.ones(2, 1)
    clean = _log(3, {"model": model, "weight": weight, "extra": torch.zeros(2, 2)})
    other = _log(3, {"model": model + 1, "weight": weight * torch.tensor([[1.0], [0.5]]),
                     "extra": torch.zeros(2, 2)})
    rep = RoundReplays(3, 1, clean, clean, None, None, None, neighbour=other)
    seen, findings = declared_kinds([rep], kinds, 2)
    assert seen["neighbour_rounds"] == 1
    assert seen["kinds"]["model"]["change"] == 1.0 and seen["kinds"]["weight"]["change"] == 0.5
    assert findings == [
        "weight messages, declared data-independent, change with the data: node 1's, when one "
        "member of node 1's data is removed (round 3, noise off: by up to 0.5)",
        "extra messages are sent, but the defense does not declare that kind"]
    unchanged = RoundReplays(3, 1, clean, clean, None, None, None, neighbour=clean)
    assert declared_kinds([unchanged], {**kinds, "extra": kinds["model"]}, 2)[1] == []


@pytest.mark.parametrize("family", ["gaussian", "laplace"])
def test_a_tensor_under_half_the_noise_is_found_and_full_noise_is_not(family):
    from privbench.audit.mechanism_coverage import coverage
    from privbench.engine.messages import MessageKind

    gen = torch.Generator().manual_seed(0)
    layout = [("w", 0, 3000), ("b", 3000, 3100), ("w2", 3100, 6000)]

    def rows(factor):
        if family == "gaussian":
            diff = torch.randn(6000, generator=gen, dtype=torch.float64)
        else:  # Laplace: a difference of two exponentials
            diff = (torch.empty(6000, dtype=torch.float64).exponential_(generator=gen)
                    - torch.empty(6000, dtype=torch.float64).exponential_(generator=gen))
        diff[3000:3100] *= factor
        return [{"node": 0, "round": 0, "kind": "model", "std": 1.0, "_diff": diff,
                 "_live": torch.ones(6000, dtype=torch.bool)}]

    kinds = {"model": MessageKind("model", covered=True)}
    summary, findings = coverage(rows(0.5), kinds, layout, family, 1e-5)
    assert len(findings) == 1 and findings[0].startswith("model noise on b (1.7 % of the message)")
    assert summary["blocks"][0]["block"] == "b" and summary["blocks"][0]["ratio"] < 0.7
    assert coverage(rows(1.0), kinds, layout, family, 1e-5)[1] == []


def _rr_audit(runs: int, factor: float | None = None) -> tuple[list[gate.Check], dict]:
    """D-PSGD+RR at ε = 1 audited over `runs` runs, flipping at `factor` x d times the claimed
    per-coordinate ε (None: correctly), judged by the shipped mechanism rules."""
    ctx = flips_at(lambda coord, d: coord * d * factor) if factor else contextlib.nullcontext()
    with ctx:
        res = audit_mechanism(quick_run(1.0), "d_psgd_rr", {}, MechanismSettings(runs=runs))
    checks = gate.check_bound(RULES, cell("d_psgd_rr", 1.0, res))
    return [c for c in checks if not c.passed and not c.inconclusive], res


def test_repeated_runs_pool_the_flips_of_every_run():
    failed, one = _rr_audit(1)
    assert not failed
    failed, two = _rr_audit(2)
    assert not failed, [c.detail for c in failed]
    assert two["epsilon"]["flip_trials"] == 2 * one["epsilon"]["flip_trials"]
    assert two["settings"]["runs"] == 2 and "runs" not in one["settings"]


@pytest.mark.slow
def test_repeated_runs_catch_flips_one_run_cannot_resolve():
    """Flips at d/2 x the claimed per-coordinate ε: one run's flip rate interval (about
    ±0.0024) still holds 1/2, four runs' (±0.0012) do not."""
    assert not _rr_audit(1, 0.5)[0]
    failed, res = _rr_audit(4, 0.5)
    assert "max_measured_ratio" in _names(failed), res["epsilon"]
    assert not _rr_audit(4)[0]


@pytest.mark.parametrize("runs", [0, 1.5, True])
def test_mechanism_runs_must_be_a_positive_integer(runs):
    with pytest.raises(ConfigError, match=r"mechanism\.runs must be an integer >= 1"):
        MechanismConfig(runs=runs)


def test_a_replay_into_the_next_round_is_not_noise_reused():
    """DP-DPSGD's sample reaches its next round's model (`model@+1`): the replay that follows it
    draws round t + 1's noise from a copy of the run's streams, which the run then draws
    again. Only the run's own rounds count, so the correct run passes and noise re-seeded each
    round is still reported as reused."""
    failed, _ = failed_rules("dp_dpsgd", 1.0, None)
    assert not failed, [c.detail for c in failed]
    failed, res = failed_rules("dp_dpsgd", 1.0, "noise re-seeded each round")
    assert "require_mechanism" in _names(failed)
    assert any("noise reused across rounds" in f for f in res["findings"])
