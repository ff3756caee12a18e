"""Shared, batched machinery of the gradient-inversion attacks (DLG, iDLG, Inverting Gradients).

Not a registry entry (underscore). The attacks in `attacks/dlg.py`, `attacks/idlg.py` and
`attacks/geiping.py` are thin configurations of what is here; the recipes and defaults follow
the papers and their authors' released code (mit-han-lab/dlg, PatrickZH/Improved-Deep-Leakage-
from-Gradients, JonasGeiping/invertinggradients).

Interface (what `privbench attack` builds on)
---------------------------------------------
Each attack class is registered in `privbench.registry.ATTACKS` under its file stem, has a
frozen dataclass `Config` (the reference code's settings as defaults) and::

    attack = ATTACKS.get("geiping")(cfg)          # cfg: attack.Config instance (or None)
    rec = attack.reconstruct(views, fm, input_shape, num_classes, device, gen)

* `views`: list of K `privbench.threat.GradientView`s with the same `batch_size` B (group by
  batch size first: `group_views`). Kinds: "gradient" (all coordinates), "sign" (only signs
  carry information: the target is sign(g) and the dummy gradient goes through a soft sign
  tanh(g / mean|g|) before the matching cost), "partial" (only coordinates in `view.mask` are
  matched, e.g. DPPS's shared layers).
* `fm`: the public `FlatModel` (obs.fm); `input_shape` (C, H, W); `num_classes`;
  `device`; `gen`: a `torch.Generator` (all randomness: dummy initialisations).
* returns a `Reconstruction`: images (K, B, C, H, W) in [0, 1], labels (K, B), loss (K,) the
  final gradient-matching cost (no prior) of the kept restart, status (K,) strings ("ok ..." or a
  reason), restart_losses (K, R).

Attacks never see ground truth: restarts are kept by their gradient-matching loss only, never by
a match to the true data; grading is `privbench.audit.inversion.grade`.

Helpers: `InversionAttack` (the base class), `group_views` (indices by batch size),
`stack_views` and `infer_labels`. Exact views of known digits batches for tests and benchmarks:
`privbench.audit.inversion.synthetic_views`; the batched-vs-sequential benchmark: `privbench bench
attacks` (`privbench.commands.bench.bench_attacks`).

Batched execution
-----------------
The Adam-based path (Geiping, iDLG with optimizer="adam") optimises all K targets x R restarts
as P = K*R independent problems in one batched program: the victim's gradient of every problem
at its own flat parameters (`flat_gradients`: `functional_call`, vmapped over P when P > 1,
autograd with `create_graph`), then the matching cost and the prior per problem, differentiated
w.r.t. the dummy data by reverse-mode autograd of the summed objective. Nothing mixes problems:
each problem has its own parameters, target, mask and cosine/L2 over its own full gradient, the
objective is a sum of per-problem terms and Adam (and its signed variant) is elementwise, so
the result equals P separate runs. (Nested `torch.func` transforms, `vmap(grad_and_value(...))`
over `torch.func.grad`, compute the same and still serve an unbatched objective in
`adam_batched`, at about twice the per-operation cost on these small models.) L-BFGS (DLG,
iDLG by default) has a global line search and
history, so it runs one instance per problem (a Python loop), as the released codes do.

Label inference (`infer_labels`, iDLG Sec. 3 and its batch generalisation)
---------------------------------------------------------------------------
The last linear layer (last 2-d parameter with `num_classes` rows) has gradient rows
dL/dW_c = mean_i (p_ic - y_ic) a_i. With non-negative penultimate features (sigmoid LeNet) only
present classes have negative row sums s_c. B = 1: label = argmin_c s_c (iDLG). B > 1: the
simple variant of Wainakh et al.'s LLG ("User-Level Label Leakage from Gradients in Federated
Learning", PoPETs 2022): impact m = (sum of the negative s_c) / B; stage 1 gives one label to
every class with s_c < 0 and adds |m| to its sum; stage 2 repeatedly gives a label to the most
negative remaining sum (adding |m| each time) until B labels are assigned (if stage 1 found more
than B negative classes, the B most negative win). For sign views the rule runs on sign(g) (same
sign pattern). When the last layer is not observed (partial view) labels cannot be inferred;
attacks then fall back to joint soft-label optimisation (DLG style) and say so in the status.

Choices / deviations (all attacks)
----------------------------------
* Loss of the victim: mean cross-entropy over the batch with probability targets (one-hot for
  hard labels), like the engine's `batch_grads`.
* Images are optimised directly in [0, 1] pixel space (privbench feeds unnormalised images), so
  the box constraint is a clamp to [0, 1].
* Dummy initialisation: standard normal (`init="randn"`, reference default) or uniform [0, 1].
* Non-finite losses (L-BFGS blow-ups) keep the last finite iterate and mark the status.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad_and_value, vmap

from attacks._victim import (
    BatchedRelease,
    Release,
    autograd_step,
    batch_gradient,
    batch_gradients,
    matching_cost,
)
from privbench import progress
from privbench.audit.attack import Attack
from privbench.models import FlatModel, Shape
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.threat.observation import GradientView

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class Reconstruction:
    """What an inversion attack returns for K targets (no ground truth inside).

    Attributes:
        images: (K, B, C, H, W) reconstructions in [0, 1].
        labels: (K, B) int64 recovered labels.
        loss: (K,) final gradient-matching cost of the kept restart (no prior term).
        status: per target, measured (with how labels were recovered) or why it is not a
            reconstruction (`privbench.results.outcome`).
        restart_losses: (K, R) final cost of every restart.
        seconds: wall time of the attack.
        info: attack name, config and label source, for results JSON.
    """

    images: Tensor
    labels: Tensor
    loss: Tensor
    status: list[Status]
    restart_losses: Tensor
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Problems:
    """K targets stacked for one batched program.

    Attributes:
        params: (K, d) models at which the victim's gradients were taken.
        target: (K, d) observed gradients (sign(g) for sign views).
        mask: (K, d) float, 1 where a coordinate is observed.
        sign: (K,) bool, True for sign views.
        batch_size: B, shared by all targets.
    """

    params: Tensor
    target: Tensor
    mask: Tensor
    sign: Tensor
    batch_size: int

    @property
    def k(self) -> int:
        """Number of targets."""
        return self.params.shape[0]

    def repeat(self, r: int) -> Problems:
        """Each target repeated r times (restart-major within a target): K -> K * r problems."""
        rep = lambda t: t.repeat_interleave(r, dim=0)  # noqa: E731
        return Problems(rep(self.params), rep(self.target), rep(self.mask), rep(self.sign),
                        self.batch_size)


def group_views(views: list[GradientView]) -> dict[int, list[int]]:
    """Indices of `views` grouped by batch size (each group is one `reconstruct` call)."""
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(views):
        groups.setdefault(int(v.batch_size), []).append(i)
    return groups


def stack_views(views: list[GradientView], device: torch.device,
                dtype: torch.dtype = torch.float32) -> Problems:
    """Stack K views (same batch size) into `Problems` on `device` in `dtype`."""
    if not views:
        raise ValueError("no gradient views to attack")
    sizes = {v.samples for v in views}  # the batch, or the samples behind local steps
    if len(sizes) != 1:
        raise ValueError(f"views have different batch sizes {sorted(sizes)}; use group_views")
    params = torch.stack([v.params.detach() for v in views]).to(device, dtype)  # (K, d)
    target = torch.stack([v.gradient.detach() for v in views]).to(device, dtype)  # (K, d)
    sign = torch.tensor([v.kind == "sign" for v in views], device=device)  # (K,)
    target = torch.where(sign[:, None], target.sign(), target)
    # A mask restricts matching for partial views and for sign views of sparse (rand-k) messages.
    mask = torch.stack([v.mask.to(dtype) if (v.kind in ("partial", "sign") and v.mask is not None)
                        else torch.ones_like(v.gradient, dtype=dtype)
                        for v in views]).to(device)  # (K, d)
    return Problems(params, target, mask, sign, sizes.pop())


def last_layer(fm: FlatModel, num_classes: int) -> tuple[int, int, int]:
    """(start, stop, fan_in) of the last linear weight with `num_classes` rows."""
    for s in reversed(fm.specs):
        if len(s.shape) == 2 and s.shape[0] == num_classes:
            return s.start, s.stop, s.shape[1]
    raise ValueError("the model has no final linear layer with num_classes rows")


def infer_labels(fm: FlatModel, probs: Problems, num_classes: int) -> tuple[Tensor, Tensor]:
    """Labels from the sign pattern of the last layer's weight gradient (iDLG / LLG-simple).

    Returns:
        labels (K, B) int64 and ok (K,) bool (False where the last layer is not observed).
    """
    start, stop, fan_in = last_layer(fm, num_classes)
    k, b = probs.k, probs.batch_size
    rows = probs.target[:, start:stop].reshape(k, num_classes, fan_in)  # (K, C, h)
    ok = probs.mask[:, start:stop].bool().all(dim=1)  # (K,)
    s = rows.sum(dim=-1)  # (K, C) row sums
    if b == 1:
        return s.argmin(dim=1, keepdim=True), ok
    neg = s < 0  # (K, C)
    impact = (s * neg).sum(dim=1, keepdim=True).abs() / b  # (K, 1) |m|
    counts = torch.zeros(k, num_classes, dtype=torch.long, device=s.device)
    # stage 1: one label per negative class, the b most negative if there are more than b
    order = s.masked_fill(~neg, math.inf).argsort(dim=1)  # (K, C)
    take = (torch.arange(num_classes, device=s.device)[None] < b) & neg.gather(1, order)
    counts.scatter_add_(1, order, take.long())
    s = s + counts * impact
    # stage 2: the most negative remaining sum gets the next label (a loop over batch slots)
    for _ in range(b):
        need = counts.sum(dim=1) < b  # (K,)
        c = s.argmin(dim=1)  # (K,)
        counts[torch.arange(k), c] += need.long()
        s[torch.arange(k), c] += impact[:, 0] * need
    cls = torch.arange(num_classes, device=s.device).repeat(k)  # (K * C,)
    labels = torch.repeat_interleave(cls, counts.flatten()).view(k, b)  # every row sums to b
    return labels, ok


def total_variation(x: Tensor) -> Tensor:
    """Anisotropic TV of one batch (..., B, C, H, W): mean|dx/dw| + mean|dx/dh| (IG metrics.py),
    one value per batch (a leading problem axis is kept)."""
    dims = (-4, -3, -2, -1)
    dw = (x[..., :, 1:] - x[..., :, :-1]).abs().mean(dim=dims)
    dh = (x[..., 1:, :] - x[..., :-1, :]).abs().mean(dim=dims)
    return dw + dh


def _param_dict(fm: FlatModel, params: Tensor) -> dict[str, Tensor]:
    """(P, d) -> {name: (P, *shape)} (parameter tensors, not slices, inside the vmapped grad)."""
    p = params.shape[0]
    return {s.name: params[:, s.start:s.stop].reshape(p, *s.shape) for s in fm.specs}


def make_objective(fm: FlatModel, cost: str, tv: float,
                   release: Release | None = None) -> Callable[..., tuple[Tensor, Tensor]]:
    """The per-problem objective (unbatched; vmap it), or P problems at once for a `release`
    batched over a leading problem axis (`BatchedRelease`; differentiate it with autograd).

    objective(x (B,C,H,W), ylog (B,C), onehot (B,C), learn (), pdict, target (d,), mask (d,),
    sign ()) -> (cost + tv * TV(x), cost); batched, every argument and result gains the leading
    P. Labels are softmax(ylog) where `learn`, else onehot. `cost`: see `matching_cost`.
    `release` is what the dummy data would release (default: one batch's gradient,
    `batch_gradient`).
    """
    match = matching_cost(fm, cost)
    victim_grad = release if release is not None else batch_gradient(fm)

    def objective(x: Tensor, ylog: Tensor, onehot: Tensor, learn: Tensor,
                  pdict: dict[str, Tensor], target: Tensor, mask: Tensor,
                  sign: Tensor) -> tuple[Tensor, Tensor]:
        yprob = torch.where(learn[..., None, None], F.softmax(ylog, dim=-1), onehot)
        c = match(victim_grad(pdict, x, yprob), target, mask, sign)
        return c + tv * total_variation(x), c

    return objective


def init_dummy(shape: Shape, init: str, gen: torch.Generator, device: torch.device,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """Dummy data drawn from `gen` ("randn" standard normal, "rand" uniform [0, 1])."""
    if init == "randn":
        x = torch.randn(shape, generator=gen, device=gen.device)
    elif init == "rand":
        x = torch.rand(shape, generator=gen, device=gen.device)
    else:
        raise ValueError(f"unknown init {init!r}; accepted: randn, rand")
    return x.to(device, dtype)


@dataclass(frozen=True)
class GeipingConfig:
    """Inverting Gradients settings (reference CLI defaults).

    Attributes:
        steps: Adam iterations (4,800 as rec_mult.py).
        lr: Adam step size (0.1).
        signed: Adam on sign(grad) (True in the CLI).
        boxed: clamp to [0, 1] after every step (True).
        decay: step decay x0.1 at 3/8, 5/8, 7/8 of the run (True).
        tv: total-variation weight α_TV (1e-4, the CLI --tv default).
        cost: "sim" (1 - cosine over all tensors, reference), "simlocal" (mean per-tensor
            cosine, IG's option) or "l2".
        restarts: initialisations per target, kept by gradient loss (1).
        init: "randn" (reference) or "rand".
        labels: "infer" (from the last layer's gradient signs) or "joint" (soft labels).
        precision: "float32" or "float64" (the attack's arithmetic; see `attacks/geiping.py`).
    """

    steps: int = 4800
    lr: float = 0.1
    signed: bool = True
    boxed: bool = True
    decay: bool = True
    tv: float = 1e-4
    cost: str = "sim"
    restarts: int = 1
    init: str = "randn"
    labels: str = "infer"
    precision: str = "float32"


@dataclass(frozen=True)
class AdamSchedule:
    """Settings of the batched Adam path.

    Attributes:
        steps: iterations; lr: Adam step size; signed: use sign(grad) (IG); boxed: clamp to
        [0, 1] after each step; decay: MultiStepLR x0.1 at 3/8, 5/8, 7/8 of the run (IG).
    """

    steps: int
    lr: float
    signed: bool
    boxed: bool
    decay: bool


def adam_batched(fm: FlatModel, probs: Problems, x0: Tensor, onehot: Tensor, learn: Tensor,
                 objective: Callable[..., tuple[Tensor, Tensor]],
                 sched: AdamSchedule, batched: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Optimise P problems at once with (signed) Adam.

    Args:
        probs: P problems; x0: (P, B, C, H, W); onehot: (P, B, C) fixed labels; learn: (P,)
            optimise soft labels (joint, DLG style) for these problems.
        objective: per problem (vmapped, differentiated by `torch.func`), or over all P at once
            when `batched` (differentiated by autograd: the problems are independent, so the
            gradient of the summed objective is each problem's own).

    A problem whose cost turns non-finite has diverged: it keeps its last finite iterate (x0 if
    none) and stops moving, as an L-BFGS instance does; the run ends early once every problem
    has diverged (its iterates can no longer change).

    Returns:
        x (P, B, C, H, W), label probabilities (P, B, C), final cost (P,) (non-finite where the
        problem diverged).
    """
    x = x0.clone().requires_grad_(True)
    ylog = torch.zeros_like(onehot).requires_grad_(True)  # (P, B, C)
    joint = bool(learn.any())
    pdict = _param_dict(fm, probs.params)
    step = (autograd_step(objective, joint) if batched else
            vmap(grad_and_value(objective, argnums=(0, 1) if joint else 0, has_aux=True)))
    opt = torch.optim.Adam([x, ylog] if joint else [x], lr=sched.lr)
    n = sched.steps
    milestones = [int(n / 2.667), int(n / 1.6), int(n / 1.142)] if sched.decay else []
    lr_sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    args = (onehot, learn, pdict, probs.target, probs.mask, probs.sign)
    alive = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)  # (P,) not diverged
    kept, kept_y = x0.clone(), ylog.detach().clone()  # the last iterate of finite cost
    progress.stage(n, "optimiser step")
    for _ in range(n):
        grads, (_, cost) = step(x.detach(), ylog.detach(), *args)
        alive &= torch.isfinite(cost)
        if not alive.any():
            break
        kept = torch.where(alive[:, None, None, None, None], x.detach(), kept)
        kept_y = torch.where(alive[:, None, None], ylog.detach(), kept_y)
        gx, gy = grads if joint else (grads, None)
        x.grad = gx.sign() if sched.signed else gx
        if joint:
            ylog.grad = (gy.sign() if sched.signed else gy) * learn[:, None, None]
        opt.step()
        lr_sched.step()
        with torch.no_grad():
            if sched.boxed:
                x.clamp_(0, 1)
            if not alive.all():
                x.copy_(torch.where(alive[:, None, None, None, None], x, kept))
                ylog.copy_(torch.where(alive[:, None, None], ylog, kept_y))
        progress.advance()
    x_end = torch.where(alive[:, None, None, None, None], x.detach(), kept)
    y_end = torch.where(alive[:, None, None], ylog.detach(), kept_y)
    with torch.enable_grad() if batched else torch.no_grad():
        _, cost = (objective if batched else vmap(objective))(x_end, y_end, *args)
        yprob = torch.where(learn[:, None, None], F.softmax(y_end, -1), onehot)
    cost = torch.where(alive, cost.detach(), math.nan)
    return x_end, yprob.detach(), cost


def lbfgs_single(fm: FlatModel, probs: Problems, x0: Tensor, onehot: Tensor, learn: bool,
                 objective: Callable[..., tuple[Tensor, Tensor]], steps: int, lr: float,
                 max_iter: int, history: int, tol: float,
                 boxed: bool) -> tuple[Tensor, Tensor, float, Status]:
    """One L-BFGS instance (PyTorch defaults otherwise: no line search), one problem (P = 1).

    Early stop (iDLG): the cost is checked every 10 steps against `tol`.

    Returns:
        x (1, B, C, H, W), label probabilities (1, B, C), final cost, status.
    """
    x = x0.clone().requires_grad_(True)
    ylog = torch.randn_like(onehot) if learn else torch.zeros_like(onehot)
    ylog.requires_grad_(learn)
    lr_t = torch.tensor(learn, device=x.device)
    pdict = {k: v[0] for k, v in _param_dict(fm, probs.params).items()}
    args = (onehot[0], lr_t, pdict, probs.target[0], probs.mask[0], probs.sign[0])
    opt = torch.optim.LBFGS([x, ylog] if learn else [x], lr=lr, max_iter=max_iter,
                            history_size=history)

    def closure() -> Tensor:
        # plain autograd through the functional per-problem objective (no vmap for P = 1)
        opt.zero_grad()
        tot, _ = objective(x[0], ylog[0], *args)
        tot.backward()
        return tot.detach()

    status = outcome.OK
    last = (x.detach().clone(), ylog.detach().clone())
    for it in range(steps):
        progress.advance()
        opt.step(closure)
        if boxed:
            with torch.no_grad():
                x.clamp_(0, 1)
        if not (torch.isfinite(x).all() and torch.isfinite(ylog).all()):
            status = outcome.diverged(f"at L-BFGS step {it} (kept the last finite iterate)")
            break
        last = (x.detach().clone(), ylog.detach().clone())
        if (it + 1) % 10 == 0 and tol > 0:
            _, cost = objective(last[0][0], last[1][0], *args)
            if float(cost) < tol:
                break
    xs, yl = last
    _, cost = objective(xs[0], yl[0], *args)
    yprob = torch.where(lr_t, F.softmax(yl, -1), onehot)
    c = float(cost)
    if not math.isfinite(c):
        status = outcome.diverged("(non-finite gradient-matching loss)")
    return xs, yprob, c, status


def select_restarts(cost: Tensor, k: int, r: int) -> tuple[Tensor, Tensor]:
    """Best restart per target by gradient-matching cost (never by ground truth).

    Args:
        cost: (K * r,) final costs, restart-major within a target.

    Returns:
        index (K,) into the K * r problems, and the (K, r) cost table.
    """
    table = cost.reshape(k, r).nan_to_num(nan=math.inf)
    best = table.argmin(dim=1)
    return torch.arange(k, device=cost.device) * r + best, table


def labels_for(fm: FlatModel, probs: Problems, num_classes: int, mode: str,
               ) -> tuple[Tensor, Tensor, list[str]]:
    """Fixed labels (K, B) and learn (K,) flags for a label mode ("infer" or "joint")."""
    k, b = probs.k, probs.batch_size
    if mode == "joint":
        return (torch.zeros(k, b, dtype=torch.long, device=probs.params.device),
                torch.ones(k, dtype=torch.bool, device=probs.params.device), ["joint"] * k)
    if mode != "infer":
        raise ValueError(f"unknown label mode {mode!r}; accepted: infer, joint")
    labels, ok = infer_labels(fm, probs, num_classes)
    rule = "idlg" if b == 1 else "llg-simple"
    src = [rule if o else "joint (last layer not observed)" for o in ok.tolist()]
    return labels, ~ok, src


def _prepare(fm: FlatModel, views: list[GradientView], input_shape: Shape, num_classes: int,
             device: torch.device, gen: torch.Generator, restarts: int, init: str,
             label_mode: str, precision: str,
             ) -> tuple[Problems, Tensor, list[str], Tensor, Tensor]:
    """Stacked problems, label handling and dummy initialisations shared by both optimisers.

    Returns:
        problems, learn (K, B) labels to optimise, label sources, one-hot labels (K, B, C),
        dummy images (K * restarts, B, C, H, W).
    """
    dtype = DTYPES[precision]
    probs = stack_views(views, device, dtype)
    labels, learn, src = labels_for(fm, probs, num_classes, label_mode)
    onehot = F.one_hot(labels, num_classes).to(dtype)  # (K, B, C)
    x0 = init_dummy((probs.k * restarts, probs.batch_size, *input_shape), init, gen, device,
                    dtype)
    return probs, learn, src, onehot, x0


def run_batched_adam(fm: FlatModel, views: list[GradientView], input_shape: Shape,
                     num_classes: int, device: torch.device, gen: torch.Generator, *,
                     restarts: int, init: str, cost: str, tv: float, label_mode: str,
                     sched: AdamSchedule, name: str, cfg: Any,
                     precision: str = "float32",
                     release: BatchedRelease | None = None) -> Reconstruction:
    """The Adam-based attack for K views x R restarts in one batched program (`release`: what
    the dummy data of all problems would release, default one batch's gradient each,
    `batch_gradients`)."""
    start = time.perf_counter()
    probs, learn, src, onehot, x0 = _prepare(fm, views, input_shape, num_classes, device, gen,
                                             restarts, init, label_mode, precision)
    k = probs.k
    rep = probs.repeat(restarts)
    x, yprob, cost_p = adam_batched(fm, rep, x0, onehot.repeat_interleave(restarts, 0),
                                    learn.repeat_interleave(restarts, 0),
                                    make_objective(fm, cost, tv, release or batch_gradients(fm)),
                                    sched, batched=True)
    idx, table = select_restarts(cost_p, k, restarts)
    status = [outcome.ok(f"(labels: {s})") if math.isfinite(c)
              else outcome.diverged("(non-finite loss)")
              for s, c in zip(src, table.gather(1, (idx % restarts)[:, None])[:, 0].tolist(),
                              strict=True)]
    return Reconstruction(x[idx].clamp(0, 1).float(), yprob[idx].argmax(-1), cost_p[idx], status,
                          table,
                          time.perf_counter() - start,
                          {"attack": name, "config": config_dict(cfg), "labels": src})


def run_lbfgs(fm: FlatModel, views: list[GradientView], input_shape: Shape, num_classes: int,
              device: torch.device, gen: torch.Generator, *, restarts: int, init: str, cost: str,
              tv: float, label_mode: str, steps: int, lr: float, max_iter: int, history: int,
              tol: float, boxed: bool, name: str, cfg: Any,
              precision: str = "float32") -> Reconstruction:
    """The L-BFGS attack: one instance per target and restart (a Python loop)."""
    start = time.perf_counter()
    probs, learn, src, onehot, x0 = _prepare(fm, views, input_shape, num_classes, device, gen,
                                             restarts, init, label_mode, precision)
    k = probs.k
    objective = make_objective(fm, cost, tv)
    xs, ys, costs, stats = [], [], [], []
    progress.stage(k * restarts * steps, "L-BFGS step (at most)")  # an early stop skips some
    for p in range(k * restarts):
        i = p // restarts
        one = Problems(probs.params[i:i + 1], probs.target[i:i + 1], probs.mask[i:i + 1],
                       probs.sign[i:i + 1], probs.batch_size)
        x, y, c, s = lbfgs_single(fm, one, x0[p:p + 1], onehot[i:i + 1], bool(learn[i]),
                                  objective, steps, lr, max_iter, history, tol, boxed)
        xs.append(x[0])
        ys.append(y[0])
        costs.append(c)
        stats.append(s)
    cost_p = torch.tensor(costs)
    idx, table = select_restarts(cost_p, k, restarts)
    x_all, y_all = torch.stack(xs), torch.stack(ys)
    status = [stats[j].noted(f"(labels: {src[i]})") for i, j in enumerate(idx.tolist())]
    return Reconstruction(x_all[idx].clamp(0, 1).float(), y_all[idx].argmax(-1), cost_p[idx],
                          status, table, time.perf_counter() - start,
                          {"attack": name, "config": config_dict(cfg), "labels": src})


def config_dict(cfg: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    return asdict(cfg) if is_dataclass(cfg) else {}


class InversionAttack(Attack):
    """Base of the registered inversion attacks: `Config` + `reconstruct` (see module docstring).

    Args:
        cfg: the attack's frozen `Config` (None: defaults).
    """

    kind: ClassVar[str] = "inversion"
    needs: ClassVar[frozenset[str]] = frozenset({"messages"})
    # Whether it inverts updates of several local steps (`GradientView.local`), not only one
    # batch's gradient.
    local_steps: ClassVar[bool] = False
    name: str = ""

    def reconstruct(self, views: list[GradientView], fm: FlatModel, input_shape: Shape,
                    num_classes: int, device: torch.device,
                    gen: torch.Generator) -> Reconstruction:
        """Reconstruct the batches behind K gradient views (same batch size)."""
        raise NotImplementedError
