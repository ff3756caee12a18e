"""DP-DPSGD: decentralized parallel SGD with per-sample clipping and Gaussian noise (baseline).

DPDL's baseline "DP-DPSGD" (Yuan et al., arXiv 2606.04399, Sec. VI-A, ref. [26]: Xu, Zhang, Wang,
"Decentralized Stochastic Gradient Descent with Differential Privacy" (A(DP)^2SGD), TPAMI 2021), run
synchronously (a choice of this implementation: DPDL's rounds are synchronous):

    x_i^{t+1} = sum_j w_ij x_j^t - eta (1/B) (sum_b clip_C(grad l(x_i^t; xi_{i,b})) + z_i^t),
    z_i^t ~ N(0, sigma^2 C^2 I_d)

Message: `model` x_i^t (broadcast), a post-processing of the node's earlier noisy gradients.
Every round is one Poisson(q_i)-subsampled Gaussian release with noise multiplier sigma per node
(q_i = min(1, B / |D_i|)); sigma is the smallest with max_i eps_i <= the run's target, the same
rule and accountant (RDP, integer orders 2..256) as `defenses/dpdl.py`, so the two are compared
at equal budgets. Graph and weights: `defenses.dpdl.mixing_matrix` (CGA weights on two_hub,
Metropolis-Hastings otherwise, identical to the CGA code's on ring and complete).

`sigma_rule="per_node"` (a deviation shared with DPDL's option) gives node i its own sigma_i, the
smallest with eps_i <= target.

Choices of this implementation: Poisson batches by default (`sampling="poisson"`, Poisson add/remove
accounting); `sampling="fixed"` keeps fixed-size batches, accounted as sampling without
replacement with replace-one adjacency and sensitivity 2C (as in DPDL); optional heavy-ball
`momentum` (0 = A(DP)^2SGD's plain step). DP-CGA (a quadratic program per agent, with
batch-level clipping) is `defenses/dp_cga.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from defenses._graph import canonical_weights, graph_periods, mixing_matrix, require_undirected
from defenses._node_dp import (
    GAUSSIAN_CHOICES,
    check_gaussian_settings,
    gaussian_node_reports,
    gaussian_release_plan,
    node_rates,
    node_sigmas,
    noisy_clipped_mean,
)
from privbench.accounting import PrivacyPlan
from privbench.config import check_choices
from privbench.engine.messages import MessageKind
from privbench.engine.planning import config_settings, configured
from privbench.engine.privacy import Calibration, ClipBound, PlanRequest, PlanSettings
from privbench.engine.trainer import Context, Trainer
from privbench.errors import NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.gossip_inversion import LinearGossip, gossip_spec
from privbench.threat.observation import GradientView, Observation


@dataclass(frozen=True)
class DPDPSGDConfig:
    """DP-DPSGD hyper-parameters beyond the run's lr, batch size, epsilon and delta.

    Attributes:
        clip: per-sample L2 clipping threshold C (default 1.0).
        momentum: heavy-ball momentum on the noisy gradient (0: the plain step).
        sigma: noise multiplier; None calibrates it to the run's (epsilon, delta); 0 = no noise.
        sigma_rule: "max" (one sigma, max_i eps_i <= target) or "per_node" (sigma_i per agent).
        accountant: "rdp" (integer orders 2..256, as DPDL) or "pld".
        sampling: "poisson" (default) or "fixed" (as in DPDL, accounted without replacement).
        weights: "cga" or "metropolis" (as in DPDL; "card", a deprecated name of "cga", is
            accepted until the next release).
    """

    clip: float = 1.0
    momentum: float = 0.0
    sigma: float | None = None
    sigma_rule: str = "max"
    accountant: str = "rdp"
    sampling: str = "poisson"
    weights: str = "cga"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", canonical_weights(self.weights))
        check_choices("dp_dpsgd", self, GAUSSIAN_CHOICES)
        check_gaussian_settings("dp_dpsgd", self.clip, self.sigma, self.momentum)


@DEFENSES.register("dp_dpsgd")
class DPDPSGD(Trainer):
    """Gossip SGD with DP-SGD gradients (DPDL's DP-DPSGD baseline)."""

    Config = DPDPSGDConfig
    kinds = (MessageKind("model", covered=True, description="x_i^t, the current model; "
                         "post-processing of the node's earlier noisy gradients"),)
    mixing = "doubly"
    private = True

    @classmethod
    def calibration(cls, cfg: DPDPSGDConfig) -> Calibration:
        """sigma set by `cfg.accountant` only (the paper states no formula of its own)."""
        return Calibration(("calibrated",), "calibrated", cfg.accountant)

    @classmethod
    def plan_settings(cls, cfg: DPDPSGDConfig) -> PlanSettings:
        """The config field a request may set (sampling)."""
        return config_settings(cfg, ("sampling",))

    @classmethod
    def privacy_plan(cls, cfg: DPDPSGDConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """One subsampled Gaussian release per round, calibrated as the trainer does."""
        sigma, reports = gaussian_release_plan(req, configured(cfg, req), req.rounds,
                                               "one subsampled Gaussian per round (A(DP)^2SGD)")
        return PrivacyPlan("dp_dpsgd", {"sigma": sigma}, reports, mode, req.epsilon, req.delta,
                           req.rounds, req.sample_rate, req.accountant,
                           ("sigma = noise std / clip bound, on the SUM of clipped per-sample "
                            "gradients",))

    @classmethod
    def clip_bound(cls, cfg: DPDPSGDConfig) -> ClipBound:
        """The per-sample L2 clip bound C."""
        return ClipBound.of(cfg.clip)

    def __init__(self, cfg: DPDPSGDConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        require_undirected("dp_dpsgd", ctx.topology)
        self.graphs = graph_periods(ctx.topology, cfg.weights, ctx.device)
        self.counts, self.rates = node_rates(ctx)  # (n,), (n,)
        self.sigma = node_sigmas(cfg, ctx, self.rates, ctx.run.rounds)  # (n,)
        self.x = self.init_params()  # (n, d)
        self.buf = torch.zeros_like(self.x)  # (n, d)
        self.taps: dict[str, Tensor] = {}
        self._reports: list[dict[str, Any]] | None = None

    def models(self) -> Tensor:
        """(n, d) current models."""
        return self.x

    def round(self, t: int) -> None:
        """Noisy clipped gradient at x_i^t, gossip of x^t, then the step."""
        ctx, cfg = self.ctx, self.cfg
        w, adj, _, _ = self.graphs[t % len(self.graphs)]
        self.taps = noisy_clipped_mean(ctx, self.x, t, cfg, self.rates, self.counts, self.sigma)
        self.buf = cfg.momentum * self.buf + self.taps["noisy"]  # (n, d)
        self.x = w @ ctx.bus.broadcast(t, "model", self.x, adj) - ctx.run.lr * self.buf

    def release_noise(self) -> np.ndarray:
        """(T, n) the noise multiplier of every node's release in every round (network DP)."""
        return np.tile(self.sigma.double().cpu().numpy(), (self.ctx.run.rounds, 1))

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: the RDP (paper) report and the configured accountant's (calibrated)."""
        if self._reports is None:
            self._reports = gaussian_node_reports(
                self.rates.tolist(), self.sigma.tolist(), self.ctx.run.delta,
                self.ctx.run.rounds, self.cfg.accountant, self.cfg.sampling,
                "one subsampled Gaussian per round (A(DP)^2SGD)")
        return self._reports

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{t+1} = W x^t - lr buf^t, buf^t = noisy^t + beta buf^{t-1}: gossip of the models,
        release t computed at x_i^t (W: the configured weights)."""
        weights = obs.defense_cfg.weights
        return gossip_spec(obs, "doubly", lag=1, evaluated_at="message",
                           release="(sum_j clip(g_j) + N) / B", carry=obs.defense_cfg.momentum,
                           matrices=lambda p: mixing_matrix(obs.topology, p, weights))

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """g_i^t = (sum_j w_ij x_j^t - x_i^{t+1}) / lr at x_i^t (de-momentumized when needed).

        Raises:
            NotApplicable: when a neighbour's or the victim's model message is not observed.
        """
        cfg, lr = obs.defense_cfg, obs.run.lr

        def model(t: int, k: int) -> Tensor:
            rec = obs.log.get(t, "model")
            row = rec.sent_by(k) if rec is not None else None
            if row is None:
                if t == 0 and obs.x0 is not None:
                    return obs.x0
                raise NotApplicable(f"node {k}'s round-{t} model message is not observed")
            return row

        def step(t: int) -> Tensor:
            w = mixing_matrix(obs.topology, t, cfg.weights)
            mixed = sum(float(w[victim, k]) * model(t, k)
                        for k in torch.nonzero(w[victim]).flatten().tolist())
            return (mixed - model(t + 1, victim)) / lr  # type: ignore[operator]

        views = []
        for t in rounds:
            g = step(t)
            if cfg.momentum and t > 0:
                g = g - cfg.momentum * step(t - 1)
            views.append(GradientView(victim, t, model(t, victim), g, "gradient", None,
                                      obs.run.batch_size,
                                      "(sum_j w_ij x_j^t - x_i^(t+1)) / lr" +
                                      (", de-momentumized" if cfg.momentum else "")))
        return views
