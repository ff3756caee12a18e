"""PEDFL: gossip SGD with Laplace-perturbed models, the fourth row of DPPS's Table 2.

Chen, Wang, Yu, Ren, Xu, Zheng, "Privacy-enhanced decentralized federated learning at dynamic
edge", IEEE Trans. Comput. 72(8), 2023 (PED^2FL), as DPPS's paper runs it: "a decentralized
federated learning algorithm with differential privacy by Laplace mechanism" (Zhou, Xue, Chen,
Sec. 5.4, ref. [5]). Its code is not released and the DPPS paper does not say how it was adapted
to directed graphs, so this is a re-implementation of this project's own design: a D-PSGD gossip
step on ALL parameters,

    g_i^t = grad F_i(x_i^t; xi_i^t)                     (at the node's own model, D-PSGD)
    g_i^t <- g_i^t / max(1, ||g_i^t||_1 / CLIP)            (optional, as DPPS's Eq. 24)
    x_i^{t+1} = sum_j w_ij (x_j^t + gamma_n n_j^t) - gamma_s g_i^t,
    n_j^t ~ Lap(0, S(t) / b) i.i.d. per coordinate,

with the same Laplace calibration as DPPS / PartPSP in Table 2: the noise of round t is scaled
to the REAL (oracle) L1 sensitivity of the communicated vectors, S(t) = max_{i,j} ||x_i^t -
x_j^t||_1 (`sensitivity_mode="oracle"`, the default; "none" is the NoDP row), times gamma_n / b,
so each round is (b / gamma_n)-DP with NODES as records (DPPS Theorem 1, Lemma 1) and b is NOT
epsilon. With b unset the per-round epsilon is calibrated from the run's target epsilon exactly
as for DPPS (basic / advanced / Laplace-PLD composition over the rounds; privacy plan `pedfl`).
DPPS's estimated sensitivity (Eq. 22) bounds DPPS's own recursion, not this one, and is refused.

What differs from SGPDP (`dpps` = DPPS on SGP, every parameter shared): the order. SGPDP adapts
then combines (the noisy vector is s_i - gamma_s g_i + noise, so a node's gradient is in its
message); PEDFL combines then adapts (the message is the model x_i^t + noise; the gradient
enters the next round's model), and its sensitivity is that of the models, which is 0 in round 0
(identical public initialisation: nothing node-specific is released, no noise is drawn and the
realized reading charges 0 for it).

The mixing matrix W is the run topology's push-sum matrix (privbench's sender-side 1 / (out-degree
+ 1)), which on the paper's one-peer exponential graph EXP (and on `circulant`) is doubly
stochastic, as D-PSGD needs; a topology that is not is refused, as for DPPS
(`require_doubly_stochastic`). The push-sum weights are carried (and stay 1 on such a graph). The
DPPS code's periodic complete-graph synchronisation (`sync`, SP = 4) and the learning-rate decays
apply as for DPPS, which shares this trainer's state, accounting (`privacy()`: paper reading per
round, calibrated composition, realized composition of S_real(t) / scale(t)) and diagnostics
(`sensitivity_trace`, `sensitivity_check`; S_i and S_est record the S each node drew with).

Messages: `shared` (x_i^t + gamma_n n_i^t, covered), `weight` (push-sum weight, public).

Gradient view (attacker): the victim's round-t gradient is (sum_j w_ij m_j^t - m_i^{t+1}) /
gamma_s from the round-t messages m_j^t into it and its own round-(t+1) message, taken at m_i^t /
a_i^t; both carry Laplace noise (exact only without noise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from defenses._push_sum_schedule import mixing_into, rates, real_sensitivity
from defenses.dpps import DPPS, DPPSConfig
from defenses.dpps.plan import plan_pedfl
from privbench.engine.grads import batch_grads, clip_l1
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import push_sum
from privbench.engine.privacy import PlanFunction
from privbench.engine.trainer import Context
from privbench.errors import ConfigError
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import observed_mix, observed_row


@dataclass(frozen=True)
class PEDFLConfig(DPPSConfig):
    """PEDFL hyper-parameters: `DPPSConfig` (b, gamma_n, calibrate_with, composition, gamma_s,
    clip, sync, sync_period, decay_rounds, decay_factor, require_doubly_stochastic, diagnostics)
    with the oracle sensitivity by default. Every parameter is shared (`shared_layers = -1`);
    the Eq. 22 fields (c_prime, lam, s0_term) and gamma_l are unused.

    Attributes:
        sensitivity_mode: "oracle" (the real L1 sensitivity of the models, Table 2) or "none".
    """

    sensitivity_mode: str = "oracle"


@DEFENSES.register("pedfl")
class PEDFL(DPPS):
    """Gossip SGD whose every sent model carries Laplace noise at the oracle L1 sensitivity."""

    Config = PEDFLConfig
    plan_function: ClassVar[PlanFunction] = staticmethod(plan_pedfl)  # its accounting
    kinds = (
        MessageKind("shared", covered=True,
                    description="x_i^t + gamma_n n_i^t, the Laplace-perturbed model (times "
                                "P_ji on the wire)"),
        MessageKind("weight", covered=False, data_dependent=False,
                    description="P_ji * a_i, push-sum weight (1 on a doubly stochastic graph)"),
    )

    def __init__(self, cfg: PEDFLConfig, ctx: Context) -> None:
        if cfg.sensitivity_mode not in ("oracle", "none"):
            raise ConfigError(f"defense config: PEDFL's sensitivity_mode must be oracle or none, "
                              f"got {cfg.sensitivity_mode!r} (DPPS's Eq. 22 estimate bounds "
                              "DPPS's recursion, not PEDFL's)")
        if cfg.shared_layers != -1 or cfg.shared_prefixes:
            raise ConfigError("defense config: PEDFL shares every parameter; shared_layers must "
                              "be -1 and shared_prefixes empty")
        super().__init__(cfg, ctx)

    def round(self, t: int) -> None:
        """Gradient at x_i^t, noise on x_i^t, gossip of the noisy models, then the step."""
        cfg, ctx = self.cfg, self.ctx
        gs, _, gn = rates(cfg, ctx.run.lr, t)
        x, yb, mask = self.sample_batch(t)
        g = batch_grads(ctx.fm, self.s / self.a[:, None], x, yb, mask)  # (n, d) at x_i^t
        if cfg.clip is not None:
            g, _ = clip_l1(g, cfg.clip)
        rows = ctx.comm.gather_rows  # oracle view of per-node values (identity in one process)
        oracle = cfg.sensitivity_mode == "oracle"
        # the sent vectors are the models themselves; the O(n^2 d) distance only when needed
        s_real = real_sensitivity(rows(self.s)) if oracle or cfg.diagnostics else None
        s_used = s_real if oracle else None
        noisy, scale = self.perturb(self.s, s_used, t, gn)  # (n, d)
        mixed, self.a = push_sum(ctx.bus, self.mixer_at(t), t, noisy, self.a, "shared", "weight")
        self.s = mixed - gs * g
        self.rounds_done = t + 1
        if cfg.diagnostics:
            used = s_used if s_used is not None else s_real
            self.record(used.expand(ctx.n), s_real, s_used, scale,  # type: ignore[union-attr]
                        rows(gs * g.abs().sum(dim=1)))

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The victim's round-t gradient (sum_j w_ij m_j^t - m_i^{t+1}) / gamma_s at m_i^t / a_i^t.

        Raises:
            NotApplicable: when a round-t message into the victim (its own included:
                `observed_mix` checks those) or its round-(t+1) message is not observed.
        """
        cfg: PEDFLConfig = obs.defense_cfg
        views = []
        for t in rounds:
            mixed, _ = observed_mix(obs, victim, t, *mixing_into(obs, cfg, t, victim),
                                    "shared", "weight")
            m_now = observed_row(obs, t, "shared", victim)  # (d,) the victim mixes its own
            a_now = observed_row(obs, t, "weight", victim)  # (1,)
            m_next = observed_row(obs, t + 1, "shared", victim)  # (d,)
            gs = rates(cfg, obs.run.lr, t)[0]
            views.append(GradientView(
                victim, t, m_now / a_now[0], (mixed - m_next.to(mixed)) / gs, "gradient", None,
                obs.run.batch_size,
                "(sum_j w_ij m_j^t - m_i^{t+1}) / gamma_s at m_i^t / a_i^t (Laplace noise in both)",
                cfg.sensitivity_mode == "none"))
        return views

