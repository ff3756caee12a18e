"""The non-private baseline SGP: accuracy, push-sum invariants, exposed messages."""

from __future__ import annotations

import torch

from privbench.config import RunConfig
from privbench.engine.grads import batch_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import NotApplicable
from privbench.threat.observation import Observation, ThreatModel


def test_sgp_reaches_90_percent_on_digits_with_defaults():
    # SGP's baseline: 8 nodes, random directed out-degree-2 graph, default settings.
    run = RunConfig(device="cpu")
    assert (run.nodes, run.topology, run.out_degree, run.dataset) == (8, "auto", 2, "digits")
    built = build(run, "sgp", policy=RecordPolicy.none())
    assert built.ctx.topology.name == built.ctx.run.topology == "random_out"  # sgp's default
    res = train(built.trainer)
    assert res.average_accuracy >= 0.90


def test_push_sum_conserves_mass_and_weights_move():
    built = build(RunConfig(device="cpu", rounds=20, eval_every=20), "sgp")
    tr = built.trainer
    for t in range(20):
        before = tr.x.sum(dim=0)
        x_half_sum = before - built.ctx.run.lr * 0  # mixing alone conserves sum of x_half
        tr.round(t)
        assert abs(tr.w.sum().item() - built.ctx.n) < 1e-4
        rec = built.ctx.bus.log.get(t, "model")
        assert torch.allclose(tr.x.sum(0), rec.payload.sum(0), atol=1e-4)
        del x_half_sum
    assert tr.w.std() > 1e-3  # non-regular directed graph: the weights moved


def test_sgp_gradient_view_equals_true_batch_gradient():
    run = RunConfig(device="cpu", rounds=4, eval_every=4)
    built = build(run, "sgp")
    tr, ctx = built.trainer, built.ctx
    truth = {}
    for t in range(4):
        z = tr.models().clone()
        tr.round(t)
        slots, mask = ctx.truth.batches[t]
        x, y = ctx.data.gather(slots)
        truth[t] = batch_grads(ctx.fm, z, x, y, mask)
    obs = Observation(ctx.bus.log, ThreatModel(), run, "sgp", tr.cfg, ctx.fm, ctx.topology,
                      x0=tr.init_params()[0])
    for v in type(tr).gradient_views(obs, 3, [0, 1, 3]):
        assert (v.gradient - truth[v.round][3]).abs().max() < 1e-5


def test_neighbour_view_exists_exactly_when_every_needed_broadcast_reaches_it():
    # A broadcast payload is the same for every receiver, so a curious neighbour can rebuild the
    # victim's pre-step model iff the victim and all its in-neighbours also send to the observer.
    run = RunConfig(device="cpu", rounds=3, eval_every=3, nodes=6)
    built = build(run, "sgp")
    train(built.trainer)
    ctx, cls = built.ctx, type(built.trainer)
    full = Observation(ctx.bus.log, ThreatModel(), run, "sgp", built.trainer.cfg, ctx.fm,
                       ctx.topology)
    outcomes = set()
    for victim in range(6):
        needed = [victim, *ctx.topology.in_neighbours(1, victim)]
        reference = cls.gradient_views(full, victim, [2])[0].gradient
        for observer in ctx.topology.out_neighbours(1, victim):
            lone = ThreatModel("neighbour", (observer,))
            obs = Observation(ctx.bus.log.observed_by(lone.receivers()), lone, run, "sgp",
                              built.trainer.cfg, ctx.fm, ctx.topology)
            derivable = all(observer in ctx.topology.out_neighbours(1, k) or k == observer
                            for k in needed)
            try:
                view = cls.gradient_views(obs, victim, [2])[0]
            except NotApplicable as exc:  # not even the victim's own messages are seen
                assert not derivable and "not observed" in str(exc)
                outcomes.add(False)
            else:
                # the exact view iff derivable; otherwise the consecutive-message estimate
                assert view.exact == derivable
                if derivable:
                    assert torch.allclose(view.gradient, reference)
                outcomes.add(view.exact)
    assert False in outcomes  # the graph has pairs where a lone neighbour is blind
