"""PEDFL (defenses/pedfl.py): the DPPS paper's Table 2 baseline.

Checks: the round is a D-PSGD step (gradient at the node's own model, gossip of the noisy
models, then the step), the noise is Lap(0, gamma_n S_real / b) on the sent models with S_real
the models' real L1 sensitivity (none in round 0), the gradient view, the accounting (the same
plan as DPPS, nothing uncovered) and the refused configurations.
"""

from __future__ import annotations

import math

import pytest
import torch

from defenses._push_sum_schedule import real_sensitivity
from privbench.cli import main as cli_main
from privbench.config import RunConfig
from privbench.engine.grads import batch_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import Observation, ThreatModel
from tests.accounting.plan_functions import make_plan

torch.set_num_threads(1)

RUN = RunConfig(dataset="digits", model="psp_mlp", nodes=10, topology="exponential", rounds=6,
                batch_size=16, lr=0.1, eval_every=6, device="cpu", seed=5)


def _build(run: RunConfig = RUN, **over):
    return build(run, "pedfl", over, policy=RecordPolicy())


def _grad(built, t: int, params: torch.Tensor) -> torch.Tensor:
    """(n, d) every node's round-t batch gradient at `params` (n, d), from ground truth."""
    ctx = built.ctx
    slots, mask = ctx.truth.batches[t]
    x, y = ctx.data.gather(slots)
    return batch_grads(ctx.fm, params, x, y, mask)


def _sent(built, t: int) -> torch.Tensor:
    """(n, d) the round-t `shared` messages, one row per sender."""
    rec = built.ctx.bus.log.get(t, "shared")
    return torch.stack([rec.sent_by(k) for k in range(built.ctx.n)])


def test_round_is_gradient_at_own_model_then_gossip_of_the_noisy_models():
    """x^{t+1} = P m^t - gamma g(x^t) with m^t the recorded noisy models: the gradient is taken
    at the node's own pre-mix model (D-PSGD), not at the mixed one (SGP's order) and not at the
    noisy one. Rounds 1-2 carry noise (b = 2, gamma_n = 0.05), so each order gives a different
    model; rounds 0 and 3 (sync, complete graph) are covered too."""
    built = _build(b=2.0, gamma_n=0.05)
    tr = built.trainer
    for t in range(4):
        x_t = tr.models().clone()
        tr.round(t)
        p = (torch.full((10, 10), 0.1) if t == 3
             else tr.mixer.matrix(t))  # round 3: (t + 1) mod SP == 0, complete graph
        expected = p @ _sent(built, t) - 0.1 * _grad(built, t, x_t)
        assert torch.allclose(tr.models(), expected, atol=1e-6), t
        if t in (1, 2):  # noisy rounds: the other orders are far off
            at_mixed = p @ _sent(built, t) - 0.1 * _grad(built, t, p @ x_t)
            assert not torch.allclose(tr.models(), at_mixed, atol=1e-4)
    assert torch.allclose(tr.a, torch.ones(10))  # doubly stochastic: weights stay 1


def test_round_zero_sends_the_public_init_and_draws_no_noise():
    """Identical initial models have sensitivity 0: round 0 sends x^0 exactly, scale 0, and the
    realized reading charges it nothing (T - 1 costly rounds)."""
    built = _build(b=2.0)
    train(built.trainer)
    x0 = built.ctx.fm.init(built.ctx.streams.fresh("init", device="cpu"))
    assert torch.equal(_sent(built, 0), x0.expand(10, -1))
    trace = built.trainer.sensitivity_trace()
    assert trace["S_real"][0] == 0 and trace["scale"][0] == 0
    assert all(s > 0 for s in trace["S_real"][1:])
    paper, cal, realized = [r for r in built.trainer.privacy() if r["node"] == 0]
    assert paper["epsilon"] == pytest.approx(2.0 / 1e-3)  # b / gamma_n per round
    assert cal["epsilon"] == pytest.approx(6 * 2.0 / 1e-3)  # basic composition over 6 rounds
    assert realized["reading"] == "realized"
    assert realized["epsilon"] == pytest.approx(5 * 2.0 / 1e-3, rel=1e-5)
    assert all(r["uncovered"] == [] for r in built.trainer.privacy())


@pytest.mark.parametrize("b", [1.0, 3.0])
def test_message_noise_is_laplace_at_gamma_n_real_sensitivity_over_b(b):
    """Round-1 messages minus the clean models x^1 (recomputed from ground truth) are
    Lap(0, beta), beta = gamma_n S_real(x^1) / b. m = n d >= 20,000 residuals: mean|r| within
    6 sd (sd = beta / sqrt(m)) of beta, E r^2 / (E|r|)^2 within 0.25 of 2 (about 5 sd; a
    Gaussian gives 1.57).
    A scale off by b, gamma_n or 2 fails."""
    built = _build(b=b, gamma_n=0.05)
    tr = built.trainer
    tr.round(0)
    x1 = tr.models().clone()
    tr.round(1)
    r = (_sent(built, 1) - x1).double().flatten()
    beta = 0.05 * float(real_sensitivity(x1)) / b
    assert tr.sensitivity_trace()["scale"][1] == pytest.approx(beta, rel=1e-5)
    m = r.numel()
    assert m >= 20_000
    assert abs(float(r.abs().mean()) / beta - 1) < 6 / math.sqrt(m)
    assert abs(float((r**2).mean() / r.abs().mean() ** 2) - 2.0) < 0.25


def test_calibrated_noise_follows_the_pedfl_plan():
    """With b unset, b(t) = epsilon_round * gamma_n from the `pedfl` plan (DPPS's calibration,
    nothing uncovered), and the calibrated epsilon composes to the target."""
    run = RunConfig(dataset="digits", model="psp_mlp", nodes=6, rounds=20, epsilon=4.0,
                    device="cpu", eval_every=20)
    built = build(run, "pedfl")
    plan = make_plan("pedfl", 4.0, run.delta, 20, 1.0, "basic")
    dpps = make_plan("dpps", 4.0, run.delta, 20, 1.0, "basic")
    assert plan.noise == dpps.noise and plan.reports[1].uncovered == ()
    assert dpps.reports[1].uncovered == ("sensitivity",)
    assert built.trainer.b_at(0) == pytest.approx(plan.noise["b"])
    train(built.trainer)
    cal = next(r for r in built.trainer.privacy() if r["mode"] == "calibrated")
    assert cal["epsilon"] == pytest.approx(4.0, rel=1e-9)


def _observation(built, threat: ThreatModel) -> Observation:
    ctx = built.ctx
    x0 = ctx.fm.init(ctx.streams.fresh("init", device="cpu"))
    return Observation(ctx.bus.log.observed_by(threat.receivers()), threat, ctx.run,
                       built.defense, built.trainer.cfg, ctx.fm, ctx.topology, x0)


def test_gradient_view_is_the_batch_gradient_without_noise_and_noisy_with_it():
    """Noise off: the view equals the victim's batch gradient at its model (rounds 0, 3 = sync,
    4), exact. Noise on: params and gradient carry the Laplace noise, not exact, and the
    gradient error is (gamma_n / gamma_s) times the round-(t+1) draw (mean |err| ~ its scale)."""
    clean = _build(sensitivity_mode="none")
    states = {}
    for t in range(6):
        states[t] = clean.trainer.models().clone()
        clean.trainer.round(t)
    obs = _observation(clean, ThreatModel("eavesdropper"))
    for v in type(clean.trainer).gradient_views(obs, 2, [0, 3, 4]):
        assert v.kind == "gradient" and v.exact and v.mask is None
        assert torch.allclose(v.params, states[v.round][2], atol=1e-6)
        true = _grad(clean, v.round, states[v.round])[2]
        assert torch.allclose(v.gradient, true, atol=1e-4, rtol=1e-3)
    with pytest.raises(NotApplicable, match="round-6"):  # the last round has no successor
        type(clean.trainer).gradient_views(obs, 2, [5])

    noisy = _build(b=2.0, gamma_n=0.05)
    states = {}
    for t in range(6):
        states[t] = noisy.trainer.models().clone()
        noisy.trainer.round(t)
    view = type(noisy.trainer).gradient_views(
        _observation(noisy, ThreatModel("eavesdropper")), 2, [1])[0]
    assert not view.exact
    err = view.gradient - _grad(noisy, 1, states[1])[2]
    scale = noisy.trainer.sensitivity_trace()["scale"][2] / 0.1  # the round-2 draw / gamma_s
    assert float(err.abs().mean()) == pytest.approx(scale, rel=0.05)


def test_gradient_view_not_applicable_for_a_blind_neighbour():
    built = _build(b=2.0)
    train(built.trainer)
    topo, victim = built.ctx.topology, 0
    outs = set(topo.out_neighbours(1, victim))
    observer = next(j for j in range(1, 10) if j not in outs and j != victim)
    obs = _observation(built, ThreatModel("neighbour", (observer,)))
    with pytest.raises(NotApplicable):
        type(built.trainer).gradient_views(obs, victim, [1])


@pytest.mark.parametrize("over, match", [
    ({"sensitivity_mode": "estimated"}, "oracle or none"),
    ({"shared_layers": 1}, "shares every parameter"),
    ({"shared_prefixes": ("0.",)}, "shares every parameter"),
])
def test_configurations_pedfl_does_not_define_are_refused(over, match):
    with pytest.raises(ConfigError, match=match):
        _build(**over)


def test_cli_trains_it_and_refuses_a_non_doubly_stochastic_graph(tmp_path, capsys):
    code = cli_main(["train", "--defense", "pedfl", "--topology", "random_out", "--nodes", "6",
                     "--rounds", "1", "--device", "cpu", "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "not doubly stochastic" in err and "\n" not in err
    code = cli_main(["train", "--defense", "pedfl", "--nodes", "6", "--rounds", "3",
                     "--set", "defense.b=3", "--device", "cpu", "--quiet",
                     "--out", str(tmp_path / "ok")])
    assert code == 0
