"""DPDL: differentially private decentralized learning with calibrated cross-gradients.

Yuan, Xiao, Wang, Li, "DPDL: Towards Differential Privacy Preservation in Decentralized Stochastic
Learning on Non-IID Data", arXiv 2606.04399 (2026), cited below as the DPDL paper. Equations in the
paper's numbering, with its convention g^{ij} = gradient of i's data at j's model (Definition 2,
eq. (3)):

    (8)-(10)  ddot g^{ij} = (1/B) (sum_b clip_C(grad l(x_j; xi_{i,b})) + z^{ij}), z ~ N(0, s^2C^2 I)
    (11)-(13) ddot g^{ii} the same at the agent's own model x_i (never sent, noised because it
              flows into the broadcast x~_i, v~_i); (14) hat g^{ii} = clean clipped mean
    (15)      S^{ij} = cos(ddot g^{ji}, hat g^{ii})      (16) c^{ij} = 1 / (1 + exp(S^{ij}))
    (17)      g~^{ij} = ddot g^{ji} / (sqrt(w_ij) N) + alpha w_ij c^{ij} hat g^{ii}
    (18)      g~^i = sum_{j in N_i (self included)} g~^{ij}
    (19)-(20) v~_i = beta v_i + g~^i,  x~_i = x_i - eta v~_i
    (21)-(22) v_i <- sum_j w_ij v~_j,   x_i <- sum_j w_ij x~_j

One round for all agents, vectorized (the matrix form of Remark 1, eqs. (63), (71)): the receivers'
models for every directed edge i->j are stacked with the agents' own models into one (E + n, d)
parameter stack, each row paired with its sender's batch, and `privbench.engine.per_sample_grads`
is called once on it; clipping, noise, cosine calibration (`index_add` over receivers) and mixing
(W @ .) are tensor ops.

Messages (Sec. IV): `model` x_i^{t-1} (broadcast), `cross_grad` ddot g^{ij}_t (per edge, the
only Gaussian-noised payload), `half_model` x~_i^t and `half_momentum` v~_i^t (broadcast).

Privacy (readings `paper`, `full`, `strict`; the paper's Theorem 1 leaves its constants c1, c2
unspecified, so sigma is calibrated numerically): per node i, with sample rate
q_i = min(1, B / |D_i|), mechanism A (its n_i - 1 cross-gradients, one batch, z_A = s/sqrt(n_i-1))
and mechanism B (x~_i, v~_i through g~^i: sensitivity C (coef_ii + alpha kappa), noise
s C sqrt(sum_j coef_ij^2) [paper, eq. 40] or s C coef_ii [strict]); A and B share the batch, so
they are one subsampled Gaussian with 1/z^2 = 1/z_A^2 + 1/z_B^2
(`privbench.accounting.dpdl_joint_ratio`). The noise multiplier s is the smallest with
max_i eps_i <= target under `calibrate_with` (exact: eps_i depends only on s * r_i and q_i, so
s = max_i z*(q_i) / r_i with z* from `privbench.accounting.calibrate_noise_scale`). All three
readings are reported for every node (results JSON: `privacy`, keys node and reading).
A noisy node hurts DPDL more than gossip SGD: its cross-gradient noise reaches each neighbour with
weight 1/(sqrt(w_ij) N) (e.g. 0.30 on a two-hub spoke-hub edge, N = 10), not w_ij (0.11).

Gradient views (`gradient_views(obs, victim, rounds, view=...)`; the paper's Sec. VI-D attacks):
"cross_gradient"
(the message itself, at the receiver's model from that receiver's own `model` broadcast; a
curious receiver's observation includes what it sends), "momentum" (v~_i^t - beta v_i^{t-1}, the
paper's MM target), "momentum_isolated" (minus the observed incoming cross-gradients).

Choices of this implementation, where the paper's text is silent (its numbers were lost with
the typeset math), and deviations:
- Mixing weights (`weights="cga"`, the CGA code base's weights; the paper gives none). On
  `ring` and `complete` these equal the
  Metropolis-Hastings weights privbench already builds (1/3, 1/N). On `two_hub` they are the CGA
  "Bipar" weights (a = floor(100/(N-1))/100, spoke self 1-2a, hub self 1-(N-2)a); privbench's
  two_hub links the two hubs (nodes 0 and 1) to each other, the CGA graph does not, so that edge
  gets weight 0 and carries no message. Any other undirected topology (e.g. the default
  `random_out`, built symmetric for doubly-mixing defenses) uses Metropolis-Hastings.
  `weights="metropolis"` uses Metropolis-Hastings everywhere. N_i = support of row i of W.
- alpha: 1.0 on two_hub / complete / other graphs, 0.5 on ring unless set (the paper uses one value
  for bipartite and fully connected graphs and another for the ring; both values are lost).
- eta is the run's `lr` (the paper's value is lost; 0.01 is this implementation's default for
  the reproduction).
- One batch per round shared by every cross-gradient and the self-gradient.
  `sampling="poisson"` (default) samples each member with probability q_i and divides by the
  expected size q_i |D_i|: Poisson add/remove accounting, sensitivity C. `sampling="fixed"` draws B
  samples without replacement and divides by B (by |D_i| when |D_i| < B); it is accounted as what
  it is, sampling without replacement with replace-one adjacency and sensitivity 2C (RDP,
  `SampledWithoutReplacementDpEvent`), so it needs about twice the noise. Every report names its
  `sampling` model.
- Calibration weight of the agent's own term (eq. 15 with j = i): `self_weight="clean"`
  (default, a deviation) computes S^ii = cos(hat g^ii, hat g^ii) from the clean self-gradient,
  so c^ii = sigmoid(-1) is data-independent and the calibration term alpha sum_j w_ij c^ij
  hat g^ii is (0.731 + 1/4 < 1)-Lipschitz in hat g^ii (Lemma 2, eqs. (44)-(47)): sensitivity
  <= alpha kappa C / B with kappa = 1, so the strict reading is an upper bound.
  `self_weight="noisy"` is the paper's S^ii = cos(ddot g^ii, hat g^ii): the weight then depends
  on the noise and the data together (Lemma 3, eqs. (48)-(50): kappa ~ 1 + w_ii C / (4 nu), taken
  as 1), so every reading is flagged approximate.
- `sigma_rule="max"` (default) gives every agent the sigma that the worst agent needs (under
  Dirichlet splits the smallest agent, whose q_i is largest); `"per_node"` lets each agent i use
  its own sigma_i with eps_i <= target, the paper's "each agent satisfies (eps, delta)-DP"; in the
  paper/full readings a neighbour's sigma_j enters node i's noise (eq. 40), so nodes under target
  are raised until none is (see `plan_privacy`).
- Default noise calibration reading is `strict` (privbench's rule: calibrate with the rigorous
  accountant); the paper's tables are reproduced with `calibrate_with="paper"` (which reading
  produced the paper's epsilon is not stated).
- RDP over integer orders 2..256 by default; `accountant="pld"` is tighter.
- delta = the run's delta (the paper's is not given). kappa = 1 (eq. (53)).
- Time-varying graphs: privacy uses each node's worst period.
- sigma = 0 and clip = inf give the no-defence variants ND-CG / ND-MM of Sec. VI-D.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from defenses._cross_gradient import cross_gradient_rows, cross_gradient_view
from defenses._graph import (
    WEIGHTS,
    canonical_weights,
    graph_periods,
    mixing_matrix,
    require_undirected,
)
from defenses._node_dp import (
    SAMPLING_MODELS,
    check_gaussian_settings,
    node_rates,
    reading_options,
    sample_round,
    sampling_rates,
    worst_node_readings,
)
from defenses.dpdl.privacy import (
    DPDL_READINGS,
    DPDLGraph,
    DPDLPrivacy,
    cross_coefficient,
    dpdl_multipliers,
    dpdl_report,
    plan_dpdl,
    plan_dpdl_nodes,
)
from privbench.accounting import PrivacyPlan
from privbench.config import check_choices
from privbench.engine.grads import clipped_grad_sum
from privbench.engine.messages import MessageKind
from privbench.engine.planning import (
    check_graph_request,
    graph_note,
    report_of,
    request_graph,
)
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
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import observed_row

READINGS = DPDL_READINGS
MILLION = 10**6
"""Local dataset size a request's graph plan assumes: q |D| = B exactly for rates with 6 digits."""


@dataclass(frozen=True)
class DPDLConfig:
    """DPDL hyper-parameters beyond the run's lr (eta), batch size (B), epsilon and delta.

    Attributes:
        clip: per-sample L2 clipping threshold C (default 1.0); `inf` disables clipping.
        momentum: beta (default 0.9).
        alpha: calibration weight of eq. (17); None = 1.0, or 0.5 on a ring.
        kappa: Lipschitz factor of the calibration term in the sensitivity (eq. (53)).
        cross_coef: "inv_sqrt_w_over_N" (eq. 17, default) or "w" (ablation: plain w_ij).
        sigma: noise multiplier; None calibrates it to the run's (epsilon, delta); 0 = no noise.
        sigma_rule: "max" (one sigma for all, max_i eps_i <= target) or "per_node"
            (each agent its own sigma_i, every eps_i <= target; a deviation, see the docstring).
        calibrate_with: reading that sets sigma: "strict" (default), "full" or "paper".
        accountant: "rdp" (integer orders 2..256) or "pld".
        sampling: "poisson" (default; Poisson add/remove accounting) or "fixed" (B without
            replacement; accounted as sampling without replacement, replace-one, sensitivity 2C).
        self_weight: "clean" (default; c^ii from the clean self-gradient, exact accounting) or
            "noisy" (the paper's eq. 15; the readings are then approximate).
        weights: "cga" (CGA weights on two_hub, else Metropolis-Hastings) or "metropolis";
            "card", a deprecated name of "cga", is accepted until the next release.
        row_chunk: per-sample-gradient rows per call (0 = all E + n rows in one call).
    """

    clip: float = 1.0
    momentum: float = 0.9
    alpha: float | None = None
    kappa: float = 1.0
    cross_coef: str = "inv_sqrt_w_over_N"
    sigma: float | None = None
    sigma_rule: str = "max"
    calibrate_with: str = "strict"
    accountant: str = "rdp"
    sampling: str = "poisson"
    weights: str = "cga"
    row_chunk: int = 0
    self_weight: str = "clean"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", canonical_weights(self.weights))
        choices = {"cross_coef": ("inv_sqrt_w_over_N", "w"), "calibrate_with": READINGS,
                   "sigma_rule": ("max", "per_node"),
                   "accountant": ("rdp", "pld"), "sampling": tuple(SAMPLING_MODELS),
                   "weights": WEIGHTS, "self_weight": ("clean", "noisy")}
        check_choices("dpdl", self, choices)
        check_gaussian_settings("dpdl", self.clip, self.sigma, self.momentum)
        if self.alpha is not None and not self.alpha >= 0:
            raise ConfigError(f"dpdl alpha must be >= 0, got {self.alpha}")
        if self.row_chunk < 0:
            raise ConfigError(f"dpdl row_chunk must be >= 0, got {self.row_chunk}")

    @property
    def calibration_mode(self) -> str:
        """"calibrated" when the rigorous `strict` reading sets sigma, else "paper"."""
        return "calibrated" if self.calibrate_with == "strict" else "paper"


# ------------------------------------------------------------ mixing (weights of the CGA code base)


def calibration_weight(s: Tensor) -> Tensor:
    """Eq. (16): c = 1 / (1 + exp(S)) = sigmoid(-S), in [0.2689, 0.7311] for S in [-1, 1]."""
    return torch.sigmoid(-s)


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine similarity of (m, d) tensors (eq. 15, guarded by 1e-12) -> (m,)."""
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + 1e-12)


def default_alpha(cfg: DPDLConfig, topology_name: str) -> float:
    """alpha of eq. (17): the config's, or the default (0.5 ring, else 1.0)."""
    if cfg.alpha is not None:
        return cfg.alpha
    return 0.5 if topology_name == "ring" else 1.0


# -------------------------------------------------------- accounting (paper, full, strict readings)


def accounting_graph(cfg: DPDLConfig, ws: Sequence[Tensor], alpha: float) -> DPDLGraph:
    """The mixing matrices and settings DPDL's accounting reads (`defenses.dpdl.privacy`)."""
    return DPDLGraph(tuple(w.detach().cpu().double().numpy() for w in ws), alpha, cfg.kappa,
                     cfg.cross_coef)


def worst_multipliers(ws: Sequence[Tensor], sigma: np.ndarray, alpha: float, kappa: float,
                      cross_coef: str) -> list[dict[str, float]]:
    """Per node and reading, the release's noise multiplier, minimised over graph periods
    (`defenses.dpdl.privacy.dpdl_multipliers`)."""
    graph = DPDLGraph(tuple(w.detach().cpu().double().numpy() for w in ws), alpha, kappa,
                      cross_coef)
    return dpdl_multipliers(graph, sigma)


def plan_privacy(cfg: DPDLConfig, ws: list[Tensor], counts: list[int], batch_size: int,
                 epsilon: float, delta: float, rounds: int, alpha: float) -> DPDLPrivacy:
    """The noise multipliers (unless fixed in cfg) meeting `epsilon` under `cfg.calibrate_with`
    (`defenses.dpdl.privacy.plan_dpdl_nodes`: the paper reading by RDP, the others by the
    config's accountant)."""
    acc = "rdp" if cfg.calibrate_with == "paper" else cfg.accountant
    return plan_dpdl_nodes(accounting_graph(cfg, ws, alpha), sampling_rates(counts, batch_size),
                           epsilon, delta, rounds, reading=cfg.calibrate_with, accountant=acc,
                           options=reading_options(acc), sampling=SAMPLING_MODELS[cfg.sampling],
                           sigma=cfg.sigma, sigma_rule=cfg.sigma_rule)


def privacy_reports(plan: DPDLPrivacy, cfg: DPDLConfig, delta: float,
                    rounds: int) -> list[dict[str, Any]]:
    """Per node, one report per reading (paper, full, strict), each with node / reading keys
    (`defenses.dpdl.privacy.dpdl_report`)."""
    approx = ("" if cfg.self_weight == "clean" else
              "; approximate: the paper's noisy self-weight c^ii (eq. 15) makes the release a "
              "non-Gaussian function of the noise (Lemma 3, kappa taken as 1)")
    out = []
    for i, (q, m) in enumerate(zip(plan.sample_rates, plan.multipliers, strict=True)):
        for reading in READINGS:
            acc = "rdp" if reading == "paper" else cfg.accountant
            rep = dpdl_report(m[reading], q, rounds, delta, reading, acc, reading_options(acc),
                              SAMPLING_MODELS[cfg.sampling],
                              ("cross_grad",) if reading == "paper" else (), i, approx)
            out.append({**rep.to_dict(), "node": i, "reading": reading,
                        "sigma": plan.sigma[i], "sample_rate": q,
                        "noise_multiplier": m[reading],
                        **({"probe_multiplier": plan.probe_multipliers[i][reading]}
                           if plan.probe_multipliers else {})})
    return out


# ---------------------------------------------------------------- trainer


@DEFENSES.register("dpdl")
class DPDL(Trainer):
    """DPDL (Sec. IV): DP cross-gradients, cosine calibration, momentum, gossip of x~ and v~."""

    Config = DPDLConfig
    kinds = (
        MessageKind("model", covered=True, description="x_i^{t-1}, the mixed model (step 1); "
                    "post-processing of earlier releases"),
        MessageKind("cross_grad", covered=True, per_edge=True,
                    description="ddot g^{ij}_t: noisy mean of i's clipped per-sample gradients at "
                    "x_j^{t-1}, noise N(0, sigma^2 C^2)/B (eq. 10); mechanism A (full, strict "
                    "readings; not counted by the paper reading)"),
        MessageKind("half_model", covered=True, description="x~_i^t = x_i^{t-1} - eta v~_i^t "
                    "(eq. 20); post-processing of g~^i_t (mechanism B)"),
        MessageKind("half_momentum", covered=True, description="v~_i^t = beta v_i^{t-1} + "
                    "g~^i_t (eq. 19); post-processing of g~^i_t (mechanism B)"),
    )
    mixing = "doubly"
    private = True

    @classmethod
    def calibration(cls, cfg: DPDLConfig) -> Calibration:
        """sigma set by the strict (or full) reading with `cfg.accountant`, or by the paper
        reading with RDP (`cfg.calibrate_with`)."""
        return Calibration(BOTH_MODES, "paper" if cfg.calibrate_with == "paper" else "calibrated",
                           cfg.accountant)

    @classmethod
    def plan_settings(cls, cfg: DPDLConfig) -> PlanSettings:
        """`plan_dpdl`'s settings: setting any plans with uniform weights 1/degree instead of
        the request's graph."""
        return formula_settings(plan_dpdl)

    @classmethod
    def privacy_plan(cls, cfg: DPDLConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """The worst node of the request's graph, planned as the trainer plans (`plan_privacy`,
        |D_i| = 10^6, B = q |D_i|); with settings, `plan_dpdl`'s uniform weights."""
        if req.settings:
            return formula_plan(plan_dpdl, req, mode)
        check_graph_request(req)
        run, topo = request_graph(req, cls)
        cfg = replace(cfg, accountant=req.accountant,
                      calibrate_with="strict" if mode == "calibrated" else "paper")
        batch = max(1, round(req.sample_rate * MILLION))
        ws = [g[0] for g in graph_periods(topo, cfg.weights, torch.device("cpu"))]
        plan = plan_privacy(cfg, ws, [MILLION] * topo.n, batch, req.epsilon, req.delta,
                            req.rounds, default_alpha(cfg, topo.name))
        reports = privacy_reports(plan, cfg, req.delta, req.rounds)
        worst, mine = worst_node_readings(reports)
        return PrivacyPlan(
            "dpdl", {"sigma": plan.sigma[worst], "node": worst, "nodes": topo.n},
            tuple(report_of(mine[r]) for r in ("paper", "strict", "full")), mode, req.epsilon,
            req.delta, req.rounds, batch / MILLION, req.accountant,
            (graph_note(run, topo, f"weights {cfg.weights}; worst node {worst}"),))

    @classmethod
    def clip_bound(cls, cfg: DPDLConfig) -> ClipBound:
        """The per-sample L2 clip bound C of every cross- and self-gradient."""
        return ClipBound.of(cfg.clip)

    def __init__(self, cfg: DPDLConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        require_undirected("dpdl", ctx.topology)
        self.graphs = graph_periods(ctx.topology, cfg.weights, ctx.device)
        self.alpha = default_alpha(cfg, ctx.topology.name)
        run = ctx.run
        self.counts, self.rates = node_rates(ctx)  # (n,), (n,)
        self.plan = plan_privacy(cfg, [g[0] for g in self.graphs], ctx.data.counts.tolist(),
                                 run.batch_size, run.epsilon, run.delta, run.rounds, self.alpha)
        self.sigma = torch.tensor(self.plan.sigma, dtype=torch.float32, device=ctx.device)  # (n,)
        self.x = self.init_params()  # (n, d) x_i^{t-1}
        self.v = torch.zeros_like(self.x)  # (n, d) v_i^{t-1}
        self.taps: dict[str, Tensor] = {}  # last round's internals (oracle taps)
        self._reports: list[dict[str, Any]] | None = None

    def models(self) -> Tensor:
        """(n, d) the agents' mixed models x_i^t."""
        return self.x

    def _batch(self, t: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Round t's batches x (n, B', ...), y (n, B'), mask (n, B') and divisors (n,)."""
        return sample_round(self.ctx, t, self.cfg.sampling, self.rates, self.counts,
                            self.x.dtype)

    def _clipped_sums(self, params: Tensor, x: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        """(m, d) sums of clipped per-sample gradients (eqs. 8-9, 11-12), optionally chunked."""
        fm, c, step = self.ctx.fm, self.cfg.clip, self.cfg.row_chunk or params.shape[0]
        out = []
        for s in range(0, params.shape[0], step):  # chunks of rows (memory), not nodes
            out.append(clipped_grad_sum(fm, params[s:s + step], x[s:s + step], y[s:s + step],
                                        mask[s:s + step], c)[0])  # (m', d)
        return torch.cat(out)

    def round(self, t: int) -> None:
        """One DPDL round for all agents (eqs. (8)-(22))."""
        ctx, n, cfg = self.ctx, self.ctx.n, self.cfg
        w, adj, src, dst = self.graphs[t % len(self.graphs)]  # (n,n), (n,n), (E,), (E,)
        e = src.numel()
        x_recv = ctx.bus.broadcast(t, "model", self.x, adj)  # (n, d) step 1
        xb, yb, mask, denom = self._batch(t)
        owner, params = cross_gradient_rows(x_recv, self.x, src, dst)  # (E + n,), (E + n, d)
        sums = self._clipped_sums(params, xb[owner], yb[owner], mask[owner])  # (E + n, d)
        noise = torch.zeros_like(sums)
        if bool((self.sigma > 0).any()):
            scale = (self.sigma[owner] * cfg.clip)[:, None]  # (E + n, 1) the sender's sigma C
            noise = torch.randn(sums.shape, generator=ctx.streams.get("noise"),
                                device=sums.device, dtype=sums.dtype) * scale
        noisy = (sums + noise) / denom[owner, None]  # (E + n, d) eqs. (10), (13)
        clean = sums[e:] / denom[:, None]  # (n, d) hat g^{ii}, eq. (14)
        cross = ctx.bus.per_edge(t, "cross_grad", noisy[:e], src, dst)  # (E, d) step 5
        self_noisy = noisy[e:]  # (n, d)
        s_edge = cosine(cross, clean[dst])  # (E,) receiver dst's S, eq. (15)
        s_self = cosine(clean if cfg.self_weight == "clean" else self_noisy, clean)  # (n,)
        c_edge, c_self = calibration_weight(s_edge), calibration_weight(s_self)  # eq. (16)
        w_edge, w_self = w[dst, src], torch.diagonal(w)  # (E,), (n,) receiver's weights
        k_edge = cross_coefficient(w_edge, n, cfg.cross_coef)  # (E,)
        k_self = cross_coefficient(w_self, n, cfg.cross_coef)  # (n,)
        agg = (k_self[:, None] * self_noisy).index_add(0, dst, k_edge[:, None] * cross)  # (n, d)
        cbar = (w_self * c_self).index_add(0, dst, w_edge * c_edge)  # (n,)
        agg = agg + self.alpha * cbar[:, None] * clean  # eqs. (17)-(18)
        v_half = cfg.momentum * self.v + agg  # (n, d) eq. (19)
        x_half = self.x - ctx.run.lr * v_half  # (n, d) eq. (20)
        xh = ctx.bus.broadcast(t, "half_model", x_half, adj)
        vh = ctx.bus.broadcast(t, "half_momentum", v_half, adj)
        self.taps = {"src": src, "dst": dst, "sums": sums, "noise": noise, "denom": denom,
                     "cross": noisy[:e], "self_grad_noisy": self_noisy, "self_grad_clean": clean,
                     "cos_edge": s_edge, "cos_self": s_self, "calib_edge": c_edge,
                     "calib_self": c_self, "agg_grad": agg, "x_prev": self.x, "v_prev": self.v,
                     "half_model": x_half, "half_momentum": v_half}
        self.v = w @ vh  # eq. (21)
        self.x = w @ xh  # eq. (22)

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: paper, full and strict readings for the sigma used."""
        if self._reports is None:
            run = self.ctx.run
            self._reports = privacy_reports(self.plan, self.cfg, run.delta, run.rounds)
        return self._reports

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int],
                       view: str = "cross_gradient") -> list[GradientView]:
        """The victim's released gradients, derived from observed messages only (Sec. VI-D).

        Args:
            obs: the observation.
            victim: agent i.
            rounds: rounds t.
            view: "cross_gradient": ddot g^{ij}_t itself (already a batch-mean gradient of the
                victim's batch) at the receiver's model x_j^{t-1}, taken from the `model` message
                j broadcast in round t; the receiver is the lowest-numbered observed one.
                "momentum": g~^i_t = v~_i^t - beta v_i^{t-1} at x_i^{t-1}, with
                v_i^{t-1} = sum_k w_ik v~_k^{t-1} (0 at t = 0), the paper's MM target (raw).
                "momentum_isolated": the same minus the observed incoming cross-gradients
                sum_{j != i} coef_ij ddot g^{ji}_t.

        Raises:
            NotApplicable: when a needed message is not observed (e.g. the momentum view for a
                curious neighbour that does not receive every neighbour's v~ of round t-1).
        """
        if view not in ("cross_gradient", "momentum", "momentum_isolated"):
            raise NotApplicable(f"unknown dpdl view {view!r}")
        cfg = obs.defense_cfg
        if view == "cross_gradient":
            return [cross_gradient_view(obs, victim, t, _dpdl_cross_source) for t in rounds]
        return [_momentum_view(obs, cfg, victim, t, view == "momentum_isolated") for t in rounds]


def _dpdl_cross_source(i: int, j: int) -> str:
    return f"cross_grad {i}->{j} (eq. 10) at x_{j}^(t-1)"


def _momentum_view(obs: Observation, cfg: DPDLConfig, victim: int, t: int,
                   isolated: bool) -> GradientView:
    n = obs.topology.n
    v_half = observed_row(obs, t, "half_momentum", victim)
    x_prev = (obs.x0 if t == 0 and obs.x0 is not None else observed_row(obs, t, "model", victim))
    g = v_half.clone()
    if t > 0 and cfg.momentum:
        w = mixing_matrix(obs.topology, t - 1, cfg.weights)
        for k in torch.nonzero(w[victim]).flatten().tolist():  # victim's neighbourhood
            g -= cfg.momentum * float(w[victim, k]) * observed_row(obs, t - 1, "half_momentum", k)
    src = "v~_i^t - beta v_i^(t-1), v_i^(t-1) = sum_k w_ik v~_k^(t-1) (eq. 19, 21)"
    if isolated:
        w = mixing_matrix(obs.topology, t, cfg.weights)
        rec = obs.log.get(t, "cross_grad")
        nbrs = [k for k in torch.nonzero(w[victim]).flatten().tolist() if k != victim]
        for k in nbrs:
            hit = (torch.nonzero((rec.edges[:, 0] == k) & (rec.edges[:, 1] == victim)).flatten()
                   if rec is not None else [])
            if not len(hit):
                raise NotApplicable(f"cross_grad {k}->{victim} of round {t} is not observed")
            coef = cross_coefficient(w[victim, k], n, cfg.cross_coef)
            g -= float(coef) * rec.payload[hit[0]]
        src += " minus the incoming cross-gradients (isolated)"
    return GradientView(victim, t, x_prev, g, "gradient", None, obs.run.batch_size, src)
