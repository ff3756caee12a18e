"""The public schedule of the DPPS family (DPPS, PartPSP, PEDFL): the step sizes after their
decays, the sync rounds that mix over the complete graph, the mixing a victim combines in a round,
and the real L1 sensitivity of the half-step vectors."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from privbench.threat.observation import Observation


def real_sensitivity(s_half: Tensor) -> Tensor:
    """max_{i,j} ||s_i - s_j||_1 of the clean half-step vectors s_half (n, d_s) -> scalar."""
    return torch.cdist(s_half[None], s_half[None], p=1.0).amax()


def rates(cfg: Any, lr: float, t: int) -> tuple[float, float, float]:
    """(gamma_s, gamma_l, gamma_n) of round t after the decays (public schedule)."""
    f = cfg.decay_factor ** sum(1 for r in cfg.decay_rounds if r <= t)
    gs = cfg.gamma_s if cfg.gamma_s is not None else lr
    gl = cfg.gamma_l if cfg.gamma_l is not None else lr
    return gs * f, gl * f, cfg.gamma_n * f


def is_sync(cfg: Any, t: int) -> bool:
    """Whether round t mixes over the complete graph ((t + 1) mod SP == 0)."""
    return cfg.sync and (t + 1) % cfg.sync_period == 0


def mixing_into(obs: Observation, cfg: Any, t: int,
                victim: int) -> tuple[Tensor, list[int]]:
    """Round t's (n, n) push-sum matrix and the senders the victim combines (itself included):
    the complete graph in a sync round, else the run topology."""
    n = obs.topology.n
    if is_sync(cfg, t):
        return torch.full((n, n), 1.0 / n), list(range(n))
    return obs.topology.mixing(t, "column"), [victim, *obs.topology.in_neighbours(t, victim)]
