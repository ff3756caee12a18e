"""privbench.threat.rebuild: what an observer of SGP's push-sum messages rebuilds (a victim's
pre-step numerator and weight, its released step) equals the trainer's own state, and what it
cannot observe raises NotApplicable."""

from __future__ import annotations

import pytest
import torch

from privbench.config import RunConfig
from privbench.engine.runner import build
from privbench.errors import NotApplicable
from privbench.threat.observation import Observation, ThreatModel
from privbench.threat.rebuild import (
    observed_row,
    push_sum_message_difference,
    push_sum_pre_step,
    push_sum_release,
)

ROUNDS = 4
EAVESDROPPER = ThreatModel()


@pytest.fixture(scope="module")
def run():
    """An SGP run of 4 rounds on 6 nodes, with each node's (x, w) before every round."""
    cfg = RunConfig(device="cpu", rounds=ROUNDS, eval_every=ROUNDS, nodes=6)
    built = build(cfg, "sgp")
    tr = built.trainer
    states = []
    for t in range(ROUNDS):
        states.append((tr.x.clone(), tr.w.clone()))
        tr.round(t)
    return built, cfg, states


def _observation(run, threat=EAVESDROPPER, x0=True):
    built, cfg, _ = run
    ctx, tr = built.ctx, built.trainer
    log = ctx.bus.log if not threat.observers else ctx.bus.log.observed_by(threat.receivers())
    return Observation(log, threat, cfg, "sgp", tr.cfg, ctx.fm, ctx.topology,
                       x0=tr.init_params()[0] if x0 else None)


def test_the_pre_step_state_is_the_trainers(run) -> None:
    obs = _observation(run)
    states = run[2]
    for t in range(ROUNDS):
        for victim in (0, 4):
            x, w = push_sum_pre_step(obs, victim, t)
            assert torch.allclose(x, states[t][0][victim], atol=1e-5)
            assert float(w) == pytest.approx(float(states[t][1][victim]), abs=1e-5)


def test_the_release_is_the_step_between_the_pre_step_and_the_sent_numerator(run) -> None:
    obs, (built, cfg, states) = _observation(run), run
    step, z = push_sum_release(obs, 2, 1, cfg.lr)
    x_half = built.ctx.bus.log.get(1, "model").sent_by(2)
    x_pre, w_pre = states[1][0][2], states[1][1][2]
    assert torch.allclose(step * cfg.lr, x_pre - x_half, atol=1e-5)
    assert torch.allclose(z, x_pre / w_pre, atol=1e-5)


def test_a_message_difference_uses_the_latest_earlier_message(run) -> None:
    obs, cfg = _observation(run), run[1]
    grad, params, s = push_sum_message_difference(obs, 3, 2, cfg.lr)
    assert s == 1 and grad.shape == params.shape
    with pytest.raises(NotApplicable, match="no earlier message"):
        push_sum_message_difference(obs, 3, 0, cfg.lr)


def test_what_the_observer_cannot_see_is_not_applicable(run) -> None:
    with pytest.raises(NotApplicable, match="initial model is not known"):
        push_sum_pre_step(_observation(run, x0=False), 0, 0)
    built = run[0]
    topo = built.ctx.topology
    victim = 0
    # a lone neighbour that is not an in-neighbour of the victim's in-neighbours misses a term
    blind = [k for k in range(6) if k != victim and k not in topo.out_neighbours(1, victim)]
    lone = ThreatModel("neighbour", (blind[0],))
    with pytest.raises(NotApplicable, match="not observed"):
        push_sum_release(_observation(run, lone), victim, 2, run[1].lr)


def test_an_observed_row_is_the_sent_payload_and_a_missing_one_names_its_kind(run) -> None:
    built = run[0]
    assert torch.equal(observed_row(_observation(run), 2, "model", 3),
                       built.ctx.bus.log.get(2, "model").sent_by(3))
    victim = 0
    topo = built.ctx.topology
    blind = [k for k in range(6) if k != victim and k not in topo.out_neighbours(1, victim)]
    lone = _observation(run, ThreatModel("neighbour", (blind[0],)))
    with pytest.raises(NotApplicable, match="round-1 'model' message is not observed by the "
                                            "neighbour threat model"):
        observed_row(lone, 1, "model", victim)
    with pytest.raises(NotApplicable, match="'gossip' message"):
        observed_row(_observation(run), 1, "gossip", victim)
