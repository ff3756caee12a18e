"""DP-SGP: constant-noise DP-SGD inside Stochastic Gradient Push (the DP push-sum baseline).

ADP-VRSGP with its three additions switched off (Wu et al., arXiv:2510.20157: noise factor
alpha == 1, step factor beta == 1, clip decay psi = 1, no gradient fusion theta = 0), i.e. DP-SGD
(Abadi et al., "Deep Learning with Differential Privacy", CCS 2016) run inside push-sum (Assran et
al., "Stochastic Gradient Push for Distributed Deep Learning", ICML 2019) with constant noise.
Each round, for every node i at once:

    B_i^t ~ Poisson(q_i) over D_i, q_i = |B| / |D_i|           (Poisson, add/remove)
    g_{i,b} = grad f(z_i^t; b),  z_i^t = x_i^t / w_i^t         (gradient at the de-biased model)
    gbar_i^t = (sum_b clip(g_{i,b}, G) + sigma_i G u_i^t) / |B|,  u ~ N(0, I_d)   (noise on the sum)
    x_i^{t+1/2} = x_i^t - lr * gbar_i^t
    x^{t+1} = P^t x^{t+1/2},  w^{t+1} = P^t w^t                (push-sum, P column-stochastic)

sigma_i is calibrated per node for its own (epsilon_i, delta_i) and sampling rate q_i with the
rigorous accountant (`privbench.accounting` plan "dp_sgp"); the paper-mode epsilon is the RDP
(moments-accountant) reading of the same noise. Messages: `model` (P_ji x_i^{t+1/2}) and `weight`
(P_ji w_i), both covered by post-processing.

Design choice: this is a clean standalone trainer, not an alias of
`adp_vrsgp`; `tests/defenses/test_adp_vrsgp.py` checks that ADP-VRSGP with theta = 0,
alpha == beta == 1, psi = 1 produces exactly the same models as this trainer for the same seed.
Accounting (`plan_dp_sgp`): every round is one Poisson(q)-subsampled Gaussian step; the paper
mode reads it with the RDP (moments) accountant, as ADP-VRSGP's Theorem 1 follows. Other DP
push-sum defenses may reuse `privbench.engine.planning` (`node_plans`, `plan_schedule`,
`node_budgets`); batches come from the context's one sampling path (`ctx.draw(t, rates=...)`).

Choices: |B| (the normaliser and the expected batch) is the run's batch_size; the Poisson batch is
compacted to its largest realised size (padding masked), so no sample slot is truncated; clip
defaults to ADP-VRSGP's G_0 = 0.1 (its Sec. 4 and 6) so that the baseline matches ADP-VRSGP's
clipping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from defenses._noisy_sum import noisy_clipped_sum
from defenses._plans import model_message_kinds
from privbench.accounting import (
    DEFAULT_OPTIONS,
    SAMPLINGS,
    AccountantOptions,
    GaussianEvent,
    PrivacyLedger,
    PrivacyPlan,
    account,
    calibrate_noise_scale,
)
from privbench.accounting.plans import (
    GAUSSIAN_PLAN_ACCOUNTANTS,
    Z_UNIT,
    assemble_plan,
    check_plan_request,
    checked_factor,
)
from privbench.accounting.validation import check_choice
from privbench.engine.mixing import Mixer, push_sum
from privbench.engine.planning import node_plans, plan_reports, plan_schedule, sample_rates
from privbench.engine.privacy import (
    BOTH_MODES,
    Calibration,
    ClipBound,
    PlanRequest,
    PlanSettings,
    formula_plan,
    formula_settings,
)
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError
from privbench.registry import DEFENSES
from privbench.threat.gossip_inversion import LinearGossip, gossip_spec
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import push_sum_release


def plan_dp_sgp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """Constant-noise DP-SGD inside push-sum (the DP-SGP baseline).

    Every round is one Poisson(q)-subsampled Gaussian step with noise multiplier sigma. Paper
    mode: the RDP (moments) accountant, as ADP-VRSGP's Theorem 1 follows; calibrated: `accountant`.
    """
    req = check_plan_request(epsilon, delta, rounds, sample_rate, accountant,
                             GAUSSIAN_PLAN_ACCOUNTANTS, calibrate_with)
    eps, delta, rounds, q, accountant = req
    paper_acc = "rdp"
    use = accountant if calibrate_with == "calibrated" else paper_acc
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    sigma = calibrate_noise_scale(eps, delta, np.ones(rounds), q, use, options,
                                  sampling=sampling) * checked_factor(noise_factor)
    ledger = PrivacyLedger().record(GaussianEvent(sigma, q, rounds, sampling))
    reports = [
        account(ledger, delta, paper_acc, mode="paper", options=options,
                note="moments-accountant (RDP) reading of constant-noise DP-SGD"),
        account(ledger, delta, accountant, mode="calibrated", options=options),
    ]
    return assemble_plan("dp_sgp", {"sigma": sigma}, reports, calibrate_with, req,
                 ("sigma = noise std / clip bound, on the SUM of clipped per-sample gradients",),
                 sigma, Z_UNIT, noise_factor)


@dataclass(frozen=True)
class DPSGPConfig:
    """DP-SGP hyper-parameters beyond the run's lr, batch size, epsilon and delta.

    Attributes:
        clip: per-sample L2 clip bound G (ADP-VRSGP's G_0).
        epsilons: per-node budgets epsilon_i (empty: every node uses the run's epsilon).
        deltas: per-node delta_i (empty: every node uses the run's delta).
        accountant: rigorous accountant for calibration, "pld" or "rdp".
        calibrate_with: "calibrated" (rigorous accountant, default) or "paper" (RDP reading).
    """

    clip: float = 0.1
    epsilons: tuple[float, ...] = ()
    deltas: tuple[float, ...] = ()
    accountant: str = "pld"
    calibrate_with: str = "calibrated"


@DEFENSES.register("dp_sgp")
class DPSGP(Trainer):
    """Constant-noise DP-SGD inside push-sum, one sigma_i per node."""

    Config = DPSGPConfig
    kinds = model_message_kinds("constant-noise DP-SGD")
    mixing = "column"
    private = True
    release: ClassVar[str] = "gbar_i^k = (sum_j clip(g_j) + N) / B"  # what a round releases
    view_source: ClassVar[str] = "(x_i^t - x_i^{t+1/2}) / lr"  # how a view rebuilds it

    def __init__(self, cfg: DPSGPConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        if cfg.clip <= 0:
            raise ConfigError(f"defense.clip must be > 0, got {cfg.clip}")
        self.mixer = Mixer(ctx.topology, self.mixing, ctx.device)
        self.plans = node_plans(ctx, plan_dp_sgp, cfg.epsilons, cfg.deltas, cfg.accountant,
                                cfg.calibrate_with)
        self.rates = torch.tensor(sample_rates(ctx), device=ctx.device)[:, None]  # (n, 1)
        self.z = plan_schedule(self.plans, ctx.device)  # (T, n): what the plans composed
        self.x = self.init_params()  # (n, d)
        self.w = torch.ones(ctx.n, device=ctx.device)  # (n,)
        self.debug_released: dict[int, Tensor] | None = None  # round -> (n, d) gbar, tests only
        self.last_release: Tensor | None = None  # (n, d) the latest gbar (post-processing only)

    @classmethod
    def calibration(cls, cfg: DPSGPConfig) -> Calibration:
        """Calibrated by `cfg.accountant` or by the paper's RDP reading (`cfg.calibrate_with`)."""
        return Calibration(BOTH_MODES, cfg.calibrate_with, cfg.accountant)

    @classmethod
    def plan_settings(cls, cfg: DPSGPConfig) -> PlanSettings:
        """`plan_dp_sgp`'s settings (the sampling model)."""
        return formula_settings(plan_dp_sgp)

    @classmethod
    def privacy_plan(cls, cfg: DPSGPConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """`plan_dp_sgp` for the request, what every node's plan is for its own budget."""
        return formula_plan(plan_dp_sgp, req, mode)

    @classmethod
    def clip_bound(cls, cfg: DPSGPConfig) -> ClipBound:
        """The per-sample L2 clip bound G."""
        return ClipBound.of(cfg.clip)

    def models(self) -> Tensor:
        """(n, d) de-biased models z = x / w."""
        return self.x / self.w[:, None]

    def gradient_point(self, z: Tensor) -> Tensor:
        """(n, d) where round t's per-sample gradients are taken: the de-biased model z.

        A subclass may move it by a function of what the node already released (DP-DFedSAM's
        ascent step), which is post-processing and costs no privacy.
        """
        return z

    def noise_std(self, t: int) -> Tensor:
        """(n, 1) std of the noise on the clipped SUM in round t: z_{t,i} C (the plan's z)."""
        return self.z[t][:, None] * self.cfg.clip

    def round(self, t: int) -> None:
        """Poisson batch -> clipped, noised gradient at z -> local step -> push-sum."""
        ctx = self.ctx
        z = self.models()  # (n, d)
        x, y, mask = ctx.draw(t, rates=self.rates)  # Poisson batches, ground truth recorded
        noisy = noisy_clipped_sum(ctx, self.gradient_point(z), x, y, mask, self.cfg.clip,
                                  self.noise_std(t))  # (n, d)
        gbar = noisy / ctx.run.batch_size  # (n, d)
        self.last_release = gbar
        if self.debug_released is not None:
            self.debug_released[t] = gbar.detach().clone()
        x_half = self.x - ctx.run.lr * gbar
        self.x, self.w = push_sum(ctx.bus, self.mixer, t, x_half, self.w)

    def release_noise(self) -> np.ndarray:
        """(T, n) the noise multiplier of every node's release in every round (network DP)."""
        return self.z.double().cpu().numpy()

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: the paper (RDP) and calibrated epsilon of its sigma_i."""
        return plan_reports(self.plans)

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{k+1/2} = P x^{k-1/2} - lr gbar^k: push-sum, release computed at z_i^k."""
        return gossip_spec(obs, "column", lag=0, evaluated_at="premix",
                           release=cls.release)

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The released noisy clipped mean gradient gbar_i^t = (x_i^t - x_i^{t+1/2}) / lr.

        Raises:
            NotApplicable: when the threat model cannot rebuild x_i^t (it must see the victim's
                and all its in-neighbours' round t-1 messages) or the victim's round-t message.
        """
        views = []
        for t in rounds:
            step, z = push_sum_release(obs, victim, t, obs.run.lr)
            views.append(GradientView(victim, t, cls.view_point(obs, victim, t, z), step,
                                      "gradient", None, obs.run.batch_size, cls.view_source))
        return views

    @classmethod
    def view_point(cls, obs: Observation, victim: int, t: int, z: Tensor) -> Tensor:
        """(d,) where the victim's round-t release was computed, rebuilt from the messages:
        z_i^t itself (the attacker's side of `gradient_point`)."""
        return z
