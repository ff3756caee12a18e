"""Dyn-D2P: dynamic differentially private decentralized learning (push-sum SGD + DP-SGD).

Zhu, Huang, Wang, Ji, Xu, "Dyn-D2P: Dynamic Differentially Private Decentralized Learning with
Provable Utility Guarantee" (Zhejiang Univ. / Qilu Univ. of Technology;
year not given in the paper's text), cited below as the Dyn-D2P paper. Algorithm 1, vectorised
over the n nodes (state (n, d)), with the variants of Sec. 3 and Algorithms 3-5 (Appendix D) as
`variant`:

    sample S_i^k                         Poisson(p = B/J_i) (Prop. 3), or one uniform sample
    h_j = grad f_i(z_i^k; j)             per sample, at the de-biased model z = x / w (line 4)
    C_k = C_0 rho_c^(-k/K)               dynamic clip bound (line 5); C_bar for dyn_mu / const
    c_j = h_j min(1, C_k / ||h_j||)      flat L2 clip (line 6, eq. 5)
    mu_k = mu_0 rho_mu^(k/K)             per-step GDP budget (eq. 7); mu_bar (eq. 9): dyn_c, const
    sigma_k = C_k / mu_k                 noise std on the SUM of clipped gradients (line 8)
    x_i^{k+1/2} = x_i^k - lr (sum_j c_j + N(0, sigma_k^2 I)) / B          (lines 9-10)
    x^{k+1} = P^k x^{k+1/2},  w^{k+1} = P^k w^k   push-sum through the bus (lines 11-13)

| variant | clip bound | per-step budget | budget solve | paper |
|---|---|---|---|---|
| dyn (Dyn-D2P) | C_0 rho_c^(-k/K) | mu_0 rho_mu^(k/K) | eq. (8) | Alg. 1 |
| dyn_c (Dyn[C]-D2P) | C_0 rho_c^(-k/K) | mu_bar | eq. (9) | Alg. 3 |
| dyn_mu (Dyn[mu]-D2P) | C_bar | mu_0 rho_mu^(k/K) | eq. (8) | Alg. 4 |
| const (Const-D2P) | C_bar | mu_bar | eq. (9) | Alg. 5 |

The non-private baseline is `sgp` (defenses/sgp.py). Messages (Alg. 1 line 11): `model` =
x_i^{k+1/2} (scaled by the public P_ji in transit) and `weight` = w_i^k; both are covered (the
weight is data-independent, the model message is the Gaussian mechanism's output plus
post-processing). Accounting (Sec. 3, Props. 1-3) comes from `privbench.accounting`
(`plan_dyn_d2p`): eq. (4) mu_tot, eq. (8) mu_0 by bisection in (mu_bar / rho_mu, mu_bar], eq. (9)
mu_bar; the paper's GDP-CLT epsilon (`paper`, approximate) and a rigorous PLD / RDP epsilon
(`calibrated`) are both reported per node.

Choices of this implementation, where the paper is silent (reason in brackets):
- Mini-batch generalisation [the algorithm and its accountant use one sample per step; the
  experiments' batch size is not reported]: Poisson sampling with p_i = B / J_i (B = the run's
  batch size) is the default; noise goes on the sum of clipped per-sample gradients, which is
  divided by the EXPECTED batch size min(B, J_i), so the sensitivity stays C_k / B.
  `sampling="one_sample"` is the paper-literal mode: one uniform sample per node and round. The
  paper accounts it as Poisson(1/J_i) (Prop. 3, although Alg. 1 line 3 draws uniformly); privbench
  accounts it as what is drawn, a fixed-size sample without replacement (replace-one adjacency,
  sensitivity 2 C_k; dp-accounting's `SampledWithoutReplacementDpEvent` under RDP), so it is
  calibrated with about twice the noise.
- Add/remove-one adjacency, per-step L2 sensitivity C_k [the paper's "differing on a
  single entry"; replace-one would need 2 C_k]; flat L2 norm over all
  parameters (eq. 5); clip factor C / max(||h||, 1e-12) via `engine.clip_l2` [undefined at
  ||h|| = 0].
- Nodes with different J_i each solve their own mu_0 with p_i = B / J_i [the paper runs IID
  splits only]; every node's
  (epsilon, delta) is its own, never summed.
- Noise calibration [the CLT of eq. 6 is asymptotic, not an upper bound]:
  `calibrate_with="calibrated"` (default: mu_0 such that the rigorous PLD / RDP epsilon meets the
  target, so `dyn_d2p@8` spends at most 8) or `"paper"` (for reproducing the paper: the CLT of eqs.
  4/6/8 sets mu_0; the CLT is not an upper bound and the rigorous epsilon then exceeds the target,
  by up to ~33%). Both epsilons are always reported, the CLT one flagged approximate. The PLD
  accountant buckets the schedule into <= 48 noise levels, each charged at its smallest noise
  (conservative).
- The noise schedule sigma_k = C_k / mu_k is drawn from the plan itself: its `schedule` is
  z_k = 1 / mu_k (eq. 7's growth applied by the plan), exactly the schedule its reports compose
  (one source of truth); the trainer only multiplies by the clip schedule C_k.
- Defaults: C_0 = 4, the paper's shallow-CNN value (Appendix F.1); C_bar = 1.5 and
  rho_c = rho_mu = 2 (1/rho = 0.5) are a choice of this implementation, the middle of the grids of
  Appendix F.1 [the paper grid-searches them and does not report the winners]. Grid-search C_bar
  for the baselines.
- Topology [every graph of the paper is doubly stochastic, so w == 1 and push-sum is never
  exercised; the weights are not stated]: any directed graph with column-stochastic uniform
  weights 1 / (1 + outdeg); the run default `random_out` is non-regular directed, so w != 1 and
  the de-bias step is exercised. The paper's graph (Appendix E) is `--topology exponential`.
- Same public initial model on every node [not stated in the paper]. No momentum, weight decay or
  BatchNorm.
- Evaluation: the engine evaluates each z_i and the mean of the z_i; the network average
  x_bar = mean_i x_i equals it when w = 1 (exponential graph) [the paper's "final testing
  accuracy" does not say which model].
- epsilon = inf (`--eps inf`) turns the noise off (sigma_k = 0) and reports epsilon = inf: with a
  huge clip bound this is plain SGP.
- Prop. 4 / eq. (10) (general-schedule calibration) is not implemented: invalid for Alg. 1 [its
  bound e^x - 1 < 2x needs mu_k <= 1, which fails in the paper-literal mode].
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from defenses._noisy_sum import noisy_clipped_sum
from privbench.accounting import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    ApproximateAccountingWarning,
    EpsilonReport,
    PrivacyPlan,
    account_schedule,
    calibrate_noise_scale,
    dyn_d2p_growth,
    dyn_d2p_mu0,
    gdp_epsilon,
    gdp_mu,
)
from privbench.accounting import SAMPLINGS as ACCOUNTING_SAMPLINGS
from privbench.accounting.plans import (
    GAUSSIAN_PLAN_ACCOUNTANTS,
    Z_UNIT,
    assemble_plan,
    check_plan_request,
    checked_factor,
)
from privbench.accounting.validation import check_choice
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, push_sum
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

VARIANTS = ("dyn", "dyn_c", "dyn_mu", "const")
SAMPLINGS = ("poisson", "one_sample")
CALIBRATIONS = ("paper", "calibrated")
ACCOUNTANTS = ("pld", "rdp")


def plan_dyn_d2p(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    rho_mu: float = 2.0, sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """Dyn-D2P: step k is mu_k-GDP, mu_k = mu_0 rho_mu^(k/K), noise multiplier 1/mu_k (eq. 7).

    Paper mode: eq. (4) -> mu_tot, eq. (8) -> mu_0 (CLT; approximate, warns). Calibrated: mu_0
    such that `accountant` over the schedule meets the target (the CLT is not an upper bound).
    rho_mu = 1 is Const-D2P / Dyn[C]-D2P (eq. 9).
    """
    req = check_plan_request(epsilon, delta, rounds, sample_rate, accountant,
                             GAUSSIAN_PLAN_ACCOUNTANTS, calibrate_with)
    eps, delta, rounds, q, accountant = req
    sampling = check_choice(sampling, "sampling", ACCOUNTING_SAMPLINGS)
    growth = dyn_d2p_growth(rounds, rho_mu)
    shape = 1.0 / growth  # (K,) z_k = scale * shape_k, scale = 1 / mu_0
    if calibrate_with == "calibrated":
        scale = calibrate_noise_scale(eps, delta, shape, q, accountant, options,
                                      sampling=sampling)
    else:  # the paper's CLT (eqs. 4, 8) assumes Poisson sampling whatever is drawn
        scale = 1.0 / dyn_d2p_mu0(gdp_mu(eps, delta), q, rounds, rho_mu)
    scale *= checked_factor(noise_factor)
    mu0 = 1.0 / scale
    schedule = scale * shape  # (K,) z_k = 1 / mu_k
    # the same product the calibration composed: its accountant result is reused, not recomputed
    reports = [
        account_schedule(schedule, q, delta, "gdp_clt", sampling=sampling, mode="paper",
                         note="mu-GDP CLT, eqs. (4) and (6): an approximation, not an upper "
                              "bound"),
        account_schedule(schedule, q, delta, accountant, sampling=sampling, options=options),
    ]
    noise = {"mu_0": mu0, "mu_last": 1 / schedule[-1], "z_first": schedule[0],
             "z_last": schedule[-1]}
    return assemble_plan("dyn_d2p", noise, reports, calibrate_with, req, (
        "sigma_k = C_k / mu_k on the SUM of clipped per-sample gradients",
    ), schedule, Z_UNIT, noise_factor)


@dataclass(frozen=True)
class DynD2PConfig:
    """Dyn-D2P hyper-parameters (the run supplies epsilon, delta, K = rounds, lr and B).

    Attributes:
        variant: "dyn" (Alg. 1), "dyn_c" (Alg. 3), "dyn_mu" (Alg. 4) or "const" (Alg. 5).
        clip_0: C_0, initial clip bound of the dynamic-clip variants (dyn, dyn_c).
        clip_bar: C_bar, constant clip bound of dyn_mu and const.
        rho_c: clip decay rho_c >= 1: C_k = C_0 rho_c^(-k/K).
        rho_mu: budget growth rho_mu >= 1: mu_k = mu_0 rho_mu^(k/K) (dyn, dyn_mu).
        sampling: "poisson" (mini-batch, p = B/J) or "one_sample" (paper-literal, one sample
            without replacement, p = 1/J, accounted with replace-one adjacency).
        calibrate_with: "calibrated" (default: the rigorous accountant sets mu_0) or "paper"
            (the GDP CLT sets mu_0; approximate, can overspend).
        accountant: rigorous accountant for the calibrated report: "pld" or "rdp".
        record_released: keep every round's released noisy gradient (sum c_j + N) / B in
            `released` (debug / tests; memory K * n * d).
    """

    variant: str = "dyn"
    clip_0: float = 4.0
    clip_bar: float = 1.5
    rho_c: float = 2.0
    rho_mu: float = 2.0
    sampling: str = "poisson"
    calibrate_with: str = "calibrated"
    accountant: str = "pld"
    record_released: bool = False

    def __post_init__(self) -> None:
        for value, name, choices in ((self.variant, "variant", VARIANTS),
                                     (self.sampling, "sampling", SAMPLINGS),
                                     (self.calibrate_with, "calibrate_with", CALIBRATIONS),
                                     (self.accountant, "accountant", ACCOUNTANTS)):
            if value not in choices:
                raise ConfigError(f"unknown Dyn-D2P {name} {value!r}; accepted: "
                                  f"{', '.join(choices)}")
        if not (self.clip_0 > 0 and self.clip_bar > 0):
            raise ConfigError(f"clip bounds must be > 0, got clip_0={self.clip_0}, "
                              f"clip_bar={self.clip_bar}")
        if not (1 <= self.rho_c < math.inf and 1 <= self.rho_mu < math.inf):
            raise ConfigError(f"rho_c and rho_mu must be finite and >= 1, got {self.rho_c}, "
                              f"{self.rho_mu}")

    @property
    def dynamic_clip(self) -> bool:
        """Whether C_k decays (dyn, dyn_c)."""
        return self.variant in ("dyn", "dyn_c")

    @property
    def dynamic_budget(self) -> bool:
        """Whether mu_k grows (dyn, dyn_mu)."""
        return self.variant in ("dyn", "dyn_mu")

    @property
    def budget_rho(self) -> float:
        """rho_mu of the budget schedule: the config's for dyn / dyn_mu, 1 (constant) otherwise."""
        return self.rho_mu if self.dynamic_budget else 1.0

    @property
    def sampling_model(self) -> str:
        """The accounting sampling model of what `_batch` draws (privbench.accounting SAMPLINGS)."""
        return "poisson" if self.sampling == "poisson" else "fixed_without_replacement"


def clip_schedule(cfg: DynD2PConfig, steps: int) -> np.ndarray:
    """(K,) clip bounds: C_0 rho_c^(-k/K) (Alg. 1 line 5) or C_bar for every k."""
    k = np.arange(steps, dtype=float)
    if cfg.dynamic_clip:
        return cfg.clip_0 * cfg.rho_c ** (-k / steps)
    return np.full(steps, float(cfg.clip_bar))


def node_plan(cfg: DynD2PConfig, epsilon: float, delta: float, steps: int,
              sample_rate: float) -> PrivacyPlan:
    """One node's privacy plan: mu_0 (or mu_bar) and its paper / calibrated epsilons.

    Args:
        cfg: variant, rho_mu, calibrate_with and accountant.
        epsilon, delta: the node's target budget.
        steps: K.
        sample_rate: p = B / J (Poisson) or 1 / J (one-sample mode).
    """
    with warnings.catch_warnings():  # the CLT is approximate: the report says so (approximate)
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        return plan_dyn_d2p(epsilon, delta, steps, sample_rate, cfg.accountant,
                            rho_mu=cfg.budget_rho, sampling=cfg.sampling_model,
                            calibrate_with=cfg.calibrate_with)


def clt_spent(mus: np.ndarray, sample_rate: float, t: int, delta: float) -> tuple[float, float]:
    """Online accountant: (mu_spent(t), epsilon_spent(t)) after t steps (eq. 6, 4).

    Approximate (the CLT of eq. 6 is not an upper bound).
    """
    with np.errstate(over="ignore"):
        total = float(np.sum(np.expm1(np.asarray(mus[:t], dtype=float) ** 2)))
    mu = sample_rate * math.sqrt(total)
    if mu == 0:
        return 0.0, 0.0
    return mu, gdp_epsilon(mu, delta)


@DEFENSES.register("dyn_d2p")
class DynD2P(Trainer):
    """Dyn-D2P and its variants (Dyn[C], Dyn[mu], Const) as an n-node push-sum trainer."""

    Config = DynD2PConfig
    kinds = (
        MessageKind("model", covered=True, description="P_ji * x_i^{k+1/2}, "
                    "x_i^{k+1/2} = x_i^k - lr (sum_j clip(g_j) + N) / B"),
        MessageKind("weight", covered=True, data_dependent=False,
                    description="P_ji * w_i^k, push-sum weight"),
    )
    mixing = "column"
    private = True

    @classmethod
    def calibration(cls, cfg: DynD2PConfig) -> Calibration:
        """mu_0 set by `cfg.accountant` or by the paper's CLT (`cfg.calibrate_with`)."""
        return Calibration(BOTH_MODES, cfg.calibrate_with, cfg.accountant)

    @staticmethod
    def fixed_settings(cfg: DynD2PConfig) -> dict[str, float]:
        """Const-D2P and Dyn[C]-D2P hold the budget constant (eq. 9): rho_mu = 1."""
        return {} if cfg.dynamic_budget else {"rho_mu": cfg.budget_rho}

    @classmethod
    def plan_settings(cls, cfg: DynD2PConfig) -> PlanSettings:
        """`plan_dyn_d2p`'s settings, less rho_mu where the variant fixes it."""
        return formula_settings(plan_dyn_d2p, cls.fixed_settings(cfg))

    @classmethod
    def privacy_plan(cls, cfg: DynD2PConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """`plan_dyn_d2p` for the request with the variant's rho_mu."""
        return formula_plan(plan_dyn_d2p, req, mode, cls.fixed_settings(cfg))

    @classmethod
    def clip_bound(cls, cfg: DynD2PConfig) -> ClipBound:
        """C_0 for the dynamic-clip variants (the bound decays from it), C_bar otherwise."""
        return ClipBound.of(cfg.clip_0 if cfg.dynamic_clip else cfg.clip_bar)

    def __init__(self, cfg: DynD2PConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        run, n = ctx.run, ctx.n
        steps = run.rounds
        self.mixer = Mixer(ctx.topology, self.mixing, ctx.device)
        self.x = self.init_params()  # (n, d) push-sum numerators x_i
        self.w = torch.ones(n, device=ctx.device)  # (n,) push-sum weights w_i
        counts = ctx.data.counts.cpu().double()  # (n,) J_i
        if cfg.sampling == "poisson":
            rates = (run.batch_size / counts).clamp(max=1.0)  # (n,) p_i = B / J_i
            expected = rates * counts  # (n,) expected batch size min(B, J_i)
        else:
            rates, expected = 1.0 / counts, torch.ones(n, dtype=torch.float64)
        self.rates = rates.tolist()
        self.expected = expected.float().to(ctx.device)  # (n,)
        self._rate: float | Tensor = self.rates[0] if len(set(self.rates)) == 1 else \
            rates.float().to(ctx.device)[:, None]  # scalar, or (n, 1) when the J_i differ
        self.plans: list[PrivacyPlan | None] = [None] * n
        if math.isinf(run.epsilon):
            mu0, z = [math.inf] * n, np.zeros((steps, n))  # no privacy asked: no noise
        else:
            cache: dict[float, PrivacyPlan] = {}
            for i, p in enumerate(self.rates):
                if p not in cache:
                    cache[p] = node_plan(cfg, run.epsilon, run.delta, steps, p)
                self.plans[i] = cache[p]
            mu0 = [float(plan.noise["mu_0"]) for plan in self.plans]  # type: ignore[union-attr]
            # (K, n) z_k = 1 / mu_k: the plans' schedules, exactly what their reports compose
            z = np.stack([plan.schedule for plan in self.plans], axis=1)  # type: ignore[union-attr]
        self.mu_0 = np.asarray(mu0)  # (n,)
        with np.errstate(divide="ignore"):
            self.mu = 1.0 / z  # (K, n) mu_k per node, from the plans (inf: no noise)
        clip = clip_schedule(cfg, steps)  # (K,)
        self.clip = torch.tensor(clip, dtype=torch.float32, device=ctx.device)  # (K,)
        sigma = clip[:, None] * z  # (K, n) sigma_k = C_k / mu_k
        self.sigma = torch.tensor(sigma, dtype=torch.float32, device=ctx.device)  # (K, n)
        self.released: dict[int, Tensor] = {}  # t -> (n, d), only with record_released

    # ------------------------------------------------------------------ training

    def models(self) -> Tensor:
        """(n, d) de-biased models z = x / w."""
        return self.x / self.w[:, None]

    def _batch(self, t: int) -> tuple[Tensor, Tensor, Tensor]:
        """Round t's samples for all nodes, recorded as ground truth.

        Returns:
            x (n, B', C, H, W), y (n, B'), mask (n, B'): Poisson samples compacted to the largest
            sampled count B' (>= 1), or one uniform sample per node.
        """
        if self.cfg.sampling == "one_sample":
            return self.ctx.draw(t, batch_size=1)  # (n, 1)
        return self.ctx.draw(t, rates=self._rate)  # type: ignore[arg-type]  # (n, B')

    def round(self, t: int) -> None:
        """Noisy clipped local step at z (Alg. 1 lines 3-10), then push-sum (lines 11-14)."""
        ctx = self.ctx
        xb, yb, mask = self._batch(t)
        noisy = noisy_clipped_sum(ctx, self.models(), xb, yb, mask, self.clip[t],
                                  self.sigma[t][:, None])  # (n, d) sum_j clip(g_j, C_k) + noise
        released = noisy / self.expected[:, None]  # (n, d) noisy clipped gradient
        if self.cfg.record_released:
            self.released[t] = released.detach().cpu().clone()
        x_half = self.x - ctx.run.lr * released  # (n, d) x_i^{k+1/2}
        self.x, self.w = push_sum(ctx.bus, self.mixer, t, x_half, self.w)

    # ------------------------------------------------------------------ privacy

    def schedule(self, node: int = 0) -> dict[str, list[float]]:
        """Node `node`'s per-round C_k, mu_k, sigma_k and the online CLT mu / epsilon spent."""
        run = self.ctx.run
        clip, mu = clip_schedule(self.cfg, run.rounds), self.mu[:, node]  # (K,) each
        spent = [clt_spent(mu, self.rates[node], t + 1, run.delta)
                 for t in range(run.rounds)] if math.isfinite(self.mu_0[node]) else []
        return {"clip": clip.tolist(), "mu": mu.tolist(), "sigma": (clip / mu).tolist(),
                "mu_spent": [m for m, _ in spent], "epsilon_spent": [e for _, e in spent]}

    def epsilon_spent(self, t: int) -> list[float]:
        """Per-node paper (CLT) epsilon after t completed rounds (eqs. 6, 4; approximate)."""
        run = self.ctx.run
        out = []
        for i, p in enumerate(self.rates):
            if math.isinf(self.mu_0[i]):
                out.append(math.inf)
                continue
            out.append(clt_spent(self.mu[:, i], p, t, run.delta)[1])
        return out

    def release_noise(self) -> np.ndarray:
        """(K, n) the noise multiplier z_k = 1 / mu_k of every node's release (network DP)."""
        with np.errstate(divide="ignore"):
            return 1.0 / np.asarray(self.mu, dtype=np.float64)

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: the paper (GDP CLT) and calibrated (PLD / RDP) reports of the K-step plan."""
        run = self.ctx.run
        out: list[dict[str, Any]] = []
        for i, plan in enumerate(self.plans):
            if plan is None:
                reports = tuple(EpsilonReport(math.inf, run.delta, "none", mode, "sample-level",
                                              note="epsilon = inf: no noise",
                                              sampling=self.cfg.sampling_model)
                                for mode in CALIBRATIONS)
            else:
                reports = plan.reports[:2]
            extra = {"node": i, "target_epsilon": run.epsilon, "variant": self.cfg.variant,
                     "calibrated_with": self.cfg.calibrate_with, "batch": self.cfg.sampling,
                     "sample_rate": self.rates[i], "rounds": run.rounds,
                     "mu_0": float(self.mu_0[i]) if math.isfinite(self.mu_0[i]) else "inf"}
            out.extend({**r.to_dict(), **extra, **self._gdp_mu(i, r.accountant)}
                       for r in reports)
        return out

    def _gdp_mu(self, node: int, accountant: str) -> dict[str, Any]:
        """{"mu": the CLT's composed mu (eq. 6)} for the GDP-CLT reading (the report draws its
        mu-GDP trade-off curve; approximate like the reading), else {}."""
        if accountant != "gdp_clt" or not math.isfinite(self.mu_0[node]):
            return {}
        run = self.ctx.run
        return {"mu": clt_spent(self.mu[:, node], float(self.rates[node]), run.rounds,
                                run.delta)[0]}

    # ------------------------------------------------------------------ attacker's view

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{k+1/2} = P x^{k-1/2} - lr released^k: push-sum, release computed at z_i^k."""
        return gossip_spec(obs, "column", lag=0, evaluated_at="premix",
                           release="(sum_j clip(g_j, C_k) + N(0, sigma_k^2 I)) / B")

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The victim's released noisy clipped gradient (x_i^t - x_i^{t+1/2}) / lr at z_i^t.

        The pre-step model x_i^t = sum_k P^{t-1}_ik x_k^{t-1/2} needs the victim's and all its
        in-neighbours' round t-1 messages (an eavesdropper, or a colluding set covering the
        victim's in-neighbourhood and one out-neighbour); round 0 needs the public x^0.

        Raises:
            NotApplicable: when the threat model cannot reconstruct the pre-step model or does
                not see the victim's round-t message.
        """
        cfg, lr = obs.defense_cfg, obs.run.lr
        batch = 1 if getattr(cfg, "sampling", "poisson") == "one_sample" else obs.run.batch_size
        views = []
        for t in rounds:
            step, z = push_sum_release(obs, victim, t, lr)
            views.append(GradientView(victim, t, z, step, "gradient",
                                      None, batch, "(x_i^t - x_i^{t+1/2}) / lr = "
                                      "(sum_j clip(g_j, C_t) + N(0, sigma_t^2 I)) / B"))
        return views
