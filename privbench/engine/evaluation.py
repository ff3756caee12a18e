"""Evaluation of every node's model: accuracy on the test set (a fixed subset on the CPU)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import functional_call

from privbench.engine.trainer import Context, Trainer, node_models
from privbench.models import FlatModel

# Samples per evaluation forward. On CPU, 64 images keep a CNN's activations (~6 MB) close to the
# cache: 1 thread, the FedAvg CNN on 28x28 images, CPU time per image: 0.48 ms at 64 vs 0.54 ms
# at 256 (channels-last; 0.63 / 0.74 ms in the default layout).
EVAL_SAMPLES_CPU = 64


EVAL_SAMPLES_ACCEL = 8192


@torch.no_grad()
def accuracy(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor,
             chunk: int | None = None) -> Tensor:
    """Test accuracy of each parameter row on the same data.

    The rows are evaluated one at a time with the plain module (no vmap: a vmapped conv and
    max-pool over 9 CNNs ran up to 1.8x slower on CPU, and no faster in any chunking we
    measured, than one model at a time), over
    chunks of `chunk` samples, so memory stays bounded whatever m and N are. Images and conv
    kernels are put in channels-last layout (oneDNN's fast path for conv and max-pool on CPU;
    same logical tensors, so the model computes the same function).

    Args:
        params: (m, d); x: (N, C, H, W); y: (N,).
        chunk: samples per forward; None: EVAL_SAMPLES_CPU on CPU, EVAL_SAMPLES_ACCEL otherwise.

    Returns:
        (m,) accuracies in [0, 1].
    """
    if chunk is None:
        chunk = EVAL_SAMPLES_CPU if params.device.type == "cpu" else EVAL_SAMPLES_ACCEL
    x = _channels_last(x)
    correct = torch.zeros(params.shape[0], device=params.device)  # (m,)
    for r in range(params.shape[0]):  # evaluation only: one model per call is the fast path
        weights = {k: _channels_last(v) for k, v in fm.unflatten(params[r]).items()}
        for s in range(0, len(y), chunk):
            logits = functional_call(fm.module, weights, (x[s:s + chunk],))  # (b, classes)
            correct[r] += (logits.argmax(dim=-1) == y[s:s + chunk]).sum()
    return correct / len(y)


def _channels_last(t: Tensor) -> Tensor:
    """4-d tensors (images, conv kernels) in channels-last memory layout; others unchanged."""
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t


def eval_subset(n_test: int, size: int, device: torch.device) -> Tensor | None:
    """The fixed evaluation subset: indices (size,) of the test set, the same in every round and
    every run (a permutation from a constant seed, independent of the run's seed); None when the
    whole test set is used (size 0 or >= n_test)."""
    if size <= 0 or size >= n_test:
        return None
    keep = torch.randperm(n_test, generator=torch.Generator().manual_seed(0))[:size]
    return keep.sort().values.to(device)


def evaluate(trainer: Trainer, z: Tensor | None = None, subset: int = 0,
             node_subset: int | None = None) -> tuple[Tensor, float]:
    """(n,) per-node test accuracy and the accuracy of the average model.

    Each rank evaluates its own nodes' models (and the average model); the per-node accuracies
    are gathered, so every rank returns the same values.

    Args:
        z: (n, d) the models from `node_models(trainer)` when the caller already has them.
        subset: evaluate on the fixed subset of this many test samples (`eval_subset`);
            0: the whole test set.
        node_subset: the per-node models' subset (default: `subset`), e.g. the run's fixed
            subset for n node models while the average model reads the whole test set.
    """
    ctx = trainer.ctx
    z = node_models(trainer) if z is None else z  # (n, d)
    mine = ctx.comm.mine(ctx.n, z.device)  # (n,)
    node_subset = subset if node_subset is None else node_subset
    avg = z.mean(dim=0, keepdim=True)  # (1, d)
    if node_subset == subset:  # one pass over the same samples: (n_mine + 1) models
        acc = _accuracy_on(ctx, torch.cat([z[mine], avg]), subset)
        node_part, avg_acc = acc[:-1], float(acc[-1])
    else:
        node_part = _accuracy_on(ctx, z[mine], node_subset)
        avg_acc = float(_accuracy_on(ctx, avg, subset)[0])
    node_acc = torch.zeros(ctx.n, device=z.device, dtype=node_part.dtype).masked_scatter(
        mine, node_part)
    return ctx.comm.gather_rows(node_acc), avg_acc


def _accuracy_on(ctx: Context, models: Tensor, subset: int) -> Tensor:
    """(m,) test accuracy of each model row on the fixed subset of `subset` samples (0: all)."""
    x, y = ctx.data.x_test, ctx.data.y_test
    keep = eval_subset(len(y), subset, y.device)
    if keep is not None:
        x, y = x[keep], y[keep]
    return accuracy(ctx.fm, models, x, y)


def eval_count(subset: int, n_test: int) -> int:
    """How many test samples an evaluation on `subset` reads (0: all)."""
    return n_test if subset == 0 else min(subset, n_test)
