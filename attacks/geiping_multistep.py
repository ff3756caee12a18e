"""Inverting Gradients on updates of several local steps (Geiping et al. 2020, Sec. 5).

Geiping, Bauermeister, Dröge, Moeller, "Inverting Gradients - How easy is it to break privacy in
federated learning?", NeurIPS 2020, Sec. 5 ("Federated averaging"): a user runs several local
steps of gradient descent from the server's model with a known step size, step count and batch
schedule, and sends the parameter difference. The attack unrolls those steps differentiably on
dummy data and minimises eq. (4) with the simulated update in place of the gradient:

    1 - <Δθ(x, y), Δθ_obs> / (||Δθ(x, y)|| ||Δθ_obs||)  +  α_TV TV(x),
    Δθ(x, y) = (θ_0 - θ_E(x, y)) / scale,  θ_{s+1} = θ_s - lr m_s,
    m_s = μ m_{s-1} + ∇θ L(θ_s; x[steps[s]], y[steps[s]]) + λ θ_s

(plain SGD for μ = λ = 0, the paper's setting; momentum and weight decay where the defense's
local optimiser has them). What the attacker knows comes from the view
(`privbench.threat.observation.LocalSteps`): the start model (the view's `params`), the step
size, each step's slice of the processed samples (a batch repeated E times, or one epoch over
the node's members in consecutive batches) and the number of samples; never the data, the
labels or the order in which the victim drew its members (the dummy slots are free, so the
order is irrelevant). The optimiser, prior, box, restarts and defaults are Inverting
Gradients' (`attacks/geiping.py`); every problem is one vectorized program over targets and
restarts (`attacks/_inversion.py`), the local steps a sequential loop inside it (each step's
gradient by autograd with `create_graph`, `attacks/_victim.py`, differentiated again w.r.t. the
dummy data; reverse-mode autograd through the unroll costs a fraction of
nested `torch.func` transforms' per-operation overhead on a long epoch of small batches).

Views the defense derives (`privbench.threat.GradientView`): "gradient" (the update itself),
"sign" (randomized or plain signs: the soft-signed simulated update is matched to the observed
signs, what RR's debiasing keeps, a positive rescaling of the signs) and "partial" / sign views
with a mask (rand-k: only the kept coordinates are matched).

Choices / deviations:
* Labels: inferred from the last layer of the update (iDLG for one sample, LLG-simple for
  several: the update is a step-weighted sum of the samples' gradients, whose last-layer sign
  pattern is the one these rules read; `attacks/_inversion.py`), or optimised jointly
  (`labels="joint"`); the paper's and the reference's runs are given the true labels.
* Not applicable: a view without `local` (one batch's gradient: the single-step attacks invert
  it; or an update whose local steps the attacker does not know, said with the reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attacks._inversion import (
    AdamSchedule,
    GeipingConfig,
    InversionAttack,
    Reconstruction,
    Shape,
    run_batched_adam,
)
from attacks._victim import BatchedRelease, Release, flat_gradients, flat_params
from privbench.models import FlatModel
from privbench.registry import ATTACKS
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.threat.observation import GradientView, LocalSteps


@dataclass(frozen=True)
class GeipingMultistepConfig(GeipingConfig):
    """Inverting Gradients' settings (`attacks/geiping.py`), applied to the unrolled update."""


def unrolled_updates(fm: FlatModel, local: LocalSteps) -> BatchedRelease:
    """The updates the local steps of `local` release from P problems' dummy data at once.

    release(pdict {name: (P, *shape)}, x (P, N, C, H, W), yprob (P, N, C)) -> (P, d)
    = (θ_0 - θ_E) / scale, differentiable w.r.t. x and yprob by autograd (each step's gradient
    by `flat_gradients`, with `create_graph`). The parameters are one flat (P, d) tensor, so a
    step's momentum and update are two vector operations.
    """
    lr, mu, wd = local.lr, local.momentum, local.weight_decay
    grads = flat_gradients(fm)

    bounds = sorted(set(local.steps))
    tiles = all(a == (bounds[i - 1][1] if i else 0) for i, (a, _) in enumerate(bounds))

    def step_slices(t: Tensor) -> dict[tuple[int, int], Tensor]:
        """Each step's samples t[:, a:b], taken once: an epoch's consecutive batches as one
        split, whose backward assembles the sample gradients once (a slice per step would
        each scatter into a zero tensor of all N samples)."""
        if tiles and bounds[-1][1] == t.shape[1]:
            return dict(zip(bounds, t.split([b - a for a, b in bounds], dim=1), strict=True))
        return {(a, b): t[:, a:b] for a, b in bounds}

    def release(pdict: dict[str, Tensor], x: Tensor, yprob: Tensor) -> Tensor:
        with torch.enable_grad():
            theta = flat_params(fm, pdict)  # (P, d)
            start, buf = theta, None
            xs, ys = step_slices(x), step_slices(yprob)
            for a, b in local.steps:  # sequential by nature: step s starts where s - 1 ended
                g = grads(theta, xs[a, b], ys[a, b])  # (P, d)
                if wd:
                    g = g + wd * theta
                buf = g if buf is None else mu * buf + g
                theta = theta - lr * buf
            return (start - theta) / local.scale  # (P, d)

    return release


def unrolled_update(fm: FlatModel, local: LocalSteps) -> Release:
    """`unrolled_updates` for one problem: release(pdict, x (N, C, H, W), yprob (N, C)) -> (d,)."""
    batched = unrolled_updates(fm, local)

    def release(pdict: dict[str, Tensor], x: Tensor, yprob: Tensor) -> Tensor:
        return batched({n: v[None] for n, v in pdict.items()}, x[None], yprob[None])[0]

    return release


def not_invertible(view: GradientView) -> Status:
    """Why a view without known local steps is not this attack's."""
    if view.local_epoch:
        return outcome.not_applicable("the update's local steps are not known to the attacker "
                                      f"({view.source}), so they cannot be simulated")
    return outcome.not_applicable("one batch's gradient, not an update of several local steps "
                                  "(the single-step attacks invert it)")


@ATTACKS.register("geiping_multistep")
class GeipingMultistep(InversionAttack):
    """Inverting Gradients on a local-steps update: the steps unrolled, cosine + TV, signed Adam."""

    Config = GeipingMultistepConfig
    name = "geiping_multistep"
    local_steps = True

    def reconstruct(self, views: list[GradientView], fm: FlatModel, input_shape: Shape,
                    num_classes: int, device: torch.device,
                    gen: torch.Generator) -> Reconstruction:
        """See `attacks/_inversion.py`; views of one schedule are inverted together."""
        c = self.cfg
        sched = AdamSchedule(c.steps, c.lr, c.signed, c.boxed, c.decay)
        k, n = len(views), views[0].samples
        images = torch.zeros(k, n, *input_shape)
        labels = torch.zeros(k, n, dtype=torch.long)
        loss = torch.full((k,), math.nan)
        table = torch.full((k, c.restarts), math.nan)
        status = [not_invertible(v) for v in views]
        seconds, groups = 0.0, {}
        for i, v in enumerate(views):
            if v.local is not None:
                groups.setdefault(v.local, []).append(i)
        info: dict[str, object] = {"attack": self.name}
        for local, idx in groups.items():
            rec = run_batched_adam(fm, [views[i] for i in idx], input_shape, num_classes, device,
                                   gen, restarts=c.restarts, init=c.init, cost=c.cost, tv=c.tv,
                                   label_mode=c.labels, sched=sched, name=self.name, cfg=c,
                                   precision=c.precision,
                                   release=unrolled_updates(fm, local))
            ix = torch.tensor(idx)
            images[ix], labels[ix] = rec.images.cpu(), rec.labels.cpu()
            loss[ix], table[ix] = rec.loss.float().cpu(), rec.restart_losses.float().cpu()
            for j, i in enumerate(idx):
                status[i] = rec.status[j].noted(f"({len(local.steps)} local steps unrolled)")
            seconds += rec.seconds
            info = rec.info
        return Reconstruction(images, labels, loss, status, table, seconds, info)
