"""ADP-VRSGP (defenses/adp_vrsgp.py) and its constant-noise baseline DP-SGP (defenses/dp_sgp.py).

Covers the push-sum invariants (Algorithm 2), the reduction to DP-SGP, push-sum de-biasing on a
non-regular directed graph, the momentum-inversion gradient view, the noise actually applied
(Sec. 4's decaying noise alpha(T - t) sigma_hat), per-node budgets (Theorem 1) and the CLI results
JSON.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest
import torch

from defenses.adp_vrsgp import ADPVRSGPConfig, schedule
from privbench.cli import main
from privbench.config import RunConfig
from privbench.engine.grads import clip_l2, masked_sum, per_sample_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import ThreatModel, observe

logging.getLogger("absl").setLevel(logging.ERROR)

RUN = RunConfig(device="cpu", rounds=15, eval_every=15, epsilon=4.0, seed=3)
REDUCED = {"vartheta": 0.0, "noise_schedule": "constant", "lr_schedule": "constant",
           "lr_rule": "run", "psi": 1.0}


def test_schedules_match_an_independently_computed_trace():
    # Golden values computed independently from the paper's rules (T=1000, tau=5, s=0.2,
    # Xi=0.5, n=8, K=1): eq. (2)'s step eta / beta^t, Sec. 4's noise factor alpha(T-t) =
    # (floor((T-t) / tau) + 10)^s from 2.914 down to 1.585 with level changes at t = 1, 6, 11,
    # ..., and the clip G <- psi G (Sec. 4) decayed once per block, ending near 0.0135.
    sched = schedule(ADPVRSGPConfig(), RunConfig(rounds=1000, nodes=8))
    trace = {0: (2.914, 0.307), 100: (2.856, 0.251), 250: (2.760, 0.227), 500: (2.560, 0.216),
             750: (2.268, 0.186), 999: (1.585, 0.167)}
    for t, (alpha, eta) in trace.items():
        assert sched.noise_factor[t] == pytest.approx(alpha, abs=1e-3)
        assert sched.lr[t] == pytest.approx(eta, abs=1e-3)
    assert np.flatnonzero(sched.reset)[:4].tolist() == [0, 1, 6, 11]
    changes = np.flatnonzero(np.diff(sched.noise_factor) != 0) + 1
    assert np.array_equal(np.flatnonzero(sched.reset[1:]) + 1, changes)  # reset <=> level change
    assert sched.clip[0] == 0.1 and sched.clip[-1] == pytest.approx(0.0135, abs=2e-4)
    per_step = schedule(ADPVRSGPConfig(clip_decay="iteration"), RunConfig(rounds=1000))
    assert per_step.clip[-1] == pytest.approx(0.1 * 0.99**999)  # decayed every step: ~4.4e-6


def test_mass_is_conserved_by_mixing():
    # sum_i w_i^t = n, and sum_i x_i^{t+1} = sum_i x_i^{t+1/2} (column-stochastic P).
    built = build(RUN, "adp_vrsgp")
    tr, n = built.trainer, built.ctx.n
    for t in range(RUN.rounds):
        x_before = tr.x.clone()
        tr.round(t)
        assert float(tr.w.sum()) == pytest.approx(n, rel=1e-5)
        x_half = built.ctx.bus.log.get(t, "model").payload  # (n, d): every node's x^{t+1/2}
        assert torch.allclose(tr.x.sum(0), x_half.sum(0), atol=1e-4)
        # Appendix: mean(x^{t+1}) = mean(x^t) - eta_t mean(gtil^t).
        step = float(tr.sched.lr[t]) * tr.gtil.mean(0)
        assert torch.allclose(tr.x.mean(0), x_before.mean(0) - step, atol=1e-5)


def test_weights_move_and_z_reaches_consensus_on_a_non_regular_directed_graph():
    built = build(RunConfig(device="cpu", rounds=60, eval_every=60, seed=1), "adp_vrsgp",
                  policy=RecordPolicy.none())
    topo, tr = built.ctx.topology, built.trainer
    indeg = topo.adjacency(0).sum(dim=1)
    assert not topo.undirected and int(indeg.max()) != int(indeg.min())  # non-regular
    train(tr)
    assert float((tr.w - 1).abs().max()) > 0.2  # the push-sum weights really move
    x_bar = tr.x.mean(0)  # sum w = n, so the network average is mean(x)

    def spread(v: torch.Tensor) -> float:
        return float((v - x_bar).norm(dim=1).max() / x_bar.norm())

    # De-biasing matters: the numerators are far apart, the de-biased models nearly agree.
    assert spread(tr.x) > 0.2 and spread(tr.models()) < 0.2 * spread(tr.x)
    # Pure push-sum from this state (no more gradient noise): z_i -> sum x / sum w.
    x, w = tr.x.clone(), tr.w.clone()
    for t in range(60):
        p = tr.mixer.matrix(t)
        x, w = p @ x, p @ w
    assert float((x / w[:, None] - x_bar).abs().max()) < 1e-4


def test_reduces_to_dp_sgp_with_the_same_seed():
    # vartheta = 0, alpha == beta == 1, psi = 1 is DP-SGD + SGP with constant noise.
    run = RunConfig(device="cpu", rounds=12, eval_every=12, epsilon=2.0, seed=5, lr=1.0)
    base = build(run, "dp_sgp")
    reduced = build(run, "adp_vrsgp", REDUCED)
    train(base.trainer), train(reduced.trainer)
    assert torch.equal(base.trainer.models(), reduced.trainer.models())
    for t in range(run.rounds):
        assert torch.equal(base.ctx.bus.log.get(t, "model").payload,
                           reduced.ctx.bus.log.get(t, "model").payload)
    assert base.trainer.privacy() == reduced.trainer.privacy()
    # ... and the comparison can fail: the full method differs from the baseline.
    full = build(run, "adp_vrsgp", {"lr_rule": "run"})
    train(full.trainer)
    assert not torch.allclose(base.trainer.models(), full.trainer.models())


def test_dp_sgp_view_is_its_released_gradient():
    built = build(RunConfig(device="cpu", rounds=5, eval_every=5, lr=1.0), "dp_sgp")
    tr = built.trainer
    tr.debug_released = {}
    train(tr)
    views = type(tr).gradient_views(observe(built, ThreatModel()), 1, [0, 2, 4])
    for v in views:
        assert float((v.gradient - tr.debug_released[v.round][1]).abs().max()) <= 1e-5


def test_vartheta_zero_switches_fusion_off():
    built = build(RUN, "adp_vrsgp", {"vartheta": 0.0})
    tr = built.trainer
    tr.debug_released = {}
    for t in range(RUN.rounds):
        tr.round(t)
        assert torch.equal(tr.gtil, tr.debug_released[t])


@pytest.mark.parametrize("overrides", [{}, {"vartheta": 0.7, "tau": 3}])
def test_momentum_inversion_recovers_the_released_noisy_gradient(overrides):
    # (x^t - x^{t+1/2}) / eta_t is the fused gradient; undoing the EMA gives gbar^t.
    built = build(RUN, "adp_vrsgp", overrides)
    tr = built.trainer
    tr.debug_released = {}
    train(tr)
    victim, rounds = 2, list(range(RUN.rounds))
    n = built.ctx.n
    colluders = ThreatModel("colluding", tuple(k for k in range(n) if k != victim))
    for threat in (ThreatModel(), colluders):
        views = type(tr).gradient_views(observe(built, threat), victim, rounds)
        for v in views:
            assert v.exact and v.kind == "gradient"
            assert float((v.gradient - tr.debug_released[v.round][victim]).abs().max()) <= 1e-5
    # The inversion is needed: read as plain push-sum (no EMA), the same messages give the fused
    # gtil^t, which equals the release only at PGF resets.
    obs = observe(built, ThreatModel())
    obs.defense_cfg = dataclasses.replace(tr.cfg, vartheta=0.0)  # same public lr schedule
    naive = type(tr).gradient_views(obs, victim, rounds)
    for v in naive:
        gap = float((v.gradient - tr.debug_released[v.round][victim]).abs().max())
        assert (gap <= 1e-5) if tr.sched.reset[v.round] else (gap > 1e-3)


def test_a_lone_neighbour_gets_not_applicable():
    built = build(RUN, "adp_vrsgp")
    train(built.trainer)
    topo = built.ctx.topology
    pairs = [(v, o) for v in range(built.ctx.n) for o in topo.out_neighbours(0, v)
             if not ThreatModel("neighbour", (o,)).sees_all_inputs_of(v, topo, 0)]
    assert pairs, "random_out(k=2) should leave some victim's inputs unseen by one neighbour"
    victim, observer = pairs[0]
    obs = observe(built, ThreatModel("neighbour", (observer,)))
    with pytest.raises(NotApplicable, match="not observed"):
        type(built.trainer).gradient_views(obs, victim, [3])


def test_the_noise_has_the_scheduled_std():
    # Sec. 4: the noise on the clipped SUM at step t has std alpha(T-t) sigma_hat_i G_t.
    # At t = 0 the gradient is taken at the public x0, so the noise is exactly recoverable.
    # n*d = 8 * 17226 standard normals: the sample std has sd ~ 1/sqrt(2 n d) = 0.0019, so the
    # 0.02 band fails with probability < 1e-20 for a correct std; a 1/|B| slip (32x) or a
    # missing alpha (x2.9) fails it surely.
    built = build(RUN, "adp_vrsgp")
    tr, ctx = built.trainer, built.ctx
    tr.debug_released = {}
    x0 = tr.models().clone()
    tr.round(0)
    slots, mask = ctx.truth.batches[0]
    xb, yb = ctx.data.gather(slots)
    g, _ = clip_l2(per_sample_grads(ctx.fm, x0, xb, yb), float(tr.sched.clip[0]))
    noise = tr.debug_released[0] * RUN.batch_size - masked_sum(g, mask)  # (n, d)
    std = tr.noise_std(0)  # (n, 1)
    expected = tr.sched.noise_factor[0] * tr.sigma_hat * tr.sched.clip[0]
    assert torch.allclose(std[:, 0].double(), expected, rtol=1e-6)
    assert float((noise / std).std()) == pytest.approx(1.0, abs=0.02)
    assert float((noise / std).mean()) == pytest.approx(0.0, abs=0.02)


def test_per_node_budgets_are_calibrated_and_reported_in_both_modes():
    eps = (1.0, 2.0, 4.0, 8.0)
    built = build(RunConfig(device="cpu", nodes=4, rounds=15, eval_every=15), "adp_vrsgp",
                  {"epsilons": eps})
    reports = built.trainer.privacy()
    assert len(reports) == 8 and {r["mode"] for r in reports} == {"paper", "calibrated"}
    for r in reports:
        assert {"epsilon", "delta", "accountant", "mode", "unit", "uncovered"} <= set(r)
        assert r["unit"] == "sample-level" and r["uncovered"] == []
    cal = {r["node"]: r for r in reports if r["mode"] == "calibrated"}
    for i, target in enumerate(eps):
        assert 0.99 * target <= cal[i]["epsilon"] <= target  # rigorous and on the safe side
    sigma = built.trainer.sigma_hat
    assert bool((sigma[1:] < sigma[:-1]).all())  # more budget, less noise
    with pytest.raises(ConfigError, match="epsilons"):
        build(RunConfig(device="cpu", nodes=4, rounds=3), "adp_vrsgp", {"epsilons": (1.0, 2.0)})


def test_cli_trains_and_writes_per_node_epsilon(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--defense", "adp_vrsgp", "--eps", "4", "--dataset", "digits",
                 "--rounds", "10", "--device", "cpu", "--out", str(out), "--quiet",
                 "--set", "defense.lr_constant=10"])
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    assert res["defense"] == "adp_vrsgp" and res["defense_config"]["lr_constant"] == 10.0
    by_mode = {m: [r for r in res["privacy"] if r["mode"] == m] for m in ("paper", "calibrated")}
    assert all(len(v) == res["run"]["nodes"] for v in by_mode.values())
    assert all(r["epsilon"] <= 4.0 for r in by_mode["calibrated"])
    assert {m["name"]: m["covered"] for m in res["messages"]} == {"model": True, "weight": True}
