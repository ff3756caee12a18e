"""Dyn-D2P trainer (Dyn-D2P paper, Algorithm 1): its accounting (eqs. (4), (6), (8), (9)), clip
and noise schedules, push-sum invariants and its reduction to SGP.

Golden numbers are the paper's equations solved independently (scipy brentq; PLD by dp-accounting
0.6.0); each test names the equation it checks.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from defenses.dyn_d2p import (
    DynD2P,
    DynD2PConfig,
    clip_schedule,
    clt_spent,
    node_plan,
)
from privbench.accounting import (
    ApproximateAccountingWarning,
    dyn_d2p_growth,
    dyn_d2p_mu0,
    dyn_d2p_mu_bar,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
)
from privbench.cli import main as cli_main
from privbench.config import RunConfig
from privbench.engine.grads import clip_l2, masked_sum, per_sample_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.mixing import Mixer, push_sum
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.observation import Observation, ThreatModel
from privbench.topology import build_topology

pytestmark = pytest.mark.filterwarnings("ignore::privbench.accounting.ApproximateAccountingWarning")


def _run(**kw: object) -> RunConfig:
    base = dict(nodes=4, rounds=6, batch_size=8, lr=0.1, epsilon=1.0, delta=1e-4, device="cpu",
                eval_every=1000, seed=3)
    base.update(kw)
    return RunConfig(**base)  # type: ignore[arg-type]


def _build(name: str = "dyn_d2p", over: dict | None = None, **kw: object):
    return build(_run(**kw), name, over or {})


# ---------------------------------------------------------------- accounting (eqs. (4), (8), (9))


def test_eq4_round_trip_and_delta():
    # Eq. (4) round trip: mu(eps = 1, delta = 1e-4) = 0.313902 and back; delta(1; 1) = 0.126937.
    assert gdp_mu(1.0, 1e-4) == pytest.approx(0.313902, abs=1e-6)
    assert gdp_epsilon(0.313902, 1e-4) == pytest.approx(1.0, abs=1e-5)
    assert gdp_delta(1.0, 1.0) == pytest.approx(0.126937, abs=1e-6)
    for eps, mu in ((0.3, 0.107716), (0.7, 0.228828), (1.0, 0.313902), (3.0, 0.817556)):
        assert gdp_mu(eps, 1e-4) == pytest.approx(mu, abs=1e-6)


@pytest.mark.parametrize("j,b,k,eps,mu_bar,mu0_2,mu0_10", [
    # Eq. (8) solved for more (J, B, K) settings.
    (2500, 32, 4000, 0.3, 0.132474, 0.090000, 0.028413),
    (2500, 32, 4000, 3.0, 0.838478, 0.555333, 0.151494),
    (3000, 32, 3000, 1.0, 0.503602, 0.339072, 0.100664),
    (2500, 1, 10000, 0.3, 1.452728, 0.920526, 0.219913),
    (2500, 1, 10000, 1.0, 2.033842, 1.230867, 0.273655),
    (2500, 1, 10000, 3.0, 2.457086, 1.443623, 0.311614),
])
def test_eq8_eq9_test_vectors(j, b, k, eps, mu_bar, mu0_2, mu0_10):
    p, mu_tot = b / j, gdp_mu(eps, 1e-4)
    assert dyn_d2p_mu_bar(mu_tot, p, k) == pytest.approx(mu_bar, abs=1e-6)
    for rho, expect in ((2.0, mu0_2), (10.0, mu0_10)):
        mu0 = dyn_d2p_mu0(mu_tot, p, k, rho)
        assert mu0 == pytest.approx(expect, abs=1e-6)
        assert mu_bar / rho < mu0 <= mu_bar  # the bracket eq. (8)'s root lies in


def test_eq8_spends_exactly_mu_tot_and_rho_to_one_gives_mu_bar():
    # Eq. (8) for J = 2500, B = 32, K = 4000: mu_0 = 0.253065, the budget met to 1e-9; eq. (9)
    # for B = 1, K = 10000: mu_bar = 2.033842, the limit of eq. (8) as rho_mu -> 1.
    j, b, k = 2500, 32, 4000
    p, mu_tot = b / j, gdp_mu(1.0, 1e-4)
    mu0 = dyn_d2p_mu0(mu_tot, p, k, 2.0)
    assert mu0 == pytest.approx(0.253065, abs=1e-6)
    mus = mu0 * dyn_d2p_growth(k, 2.0)
    assert p * math.sqrt(np.sum(np.expm1(mus**2))) == pytest.approx(mu_tot, rel=1e-9)
    mu_bar = dyn_d2p_mu_bar(gdp_mu(1.0, 1e-4), 1 / 2500, 10000)
    assert mu_bar == pytest.approx(2.033842, abs=1e-6)
    assert dyn_d2p_mu0(gdp_mu(1.0, 1e-4), 1 / 2500, 10000, 1 + 1e-9) == pytest.approx(mu_bar,
                                                                                     rel=1e-8)


def test_plan_matches_eq_8_and_rigorous_accountant_reports_more():
    # Eq. (8)'s mu_0 for the mini-batch setting, and the PLD epsilon of that CLT-calibrated Dyn
    # schedule (1.024 at discretization 1e-3; our 48-bucket schedule is conservative, so >=).
    plan = node_plan(DynD2PConfig(calibrate_with="paper"), 1.0, 1e-4, 4000, 32 / 2500)
    assert plan.noise["mu_0"] == pytest.approx(0.253065, abs=1e-6)
    paper, calibrated = plan.report("paper"), plan.report("calibrated")
    assert paper.epsilon == pytest.approx(1.0, abs=1e-6) and paper.approximate
    assert 1.02 <= calibrated.epsilon <= 1.05 and not calibrated.approximate
    const = node_plan(DynD2PConfig(variant="const", calibrate_with="paper"), 1.0, 1e-4, 4000,
                      32 / 2500)
    assert const.noise["mu_0"] == pytest.approx(0.374257, abs=1e-6)  # mu_bar, eq. (9)


def test_calibrated_mode_meets_the_target_with_the_rigorous_accountant():
    plan = node_plan(DynD2PConfig(), 1.0, 1e-4, 50, 0.1)  # the default is calibrated
    assert plan.calibrated_with == "calibrated"
    eps = plan.report("calibrated").epsilon
    assert 0.99 <= eps <= 1.0  # calibrate_noise_scale: safe side, rtol 1e-3
    paper = node_plan(DynD2PConfig(calibrate_with="paper"), 1.0, 1e-4, 50, 0.1)
    assert plan.noise["mu_0"] < paper.noise["mu_0"]  # the CLT (eq. (6)) under-noises


# ---------------------------------------------------------------- schedules (Sec. 3, eq. (7))


def plan_schedules(cfg: DynD2PConfig, plan) -> dict[str, np.ndarray]:
    """C_k, mu_k and sigma_k = C_k / mu_k (Sec. 3) of what the trainer draws: the clip
    schedule times the plan's z_k = 1 / mu_k."""
    z = np.asarray(plan.schedule)
    clip = clip_schedule(cfg, len(z))
    return {"clip": clip, "mu": 1.0 / z, "sigma": clip * z}


@pytest.mark.parametrize("variant,first,last", [
    # J=2500, B=32, K=4000, eps=1, rho_c=rho_mu=2, C_0=7, C_bar=3; mu_0 by eq. (8).
    ("dyn", 27.661, 6.918), ("dyn_c", 18.704, 9.353), ("dyn_mu", 11.855, 5.928),
    ("const", 8.016, 8.016),
])
def test_noise_schedules_match_the_paper_s_rules(variant, first, last):
    cfg = DynD2PConfig(variant=variant, clip_0=7.0, clip_bar=3.0, calibrate_with="paper")
    plan = node_plan(cfg, 1.0, 1e-4, 4000, 32 / 2500)
    s = plan_schedules(cfg, plan)
    assert s["sigma"][0] == pytest.approx(first, abs=1.5e-3)
    assert s["sigma"][-1] == pytest.approx(last, abs=1.5e-3)
    if variant == "dyn":
        assert s["clip"][-1] == pytest.approx(3.5006, abs=1e-4)
        assert s["mu"][-1] == pytest.approx(0.506042, abs=1e-6)


def test_schedules_are_monotone():
    # C_k decreasing, mu_k increasing, sigma_k decreasing, sigma_{K-1} / sigma_0 =
    # (rho_c rho_mu)^(-(K-1)/K).
    cfg, k = DynD2PConfig(rho_c=3.0, rho_mu=5.0), 500
    s = plan_schedules(cfg, node_plan(cfg, 1.0, 1e-4, k, 0.05))
    assert np.all(np.diff(s["clip"]) < 0) and np.all(np.diff(s["mu"]) > 0)
    assert np.all(np.diff(s["sigma"]) < 0)
    assert s["sigma"][-1] / s["sigma"][0] == pytest.approx((3.0 * 5.0) ** (-(k - 1) / k))


def test_online_accountant():
    # The CLT budget (eq. (6)) spent after K/2 steps, and the whole target after K.
    k, p = 4000, 32 / 2500
    cfg = DynD2PConfig(calibrate_with="paper")  # mu_0 by eq. (8)
    plan = node_plan(cfg, 1.0, 1e-4, k, p)
    assert plan.noise["mu_0"] == pytest.approx(dyn_d2p_mu0(gdp_mu(1.0, 1e-4), p, k, 2.0))
    mus = plan_schedules(cfg, plan)["mu"]
    mu_half, eps_half = clt_spent(mus, p, k // 2, 1e-4)
    assert mu_half == pytest.approx(0.17825, abs=1e-5) and eps_half == pytest.approx(0.5285,
                                                                                     abs=1e-4)
    mu_end, eps_end = clt_spent(mus, p, k, 1e-4)
    assert mu_end == pytest.approx(gdp_mu(1.0, 1e-4), rel=1e-9)
    assert eps_end == pytest.approx(1.0, abs=1e-8)


def test_trainer_spends_its_target_and_reports_both_modes():
    b = _build(over={"calibrate_with": "paper"}, epsilon=0.7)
    tr = b.trainer
    assert tr.epsilon_spent(tr.ctx.run.rounds) == pytest.approx([0.7] * 4, abs=1e-8)
    assert all(e < 0.7 for e in tr.epsilon_spent(3))
    reports = tr.privacy()
    assert len(reports) == 2 * 4
    for node in range(4):
        mine = {r["mode"]: r for r in reports if r["node"] == node}
        assert set(mine) == {"paper", "calibrated"}
        assert mine["paper"]["epsilon"] == pytest.approx(0.7, abs=1e-8)
        assert mine["paper"]["accountant"] == "gdp_clt" and mine["paper"]["approximate"]
        assert mine["calibrated"]["accountant"] == "pld"
        assert mine["calibrated"]["epsilon"] >= 0.7 * 0.999  # never below the target much
        for key in ("epsilon", "delta", "accountant", "mode", "unit", "uncovered"):
            assert key in mine["paper"]


def test_unequal_local_datasets_get_their_own_budget():
    # p_i = B / J_i: each node solves its own mu_0 (eq. (8)).
    b = _build(nodes=5)
    tr = b.trainer
    counts = b.ctx.data.counts.tolist()
    assert len(set(counts)) > 1
    assert tr.rates == pytest.approx([8 / c for c in counts])
    big, small = int(np.argmax(counts)), int(np.argmin(counts))
    assert tr.mu_0[big] > tr.mu_0[small]  # more data: smaller p, larger per-step budget


# ---------------------------------------------------------------- push-sum (Algorithm 1)


def test_push_sum_consensus_on_non_regular_directed_graph():
    # gamma = 0, time-varying random directed graph: z_i converges to the initial average.
    from privbench.engine.messages import MessageBus, MessageKind

    gen = torch.Generator().manual_seed(0)
    topo = build_topology("random_out", 7, gen, k=2, time_varying=True)
    mixer = Mixer(topo, "column", torch.device("cpu"))
    bus = MessageBus(DynD2P.kinds, RecordPolicy.none())
    x0 = torch.randn(7, 5, generator=gen)
    x, w = x0.clone(), torch.ones(7)
    moved = False
    for t in range(300):
        x, w = push_sum(bus, mixer, t, x, w)
        assert w.sum().item() == pytest.approx(7.0, abs=1e-4)  # float32 over 300 rounds
        moved |= bool((w - 1).abs().max() > 1e-3)
    assert moved  # non-regular graph: w really departs from 1
    assert torch.allclose(x / w[:, None], x0.mean(0).expand(7, -1), atol=1e-4)
    assert MessageKind  # imported for the bus


def test_mass_conservation_and_debiasing_in_the_trainer():
    # sum_i x_i^{k+1} = sum_i x_i^k - gamma sum_i (g_i^k + N_i^k), on the default random_out
    # graph (non-regular).
    b = _build(over={"record_released": True}, rounds=5)
    tr = b.trainer
    for t in range(5):
        x_before = tr.x.sum(0).clone()
        tr.round(t)
        expect = x_before - b.ctx.run.lr * tr.released[t].sum(0)
        assert torch.allclose(tr.x.sum(0), expect, atol=1e-4)
        assert tr.w.sum().item() == pytest.approx(4.0, abs=1e-5)
    assert (tr.w - 1).abs().max() > 1e-3
    assert torch.allclose(tr.models(), tr.x / tr.w[:, None])


def test_exponential_graph_one_message_in_and_out_and_unit_weights():
    # One-peer exponential graph: one in- and one out-message per node per round.
    b = _build(topology="exponential", rounds=4)
    train(b.trainer)
    for t in range(4):
        p = b.ctx.topology.mixing(t, "column")
        assert torch.allclose(p.sum(0), torch.ones(4))
        edges = b.ctx.bus.log.get(t, "model").edges
        assert sorted(edges[:, 0].tolist()) == list(range(4))
        assert sorted(edges[:, 1].tolist()) == list(range(4))
    assert torch.allclose(b.trainer.w, torch.ones(4))


# ---------------------------------------------------------------- clipping and noise (§9.8-9)


def test_one_sample_clipped_gradient_norm_is_bounded():
    # eps = inf (no noise), one-sample mode -> released = g_i^k, ||g|| <= C_k.
    b = _build(over={"sampling": "one_sample", "record_released": True, "clip_0": 0.05},
               epsilon=math.inf, rounds=6)
    train(b.trainer)
    for t, g in b.trainer.released.items():
        assert torch.all(g.norm(dim=1) <= b.trainer.clip[t] + 1e-6)
        assert torch.all(g.norm(dim=1) > 0.5 * b.trainer.clip[t])  # clipping was active


def test_no_noise_and_no_clipping_is_plain_sgp():
    # same seed, same samples -> the same trajectory as the `sgp` baseline.
    run = dict(batch_size=1, rounds=8)
    dyn = _build(over={"sampling": "one_sample", "clip_0": 1e9}, epsilon=math.inf, **run)
    sgp = build(_run(**run), "sgp")
    train(dyn.trainer)
    train(sgp.trainer)
    assert torch.allclose(dyn.trainer.models(), sgp.trainer.models(), atol=1e-5)
    assert dyn.trainer.privacy()[0]["epsilon"] == "inf"


def test_released_noise_has_the_scheduled_std():
    # Noise = released * B - sum of clipped per-sample gradients (recomputed from ground truth).
    # n * d = 4 * 17226 draws: the relative sd of the std estimate is ~0.27%, so a 3% band fails
    # with probability < 1e-20 if the std is right; a wrong scale (e.g. C_k vs C_k / mu_k) fails.
    b = _build(over={"record_released": True}, rounds=3)
    tr, ctx = b.trainer, b.ctx
    for t in range(3):
        z = tr.models().clone()
        tr.round(t)
        slots, mask = ctx.truth.batches[t]
        x, y = ctx.data.gather(slots)
        # independent of the trainer's fused path: materialise, clip, then sum
        clean = masked_sum(clip_l2(per_sample_grads(ctx.fm, z, x, y), tr.clip[t])[0], mask)
        noise = tr.released[t] * tr.expected[:, None] - clean  # (n, d)
        std = noise.std(dim=1)
        assert torch.allclose(std, tr.sigma[t], rtol=0.03)
        assert abs(noise.mean().item()) < 0.01 * tr.sigma[t].mean().item()


def test_poisson_batches_have_the_expected_size():
    # Mean sampled count over 4 nodes * 30 rounds of Binomial(J, B/J): sd of the mean < 0.26
    # around B = 8, so |mean - 8| < 1.6 (> 6 sd) fails with probability < 1e-9.
    b = _build(rounds=30)
    train(b.trainer)
    sizes = [m.sum(1).float() for _, m in b.ctx.truth.batches.values()]
    assert abs(torch.cat(sizes).mean().item() - 8.0) < 1.6
    for slots, mask in b.ctx.truth.batches.values():
        assert torch.all(slots[mask] < b.ctx.data.counts[:, None].expand_as(slots)[mask])


# ---------------------------------------------------------------- gradient views


def _observation(b, threat: ThreatModel, x0: bool = True) -> Observation:
    return Observation(b.ctx.bus.log.observed_by(threat.receivers()), threat, b.ctx.run,
                       b.defense, b.trainer.cfg, b.ctx.fm, b.ctx.topology,
                       b.trainer.init_params()[0] if x0 else None)


def test_gradient_view_equals_the_released_noisy_gradient():
    b = _build(over={"record_released": True}, rounds=5)
    tr = b.trainer
    zs = []
    for t in range(5):
        zs.append(tr.models().clone())
        tr.round(t)
    obs = _observation(b, ThreatModel("eavesdropper"))
    for victim in range(4):
        views = DynD2P.gradient_views(obs, victim, [0, 2, 4])
        for v in views:
            ref = tr.released[v.round][victim]
            assert torch.allclose(v.gradient, ref, atol=1e-3 * ref.abs().max().item())
            assert torch.allclose(v.params, zs[v.round][victim], atol=1e-5)
            assert v.exact and v.kind == "gradient" and v.batch_size == 8


def test_gradient_view_for_a_colluding_set_and_not_applicable_otherwise():
    b = _build(over={"record_released": True}, rounds=4)
    train(b.trainer)
    victim, t = 0, 3
    # Everyone but the victim colludes: every in-neighbour of the victim also sends to one of
    # them (out-degree 2), and so does the victim, so x_i^t and x_i^{t+1/2} are both known.
    obs = _observation(b, ThreatModel("colluding", (1, 2, 3)))
    (view,) = DynD2P.gradient_views(obs, victim, [t])
    ref = b.trainer.released[t][victim]
    assert torch.allclose(view.gradient, ref, atol=1e-3 * ref.abs().max().item())
    with pytest.raises(NotApplicable):  # round 0 needs the public x^0
        DynD2P.gradient_views(_observation(b, ThreatModel("eavesdropper"), x0=False), victim, [0])


def test_gradient_view_not_applicable_for_a_single_out_neighbour():
    # One-peer exponential graph (Appendix E): at round 2 (hop 1) node 3 sends only to node 0,
    # so node 2, node 0's out-neighbour at round 3 (hop 2), never sees x_3^{5/2}.
    b = _build(topology="exponential", rounds=4)
    train(b.trainer)
    assert b.ctx.topology.out_neighbours(3, 0) == [2]
    assert b.ctx.topology.out_neighbours(2, 3) == [0]
    obs = _observation(b, ThreatModel("neighbour", (2,)))
    with pytest.raises(NotApplicable):
        DynD2P.gradient_views(obs, 0, [3])


# ---------------------------------------------------------------- config, aliases, CLI


def test_config_validation_and_aliases():
    with pytest.raises(ConfigError):
        DynD2PConfig(variant="dynamic")
    with pytest.raises(ConfigError):
        DynD2PConfig(rho_mu=0.5)
    for key, variant in (("dyn_d2p", "dyn"), ("dyn_c_d2p", "dyn_c"), ("dyn_mu_d2p", "dyn_mu"),
                         ("const_d2p", "const")):
        cls = DEFENSES.get(key)
        assert issubclass(cls, DynD2P) and cls.Config().variant == variant


def test_cli_train_writes_per_node_epsilons(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli_main(["train", "--defense", "dyn_d2p", "--eps", "1", "--dataset", "digits",
                     "--nodes", "4", "--rounds", "4", "--device", "cpu", "--quiet",
                     "--out", str(out)])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    modes = {(r["node"], r["mode"]) for r in result["privacy"]}
    assert modes == {(i, m) for i in range(4) for m in ("paper", "calibrated")}
    assert {m["name"]: m["covered"] for m in result["messages"]} == {"model": True,
                                                                     "weight": True}
    capsys.readouterr()


def test_clt_warning_is_silenced_only_inside_the_plan():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        node_plan(DynD2PConfig(), 1.0, 1e-4, 50, 0.1)
    assert not any(issubclass(w.category, ApproximateAccountingWarning) for w in caught)
