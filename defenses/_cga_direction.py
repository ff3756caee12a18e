"""DP-CGA's combination of received gradients: the dual quadratic program of its update direction,
per block of the model (the paper's Sec. III; Algorithm 1's QP step)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def solve_dual_qp(gram: Tensor, lin: Tensor, margin: float, eps: float,
                  iters: int) -> tuple[Tensor, Tensor]:
    """Batched CGA dual QP: v* = argmin_{v >= margin} 0.5 v^T (G + eps I) v + lin^T v.

    Lawson-Hanson's active-set method (the algorithm of `scipy.optimize.nnls`) in Gram form on
    u = v - margin >= 0, every problem of the batch at once with masks: from u = 0 (every v_k at
    the margin), move into the free set P the bound variable whose negative gradient is largest
    while one is positive; solve the equality-constrained problem on P (one batched linear
    solve); if a free variable would leave u >= 0, step to the boundary and release it. Each
    iteration is one batched solve; problems that are done idle; the loop ends when all are
    done or after `iters` iterations (v stays feasible throughout). Exact up to the solve's
    rounding (float64), whatever the conditioning: CGA's cross-gradients are often nearly
    collinear, where first-order methods stall.

    Args:
        gram: (..., K, K) Gram matrices M M^T (positive semi-definite).
        lin: (..., K) linear terms M g0.
        margin: lower bound of every v_k.
        eps: ridge on the Gram matrix.
        iters: most active-set iterations (each adds or releases one variable).

    Returns:
        (..., K) float64 v, and (...,) bool: the problems that met the optimality test.
    """
    hess = gram.double()
    k = hess.shape[-1]
    eye = torch.eye(k, dtype=hess.dtype, device=hess.device)
    hess = 0.5 * (hess + hess.transpose(-1, -2)) + eps * eye
    b = lin.double() + margin * hess.sum(-1)  # (..., K) gradient at u = 0
    diag = torch.diagonal(hess, dim1=-2, dim2=-1)  # (..., K)
    scale = diag.amax(-1, keepdim=True)  # (..., 1)
    ridge = 1e-14 * scale + 1e-300  # keeps the masked solve regular; far below the problem
    tol = 1e-11 * (b.abs().amax(-1, keepdim=True) + scale)  # (..., 1) optimality test
    u = torch.zeros_like(b)
    free = torch.zeros_like(b, dtype=torch.bool)  # P
    settled = torch.ones_like(b[..., 0], dtype=torch.bool)  # u solves the problem on P
    done = torch.zeros_like(settled)
    arange = torch.arange(k, device=b.device)

    def check() -> tuple[Tensor, Tensor]:
        """(...,) problems to grow P in, and the variable to free: the largest w_k > tol."""
        w = -((hess @ u[..., None])[..., 0] + b)  # (..., K) negative gradient
        best, j = w.masked_fill(free, -math.inf).max(-1)  # (...,)
        return settled & (best > tol[..., 0]), j

    for _ in range(iters):  # active-set iterations (one batched solve each), not nodes
        grow, j = check()
        grow = grow & ~done
        done = done | (settled & ~grow)
        if bool(done.all()):
            break
        free = free | (grow[..., None] & (arange == j[..., None]))
        fm = free.to(hess.dtype)
        sys = hess * fm[..., :, None] * fm[..., None, :] + torch.diag_embed(1 - fm + ridge * fm)
        s = torch.linalg.solve(sys, -b * fm)  # (..., K): optimum on P, 0 elsewhere
        ok = ((s > 0) | ~free).all(-1)  # (...,)
        ratio = torch.where(free & (s <= 0), u / (u - s).clamp(min=1e-300), math.inf)
        alpha, first = ratio.min(-1, keepdim=True)  # (..., 1) the first variable to hit 0
        back = u + alpha.clamp(0.0, 1.0) * (s - u)  # the boundary point on the way to s
        tiny = 1e-14 * u.abs().amax(-1, keepdim=True)
        drop = free & ((back <= tiny) | (arange == first))
        live = ~done
        u = torch.where((live & ok)[..., None], s,
                        torch.where((live & ~ok)[..., None], back.clamp(min=0), u))
        free = torch.where((live & ~ok)[..., None], free & ~drop, free)
        settled = torch.where(live, ok, settled)
    return u + margin, done | (settled & ~check()[0])


def segments(fm: Any, scope: str) -> list[tuple[int, int]]:
    """[start, stop) of each QP block: every parameter tensor ("layer") or the whole vector."""
    if scope == "model":
        return [(0, fm.d)]
    return [(s.start, s.stop) for s in fm.specs]


def block_grams(rows: Tensor, g0: Tensor, blocks: Sequence[tuple[int, int]],
                weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Each QP's Gram matrix M M^T and linear term M g0, M = diag(weights) rows, per block.

    Args:
        rows: (m, k, d) each receiver's received vectors (a view is fine; not copied).
        g0: (m, d) each receiver's weighted self-gradient.
        blocks: [start, stop) of every QP block (see `segments`).
        weights: (m, k) row weights w_jk (None: 1).

    Returns:
        gram (m, L, k, k) and lin (m, L, k).
    """
    grams, lins = [], []
    for a, b in blocks:  # parameter tensors (a handful), not nodes
        part = rows[:, :, a:b]  # (m, k, d_l)
        grams.append(part @ part.transpose(1, 2))  # (m, k, k)
        lins.append((part @ g0[:, a:b, None])[..., 0])  # (m, k)
    gram, lin = torch.stack(grams, 1), torch.stack(lins, 1)  # (m, L, k, k), (m, L, k)
    if weights is not None:
        gram = gram * weights[:, None, :, None] * weights[:, None, None, :]
        lin = lin * weights[:, None, :]
    return gram, lin


def add_combination(out: Tensor, rows: Tensor, coef: Tensor,
                    blocks: Sequence[tuple[int, int]]) -> Tensor:
    """out (m, d) += sum_k coef[:, l, k] rows[:, k] on every block l (in place; returned)."""
    for blk, (a, b) in enumerate(blocks):
        out[:, a:b] += (coef[:, blk, None, :] @ rows[:, :, a:b])[:, 0]  # (m, d_l)
    return out


def cga_direction(rows: Tensor, g0: Tensor, blocks: Sequence[tuple[int, int]], margin: float,
                  eps: float, iters: int) -> tuple[Tensor, Tensor]:
    """g~ = M^T v* + g0 for receivers whose (weighted, zero-padded) rows are stacked.

    Args:
        rows: (m, K, d) each receiver's m_k = w_jk ddot g^{kj}; zero rows pad to K.
        g0: (m, d) each receiver's w_jj ddot g^{jj}.

    Returns:
        (m, d) g~ and (m, L, K) v*.
    """
    gram, lin = block_grams(rows, g0, blocks)
    v, _ = solve_dual_qp(gram, lin, margin, eps, iters)
    return add_combination(g0.clone(), rows, v.to(rows.dtype), blocks), v
