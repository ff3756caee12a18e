"""One generic DP-SGD round (clipped sum + Gaussian noise + push-sum mixing) the ways it runs.

Used by `privbench bench engine`; every method computes the same update (tested without noise):

* `privbench`: `engine.clipped_grad_sum`, all n nodes in one vmap, no per-sample gradients
  (ghost norms / per-layer book-keeping, privbench/engine/ghost.py);
* `opacus_hooks`, `opacus_functorch`, `opacus_ew`: Opacus per-sample gradients in each of its
  `grad_sample_mode`s (module hooks, the default; torch.func for every layer; torch's
  ExpandedWeights) and `DPOptimizer.clip_and_accumulate`, looped over the nodes (one module,
  each node's parameters loaded in turn, as per-node Opacus code runs);
* `opacus_ghost`: Opacus `GradSampleModuleFastGradientClipping` (ghost clipping: norms in the
  first backward, the clipped sum in a second), looped over the nodes;
* `func_per_node`: `torch.func` per-sample gradients of one node at a time (vmap(grad)), clip,
  sum: the per-node loop of functorch code;
* `floor`: non-private batched gradients of the same samples (no per-sample work;
  `engine.batch_grads`, which loops over the nodes of a conv model on the CPU);
* `floor_vmap`: the same gradients in one vmap over the nodes (`engine.vmapped_batch_grads`,
  what `floor` runs on a GPU or for a model without convolutions);
* `naive_loop`: a labelled reference only: a forward/backward per node and per sample.

Opacus is an optional dependency (`pip install -e ".[bench]"`); without it its methods are
reported as "Opacus not installed".
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from privbench.engine.grads import (
    batch_grads,
    clipped_grad_sum,
    vmap_clipped_sum,
    vmapped_batch_grads,
)
from privbench.models import FlatModel

LR = 0.1


class _OpacusSetup(TypedDict, total=False):
    """Opacus' modules of a method, built on its first round and reused (opacus is optional:
    its types are not imported here)."""

    hooks: tuple[Any, Any]  # GradSampleModule, DPOptimizer (per grad_sample_mode)
    functorch: tuple[Any, Any]
    ew: tuple[Any, Any]
    ghost: tuple[Any, Any, Any]  # the fast-gradient-clipping module, optimizer and loss

@dataclass
class RoundInputs:
    """One round's fixed inputs: params (n, d), x (n, B, ...), y (n, B), p (n, n) mixing."""

    fm: FlatModel
    params: Tensor
    x: Tensor
    y: Tensor
    p: Tensor
    gen: torch.Generator
    clip: float = 1.0
    sigma: float = 1.0
    cache: _OpacusSetup = field(default_factory=lambda: _OpacusSetup())  # per-method set-up


def _step(inp: RoundInputs, sums: Tensor) -> Tensor:
    """Noise, local step and push-sum mixing of the clipped sums (n, d) -> (n, d)."""
    # params - LR (sums + sigma C noise) / B, in place in the noise buffer (one (n, d) tensor)
    step = torch.randn(inp.params.shape, generator=inp.gen, device=inp.params.device)
    step.mul_(inp.sigma * inp.clip).add_(sums).mul_(-LR / inp.y.shape[1]).add_(inp.params)
    return inp.p @ step


def round_privbench(inp: RoundInputs) -> Tensor:
    """All nodes at once, without per-sample gradients."""
    mask = torch.ones(inp.y.shape, dtype=torch.bool, device=inp.y.device)
    with torch.no_grad():
        return _step(inp, clipped_grad_sum(inp.fm, inp.params, inp.x, inp.y, mask, inp.clip)[0])


def round_func_per_node(inp: RoundInputs) -> Tensor:
    """torch.func per-sample gradients, one node at a time."""
    bound = torch.tensor(inp.clip, dtype=inp.params.dtype, device=inp.params.device)
    ones = torch.ones(1, inp.y.shape[1], dtype=torch.bool, device=inp.y.device)
    sums = [vmap_clipped_sum(inp.fm, inp.params[i:i + 1], inp.x[i:i + 1], inp.y[i:i + 1], ones,
                             bound)[0] for i in range(inp.params.shape[0])]  # the per-node loop
    with torch.no_grad():
        return _step(inp, torch.cat(sums))


def round_floor(inp: RoundInputs) -> Tensor:
    """Non-private: batched mean gradients, no per-sample work."""
    with torch.no_grad():
        return inp.p @ (inp.params - LR * batch_grads(inp.fm, inp.params, inp.x, inp.y))


def round_floor_vmap(inp: RoundInputs) -> Tensor:
    """Non-private, every node in one vmap (the floor's path on a GPU)."""
    mask = torch.ones(inp.y.shape, dtype=torch.bool, device=inp.y.device)
    with torch.no_grad():
        return inp.p @ (inp.params - LR * vmapped_batch_grads(inp.fm, inp.params, inp.x, inp.y,
                                                               mask))


def round_naive_loop(inp: RoundInputs) -> Tensor:
    """Reference only: a forward/backward per node and per sample through the nn.Module."""
    fm, params, x, y = inp.fm, inp.params, inp.x, inp.y
    module = fm.module
    sums = []
    for i in range(params.shape[0]):
        with torch.no_grad():
            nn.utils.vector_to_parameters(params[i], module.parameters())
        total = torch.zeros(fm.d, device=params.device)
        for b in range(x.shape[1]):
            module.zero_grad(set_to_none=True)
            F.cross_entropy(module(x[i, b:b + 1]), y[i, b:b + 1]).backward()
            g = torch.cat([q.grad.reshape(-1) for q in module.parameters()])
            total += g * min(1.0, inp.clip / (float(g.norm()) + 1e-12))
        sums.append(total)
    with torch.no_grad():
        return _step(inp, torch.stack(sums))


def opacus_missing() -> str | None:
    """None when Opacus can be imported, else why not."""
    return None if importlib.util.find_spec("opacus") else "Opacus not installed"


def _load(module: nn.Module, row: Tensor) -> None:
    with torch.no_grad():
        nn.utils.vector_to_parameters(row, module.parameters())


def _flat_grads(params: list[nn.Parameter], attr: str) -> Tensor:
    return torch.cat([getattr(q, attr).reshape(-1) for q in params])


def _opacus_per_sample(inp: RoundInputs, mode: str) -> Tensor:
    """Opacus per-sample gradients (`grad_sample_mode` `mode`), clipped and summed by its
    DPOptimizer, one node after the other."""
    if mode not in inp.cache:
        from opacus.grad_sample import get_gsm_class
        from opacus.optimizers import DPOptimizer

        gsm = get_gsm_class(mode)(copy.deepcopy(inp.fm.module), loss_reduction="sum")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=LR), noise_multiplier=0.0,
                          max_grad_norm=inp.clip, expected_batch_size=inp.y.shape[1],
                          loss_reduction="sum")
        inp.cache[mode] = gsm, opt
    gsm, opt = inp.cache[mode]
    params = list(gsm.parameters())
    sums = []
    for i in range(inp.params.shape[0]):  # the per-node loop
        _load(gsm._module, inp.params[i])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(gsm(inp.x[i]), inp.y[i], reduction="sum").backward()
        opt.clip_and_accumulate()  # per-sample norms, clip factors, clipped sum (p.summed_grad)
        sums.append(_flat_grads(params, "summed_grad"))
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        return _step(inp, torch.stack(sums))


def round_opacus_hooks(inp: RoundInputs) -> Tensor:
    """Opacus per-sample gradients by module hooks (its default), per node."""
    return _opacus_per_sample(inp, "hooks")


def round_opacus_functorch(inp: RoundInputs) -> Tensor:
    """Opacus per-sample gradients by torch.func for every layer, per node."""
    return _opacus_per_sample(inp, "functorch")


def round_opacus_ew(inp: RoundInputs) -> Tensor:
    """Opacus per-sample gradients by torch's ExpandedWeights, per node."""
    return _opacus_per_sample(inp, "ew")


def round_opacus_ghost(inp: RoundInputs) -> Tensor:
    """Opacus ghost clipping (two backward passes), per node."""
    if "ghost" not in inp.cache:
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        gsm = GradSampleModuleFastGradientClipping(
            copy.deepcopy(inp.fm.module), max_grad_norm=inp.clip, use_ghost_clipping=True,
            loss_reduction="sum")
        opt = DPOptimizerFastGradientClipping(
            torch.optim.SGD(gsm.parameters(), lr=LR), noise_multiplier=0.0,
            max_grad_norm=inp.clip, expected_batch_size=inp.y.shape[1], loss_reduction="sum")
        crit = DPLossFastGradientClipping(gsm, opt, nn.CrossEntropyLoss(reduction="sum"),
                                          loss_reduction="sum")
        inp.cache["ghost"] = gsm, opt, crit
    gsm, opt, crit = inp.cache["ghost"]
    params = list(gsm.parameters())
    sums = []
    for i in range(inp.params.shape[0]):  # the per-node loop
        _load(gsm._module, inp.params[i])
        opt.zero_grad(set_to_none=True)
        crit(gsm(inp.x[i]), inp.y[i]).backward()  # p.grad: the clipped sum
        sums.append(_flat_grads(params, "grad"))
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        return _step(inp, torch.stack(sums))


@dataclass(frozen=True)
class RoundMethod:
    """A way to run the round: label, function, and why it cannot run here (None: it can)."""

    label: str
    fn: Callable[[RoundInputs], Tensor]
    missing: Callable[[], str | None] = lambda: None


METHODS: dict[str, RoundMethod] = {
    "privbench": RoundMethod("privbench (all nodes, no per-sample grads)", round_privbench),
    "opacus_hooks": RoundMethod("Opacus hooks, per node", round_opacus_hooks, opacus_missing),
    "opacus_functorch": RoundMethod("Opacus functorch, per node", round_opacus_functorch,
                               opacus_missing),
    "opacus_ew": RoundMethod("Opacus ExpandedWeights, per node", round_opacus_ew, opacus_missing),
    "opacus_ghost": RoundMethod("Opacus ghost clipping, per node", round_opacus_ghost,
                           opacus_missing),
    "func_per_node": RoundMethod("torch.func, per node", round_func_per_node),
    "floor": RoundMethod("non-private floor", round_floor),
    "floor_vmap": RoundMethod("non-private floor, one vmap", round_floor_vmap),
    "naive_loop": RoundMethod("naive loop (reference only)", round_naive_loop),
}
OPACUS_METHODS = ("opacus_hooks", "opacus_functorch", "opacus_ew", "opacus_ghost")
