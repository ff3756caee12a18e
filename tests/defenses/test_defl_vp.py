"""DeFL-VP (defenses/defl_vp.py) and its baselines and ablations (each adds or removes one module).

Statistical tests use exact binomial intervals (scipy) and state their failure probability; each
is paired with a check that a wrong mechanism (no debiasing, biased sparsifier) fails the same
bound, so the tests can fail.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy.stats import binom

from defenses.defl_vp import (
    DeFLVP,
    DeFLVPConfig,
    privatize_sign,
    rand_k,
    rand_k_count,
    randomized_response,
    rr_scale,
    sign_pm1,
)
from privbench.config import RunConfig
from privbench.engine.grads import batch_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import Observation, ThreatModel

EPS_GRID = (0.5, 1.0, 2.0, 4.0, 8.0)  # the paper's Table 3
FAIL = 1e-9  # failure probability of every statistical check below


def _interval(n: int, prob: float, fail: float) -> tuple[float, float]:
    """Exact two-sided binomial interval [lo, hi] with P(K outside) <= fail."""
    return binom.ppf(fail / 2, n, prob), binom.isf(fail / 2, n, prob)


def _run(rounds: int = 4, nodes: int = 4, **over) -> RunConfig:
    base = dict(rounds=rounds, nodes=nodes, device="cpu", eval_every=rounds, max_per_node=40,
                batch_size=16)
    base.update(over)
    return RunConfig(**base)


def _train(name: str = "defl_vp", rounds: int = 4, overrides: dict | None = None, **run_over):
    """Build and run `rounds` rounds by hand, keeping each round's raw gradient and models.

    The mechanics are tested at the paper's per-coordinate epsilon (Alg. 3): the default per-run
    calibration makes eps0 ~ 1e-7, a flip probability of 1/2 and a debias factor ~1e7.
    """
    over = {"eps_mode": "per_coordinate", **(overrides or {})}
    built = build(_run(rounds, **run_over), name, over, policy=RecordPolicy())
    tr = built.trainer
    xs, gs, qs = [tr.x.clone()], [], []
    for t in range(rounds):
        tr.round(t)
        xs.append(tr.x.clone())
        gs.append(tr.last["g"].clone())
        qs.append(tr.last["q"].clone())
    return built, xs, gs, qs


def _obs(built, threat: ThreatModel) -> Observation:
    ctx = built.ctx
    return Observation(ctx.bus.log.observed_by(threat.receivers()), threat, ctx.run, built.defense,
                       built.trainer.cfg, ctx.fm, ctx.topology)


# ------------------------------------------------------------------ check 1: W


def test_mixing_matrix_symmetric_doubly_stochastic_and_contracting():
    built = build(_run(nodes=10), "defl_vp")
    w = built.trainer.mixer.matrix(0).double()
    n = w.shape[0]
    assert torch.allclose(w, w.T)
    assert torch.allclose(w.sum(0), torch.ones(n, dtype=w.dtype))
    assert torch.allclose(w.sum(1), torch.ones(n, dtype=w.dtype))
    assert (torch.diag(w) > 0).all()
    rho = torch.linalg.eigvalsh(w - torch.full_like(w, 1 / n)).abs().max()
    assert rho < 1 - 1e-6  # Eq. 2


# ------------------------------------------------------------------ check 2: RR


@pytest.mark.parametrize("eps", EPS_GRID)
def test_rr_values_norm_and_flip_rate(eps):
    gen = torch.Generator().manual_seed(1)
    d, reps = 2000, 500
    v = torch.randn(reps, d, generator=gen)
    v[:, :5] = 0.0  # sign(0) := +1
    out = privatize_sign(v, eps, gen)
    p = 1 / (1 + math.exp(-eps))
    c = 1 / (2 * p - 1)
    assert math.isclose(rr_scale(eps), c, rel_tol=1e-12)
    # values are exactly +-1/(2p-1) (float32 rounding of c)
    assert torch.all((out == torch.tensor(c, dtype=torch.float32))
                     | (out == -torch.tensor(c, dtype=torch.float32)))
    # ||ṽ||^2 = d / (2p-1)^2 deterministically (Lemma 3, Eq. 42)
    norms = out.double().pow(2).sum(dim=1)
    assert torch.allclose(norms, torch.full_like(norms, d * c * c), rtol=1e-6)
    # flip rate: K ~ Binom(reps * d, 1 - p); P(outside the interval) <= FAIL
    flips = int((torch.sign(out) != sign_pm1(v)).sum())
    lo, hi = _interval(reps * d, 1 - p, FAIL)
    assert lo <= flips <= hi


@pytest.mark.parametrize("eps", EPS_GRID)
def test_rr_debiased_sign_is_unbiased_and_raw_rr_is_not(eps):
    gen = torch.Generator().manual_seed(2)
    d, reps = 64, 40_000
    s = sign_pm1(torch.randn(d, generator=gen))  # (d,)
    p = 1 / (1 + math.exp(-eps))
    out = privatize_sign(s.expand(reps, d), eps, gen)  # (reps, d)
    # per coordinate: keeps K_k ~ Binom(reps, p) and mean_k = c s_k (2 K_k / reps - 1).
    # Union bound over d coordinates: P(any outside) <= FAIL.
    lo, hi = _interval(reps, p, FAIL / d)
    c = rr_scale(eps)
    mean = out.double().mean(dim=0) * s.double()  # (d,), E = 1 for every coordinate
    band_lo, band_hi = c * (2 * lo / reps - 1), c * (2 * hi / reps - 1)
    assert torch.all(mean >= band_lo - 1e-9) and torch.all(mean <= band_hi + 1e-9)
    assert band_lo <= 1.0 <= band_hi
    # pooled over all reps * d entries: K ~ Binom(reps * d, p), P(outside) <= FAIL
    lo, hi = _interval(reps * d, p, FAIL)
    band_lo, band_hi = c * (2 * lo / (reps * d) - 1), c * (2 * hi / (reps * d) - 1)
    assert band_lo - 1e-12 <= float(mean.mean()) <= band_hi + 1e-12
    # the same band rejects RR without debiasing (its mean is 2p - 1, not 1): the test can fail
    raw = float(((out.double() / c).mean(dim=0) * s.double()).mean())
    assert not band_lo - 1e-12 <= raw <= band_hi + 1e-12


def test_randomized_response_extremes():
    gen = torch.Generator().manual_seed(3)
    s = sign_pm1(torch.randn(1000, generator=gen))
    assert torch.equal(randomized_response(s, 1.0, gen), s)
    assert torch.equal(privatize_sign(s, math.inf, gen), s)  # dp=sign: no flips


# ------------------------------------------------------------------ check 3: rand-k


def test_rand_k_support_unbiased_and_variance():
    gen = torch.Generator().manual_seed(4)
    d, reps = 50, 20_000
    k = rand_k_count(d, 0.2)
    assert k == 10
    u = torch.randn(d, generator=gen).double()
    cu, mask = rand_k(u.expand(reps, d).contiguous(), k, gen)  # (reps, d)
    assert torch.all(mask.sum(dim=1) == k)
    assert torch.equal(cu[mask], (u.expand(reps, d) * (d / k))[mask])
    assert torch.all(cu[~mask] == 0)
    # K_j = #draws keeping j ~ Binom(reps, k/d); union bound over d: P(any outside) <= FAIL
    lo, hi = _interval(reps, k / d, FAIL / d)
    counts = mask.sum(dim=0)
    assert torch.all((counts >= lo) & (counts <= hi))
    # E[C(u)] = u: mean_j = (d/k) u_j K_j / reps, so |mean_j - u_j| <= (d/k)|u_j| max dev
    dev = max(k / d - lo / reps, hi / reps - k / d)
    assert torch.all((cu.mean(dim=0) - u).abs() <= (d / k) * u.abs() * dev + 1e-12)
    # E||C(u)-u||^2 / ||u||^2 = d/k - 1 (beta = 4), same event bounds the error
    ratio = ((cu - u) ** 2).sum(dim=1).mean() / (u**2).sum()
    assert abs(float(ratio) - (d / k - 1)) <= ((d / k - 1) ** 2 - 1) * dev + 1e-9
    # a biased compressor (top-k by magnitude) fails the unbiasedness bound
    top = torch.zeros_like(u)
    idx = u.abs().topk(k).indices
    top[idx] = u[idx] * (d / k)
    assert not torch.all((top - u).abs() <= (d / k) * u.abs() * dev + 1e-12)


def test_rand_k_error_is_exact_on_sign_vectors():
    gen = torch.Generator().manual_seed(5)
    d = 1000
    k = rand_k_count(d, 0.2)
    u = sign_pm1(torch.randn(8, d, generator=gen)) * 3.0
    cu, _ = rand_k(u, k, gen)
    ratio = ((cu - u) ** 2).sum(dim=1) / (u**2).sum(dim=1)
    assert torch.allclose(ratio, torch.full_like(ratio, d / k - 1), rtol=1e-6)


# ------------------------------------------------------------------ check 4: Eq. 19


@pytest.mark.parametrize("name", ["defl_vp", "d_psgd_rr", "dfl_compression", "dfl_vr"])
def test_network_average_follows_eq19(name):
    built, xs, _, _ = _train(name, rounds=3, overrides={"gradient": "G1"})
    log, eta = built.ctx.bus.log, built.trainer.eta
    n = built.ctx.n
    for t in range(3):
        q = log.get(t, "update")
        assert torch.equal(q.senders, torch.arange(n))  # every node broadcasts one q per round
        pred = xs[t].double().mean(0) - eta * q.payload.double().mean(0)
        scale = xs[t].abs().max() + eta * q.payload.abs().max()
        assert (xs[t + 1].double().mean(0) - pred).abs().max() <= 1e-6 * float(scale)


# ------------------------------------------------------------------ check 5: §5.1 switches


def test_ablation_switches_match_the_method_table():
    cases = {  # name or override -> (vr, dp, compressor, eta source)
        "defl_vp": (True, "rr", "rand_k", "eta_sign"),
        "d_psgd_rr": (False, "rr", "none", "eta_sign"),
        "dfl_compression": (False, "none", "rand_k", "local_lr"),
        "dfl_vr": (True, "none", "none", "local_lr"),
    }
    for name, (vr, dp, comp, eta) in cases.items():
        built = build(_run(rounds=1), name, {"eta_sign": 0.003, "local_lr": 0.02})
        cfg = built.trainer.cfg
        assert (cfg.vr, cfg.dp, cfg.compressor) == (vr, dp, comp)
        assert built.trainer.eta == {"eta_sign": 0.003, "local_lr": 0.02}[eta]
        covered = {k.name: k.covered for k in built.trainer.kinds}
        assert covered["update"] == (dp == "rr")
        # a control variate is declared only when one is sent; under the calibrated reading
        # (eps_mode per_run, the default) a private run builds it from privatized signs
        assert ("control_variate" in covered) == vr
        assert covered.get("control_variate", False) == (vr and dp == "rr")
        train(built.trainer)
        assert ("control_variate" in built.ctx.bus.log.kinds()) == vr
        if dp == "rr" and not vr:  # D-PSGD+RR: nothing it sends is outside the guarantee
            assert all(not r["uncovered"] for r in built.trainer.privacy())


def test_dfl_vr_message_is_the_corrected_gradient():
    built, _, gs, qs = _train("dfl_vr", rounds=2, overrides={"gradient": "G1"})
    tr, log = built.trainer, built.ctx.bus.log
    w = tr.mixer.matrix(1)
    h1 = log.get(1, "control_variate").payload  # (n, d) h^1 = a g^0
    assert torch.allclose(h1, 0.5 * gs[0])
    assert torch.allclose(qs[1], gs[1] - h1 + w @ h1, atol=1e-6)


@pytest.mark.parametrize(("weight_decay", "model"), [(0.0, "mlp"), (1e-3, "mlp"), (0.0, "cnn")])
def test_local_epoch_is_the_momentum_recursion_bit_for_bit(weight_decay, model, monkeypatch):
    """G2 (a local epoch's pseudo-gradient as g_i^t) updates its local copy in place, and only
    the rows of nodes whose epoch is still running, for speed; it must compute exactly the
    out-of-place recursion over every node, buf = m buf + g + wd x̂, x̂ -= lr active buf, and
    leave x alone. Unequal node sizes (Dirichlet), so that nodes finish their epochs at different
    steps."""
    run = _run(1, partition="dirichlet", alpha=0.3, max_per_node=None, batch_size=64, model=model)
    built = build(run, "defl_vp", {"weight_decay": weight_decay}, policy=RecordPolicy.none())
    tr, ctx, cfg = built.trainer, built.ctx, built.trainer.cfg
    steps = (ctx.data.counts + run.batch_size - 1) // run.batch_size  # (n,) each node's epoch
    assert int(steps.min()) < int(steps.max())  # the partial-row path runs
    perm, members = ctx.draw_epoch(0)
    monkeypatch.setattr(ctx, "draw_epoch", lambda t: (perm, members))  # one pass for both
    x = tr.x + 0.01 * torch.randn(tr.x.shape, generator=torch.Generator().manual_seed(0))
    x_before = x.clone()
    got = tr._epoch_pseudo_gradient(0, x)
    assert torch.equal(x, x_before)
    b = ctx.run.batch_size
    x_hat, buf = x.clone(), torch.zeros_like(x)
    assert tr.epoch_steps > 1
    for s in range(tr.epoch_steps):
        cols = slice(s * b, (s + 1) * b)
        xb, yb = ctx.data.gather(perm[:, cols])
        g = batch_grads(ctx.fm, x_hat, xb, yb, members[:, cols]) + weight_decay * x_hat
        buf = cfg.local_momentum * buf + g
        active = members[:, cols].any(dim=1).to(x.dtype)[:, None]
        x_hat = x_hat - cfg.local_lr * active * buf
    assert torch.equal(got, (x - x_hat) / cfg.local_lr)


def test_dfl_compression_message_is_rand_k_of_g():
    _, _, gs, qs = _train("dfl_compression", rounds=1, overrides={"gradient": "G1"})
    d = gs[0].shape[1]
    k = rand_k_count(d, 0.2)
    mask = qs[0] != 0
    assert torch.all(mask.sum(1) <= k)
    assert torch.allclose(qs[0][mask], (gs[0] * (d / k))[mask])


def test_sign_only_without_vr_or_compression_is_decentralized_signsgd():
    over = {"dp": "sign", "vr": False, "compressor": "none", "gradient": "G1"}
    _, _, gs, qs = _train("defl_vp", rounds=2, overrides=over)
    for g, q in zip(gs, qs, strict=True):
        assert torch.equal(q, sign_pm1(g))


def test_d_psgd_rr_message_is_debiased_rr_sign_dense():
    _, _, gs, qs = _train("d_psgd_rr", rounds=1, overrides={"gradient": "G1"}, epsilon=1.0)
    c = rr_scale(1.0)
    assert torch.allclose(qs[0].abs(), torch.full_like(qs[0], c))
    agree = (torch.sign(qs[0]) == sign_pm1(gs[0])).double().mean()
    assert 0.6 < float(agree) < 0.86  # p = 0.731 on n*d ~ 7e4 coordinates (> 30 sigma margin)


def test_bad_config_is_rejected():
    with pytest.raises(ConfigError):
        DeFLVPConfig(protect_control_variate=True, dp="none")
    with pytest.raises(ConfigError):
        DeFLVPConfig(compress_ratio=0.0)
    with pytest.raises(ConfigError):
        build(_run(), "defl_vp", {"eps_mode": "per_pixel"})


# ------------------------------------------------------------------ gradient views


@pytest.mark.parametrize("gradient", ["G1", "G2"])
def test_control_variate_view_is_the_exact_raw_gradient_for_one_neighbour(gradient):
    built, xs, gs, _ = _train("defl_vp", rounds=4, overrides={"gradient": gradient})
    topo, victim = built.ctx.topology, 0
    observer = topo.out_neighbours(0, victim)[0]
    obs = _obs(built, ThreatModel("neighbour", (observer,)))
    views = DeFLVP.gradient_views(obs, victim, [0, 1, 2])
    for t, view in enumerate(views):
        assert view.kind == "gradient" and view.exact and view.round == t
        assert torch.equal(view.params, xs[t][victim])
        assert (view.gradient - gs[t][victim]).abs().max() <= 1e-6
    with pytest.raises(NotApplicable):  # h^{T} is never sent
        DeFLVP.gradient_views(obs, victim, [3])
    non_neighbour = next((j for j in range(built.ctx.n) if j != victim
                          and j not in topo.out_neighbours(0, victim)), None)
    if non_neighbour is not None:
        far = _obs(built, ThreatModel("neighbour", (non_neighbour,)))
        with pytest.raises(NotApplicable):
            DeFLVP.gradient_views(far, victim, [0])


def test_sign_and_model_difference_views():
    built, _, _, qs = _train("defl_vp", rounds=3)
    tr, victim = built.trainer, 1
    obs = _obs(built, ThreatModel("eavesdropper"))
    (sv,) = DeFLVP.gradient_views(obs, victim, [1], view="sign")
    assert sv.kind == "sign" and torch.equal(sv.gradient, qs[1][victim])
    assert torch.equal(sv.mask, qs[1][victim] != 0)
    assert int(sv.mask.sum()) == rand_k_count(built.ctx.fm.d, 0.2)
    (mv,) = DeFLVP.gradient_views(obs, victim, [1], view="model_difference")
    w = tr.mixer.matrix(1)
    expected = (w @ qs[1])[victim]  # sum_j w_ij q_j^t
    assert mv.kind == "sign" and not mv.exact
    assert torch.allclose(mv.gradient, expected, atol=1e-3 * float(expected.abs().max()))
    with pytest.raises(ConfigError):
        DeFLVP.gradient_views(obs, victim, [1], view="pixels")
    no_vr_built, _, _, no_vr_q = _train("d_psgd_rr", rounds=2)
    no_vr = _obs(no_vr_built, ThreatModel("eavesdropper"))
    with pytest.raises(NotApplicable):
        DeFLVP.gradient_views(no_vr, victim, [0], view="control_variate")
    (default,) = DeFLVP.gradient_views(no_vr, victim, [0])  # no CVs: default is the update
    assert default.kind == "sign" and torch.equal(default.gradient, no_vr_q[0][victim])
    assert default.mask is None  # d_psgd_rr sends dense (uncompressed) signs


def test_protected_control_variate_view_is_the_privatized_sign():
    over = {"protect_control_variate": True, "gradient": "G1"}
    built, _, _, _ = _train("defl_vp", rounds=3, overrides=over, epsilon=1.0)
    covered = {k.name: k.covered for k in built.trainer.kinds}
    assert covered["control_variate"]
    obs = _obs(built, ThreatModel("eavesdropper"))
    c = rr_scale(1.0)
    for view in DeFLVP.gradient_views(obs, 2, [0, 1]):
        assert view.kind == "sign"
        assert torch.allclose(view.gradient.abs(), torch.full_like(view.gradient, c), rtol=1e-5)
    assert all(not r["uncovered"] for r in built.trainer.privacy())


def test_views_accept_a_json_defense_config():
    built, _, gs, _ = _train("defl_vp", rounds=2, overrides={"alpha_cv": 0.25, "gradient": "G1"})
    obs = _obs(built, ThreatModel("eavesdropper"))
    obs.defense_cfg = json.loads(json.dumps(built.trainer.cfg.__dict__))
    (view,) = DeFLVP.gradient_views(obs, 0, [0])
    assert (view.gradient - gs[0][0]).abs().max() <= 1e-6


# ------------------------------------------------------------------ accounting / CLI


def test_default_cell_label_is_the_composed_epsilon():
    # a cell named defl_vp@2 / d_psgd_rr@2 must spend 2 over the whole run (eps_mode per_run)
    for name in ("defl_vp", "d_psgd_rr"):
        tr = build(_run(rounds=7, epsilon=2.0), name).trainer
        composed = [r for r in tr.privacy() if r["reading"] == "composed_d_coordinates_T_rounds"]
        assert composed and all(math.isclose(r["epsilon"], 2.0, rel_tol=1e-9) for r in composed)
        assert all(r["mode"] == "calibrated" for r in composed)


def test_privacy_reports_both_readings_per_node():
    run = _run(rounds=7, epsilon=2.0)
    tr = build(run, "defl_vp", {"eps_mode": "per_coordinate"}).trainer
    d, reps = tr.d, tr.privacy()
    assert len(reps) == 3 * run.nodes
    by = {(r["node"], r["reading"]): r for r in reps}
    for i in range(run.nodes):
        assert by[(i, "per_coordinate_per_round")]["epsilon"] == 2.0
        assert by[(i, "per_coordinate_per_round")]["mode"] == "paper"
        assert math.isclose(by[(i, "composed_d_coordinates_T_rounds")]["epsilon"], 7 * d * 2.0)
        assert by[(i, "composed_d_coordinates_T_rounds")]["mode"] == "calibrated"
        assert by[(i, "per_coordinate_per_round")]["uncovered"] == ["control_variate"]
        assert "NOT covered" in by[(i, "per_coordinate_per_round")]["warning"]
    assert math.isclose(reps[0]["keep_prob"], math.exp(2) / (math.exp(2) + 1))
    vec = build(run, "defl_vp", {"eps_mode": "per_vector"}).trainer
    by = {r["reading"]: r for r in vec.privacy() if r["node"] == 0}
    assert math.isclose(by["per_coordinate_per_round"]["epsilon"], 2.0 / d)
    assert math.isclose(by["composed_d_coordinates_T_rounds"]["epsilon"], 7 * 2.0, rel_tol=1e-9)
    assert math.isclose(vec.coordinate_epsilon, 2.0 / d)
    whole = build(run, "defl_vp", {"eps_mode": "per_run"}).trainer
    by = {r["reading"]: r for r in whole.privacy() if r["node"] == 0}
    assert math.isclose(by["composed_d_coordinates_T_rounds"]["epsilon"], 2.0, rel_tol=1e-9)


def test_non_private_switch_reports_infinite_epsilon():
    reps = build(_run(), "dfl_vr").trainer.privacy()
    assert reps and all(r["epsilon"] == "inf" for r in reps)  # EpsilonReport.to_dict
    assert {r["mode"] for r in reps} == {"paper", "calibrated"}


def test_cli_train_writes_per_node_epsilon_both_modes(tmp_path):
    from privbench.cli import main

    code = main(["train", "--defense", "defl_vp", "--eps", "4", "--dataset", "digits",
                 "--rounds", "2", "--nodes", "4", "--device", "cpu", "--quiet",
                 "--set", "max_per_node=30", "--out", str(tmp_path)])
    assert code == 0
    res = json.loads((tmp_path / "results.json").read_text())
    modes = {(r["node"], r["mode"]) for r in res["privacy"]}
    assert modes == {(i, m) for i in range(4) for m in ("paper", "calibrated")}
    kinds = {m["name"]: m for m in res["messages"]}
    assert kinds["control_variate"]["covered"] and kinds["control_variate"]["data_dependent"]
    assert kinds["update"]["covered"]
    assert res["defense_config"]["protect_control_variate"] is None  # resolved: protected
    assert res["accuracy"]["average_model"] > 0


@pytest.mark.parametrize(("over", "protects"), [
    ({}, True),  # the calibrated reading: every data-dependent message covered
    ({"eps_mode": "per_coordinate"}, False),  # the paper's reading: the algorithm as written
    ({"eps_mode": "per_vector"}, False),
    ({"protect_control_variate": False}, False),  # explicit: the paper's order, calibrated ε
    ({"eps_mode": "per_coordinate", "protect_control_variate": True}, True),
])
def test_the_calibrated_reading_protects_the_control_variate_and_the_paper_reading_reports_it(
        over, protects):
    built = build(_run(rounds=1), "defl_vp", over)
    assert built.trainer.cfg.protects == protects
    assert built.trainer.cfg.order == ("rr_vr" if protects else "vr_rr")
    covered = {k.name: k.covered for k in built.trainer.kinds}
    assert covered["control_variate"] == protects
    uncovered = {u for r in built.trainer.privacy() for u in r["uncovered"]}
    assert uncovered == (set() if protects else {"control_variate"})
