"""White-box gradient canaries (the auditor's hook into per-sample clipping).

The one-run audit of Steinke, Nasr & Jagielski ("Privacy Auditing with One (1) Training Run",
NeurIPS 2023, §6 white-box) and the gradient canaries of Nasr et al. ("Tight Auditing of
Differentially Private Machine Learning", USENIX Security 2023): the auditor adds m records to a
node's data, each independently with probability 1/2, whose per-sample gradient it controls. Here
canary j's gradient is the Dirac vector `norm * e_{coords[j]}` (a distinct model coordinate per
canary, so canaries never interfere), with `norm` larger than the clip bound the defense claims:
a correct defense clips it to norm C like any record; a defense that skips clipping lets it through
whole, which is what a record with a large gradient does.

A canary is stored in the audited node's data row beyond its member count, so the defense's
sampler never draws it and the node's sampling rate and calibration are those of its own records;
the audit's context (`privbench.audit.canary_audit.CanaryContext`) adds each included canary to a
batch with the rate the defense's draw used for the node. Only its gradient is special. Its label
encodes its id, `y = -(j + 1)` (real labels are >= 0), so `engine.clipped_grad_sum` (per-sample
clipped sums: DP-SGD-style defenses) and `engine.batch_grads` (batch means: the non-private
baselines, DeFL-VP, DPPS / PartPSP, whose node-level claims bound any one record's influence too)
recognise canary slots in any batch without knowing the defense. The bank is active only inside
`inserted(bank)`; outside it the hook is never consulted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor

from privbench.errors import NotApplicable

_ACTIVE: ContextVar[GradientCanaries | VectorCanaries | None] = ContextVar(
    "privbench_canaries", default=None)


@dataclass(frozen=True)
class GradientCanaries:
    """m Dirac gradient canaries.

    Attributes:
        coords: (m,) distinct model coordinates, canary j's gradient is `norm * e_{coords[j]}`.
        norm: the canaries' gradient norm before clipping.
    """

    coords: Tensor
    norm: float

    @property
    def m(self) -> int:
        """Number of canaries."""
        return int(self.coords.numel())

    def labels(self, ids: Tensor) -> Tensor:
        """The labels that mark canaries `ids` (k,) in a dataset: -(id + 1)."""
        return -(ids.to(torch.int64) + 1)

    def clipped_sum(self, inner: Callable[..., tuple[Tensor, Tensor]], fm: object, params: Tensor,
                    x: Tensor, y: Tensor, mask: Tensor, bound: Tensor | float,
                    max_bytes: int | None) -> tuple[Tensor, Tensor]:
        """`inner` (the engine's clipped sum) on the real samples, plus every sampled canary's
        clipped gradient: min(1, bound / norm) * norm on its coordinate.

        Args:
            params: (m_rows, d); x: (m_rows, B, ...); y: (m_rows, B) with canaries < 0;
            mask: (m_rows, B) sampled slots; bound: float or broadcastable to (m_rows, B).
        """
        is_canary = y < 0  # (m_rows, B)
        sums, norms = inner(fm, params, x, y.clamp(min=0), mask & ~is_canary, bound, max_bytes)
        present = (mask & is_canary).to(sums.dtype)  # (m_rows, B)
        b = torch.as_tensor(bound, dtype=sums.dtype, device=sums.device).expand(y.shape)
        weight = (b / self.norm).clamp(max=1.0) * self.norm * present  # (m_rows, B)
        coords = self.coords.to(y.device)[(-y - 1).clamp(min=0, max=self.m - 1)]  # (m_rows, B)
        sums = sums.scatter_add(1, coords, weight)
        norms = torch.where(is_canary & mask, torch.full_like(norms, self.norm), norms)
        return sums, norms


    def batch_mean(self, inner: Callable[..., Tensor], fm: object, params: Tensor, x: Tensor,
                   y: Tensor, mask: Tensor) -> Tensor:
        """`inner` (the engine's batch-mean gradient) with every sampled canary counted as one
        more sample of the mean: (sum of real gradients + sum of canary vectors) / batch count.
        No per-sample clip applies here, so a canary keeps its full norm (which is what a record
        with a large gradient does to a defense that does not clip per sample).

        Args:
            params: (m_rows, d); x: (m_rows, B, ...); y: (m_rows, B) with canaries < 0;
            mask: (m_rows, B) sampled slots.
        """
        is_canary = y < 0  # (m_rows, B)
        real = mask & ~is_canary
        n_all = mask.sum(dim=1).clamp(min=1).to(params.dtype)  # (m_rows,)
        g = inner(fm, params, x, y.clamp(min=0), real)  # (m_rows, d) mean over real samples
        g = g * (real.sum(dim=1).to(params.dtype) / n_all)[:, None]
        present = (mask & is_canary).to(g.dtype) * self.norm / n_all[:, None]  # (m_rows, B)
        coords = self.coords.to(y.device)[(-y - 1).clamp(min=0, max=self.m - 1)]
        return g.scatter_add(1, coords, present)


@dataclass(frozen=True)
class VectorCanaries:
    """Canaries whose gradients are arbitrary vectors: the mechanism audit's worst-case probes
    (`privbench.audit.mechanism_replay`), two canaries of opposite directions whose clipped
    contributions saturate the clip bound whatever the other samples of the batch are (Nasr et
    al. 2023: a white-box adversary chooses the gradient). Same labels and hooks as
    `GradientCanaries`.

    Attributes:
        vectors: (m, d) canary j's gradient, before clipping.
    """

    vectors: Tensor

    def _slots(self, y: Tensor, mask: Tensor, like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The sampled canary slots: rows (k,), slots (k,), and their gradients (k, d)."""
        rows, slots = torch.nonzero((y < 0) & mask, as_tuple=True)
        ids = (-y[rows, slots] - 1).clamp(max=len(self.vectors) - 1)
        return rows, slots, self.vectors.to(like)[ids]

    def clipped_sum(self, inner: Callable[..., tuple[Tensor, Tensor]], fm: object, params: Tensor,
                    x: Tensor, y: Tensor, mask: Tensor, bound: Tensor | float,
                    max_bytes: int | None) -> tuple[Tensor, Tensor]:
        """`inner` on the real samples, plus every sampled canary's L2-clipped gradient
        (`GradientCanaries.clipped_sum`'s arguments)."""
        sums, norms = inner(fm, params, x, y.clamp(min=0), mask & (y >= 0), bound, max_bytes)
        rows, slots, v = self._slots(y, mask, sums)
        size = v.norm(dim=1)  # (k,)
        b = torch.as_tensor(bound, dtype=sums.dtype, device=sums.device).expand(y.shape)
        factor = (b[rows, slots] / (size + 1e-12)).clamp(max=1.0)  # (k,)
        norms = norms.index_put((rows, slots), size)
        return sums.index_add(0, rows, v * factor[:, None]), norms

    def batch_mean(self, inner: Callable[..., Tensor], fm: object, params: Tensor, x: Tensor,
                   y: Tensor, mask: Tensor) -> Tensor:
        """`inner` with every sampled canary counted as one more sample of the mean
        (`GradientCanaries.batch_mean`'s arguments). No bound is known here (a defense that
        clips the batch as a whole clips this mean afterwards), so each canary is scaled by
        1 + the norm of its row's real gradient sum: it outweighs the real samples by its own
        norm's factor, however large their gradients are."""
        real = mask & (y >= 0)
        n_all = mask.sum(dim=1).clamp(min=1).to(params.dtype)  # (m_rows,)
        g = inner(fm, params, x, y.clamp(min=0), real) * (real.sum(dim=1) / n_all)[:, None]
        rows, _, v = self._slots(y, mask, g)
        rest = 1 + (g * n_all[:, None]).norm(dim=1)  # (m_rows,) 1 + |real gradient sum|
        return g.index_add(0, rows, v * (rest / n_all)[rows, None])


def active() -> GradientCanaries | VectorCanaries | None:
    """The bank inserted in the current context, if any."""
    return _ACTIVE.get()


def refuse(y: Tensor, where: str) -> None:
    """Called by gradient paths that cannot take canaries (e.g. per-sample gradients handed to
    the defense itself).

    Raises:
        NotApplicable: when a bank is active and `y` holds canary labels.
    """
    if _ACTIVE.get() is not None and bool((y < 0).any()):
        raise NotApplicable(f"white-box gradient canaries cannot be inserted into {where}")


@contextlib.contextmanager
def inserted(bank: GradientCanaries | VectorCanaries
             ) -> Iterator[GradientCanaries | VectorCanaries]:
    """Activate `bank` for the per-sample clipping calls made inside the block."""
    token = _ACTIVE.set(bank)
    try:
        yield bank
    finally:
        _ACTIVE.reset(token)
