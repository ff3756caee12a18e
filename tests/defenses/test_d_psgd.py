"""The non-private baseline D-PSGD: accuracy on an undirected graph, exposed messages."""

from __future__ import annotations

from privbench.config import RunConfig
from privbench.engine.grads import batch_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import NotApplicable
from privbench.threat.observation import Observation, ThreatModel


def test_d_psgd_learns_on_an_undirected_graph():
    run = RunConfig(device="cpu", rounds=300, topology="ring")
    res = train(build(run, "d_psgd", policy=RecordPolicy.none()).trainer)
    assert res.average_accuracy >= 0.85


def test_d_psgd_gradient_view_equals_true_batch_gradient():
    run = RunConfig(device="cpu", rounds=4, eval_every=4, topology="ring")
    built = build(run, "d_psgd")
    tr, ctx = built.trainer, built.ctx
    truth = {}
    for t in range(4):
        x_before = tr.x.clone()
        tr.round(t)
        slots, mask = ctx.truth.batches[t]
        xb, yb = ctx.data.gather(slots)
        truth[t] = batch_grads(ctx.fm, x_before, xb, yb, mask)
    obs = Observation(ctx.bus.log, ThreatModel(), run, "d_psgd", tr.cfg, ctx.fm, ctx.topology)
    for v in type(tr).gradient_views(obs, 2, [0, 1, 2]):
        assert (v.gradient - truth[v.round][2]).abs().max() < 1e-4
    try:
        type(tr).gradient_views(obs, 2, [3])  # round 4's model was never sent
    except NotApplicable:
        pass
    else:
        raise AssertionError("derived a view from an unrecorded round")
