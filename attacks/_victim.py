"""What a victim would release from the inversion attacks' dummy data, differentiably.

Not a registry entry (underscore). The victim's loss (`soft_label_loss`), one batch's gradient
for one problem (`batch_gradient`, `torch.func`, vmapped by the caller) or for P problems at once
(`batch_gradients`, autograd over flat parameters: `flat_gradients`, `flat_params`), the cost
matching a released vector to its target (`matching_cost`) and one autograd step of a batched
objective (`autograd_step`). `attacks/_inversion.py` optimises dummy data through them;
`attacks/geiping_multistep.py` unrolls local steps with `flat_gradients`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, grad, vmap

from privbench.models import FlatModel

COSTS = ("sim", "simlocal", "l2")

# What a victim releases from its dummy data: (pdict, x (B, C, H, W), yprob (B, C)) -> (d,).
Release = Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]
# The same for P problems at once, differentiable by autograd: (pdict {name: (P, *shape)},
# x (P, B, C, H, W), yprob (P, B, C)) -> (P, d).
BatchedRelease = Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]


def soft_label_loss(fm: FlatModel, p: dict[str, Tensor], x: Tensor, yprob: Tensor) -> Tensor:
    """Mean cross-entropy of one batch x (B, C, H, W) against label probabilities (B, C)."""
    logits = functional_call(fm.module, p, (x,))  # (B, classes)
    return -(yprob * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def batch_gradient(fm: FlatModel) -> Release:
    """The release of one batch's gradient at the known parameters (DLG, iDLG, IG)."""
    names = [s.name for s in fm.specs]

    def victim_grad(pdict: dict[str, Tensor], x: Tensor, yprob: Tensor) -> Tensor:
        g = grad(lambda p: soft_label_loss(fm, p, x, yprob))(pdict)
        return torch.cat([g[n].reshape(-1) for n in names])  # (d,)

    return victim_grad


def flat_gradients(fm: FlatModel) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """Each problem's loss gradient at its flat parameters, kept differentiable (autograd with
    `create_graph`): grads(theta (P, d) requiring grad, x (P, B, C, H, W), yprob (P, B, C))
    -> (P, d). The problems are independent, so the summed loss's gradient is each one's own;
    one problem runs without vmap (its per-call cost is most of a small model's step). The
    parameters reach the model as one split of the flat vector, whose backward writes each
    (d,) gradient once (a slice per tensor would each scatter into a zero (d,) tensor)."""
    specs = fm.specs
    sizes = [s.stop - s.start for s in specs]  # the specs tile the flat vector in order

    def loss(flat: Tensor, x: Tensor, yprob: Tensor) -> Tensor:
        p = {s.name: t.view(s.shape) for s, t in zip(specs, flat.split(sizes), strict=True)}
        return soft_label_loss(fm, p, x, yprob)

    vmapped = vmap(loss)  # (P, d), (P, B, C, H, W), (P, B, classes) -> (P,)

    def grads(theta: Tensor, x: Tensor, yprob: Tensor) -> Tensor:
        losses = loss(theta[0], x[0], yprob[0])[None] if len(theta) == 1 else \
            vmapped(theta, x, yprob)
        g, = torch.autograd.grad(losses.sum(), theta, create_graph=True)
        return g

    return grads


def flat_params(fm: FlatModel, pdict: dict[str, Tensor]) -> Tensor:
    """{name: (P, *shape)} -> (P, d), a fresh leaf that requires grad (`flat_gradients`)."""
    flat = torch.cat([pdict[s.name].flatten(1) for s in fm.specs], dim=1)
    return flat.detach().requires_grad_(True)


def batch_gradients(fm: FlatModel) -> BatchedRelease:
    """`batch_gradient` over P problems at once, differentiable by autograd."""
    grads = flat_gradients(fm)

    def release(pdict: dict[str, Tensor], x: Tensor, yprob: Tensor) -> Tensor:
        with torch.enable_grad():
            return grads(flat_params(fm, pdict), x, yprob)  # (P, d)

    return release


def matching_cost(fm: FlatModel, cost: str) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """The matching cost of a released vector g (..., d) against its target (..., d), over the
    coordinates in `mask` (..., d), soft-signed where `sign` (...): one value per leading index.

    `cost` is "sim" (1 - cosine over all observed coordinates, IG), "simlocal" (1 - the mean of
    per-tensor cosines, IG's 'simlocal') or "l2" (sum of squares, DLG).
    """
    if cost not in COSTS:
        raise ValueError(f"unknown matching cost {cost!r}; accepted: {', '.join(COSTS)}")
    bounds = [(s.start, s.stop) for s in fm.specs]

    def cosine(g: Tensor, t: Tensor) -> Tensor:
        return (g * t).sum(-1) / (g.norm(dim=-1) * t.norm(dim=-1) + 1e-12)

    def match(g: Tensor, target: Tensor, mask: Tensor, sign: Tensor) -> Tensor:
        soft = torch.tanh(g / (g.abs().mean(-1, keepdim=True) + 1e-12))
        g = torch.where(sign[..., None], soft, g) * mask
        t = target * mask
        if cost == "sim":
            return 1 - cosine(g, t)
        if cost == "simlocal":  # one cosine per parameter tensor (few: a layer loop)
            return 1 - torch.stack([cosine(g[..., a:b], t[..., a:b]) for a, b in bounds]).mean(0)
        return ((g - t) ** 2).sum(-1)

    return match


def autograd_step(objective: Callable[..., tuple[Tensor, Tensor]],
                  joint: bool) -> Callable[..., tuple[Any, tuple[Tensor, Tensor]]]:
    """`vmap(grad_and_value(objective))`'s contract for an objective batched over P problems
    (x (P, B, C, H, W), ylog (P, B, C), ...) -> ((P,) total, (P,) cost), by reverse-mode
    autograd: each problem's terms depend on its own inputs only."""

    def step(x: Tensor, ylog: Tensor, *args: Any) -> tuple[Any, tuple[Tensor, Tensor]]:
        x = x.requires_grad_(True)
        ylog = ylog.requires_grad_(joint)
        tot, cost = objective(x, ylog, *args)
        grads = torch.autograd.grad(tot.sum(), [x, ylog] if joint else [x])
        return (grads if joint else grads[0]), (tot.detach(), cost.detach())

    return step
