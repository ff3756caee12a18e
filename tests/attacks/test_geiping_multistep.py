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
