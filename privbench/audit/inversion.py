"""Glue for gradient-inversion attacks: observation -> gradient views -> attack -> grading.

* `privbench.threat.observe(built, threat)`: what a threat model sees of a trained run (message
  log restricted to the observed receivers, public context, the shared public initial model x0).
* `invert(obs, defense_cls, victims, rounds, attack, config, gen, device)`: asks the defense for
  one `GradientView` per (victim, round) (`defense_cls.gradient_views`; `NotApplicable` becomes a
  target with status "not applicable: <reason>"), runs the registered attack batched (one call
  per distinct number of samples behind a view; an update of several local steps only for an
  attack that unrolls them, `local_steps`) and returns an `InversionRun` with the
  reconstructions. No ground truth is touched.
* `grade(run, data, truth)`: the runner's side. For each target it takes the victim's true batch
  of that round (`GroundTruth` slots and mask into `NodeData` members), matches reconstructions
  to true images one-to-one by MSE (Hungarian), and returns a JSON-ready dict: mean MSE, PSNR,
  SSIM, LPIPS (None with a status when unavailable), label accuracy, the number of graded
  targets, and per-target values. Images are compared in [0, 1] (`privbench.metrics.image`).

Like the runner, this module composes: it reaches attacks only through `privbench.registry`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
from torch import Tensor

from privbench.config import replace_checked, to_dict
from privbench.data.datasets import NodeData
from privbench.engine.truth import GroundTruth
from privbench.errors import NotApplicable
from privbench.metrics import image as im
from privbench.models import FlatModel
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.threat.observation import GradientView, LocalSteps, Observation


class Target(TypedDict, total=False):
    """One (victim, round) target and, when a view exists, what the view is."""

    victim: int
    round: int
    kind: str
    source: str
    exact: bool
    batch_size: int
    local_steps: int
    samples: int


class GradedTarget(Target, total=False):
    """A target graded against the victim's true batch (`grade`)."""

    status: str
    gradient_loss: float | None
    n_true: int
    n_reconstructed: int
    n_matched: int
    mse: float | None
    psnr: float | None
    ssim: float | None
    lpips: float | None
    label_accuracy: float | None
    true_labels: list[int]
    recovered_labels: list[int]


class Grade(TypedDict):
    """An inversion run graded (`grade`): means over the graded targets, and every target."""

    attack: str
    config: dict[str, Any]
    defense: str
    view_options: dict[str, str]
    image_range: list[float]
    n_targets: int
    n_graded: int
    mse: float | None
    psnr: float | None
    ssim: float | None
    lpips: float | None
    lpips_status: str
    label_accuracy: float | None
    seconds: float
    per_target: list[GradedTarget]


@dataclass
class InversionRun:
    """Reconstructions of an attack on K (victim, round) targets, without ground truth.

    Attributes:
        attack: attack registry key; config: its config as a dict; defense: defense key.
        targets: per target {"victim", "round", and when a view exists "kind", "source",
            "exact", "batch_size"}.
        status: per target: measured (with a note), not applicable or failed, with why.
        images: per target (B, C, H, W) in [0, 1], or None.
        labels: per target (B,) int64, or None.
        loss: per target final gradient-matching loss, or None.
        seconds: attack wall time (all groups).
        view_options: the keyword arguments given to the defense's `gradient_views`.
    """

    attack: str
    config: dict[str, Any]
    defense: str
    targets: list[Target] = field(default_factory=list)
    status: list[Status] = field(default_factory=list)
    images: list[Tensor | None] = field(default_factory=list)
    labels: list[Tensor | None] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    seconds: float = 0.0
    view_options: dict[str, str] = field(default_factory=dict)


def invert(obs: Observation, defense_cls: Any, victims: list[int], rounds: list[int],
           attack: str, config: Any = None, gen: torch.Generator | None = None,
           device: torch.device | str = "cpu",
           input_shape: tuple[int, ...] | None = None,
           view_options: dict[str, str] | None = None) -> InversionRun:
    """Attack every (victim, round) target through the defense's gradient views.

    Args:
        obs: the attacker's observation.
        defense_cls: the defense class (`privbench.registry.DEFENSES.get(obs.defense)`), or any
            view source with its `gradient_views` (e.g. `gossip_inversion.BestViews`).
        victims, rounds: the targets are their product.
        attack: attack registry key ("dlg", "idlg", "geiping").
        config: the attack's Config instance, a dict of overrides, or None (defaults).
        gen: generator of the attack's randomness (default: seeded from 0).
        device: where the attack runs.
        input_shape: (C, H, W) of the data (default: read from the run's dataset).
        view_options: keyword arguments for the defense's `gradient_views` (e.g. DPDL's or
            DeFL-VP's `view="momentum"`).
    """
    targets = [(obs, v, t) for v in victims for t in rounds]
    return invert_many(targets, defense_cls, attack, config, gen, device, input_shape,
                       view_options)


def invert_many(targets: list[tuple[Observation, int, int]], defense_cls: Any, attack: str,
                config: Any = None, gen: torch.Generator | None = None,
                device: torch.device | str = "cpu", input_shape: tuple[int, ...] | None = None,
                view_options: dict[str, str] | None = None) -> InversionRun:
    """`invert` over (observation, victim, round) targets of one run, each seen by its own
    threat model, attacked together (one batched call per distinct batch size)."""
    load_plugins()
    cls = ATTACKS.get(attack)
    cfg = config if isinstance(config, cls.Config) else replace_checked(
        cls.Config(), dict(config or {}), where="attack")
    gen = gen if gen is not None else torch.Generator().manual_seed(0)
    device = torch.device(device)
    obs = targets[0][0]
    run = InversionRun(attack, to_dict(cfg), obs.defense, view_options=dict(view_options or {}))
    views: list[GradientView | None] = []
    for o, v, t in targets:
        run.targets.append({"victim": v, "round": t})
        try:
            got = defense_cls.gradient_views(o, v, [t], **(view_options or {}))
            if not got:
                raise NotApplicable(f"no gradient view of node {v} in round {t}")
            view = got[0]
            if view.local_epoch and not getattr(cls, "local_steps", False):
                raise NotApplicable(
                    "the view is an update of several local steps "
                    f"({view.source}), not one batch's gradient; a batch-{view.batch_size} "
                    "inversion does not fit it (geiping_multistep unrolls the steps)")
            run.targets[-1].update(kind=view.kind, source=view.source, exact=view.exact,
                                   batch_size=view.batch_size)
            if view.local is not None:
                run.targets[-1].update(local_steps=len(view.local.steps),
                                       samples=view.local.samples)
            run.status.append(outcome.inconclusive("pending"))
        except NotApplicable as exc:
            view = None
            run.status.append(outcome.not_applicable(exc))
        views.append(view)
    n = len(views)
    run.images, run.labels, run.loss = [None] * n, [None] * n, [None] * n
    present = [i for i, v in enumerate(views) if v is not None]
    groups: dict[int, list[int]] = {}
    for i in present:
        groups.setdefault(views[i].samples, []).append(i)  # type: ignore[union-attr]
    start = time.perf_counter()
    atk = cls(cfg)
    shape = tuple(input_shape) if input_shape is not None else _input_shape(obs)
    for idx in groups.values():
        rec = atk.reconstruct([views[i] for i in idx], obs.fm,  # type: ignore[misc]
                              shape, _num_classes(obs), device, gen)
        for j, i in enumerate(idx):
            run.status[i] = rec.status[j]
            if rec.status[j].not_applicable:
                continue  # the attack cannot read this view: nothing to grade
            run.images[i] = rec.images[j].cpu()
            run.labels[i] = rec.labels[j].cpu()
            run.loss[i] = float(rec.loss[j])
    run.seconds = time.perf_counter() - start
    return run


def _input_shape(obs: Observation) -> tuple[int, ...]:
    """(C, H, W) of the run's (public) dataset."""
    from privbench.data.datasets import load_dataset

    return load_dataset(obs.run.dataset, obs.run.data_root, False).input_shape


def _num_classes(obs: Observation) -> int:
    """Number of classes: rows of the model's last parameter (the output bias)."""
    return int(obs.fm.specs[-1].shape[0])


def true_batch(data: NodeData, truth: GroundTruth, victim: int, t: int,
               ) -> tuple[Tensor, Tensor] | None:
    """The victim's true round-t batch (images (B, C, H, W), labels (B,)), or None if unrecorded."""
    if t not in truth.batches:
        return None
    slots, mask = truth.batches[t]
    sel = slots[victim][mask[victim]].to(data.x.device)
    return data.x[victim, sel].cpu(), data.y[victim, sel].cpu()


def graded_inversions(targets: list[tuple[Observation, int, int]], source: Any, attack: str,
                      config: Any, gen: torch.Generator, data: NodeData, truth: GroundTruth,
                      device: torch.device | str = "cpu",
                      use_lpips: bool = True) -> tuple[InversionRun, Grade]:
    """One inversion attack on (observation, victim, round) targets of a trained run, graded
    against its ground truth: the path of every inversion, in the audit sweep
    (`privbench.audit.dispatch`) and the leakage map alike."""
    inv = invert_many(targets, source, attack, config, gen, device, data.input_shape)
    return inv, grade(inv, data, truth, use_lpips=use_lpips)


def grade(run: InversionRun, data: NodeData, truth: GroundTruth,
          use_lpips: bool = True) -> Grade:
    """Grade reconstructions against ground truth (JSON-ready; images in [0, 1]).

    Per target: optimal one-to-one MSE matching of the B reconstructions to the true batch, then
    MSE, PSNR, SSIM (and LPIPS) per matched pair, averaged; label accuracy as the multiset overlap
    of recovered and true labels. Summary values are means over graded targets. A target that
    could not be graded has its `run.status` noted with why.
    """
    per: list[GradedTarget] = []
    statuses: list[Status] = []  # run.status, each noted with why it was not graded
    lp_ok, lp_status = im.lpips_status() if use_lpips else (False, "LPIPS not requested")
    for tgt, st, x, y, loss in zip(run.targets, run.status, run.images, run.labels, run.loss,
                                   strict=True):
        row: GradedTarget = {**tgt, "status": st.text, "gradient_loss": loss}
        tb = true_batch(data, truth, tgt["victim"], tgt["round"])
        if x is None or y is None or tb is None:
            if tb is None and x is not None:
                st = st.noted(f"not graded: round {tgt['round']} ground truth not recorded",
                              "; ")
            per.append({**row, "status": st.text})
            statuses.append(st)
            continue
        tx, ty = tb
        if len(ty) == 0:  # e.g. an empty Poisson batch: nothing to reconstruct
            st = st.noted("not graded: the true batch is empty", "; ")
            row.update(n_true=0, status=st.text)
            per.append(row)
            statuses.append(st)
            continue
        r, c = im.match(x, tx)
        pairs = list(zip(r.tolist(), c.tolist(), strict=True))
        mses = [im.mse(x[i], tx[j]) for i, j in pairs]
        psnrs = [im.psnr(x[i], tx[j]) for i, j in pairs]
        ssims = [im.ssim(x[i], tx[j]) for i, j in pairs]
        lp = None
        if lp_ok and pairs:
            vals, _ = im.lpips_distance(x[list(r)], tx[list(c)])
            lp = im.summarize(vals) if vals is not None else None
        row.update(n_true=len(ty), n_reconstructed=len(y), n_matched=len(pairs),
                   mse=im.summarize(mses), psnr=im.summarize(psnrs), ssim=im.summarize(ssims),
                   lpips=lp, label_accuracy=im.label_accuracy(y, ty),
                   true_labels=ty.tolist(), recovered_labels=y.tolist())
        per.append(row)
        statuses.append(st)
    run.status = statuses
    graded = [p for p in per if "mse" in p]

    def mean(key: str) -> float | None:
        return im.summarize([p[key] for p in graded if p.get(key) is not None])

    return {"attack": run.attack, "config": run.config, "defense": run.defense,
            "view_options": run.view_options,
            "image_range": list(im.IMAGE_RANGE), "n_targets": len(per), "n_graded": len(graded),
            "mse": mean("mse"), "psnr": mean("psnr"), "ssim": mean("ssim"),
            "lpips": mean("lpips") if lp_ok else None,
            "lpips_status": "ok" if lp_ok else lp_status,
            "label_accuracy": mean("label_accuracy"), "seconds": run.seconds,
            "per_target": per}


def synthetic_views(k: int, batch_size: int, seed: int = 0, model: str = "lenet",
                    ) -> tuple[list[GradientView], FlatModel, Tensor, Tensor]:
    """K exact gradient views of known digits batches at independent random models (for tests
    and benchmarks; the returned images/labels are the truth, never passed to an attack).

    Returns:
        views, the FlatModel, images (K, B, 1, 8, 8) and labels (K, B).
    """
    from privbench.data.datasets import load_digits
    from privbench.engine.grads import batch_grads
    from privbench.models import build_model

    ds = load_digits()
    fm = build_model(model, ds.input_shape, ds.num_classes)
    g = torch.Generator().manual_seed(seed)
    params = torch.stack([fm.init(g) for _ in range(k)])  # (K, d)
    idx = torch.randperm(len(ds.y_train), generator=g)[: k * batch_size].view(k, batch_size)
    x, y = ds.x_train[idx], ds.y_train[idx]  # (K, B, 1, 8, 8), (K, B)
    grads = batch_grads(fm, params, x, y)  # (K, d)
    views = [GradientView(0, i, params[i], grads[i], "gradient", None, batch_size, "synthetic")
             for i in range(k)]
    return views, fm, x, y


def synthetic_local_views(k: int, batch_size: int, steps: int, lr: float, seed: int = 0,
                          model: str = "mlp",
                          ) -> tuple[list[GradientView], FlatModel, Tensor, Tensor]:
    """K updates of `steps` SGD steps on one known digits batch each (step size `lr`, from
    independent random models), released as (start - end) / lr like D-PSGD's local steps (for
    tests and the cross-check; the returned images/labels are the truth, never passed to an
    attack).

    Returns:
        views (each with its `local` steps), the FlatModel, images (K, B, 1, 8, 8), labels (K, B).
    """
    from privbench.engine.grads import batch_grads

    views, fm, x, y = synthetic_views(k, batch_size, seed, model)
    start = torch.stack([v.params for v in views])  # (K, d)
    local = start
    for _ in range(steps):
        local = local - lr * batch_grads(fm, local, x, y)
    sched = LocalSteps(lr, ((0, batch_size),) * steps, batch_size, lr)
    out = [GradientView(0, i, start[i], (start[i] - local[i]) / lr, "gradient", None,
                        batch_size, f"synthetic: {steps} local steps", local_epoch=steps > 1,
                        local=sched) for i in range(k)]
    return out, fm, x, y
