"""The DPPS mechanism (Zhou, Xue, Chen 2025, Algorithm 1): the Laplace draw of Eq. 8, the
sensitivity estimate of Eq. 22 (Remark 1), the noise feedback that estimate implies, and the
sensitivity modes of `defenses.dpps.DPPSConfig` (see its module docstring)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

SENSITIVITY_MODES = ("auto", "estimated", "clipped", "oracle", "none")
# L1 bound CLIP of the clipped mode when `clip` is unset (one node's update then moves its
# release by at most gamma_s CLIP in L1)
DEFAULT_L1_CLIP = 1.0
# what the S of the noise is, per mode (the mechanism audit measures a clip bound with probes)
SENSITIVITY_BASIS = {"estimated": "estimate", "clipped": "clip_bound", "oracle": "oracle",
                     "none": "none"}


def laplace(shape: tuple[int, ...], scale: Tensor, gen: torch.Generator,
            device: torch.device) -> Tensor:
    """I.i.d. Lap(0, scale) draws as the difference of two Exp(1) draws times `scale`."""
    e1 = torch.empty(shape, device=device).exponential_(1.0, generator=gen)
    e2 = torch.empty(shape, device=device).exponential_(1.0, generator=gen)
    return (e1 - e2) * scale


def sensitivity_step(prev: Tensor, eps_norm: Tensor, noise_norm_prev: Tensor, reset: bool,
                     c_prime: float, lam: float, gamma_n: float,
                     s0_norm: Tensor | None = None) -> Tensor:
    """Eq. 22 for every node at once.

    Args:
        prev: (n,) S_i^(t-1) (ignored when `reset`).
        eps_norm: (n,) ||eps_i^(t)||_1.
        noise_norm_prev: (n,) ||n_i^(t-1)||_1 of the RAW Laplace draw (before gamma_n).
        reset: t = 0 or a reset round: S_i = 2C'||eps_i||_1 (+ 2C'||s_i^(0)||_1 if given).
        c_prime, lam, gamma_n: C', lambda and the current noise rate.
        s0_norm: (n,) ||s_i^(0)||_1 for the paper's t = 0 term, or None (code: dropped).

    Returns:
        (n,) S_i^(t).
    """
    if reset:
        out = 2 * c_prime * eps_norm
        return out if s0_norm is None else out + 2 * c_prime * s0_norm
    return lam * prev + 2 * c_prime * (eps_norm + lam * gamma_n * noise_norm_prev)


def noise_feedback(d_shared: int, eps_round: float, mix: Tensor) -> dict[str, float]:
    """The sensitivity the noise itself creates ("Why Eq. 22 cannot hold a calibrated ε" in
    reports/reproduce/dpps/README.md).

    A round's Laplace noise n_k, scale S / eps_round on each of the d_shared coordinates, is mixed
    by `mix` (n, n; row i = what node i receives) into the next round's vectors, so nodes i and j
    then differ by sum_k (mix_ik - mix_jk) n_k, about c d_shared S / eps_round in L1 with
    c = (2 / sqrt(pi)) max_ij ||mix_i - mix_j||_2 (the mean absolute value of that difference per
    unit of scale; 1.13 on the one-peer graph, where two nodes' senders can be disjoint; less
    where every pair shares senders): the next round's S grows by that factor (syncs aside), so
    the run stays bounded only for eps_round above about c d_shared.
    """
    c = 2.0 / math.sqrt(math.pi) * float(torch.cdist(mix, mix).max())
    return {"shared_coordinates": d_shared, "growth_per_round": c * d_shared / eps_round,
            "stable_above_epsilon_round": c * d_shared}


def resolved_mode(cfg: Any) -> str:
    """The sensitivity mode a run uses ("auto" resolved, see `DPPSConfig`)."""
    if cfg.sensitivity_mode != "auto":
        return cfg.sensitivity_mode
    return "estimated" if cfg.b is not None or cfg.calibrate_with == "paper" else "clipped"


def clip_bound(cfg: Any) -> float | None:
    """The L1 clip CLIP of the shared gradient (Eq. 24): `clip`, else the clipped mode's
    default; None: no clipping."""
    if cfg.clip is not None:
        return cfg.clip
    return DEFAULT_L1_CLIP if resolved_mode(cfg) == "clipped" else None
