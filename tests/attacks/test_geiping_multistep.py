"""The multi-step inversion (`attacks/geiping_multistep.py`, Geiping et al. 2020, Sec. 5): the
steps a view exposes are the steps the victim ran, and the non-private local-step baseline is
reconstructed."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from privbench.config import RunConfig
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS, DEFENSES


def _built(defense: str, overrides: dict, batch_size: int, rounds: int = 3, **run: object):
    from privbench.engine.runner import build

    load_plugins()
    cfg = RunConfig(dataset="digits", model="mlp", batch_size=batch_size, nodes=4, rounds=4,
                    device="cpu", seed=0, eval_every=4, lr=0.1, epsilon=1.0, **run)
    built = build(cfg, defense, overrides)
    for t in range(rounds):
        built.trainer.round(t)
    return built


def _simulated(built, view, t: int) -> torch.Tensor:
    """The attack's unrolled release on the victim's TRUE round-t samples, in the order drawn."""
    from attacks._inversion import _param_dict
    from attacks.geiping_multistep import unrolled_update
    from privbench.audit.inversion import true_batch

    x, y = true_batch(built.ctx.data, built.ctx.truth, view.victim, t)
    pdict = {k: v[0] for k, v in _param_dict(built.ctx.fm, view.params[None]).items()}
    yprob = F.one_hot(y, 10).float()
    return unrolled_update(built.ctx.fm, view.local)(pdict, x, yprob)


def test_d_psgd_local_steps_view_is_the_unrolled_update() -> None:
    """D-PSGD with 3 local steps: the view carries the steps, and unrolling them on the true
    batch gives the observed update (a wrong step count, size or batch would not)."""
    from privbench.threat.observation import observe

    built = _built("d_psgd", {"local_steps": 3}, batch_size=4)
    obs = observe(built)
    view = DEFENSES.get("d_psgd").gradient_views(obs, 0, [1])[0]
    assert view.local_epoch and view.local is not None
    assert view.local.steps == ((0, 4),) * 3 and view.local.samples == 4
    sim = _simulated(built, view, 1)
    assert torch.allclose(sim, view.gradient, atol=1e-4, rtol=1e-3)
    one = DEFENSES.get("d_psgd").gradient_views(observe(_built("d_psgd", {}, 4)), 0, [1])[0]
    assert one.local is None and not one.local_epoch  # E = 1: one batch's gradient, as before
    assert (sim - one.gradient).abs().max() > 1e-3


def test_defl_vp_epoch_view_is_the_unrolled_momentum_epoch() -> None:
    """DeFL-VP's G2 control variates (unprotected) give the raw epoch pseudo-gradient: momentum
    SGD over every member in consecutive batches, the last one partial, as the view says."""
    from privbench.threat.observation import observe

    built = _built("defl_vp", {"protect_control_variate": False, "local_lr": 0.05},
                   batch_size=4, rounds=3, max_per_node=30)
    view = DEFENSES.get("defl_vp").gradient_views(observe(built), 1, [0])[0]
    members = int(built.ctx.data.counts[1])
    assert view.local is not None and view.local.samples == members
    assert view.local.steps[-1] == (4 * (len(view.local.steps) - 1), members)
    assert view.local.momentum == 0.9
    sim = _simulated(built, view, 0)
    assert torch.allclose(sim, view.gradient, atol=1e-4, rtol=1e-3)


def test_a_single_gradient_view_is_not_this_attacks() -> None:
    """One batch's gradient, or an update whose steps are unknown, is not applicable, with why."""
    from privbench.audit.inversion import synthetic_views

    views, fm, _, _ = synthetic_views(1, 1)
    cls = ATTACKS.get("geiping_multistep")
    rec = cls(cls.Config(steps=2)).reconstruct(views, fm, (1, 8, 8), 10, torch.device("cpu"),
                                               torch.Generator().manual_seed(0))
    assert rec.status[0].not_applicable and "one batch's gradient" in rec.status[0].reason


def test_non_private_local_steps_are_reconstructed() -> None:
    """The reference of what leaks without DP: D-PSGD, batch 1, 5 local steps on digits, the
    victim's round-1 update seen by an eavesdropper and inverted through the audit's path:
    PSNR >= 18 dB and the label recovered (a failure of the unrolling drops it to ~10 dB)."""
    from privbench.audit.inversion import graded_inversions
    from privbench.threat.gossip_inversion import view_source
    from privbench.threat.observation import observe

    built = _built("d_psgd", {"local_steps": 5}, batch_size=1)
    obs = observe(built)
    _, g = graded_inversions([(obs, v, 1) for v in range(2)],
                             view_source(type(built.trainer), obs), "geiping_multistep",
                             {"steps": 300}, torch.Generator().manual_seed(0), built.ctx.data,
                             built.ctx.truth, use_lpips=False)
    assert g["n_graded"] == 2, [p["status"] for p in g["per_target"]]
    assert all(p["local_steps"] == 5 for p in g["per_target"])
    assert g["psnr"] >= 18.0, g["per_target"]
    assert g["label_accuracy"] == 1.0


def _local_problems(k: int, poison: int | None = None):
    """K synthetic 3-step updates of batch 2 as stacked problems (problem `poison`'s target
    made non-finite), with labels, dummy images and the step schedule."""
    from attacks._inversion import init_dummy, stack_views
    from privbench.audit.inversion import synthetic_local_views

    views, fm, _, y = synthetic_local_views(k, 2, steps=3, lr=0.1, seed=2)
    probs = stack_views(views, torch.device("cpu"))
    if poison is not None:
        probs.target[poison] = float("nan")
    x0 = init_dummy((k, 2, 1, 8, 8), "rand", torch.Generator().manual_seed(0),
                    torch.device("cpu"))
    return probs, fm, F.one_hot(y, 10).float(), x0, views[0].local


def test_batched_unroll_matches_the_vmapped_functional_one() -> None:
    """The autograd unroll over all problems gives the cost and the dummy-data gradient that
    `torch.func` (grad of the unrolled grad, vmapped) gives problem by problem."""
    from torch.func import grad, grad_and_value, vmap

    from attacks._inversion import _param_dict, make_objective
    from attacks._victim import autograd_step, soft_label_loss
    from attacks.geiping_multistep import unrolled_updates

    probs, fm, onehot, x0, local = _local_problems(3)
    names = [s.name for s in fm.specs]

    def reference(pdict, x, yprob):  # the unroll written with nested torch.func transforms
        p = dict(pdict)
        for a, b in local.steps:
            g = grad(lambda q, a=a, b=b: soft_label_loss(fm, q, x[a:b], yprob[a:b]))(p)
            p = {n: p[n] - local.lr * g[n] for n in names}
        return torch.cat([(pdict[n] - p[n]).reshape(-1) for n in names]) / local.scale

    learn = torch.zeros(3, dtype=torch.bool)
    args = (torch.zeros_like(onehot), onehot, learn, _param_dict(fm, probs.params), probs.target,
            probs.mask, probs.sign)
    want_g, (_, want_c) = vmap(grad_and_value(make_objective(fm, "sim", 1e-4, reference),
                                              has_aux=True))(x0, *args)
    got_g, (_, got_c) = autograd_step(make_objective(fm, "sim", 1e-4,
                                                     unrolled_updates(fm, local)), False)(
        x0.clone(), *args)
    torch.testing.assert_close(got_c, want_c, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_g, want_g, atol=1e-6, rtol=1e-4)
    assert want_g.abs().max() > 0  # a zero gradient would make the comparison vacuous


def test_a_diverged_problem_is_frozen_and_the_others_run_on() -> None:
    """A problem of non-finite cost keeps its last finite iterate (here its start) and reports
    a non-finite cost, without changing the others; with every problem diverged the run stops
    after the first evaluation."""
    from attacks._inversion import AdamSchedule, Problems, adam_batched, make_objective
    from attacks.geiping_multistep import unrolled_updates

    probs, fm, onehot, x0, local = _local_problems(2, poison=1)
    calls = []
    base = make_objective(fm, "sim", 1e-4, unrolled_updates(fm, local))

    def objective(*args):
        calls.append(1)
        return base(*args)

    sched = AdamSchedule(steps=6, lr=0.1, signed=True, boxed=True, decay=False)
    learn = torch.zeros(2, dtype=torch.bool)
    x, _, cost = adam_batched(fm, probs, x0, onehot, learn, objective, sched, batched=True)
    assert torch.equal(x[1], x0[1]) and not torch.isfinite(cost[1])
    assert not torch.equal(x[0], x0[0]) and torch.isfinite(cost[0])
    one = Problems(probs.params[:1], probs.target[:1], probs.mask[:1], probs.sign[:1], 2)
    alone, _, c_alone = adam_batched(fm, one, x0[:1], onehot[:1], learn[:1], objective, sched,
                                     batched=True)
    torch.testing.assert_close(alone[0], x[0])
    torch.testing.assert_close(c_alone[0], cost[0])
    calls.clear()
    dead = Problems(probs.params[1:], probs.target[1:], probs.mask[1:], probs.sign[1:], 2)
    x, _, cost = adam_batched(fm, dead, x0[1:], onehot[1:], learn[1:], objective, sched,
                              batched=True)
    assert len(calls) == 2 and torch.equal(x[0], x0[1])  # one step's evaluation, one final
