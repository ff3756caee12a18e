"""Gradients for every node and sample in one call: per-sample and batch gradients through
`vmap(vmap(grad(loss)))` over `functional_call`, clipping as a norm over per-sample rows, and
clipped sums (ghost clipping where it is cheaper)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, grad, vmap

from privbench.engine import canaries
from privbench.engine.ghost import fast_clipped_sum, plan_for, row_bytes
from privbench.models import FlatModel


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
    `privbench.engine.ghost.fast_clipped_sum`: one forward and one backward per row, all rows in one
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
    return _joined(sums), _joined(norms)


def _joined(chunks: list[Tensor]) -> Tensor:
    """The chunks' rows in one tensor; a single chunk as it is (no copy: an (m, d) copy is 12 MB
    for the FedAvg CNN at n = 16)."""
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


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
    equal to float rounding (tests/engine/test_grads.py); on a GPU the vmap stays. It returns plain
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
