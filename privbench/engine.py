"""The node stack and the round loop.

All n nodes' parameters are one `(n, d)` tensor. Gradients for every node (and, for DP, every
sample) come from one `torch.func` call: `vmap(vmap(grad(loss)))` over `functional_call`, so there
is no Python loop over nodes or samples, with one measured exception: the non-private batch step
of a convolutional model on the CPU (`looped_batch_grads`), where vmap's grouped convolution is
the slower way. Clipping is a norm over per-sample rows; gossip is a mixing-matrix product done
by each trainer. The round loop (`train`) exists once; a defense is a
`Trainer` that implements one round as: local step -> messages out (through the bus) -> combine.
"""

from __future__ import annotations

import abc
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, grad, vmap

from privbench import canaries
from privbench.comm import Comm
from privbench.config import RunConfig
from privbench.data import NodeData
from privbench.ghost import fast_clipped_sum, plan_for, row_bytes
from privbench.messages import GroundTruth, MessageBus, MessageKind
from privbench.models import FlatModel
from privbench.seeding import Streams
from privbench.topology import Topology


def rows_to_dict(fm: FlatModel, params: Tensor) -> dict[str, Tensor]:
    """(m, d) -> {name: (m, *shape)}, one tensor per parameter for m rows at once.

    Differentiate w.r.t. these parameter tensors, not slices of one flat vector (slicing a flat
    leaf makes every slice's backward materialise a full (d,) zero gradient, which dominated
    the per-sample cost)."""
    m = params.shape[0]
    return {s.name: params[:, s.start:s.stop].reshape(m, *s.shape) for s in fm.specs}


def _dict_to_rows(fm: FlatModel, grads: dict[str, Tensor], lead: int) -> Tensor:
    """{name: (*lead_dims, *shape)} -> (*lead_dims, d), in the flat order."""
    return torch.cat([grads[s.name].flatten(start_dim=lead) for s in fm.specs], dim=-1)


def _per_sample_dict(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor) -> dict[str, Tensor]:
    """{name: (m, B, *shape)} per-sample gradients, one tensor per parameter (no flat copy)."""

    def loss(p: dict[str, Tensor], xs: Tensor, ys: Tensor) -> Tensor:
        return F.cross_entropy(functional_call(fm.module, p, (xs[None],)), ys[None])

    g = vmap(vmap(grad(loss), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    return g(rows_to_dict(fm, params), x, y)


def per_sample_grads(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """Per-sample gradients for m parameter rows at once.

    Args:
        fm: the model.
        params: (m, d), one row per node (or per edge, for DPDL's cross-gradients).
        x: (m, B, C, H, W) each row's samples.
        y: (m, B) labels.

    Returns:
        (m, B, d) gradients of each sample's loss at its row's parameters.

    DP steps that only need the clipped sum should call `clipped_grad_sum`: it never builds this
    (m, B, d) stack (2-3x faster for the CNN on CPU, and memory bounded in m).
    """
    canaries.refuse(y, "per-sample gradients handed to the defense")
    return _dict_to_rows(fm, _per_sample_dict(fm, params, x, y), lead=2)


def clipped_grad_sum(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, mask: Tensor,
                     bound: Tensor | float, max_bytes: int | None = None,
                     ) -> tuple[Tensor, Tensor]:
    """Sum over real samples of L2-clipped per-sample gradients, without per-sample gradients.

    Equals `masked_sum(clip_l2(per_sample_grads(fm, params, x, y), bound)[0], mask)` (same
    factor min(1, bound / (||g|| + 1e-12))). Where every parametrised layer has an exact rule
    (Linear, Conv2d, GroupNorm; any other leaf layer by its own vjp) this is
    `privbench.ghost.fast_clipped_sum`: one forward and one backward per row, all rows in one
    vmap, ghost norms or formed per-layer gradients, whichever is cheaper, and the clipped sum as
    one weighted product per layer (Bu et al. 2023 book-keeping). Otherwise it falls back to
    per-sample gradients by `vmap(vmap(grad))`, per parameter tensor (never one (m, B, d) stack).
    Rows are processed in chunks of at most `max_bytes` of working memory (at least one row per
    chunk), so memory is bounded in m.

    Args:
        params: (m, d); x: (m, B, C, H, W); y: (m, B); mask: (m, B) bool, True for real samples.
        bound: clipping bound, a float or a tensor broadcastable to (m, B).
        max_bytes: per-chunk working-memory budget; None: 64 MiB on CPU (measured best of 32, 64,
            256 MiB for the CNN at n = 64), 4 GiB on accelerators
            (16 MiB / 1 GiB of per-sample gradients on the fallback path).

    Returns:
        (m, d) clipped sums and (m, B) the per-sample gradient norms before clipping; rows
        without a real sample are not computed (zero sum and norms).
    """
    bank = canaries.active()
    if bank is not None and bool((y < 0).any()):  # an audit's gradient canaries in the batch
        return bank.clipped_sum(clipped_grad_sum, fm, params, x, y, mask, bound, max_bytes)
    live = mask.any(dim=1)  # (m,) rows with a real sample (all, except other ranks' nodes)
    if not bool(live.all()):
        sums = torch.zeros_like(params)
        norms = torch.zeros(y.shape, device=params.device, dtype=params.dtype)
        if bool(live.any()):
            bnd = bound
            if isinstance(bound, Tensor) and bound.dim():
                bnd = bound.expand(*y.shape)[live]
            sums[live], norms[live] = clipped_grad_sum(fm, params[live], x[live], y[live],
                                                       mask[live], bnd, max_bytes)
        return sums, norms
    m, b = y.shape
    plan = plan_for(fm.module, tuple(x.shape[2:]))
    cpu = params.device.type == "cpu"
    if max_bytes is None:
        max_bytes = (64 * 2**20 if cpu else 2**32) if plan else (16 * 2**20 if cpu else 2**30)
    per_row = (row_bytes(plan, b, params.element_size()) if plan
               else b * fm.d * params.element_size())
    step = max(1, min(m, max_bytes // max(1, per_row)))
    bound_t = torch.as_tensor(bound, dtype=params.dtype, device=params.device)
    bound_t = bound_t.expand(m, b) if bound_t.dim() else bound_t
    sums, norms = [], []
    for s in range(0, m, step):  # chunks of rows (one chunk unless memory would exceed max_bytes)
        rows = slice(s, s + step)
        bnd = bound_t[rows] if bound_t.dim() else bound_t
        if plan is not None:
            parts, nrm = fast_clipped_sum(plan, fm.module, rows_to_dict(fm, params[rows]),
                                          x[rows], y[rows], mask[rows], bnd)
            sums.append(_dict_to_rows(fm, parts, lead=1))  # (m', d)
        else:
            sums_chunk, nrm = vmap_clipped_sum(fm, params[rows], x[rows], y[rows], mask[rows],
                                                bnd)
            sums.append(sums_chunk)
        norms.append(nrm)
    return torch.cat(sums), torch.cat(norms)


def vmap_clipped_sum(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, mask: Tensor,
                      bound: Tensor) -> tuple[Tensor, Tensor]:
    """Fallback: vmap(vmap(grad)) per-sample gradients per parameter -> (m, d), (m, B)."""
    g = _per_sample_dict(fm, params, x, y)
    nrm = sum(v.flatten(start_dim=2).pow(2).sum(dim=-1) for v in g.values()).sqrt()  # (m, B)
    w = (bound / (nrm + 1e-12)).clamp(max=1.0) * mask.to(nrm.dtype)  # (m, B)
    return torch.cat([torch.einsum("mbk,mb->mk", g[sp.name].flatten(start_dim=2), w)
                      for sp in fm.specs], dim=-1), nrm


def batch_grads(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor,
                mask: Tensor | None = None) -> Tensor:
    """Gradient of each row's (masked) mean loss, the non-private step.

    Args:
        params: (m, d); x: (m, B, ...); y: (m, B); mask: (m, B) bool, True for real samples.

    Returns:
        (m, d); rows without a real sample are not computed (zero, the gradient of a zero loss).
    """
    if mask is None:
        mask = torch.ones(y.shape, dtype=torch.bool, device=y.device)
    bank = canaries.active()
    if bank is not None and bool((y < 0).any()):  # an audit's gradient canaries in the batch
        return bank.batch_mean(batch_grads, fm, params, x, y, mask)
    live = mask.any(dim=1)  # (m,) rows with a real sample (all, except other ranks' nodes)
    if not bool(live.all()):
        out = torch.zeros_like(params)
        if bool(live.any()):
            out[live] = batch_grads(fm, params[live], x[live], y[live], mask[live])
        return out

    if params.device.type == "cpu" and fm.convolutional:
        return looped_batch_grads(fm, params, x, y, mask)
    return vmapped_batch_grads(fm, params, x, y, mask)


def _masked_mean_loss(fm: FlatModel, p: dict[str, Tensor], xb: Tensor, yb: Tensor,
                      mb: Tensor) -> Tensor:
    """Mean cross-entropy over the real samples (mb (B,) True) of one row's batch xb (B, ...)."""
    per = F.cross_entropy(functional_call(fm.module, p, (xb,)), yb, reduction="none")  # (B,)
    w = mb.to(per.dtype)
    return (per * w).sum() / w.sum().clamp(min=1.0)


def vmapped_batch_grads(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor,
                        mask: Tensor) -> Tensor:
    """`batch_grads` of every row in one `vmap(grad)` call: params (m, d) -> (m, d)."""
    loss = functools.partial(_masked_mean_loss, fm)  # differentiated in p, its first argument
    return _dict_to_rows(fm, vmap(grad(loss))(rows_to_dict(fm, params), x, y, mask), lead=1)


def looped_batch_grads(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor,
                       mask: Tensor) -> Tensor:
    """`batch_grads` one row at a time, in channels-last layout: params (m, d) -> (m, d).

    The engine's one loop over nodes, taken for convolutional models on the CPU only (by
    `batch_grads`): there `vmap` over m stacked conv weights becomes one grouped convolution
    (groups = m), which oneDNN runs slower than m ordinary channels-last convolutions (the
    FedAvg CNN's round of DeFL-VP's local epoch, 10 nodes, batch 64: reports/performance/README.md;
    `privbench bench engine --method floor,floor_vmap`). A row's step takes tens of
    milliseconds, so the loop's own cost is nothing. The same loss as `vmapped_batch_grads`,
    equal to float rounding (tests/test_engine.py); on a GPU the vmap stays. It returns plain
    gradients, with no graph back to params or x (every caller takes them as a step).
    """
    cl = torch.channels_last
    out = torch.empty_like(params)
    for i in range(params.shape[0]):
        # detached leaves, 4-d conv weights copied to channels-last (the layout oneDNN runs best)
        p = {k: (v.contiguous(memory_format=cl) if v.dim() == 4 else v).requires_grad_()
             for k, v in fm.unflatten(params[i].detach()).items()}
        xb = x[i].contiguous(memory_format=cl) if x[i].dim() == 4 else x[i]  # (B, C, H, W)
        with torch.enable_grad():  # a caller's no_grad must not stop it (as torch.func.grad)
            grads = torch.autograd.grad(_masked_mean_loss(fm, p, xb, y[i], mask[i]),
                                        list(p.values()))
        out[i] = fm.flatten(dict(zip(p, grads, strict=True)))  # the logical (flat) order
    return out


def clip_l2(g: Tensor, bound: Tensor | float) -> tuple[Tensor, Tensor]:
    """Scale each row of g (..., d) to L2 norm at most `bound` (broadcast over the leading dims).

    Returns:
        clipped (..., d) and the original norms (...).
    """
    norms = g.norm(dim=-1)
    bound_t = torch.as_tensor(bound, dtype=g.dtype, device=g.device)
    factor = (bound_t / (norms + 1e-12)).clamp(max=1.0)
    return g * factor[..., None], norms


def clip_l1(g: Tensor, bound: Tensor | float) -> tuple[Tensor, Tensor]:
    """Scale each row of g (..., d) to L1 norm at most `bound`. Returns (clipped, L1 norms)."""
    norms = g.abs().sum(dim=-1)
    bound_t = torch.as_tensor(bound, dtype=g.dtype, device=g.device)
    factor = (bound_t / (norms + 1e-12)).clamp(max=1.0)
    return g * factor[..., None], norms


def masked_sum(g: Tensor, mask: Tensor) -> Tensor:
    """Sum of per-sample rows g (m, B, d) over real samples mask (m, B) -> (m, d)."""
    return torch.einsum("mbd,mb->md", g, mask.to(g.dtype))


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


@dataclass
class Context:
    """What a trainer works with: the run's pieces, already built and on the device."""

    run: RunConfig
    fm: FlatModel
    data: NodeData
    topology: Topology
    bus: MessageBus
    truth: GroundTruth
    streams: Streams
    device: torch.device
    comm: Comm = field(default_factory=Comm)

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self.data.n

    def draw(self, t: int, rates: Tensor | None = None,
             batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The one sampling path: round t's batches for every node, recorded as ground truth.

        Samples (Poisson at `rates`, else uniform fixed-size batches without replacement of
        `batch_size`, default the run's), records the drawn slots in `truth` (what the attacks
        are graded against) and gathers them. A trainer that samples any other way trains but
        cannot be graded; the contract test (tests/test_sampling_contract.py) fails for it.

        Args:
            rates: (n, 1) per-node Poisson sampling rates, or None for fixed-size batches.
            batch_size: the fixed batch size (ignored with `rates`).

        Returns:
            x (n, k, C, H, W), y (n, k), mask (n, k): k = B for fixed batches (padding masked
            where |D_i| < B), the largest realised Poisson batch (>= 1) otherwise.
        """
        gen = self.streams.get("batch")
        if rates is not None:
            slots, mask = self.data.poisson(rates, gen)  # (n, k)
        else:
            slots, mask = self.data.sample(batch_size or self.run.batch_size, gen)  # (n, B)
        self.truth.record(t, slots, mask)
        x, y = self.data.gather(slots)
        return x, y, mask

    def draw_epoch(self, t: int) -> tuple[Tensor, Tensor]:
        """Round t's pass over every member (a local epoch), recorded as ground truth.

        Returns:
            perm (n, M): each node's members in a random order, padding slots last; members
            (n, M) bool: the slots of real members whose data this process holds. The caller
            gathers `perm` in chunks (`data.gather`); every member is recorded as used.
        """
        data = self.data
        n, m = data.y.shape
        keys = torch.rand(n, m, generator=self.streams.get("batch"), device=data.y.device)
        perm = keys.masked_fill(data.arange_mask(), 2.0).argsort(dim=1)  # (n, M) padding last
        pos = torch.arange(m, device=data.y.device)  # (M,)
        members = (pos[None] < data.counts[:, None]) & data.held_rows()  # (n, M)
        self.truth.record(t, perm, members)
        return perm, members


class Trainer(abc.ABC):
    """A decentralized learning algorithm: one round = local step -> messages out -> combine.

    The contract (what tests/test_contract.py, test_sampling_contract.py, test_dp_selfcheck.py,
    test_plan_is_the_noise.py and tests/distributed/ check for every registered defense):

    * declare `Config` (a frozen dataclass; every setting the paper leaves open is a field,
      with a documented default),
      `kinds` (every message kind it sends, with `covered` / `data_dependent`), `mixing`, and
      `private`;
    * keep all node state stacked (n, d) and implement `round(t)` and `models()`;
    * draw batches only through `ctx.draw` / `ctx.draw_epoch` (or `sample_batch`): the one path
      that records the ground truth attacks are graded against;
    * send every payload through `ctx.bus` (`privbench.mixing.push_sum` / `gossip`), reading other
      nodes' values only through what the bus delivers (then it runs distributed unchanged);
    * a private trainer draws its noise from its privacy plan's `schedule`, with random numbers
      for all n rows from `ctx.streams`, and `privacy()` returns the reports composed from that
      same schedule, with the sampling model it draws;
    * optionally `gradient_views(obs, victim, rounds)` (classmethod): what an observer can derive
      of a victim's released gradient; without it the gradient attacks say "not applicable";
    * optionally extend `structure(fm, cfg)` (classmethod) with what part of the model it sends
      (DPPS's shared coordinates): audit fingerprints and reproduction lines hold it.

    The README ("Extending") has a complete minimal example, tested from its text.
    """

    Config: ClassVar[type]
    kinds: ClassVar[tuple[MessageKind, ...]]
    mixing: ClassVar[str] = "column"  # "column" (push-sum) or "doubly" (gossip)
    default_topology: ClassVar[str] = "random_out"  # the graph of a run with topology "auto"
    private: ClassVar[bool] = False
    # rounds before t whose messages `gradient_views` reads for round t (x_i^t comes from round
    # t - 1's messages; ADP-VRSGP's gradient fusion also unmixes round t - 1's release: 2)
    view_lookback: ClassVar[int] = 1

    def __init__(self, cfg: Any, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    @classmethod
    def structure(cls, fm: FlatModel, cfg: Any) -> dict[str, Any]:
        """What the code builds from a configuration, beyond the configuration: the model's
        parameter count and its layers' sizes (input side first, as a split counts them).
        A trainer that sends only part of the model adds how much it sends. An audit cell's
        fingerprint and a reproduction line hold it, so a code change that makes another model
        or split of the same configuration is caught on resume or merge, not mixed in."""
        sizes = [int(fm.slice_of(layer).sum()) for layer in fm.layers]
        return {"parameters": fm.d, "layers": sizes}

    def samples_in(self, t: int) -> bool:
        """Whether round t draws data (True for every round of a one-step-per-round trainer;
        MUFFLIATO's gossip-only rounds do not): the sampling contract checks it."""
        return True

    def init_params(self) -> Tensor:
        """(n, d) identical initial models (a shared, public initialisation)."""
        x0 = self.ctx.fm.init(self.ctx.streams.fresh("init", device="cpu")).to(self.ctx.device)
        return x0.expand(self.ctx.n, -1).clone()

    def sample_batch(self, t: int) -> tuple[Tensor, Tensor, Tensor]:
        """Round t's uniform mini-batches for every node, recorded as ground truth.

        Returns:
            x (n, B, C, H, W), y (n, B), mask (n, B).
        """
        return self.ctx.draw(t, batch_size=self.ctx.run.batch_size)

    @abc.abstractmethod
    def round(self, t: int) -> None:
        """Run round t for all nodes."""

    @abc.abstractmethod
    def models(self) -> Tensor:
        """(n, d) the nodes' current models as they would be evaluated (de-biased for push-sum)."""

    def privacy(self) -> list[dict[str, Any]]:
        """Per-node ε reports (empty for non-private trainers)."""
        return []


@dataclass
class TrainResult:
    """Outcome of the round loop."""

    history: list[dict[str, Any]] = field(default_factory=list)
    node_accuracy: list[float] = field(default_factory=list)
    average_accuracy: float = float("nan")
    seconds: float = 0.0
    eval_seconds: float = 0.0
    diverged_round: int | None = None
    # rounds at which the loop continued a run from a checkpoint (`train`'s `start`); empty
    # for a run trained in one go
    resumed_at: list[int] = field(default_factory=list)


def node_models(trainer: Trainer) -> Tensor:
    """(n, d) every node's current model, each row from the rank that runs the node."""
    return trainer.ctx.comm.gather_rows(trainer.models())


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


def _n_eval(subset: int, n_test: int) -> int:
    """How many test samples an evaluation on `subset` reads (0: all)."""
    return n_test if subset == 0 else min(subset, n_test)


def all_finite(trainer: Trainer) -> bool:
    """Whether every node's current model is finite (one isfinite reduction over this rank's
    rows of the stacked (n, d) models; every rank gets the same answer)."""
    ctx = trainer.ctx
    z = trainer.models()  # (n, d)
    ok = bool(torch.isfinite(z[ctx.comm.mine(ctx.n, z.device)]).all())
    return ctx.comm.all_ok(ok) if ctx.comm.distributed else ok


def train(trainer: Trainer, progress: Callable[[int], None] | None = None,
          rounds: int | None = None, start: int = 0, result: TrainResult | None = None,
          after_round: Callable[[int, TrainResult], None] | None = None,
          before_round: Callable[[int], None] | None = None,
          evaluations: bool = True) -> TrainResult:
    """The round loop: rounds, periodic evaluation, a finiteness check after every round.

    A run whose models stop being finite stops at that round (`diverged_round`, 0-based).

    Intermediate evaluations use the run's fixed `eval_subset` of the test set; the last one
    evaluates the average model (the headline accuracy) on the whole test set and the n node
    models on the fixed subset (n whole-test-set passes of a CNN on Fashion-MNIST were most of
    the evaluation time); their time is kept apart (`eval_seconds`, included in `seconds`).

    Args:
        trainer: a built trainer.
        progress: called with 1 after every round (e.g. a tqdm bar's update).
        rounds: stop after this many of the configured rounds (None: all). The noise stays
            calibrated for the configured run: used to release the first rounds' messages of a
            run exactly as the full run would (the audit's inversion views).
        start, result: continue a run whose first `start` rounds are done, with the loop's
            result so far (`privbench.checkpoint.load` restores both and the trainer); its
            seconds add up, and `start` is noted in `resumed_at`.
        after_round: called with the rounds done and the result so far after every round that
            did not diverge (a checkpoint's chance to save: `privbench.checkpoint.Saver`).
        before_round: called with t before round t runs (the mechanism audit replays the
            round from this state: `privbench.mechanism`).
        evaluations: False skips every evaluation (a run trained only for what it sends).
    """
    run = trainer.ctx.run
    result = result if result is not None else TrainResult()
    if start:
        result.resumed_at.append(start)
    before, tic0 = result.seconds, time.perf_counter()
    for t in range(start, run.rounds if rounds is None else min(rounds, run.rounds)):
        if before_round is not None:
            before_round(t)
        trainer.round(t)
        if progress is not None:
            progress(1)
        if not all_finite(trainer):
            result.diverged_round = t
            break
        last = t + 1 == run.rounds
        if evaluations and ((t + 1) % run.eval_every == 0 or last):
            z = node_models(trainer)  # (n, d), gathered once
            tic = time.perf_counter()
            subset = 0 if last else run.eval_subset
            node_acc, avg_acc = evaluate(trainer, z, subset, run.eval_subset)
            result.eval_seconds += time.perf_counter() - tic
            n_test = len(trainer.ctx.data.y_test)
            result.history.append({"round": t + 1, "average_accuracy": avg_acc,
                                   "mean_node_accuracy": float(node_acc.mean()),
                                   "test_samples": _n_eval(subset, n_test),
                                   "node_test_samples": _n_eval(run.eval_subset, n_test)})
            result.node_accuracy, result.average_accuracy = node_acc.tolist(), avg_acc
        if after_round is not None:
            result.seconds = before + time.perf_counter() - tic0
            after_round(t + 1, result)
    result.seconds = before + time.perf_counter() - tic0
    return result
