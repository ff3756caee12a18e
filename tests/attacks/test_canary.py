"""The one-run gradient-canary audit (`privbench.audit.canary_audit`, `attacks/canary.py`).

A DP-SGP run at ε = 1 (4 nodes, 120 members each, batch 16: rate 0.133, 60 rounds) is audited
with 300 canaries per node, once as shipped and once with its noise scaled by 0.3 (claim
unchanged, about 6.8 spent). About 12 s per audit on 2 CPU cores. Statistical assertions are
95 % statements (the rate checks: Clopper-Pearson at 1 - 1e-6, so a correct sampler fails them
with probability below 1e-5 over the test's checks); the runs are seeded, so the outcome is fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attacks.canary import CanaryConfig
from privbench.audit.canary_audit import (
    CanaryContext,
    gdp_fit,
    gradient_canary_audit,
    joint_llr,
    with_canary_rows,
)
from privbench.audit.input_canary import _view_llr
from privbench.config import RunConfig, replace_checked
from privbench.errors import ConfigError
from privbench.metrics.audit import canaries_for_cap, clopper_pearson, one_run_cap
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.report.gate import empirical_ratio_check
from privbench.threat.observation import GradientView

load_plugins()

from defenses import dp_sgp  # noqa: E402  (registered by load_plugins)

RUN = {"model": "mlp", "nodes": 4, "rounds": 60, "eval_every": 60, "batch_size": 16, "lr": 0.2,
       "delta": 1e-5, "holdout": 0.5, "max_per_node": 240, "device": "cpu", "epsilon": 1.0}
M = 300


def _audit(defense: str = "dp_sgp", **kw) -> dict:
    run = replace_checked(RunConfig(), RUN, where="run")
    return gradient_canary_audit(run, defense, M, gen=torch.Generator().manual_seed(1), **kw)


class ScaledNoise(dp_sgp.DPSGP):
    def noise_std(self, t: int) -> torch.Tensor:
        return super().noise_std(t) * 0.3  # the claim stays the calibrated one


@pytest.fixture(scope="module")
def correct() -> dict:
    return _audit()


@pytest.fixture(scope="module")
def weak_noise() -> dict:
    real = DEFENSES._items["dp_sgp"]
    DEFENSES._items["dp_sgp"] = ScaledNoise
    try:
        return _audit()
    finally:
        DEFENSES._items["dp_sgp"] = real


def _within(k: int, n: int, p: float) -> bool:
    lo, hi = clopper_pearson(k, n, 1e-6)
    return lo <= p <= hi


def test_canaries_keep_every_nodes_sampling_rate(correct):
    for node in correct["nodes"]:
        rate = node["canary_rate"]
        q = rate["ledger"]
        assert q == pytest.approx(16 / 120, rel=0.02)  # the undiluted ledger rate
        assert rate["rate"] == pytest.approx(q)  # the rate the sampler drew canaries at
        assert _within(rate["drawn"], rate["offered"], q)
        # the node's own records: drawn at q too (|D_i| did not grow)
        assert rate["members_realised"] == pytest.approx(q, abs=0.02)
        assert node["claimed_epsilon"]["calibrated"]["epsilon"] == pytest.approx(1.0, abs=0.02)


def test_every_node_is_audited_through_its_own_threat(correct):
    assert [n["node"] for n in correct["nodes"]] == [0, 1, 2, 3]
    assert correct["p_star"] == pytest.approx(0.05 / 4)  # Bonferroni over the nodes
    assert correct["cap"] == pytest.approx(one_run_cap(M, 2 * 30, 1e-5, 0.05 / 4))
    assert all(n["threat"]["kind"] == "eavesdropper" for n in correct["nodes"])
    assert all(n["scorer"] == "joint" for n in correct["nodes"])


def test_out_guesses_are_made(correct):
    for node in correct["nodes"]:
        one = node["one_run"]
        assert one["k_minus"] == one["k_plus"] == 30
        assert one["guesses"] == 60


def test_the_estimate_tracks_the_mechanism(correct, weak_noise):
    for node in correct["nodes"]:  # correct: the interval reaches the claim or stays below it
        low, high = node["estimate"]["epsilon_interval"]
        assert low <= 1.0 and node["one_run"]["epsilon_lb"] <= 1.0
        assert low <= node["estimate"]["epsilon"] <= high
    for node in weak_noise["nodes"]:  # noise x 0.3: well above the claim of 1
        assert node["estimate"]["epsilon_interval"][0] > 2.0
    assert max(n["one_run"]["epsilon_lb"] for n in weak_noise["nodes"]) > 0.5


def test_ratio_is_the_nodes_bound_over_its_own_claim(weak_noise):
    for node in weak_noise["nodes"]:
        own = node["claimed_epsilon"]["calibrated"]["epsilon"]
        assert node["ratio"] == pytest.approx(node["one_run"]["epsilon_lb"] / own)
    assert weak_noise["worst"]["ratio"] == max(n["ratio"] for n in weak_noise["nodes"])


def test_the_gate_holds_the_canary_audit_to_its_own_claim_ratio():
    cell = {"privacy": [{"node": 0, "epsilon": 1.0, "mode": "calibrated"},
                        {"node": 1, "epsilon": 0.2, "mode": "calibrated"}],
            "attacks": {"canary": {"status": "ok", "metrics": {
                "empirical_epsilon": 0.5, "empirical_epsilon_cap": 4.0,
                "empirical_ratio": 2.5}}}}  # node 1's bound 0.5 over its own claim 0.2
    check = empirical_ratio_check("dpdl@1", cell, 1.0)
    assert not check.passed and "own claim 2.5" in check.detail
    cell["attacks"]["canary"]["metrics"]["empirical_ratio"] = 0.5
    assert empirical_ratio_check("dpdl@1", cell, 1.0).passed


def test_fixed_size_draws_add_canaries_at_b_over_d():
    from privbench.engine.runner import build

    run = replace_checked(RunConfig(), {**RUN, "rounds": 1}, where="run")
    base = build(run, "sgp")
    labels = -(torch.arange(40) + 1)
    data, slots = with_canary_rows(base.ctx.data, {2: labels})
    assert torch.equal(data.counts, base.ctx.data.counts)  # |D_i| unchanged
    fields = {k: getattr(base.ctx, k) for k in ("run", "fm", "topology", "bus", "truth",
                                                  "streams", "device")}
    ctx = CanaryContext(**fields, data=data, slots=slots,
                        canary_gen=torch.Generator().manual_seed(0))
    for t in range(50):
        _, y, mask = ctx.draw(t)
        assert not bool((y[[0, 1, 3]] < 0).any())  # only node 2 carries canaries
        assert int((mask[2] & (y[2] < 0)).sum()) == int((y[2] < 0).sum())
    assert ctx.rates[2][0] == pytest.approx(16 / int(data.counts[2]))
    assert _within(ctx.drawn[2], ctx.offered[2], 16 / int(data.counts[2]))
    assert ctx.members_drawn[2] == 50 * 16


def test_joint_scoring_sees_through_noise_reused_across_rounds():
    gen = torch.Generator().manual_seed(0)
    t, d, m, q, a = 40, 4000, 200, 0.2, 1.0
    coords = torch.arange(m)
    inc = torch.rand(m, generator=gen) < 0.5
    drawn = (torch.rand(t, m, generator=gen) < q) & inc  # (T, m)
    noise = 5.0 * torch.randn(d, generator=gen)  # the same noise every round
    g = noise.expand(t, d).clone() + 0.05 * torch.randn(t, d, generator=gen)
    g[:, :m] += a * drawn
    views = [GradientView(victim=0, round=k, params=torch.zeros(d), gradient=g[k],
                          kind="gradient", mask=None, batch_size=1, source="test",
                          exact=True) for k in range(t)]
    background = torch.ones(d, dtype=torch.bool)
    background[coords] = False
    joint = joint_llr(views, coords, background, a, q)
    per_round = sum(_view_llr(v, coords, a, q) for v in views)  # each round's noise as fresh
    assert gdp_fit(joint, inc.numpy(), 1e-5)["mu"] > 5
    assert gdp_fit(per_round, inc.numpy(), 1e-5)["mu"] < 1.5


def test_joint_scoring_leaves_out_flat_rounds_and_survives_huge_views():
    """A view that is zero off the canaries (a control variate at its start) carries no
    evidence and is left out; views of order 1e200 (their squares overflow) score as the same
    views at order 1, since the likelihood ratio does not depend on the unit."""
    gen = torch.Generator().manual_seed(1)
    t, d, m, q, a = 6, 3000, 100, 0.5, 1.0
    coords = torch.arange(m)
    inc = torch.rand(m, generator=gen) < 0.5
    g = 0.3 * torch.randn(t, d, generator=gen, dtype=torch.float64)
    g[:, :m] += a * ((torch.rand(t, m, generator=gen) < q) & inc)
    g[0] = 0.0  # round 0: nothing sent yet

    def views(x: torch.Tensor) -> list[GradientView]:
        return [GradientView(victim=0, round=k, params=torch.zeros(d), gradient=x[k],
                             kind="gradient", mask=None, batch_size=1, source="test",
                             exact=True) for k in range(t)]

    background = torch.ones(d, dtype=torch.bool)
    background[coords] = False
    unit = joint_llr(views(g), coords, background, a, q)
    huge = joint_llr(views(g * 1e200), coords, background, a * 1e200, q)
    assert np.isfinite(unit).all() and np.allclose(unit, huge, rtol=1e-6, atol=1e-6)
    assert gdp_fit(unit, inc.numpy(), 1e-5)["mu"] > 1
    assert not joint_llr(views(torch.zeros(t, d, dtype=torch.float64)), coords, background,
                         a, q).any()


def test_canaries_for_cap_is_the_smallest_count():
    m = canaries_for_cap(3.0, 0.2, 1e-5, 0.05)
    k = round(m * 0.2 / 2)
    assert one_run_cap(m, 2 * k, 1e-5) > 3.0
    assert one_run_cap(m - 1, 2 * round((m - 1) * 0.2 / 2), 1e-5) <= 3.0


@pytest.mark.slow
def test_a_claim_of_8_needs_about_13000_canaries_guessed_all():
    m = canaries_for_cap(8.0, 1.0, 1e-5)
    assert 12_000 < m < 14_000
    assert canaries_for_cap(8.0, 0.5, 1e-5, limit=100_000) is None


def test_bad_canary_settings_are_refused():
    with pytest.raises(ConfigError, match=r"canary\.nodes"):
        CanaryConfig(nodes="first")
    with pytest.raises(ConfigError, match="guess_fraction"):
        CanaryConfig(guess_fraction=0.0)
    with pytest.raises(ConfigError, match="distinct coordinates"):
        run = replace_checked(RunConfig(), {**RUN, "rounds": 1}, where="run")
        gradient_canary_audit(run, "dp_sgp", 10_000)
    assert math.isfinite(one_run_cap(M, 60, 1e-5))


@pytest.mark.slow
def test_dpdl_is_held_to_each_nodes_own_claim_in_the_audited_run():
    from privbench.audit.candidates import claims
    from privbench.engine.loop import train
    from privbench.engine.runner import build

    res = _audit("dpdl")
    assert res["nodes"], res
    cell = build(replace_checked(RunConfig(), RUN, where="run"), "dpdl")
    train(cell.trainer, evaluations=False)
    cell_privacy = cell.trainer.privacy()
    for node in res["nodes"]:
        own = node["claimed_epsilon"]["calibrated"]["epsilon"]
        # the node's claim in the cell's own run: its rate is not diluted by the canaries
        assert own == pytest.approx(claims(cell_privacy, node["node"])["calibrated"]["epsilon"])
        assert node["ratio"] == pytest.approx(node["one_run"]["epsilon_lb"] / own)
        assert node["canary_rate"]["rate"] == pytest.approx(node["canary_rate"]["ledger"])
