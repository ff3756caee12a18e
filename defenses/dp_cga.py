"""DP-CGA: Cross-Gradient Aggregation with batch-level clipping and Gaussian noise (baseline).

DPDL's baseline "DP-CGA" (Yuan et al., arXiv 2606.04399, Sec. VI-A): Cross-Gradient Aggregation,
Esfandiari, Tan, Jiang, Balu, Herron, Hegde, Sarkar, "Cross-Gradient Aggregation for Decentralized
Learning from Non-IID Data", ICML 2021 (ref. [15]; reference code
`yasesf93/CrossGradientAggregation`, `Optimizers/CGA.py` (`step`, `ProjSGA`) and
`collaborative.py`), with the DP variant of the DPDL paper: "each agent first computes the average
cross-gradient (or self-gradient) over its local data batch, and then conducts clipping operation
and adds Gaussian noise". Notation as the DPDL paper (Definition 2, eq. (3)): g^{ij} is agent i's
gradient on its own data at agent j's model, sent from i to j.

Round t, all agents in lock-step (one round = one batch per agent):

    1. x_j^t is broadcast (`model`) to every neighbour (off-diagonal support of W).
    2. Agent i draws one batch xi_i (Poisson at q_i = min(1, B / |D_i|), divisor B_i the expected
       size q_i |D_i|; or `sampling="fixed"`: B without replacement, divisor the batch size) and
       for every neighbour j and for itself releases
           ddot g^{ij} = clip_C((1/B_i) sum_{b in xi_i} grad l(x_j^t; b)) + z^{ij},
           z^{ij} ~ N(0, (sigma C / B_i)^2 I), independent over (i, j, t)
       (batch-level clipping: g clip_C = g min(1, C / ||g||) of the batch MEAN, not per sample;
       the noise is DP-DPSGD's, std sigma C on the sum scale, divided by the divisor). The cross
       ones go to j (`cross_grad`, per edge); the self one ddot g^{ii} stays at i.
    3. Receiver j solves CGA's quadratic program (`ProjSGA`) on the rows
       m_k = w_jk ddot g^{kj} (k in N_j \\ {j}) and g0 = w_jj ddot g^{jj}:
           v* = argmin_{v >= margin} 0.5 v^T (M M^T + eps I) v + (M g0)^T v,
           g~_j = M^T v* + g0,
       i.e. v* minimises ||M^T v + g0||^2 over v >= margin (eps aside). The reference solves it
       per parameter tensor (`qp_scope="layer"`, default); `"model"` solves one QP on the flat
       vector. KKT: <g~_j, m_k> + eps v_k >= 0 for every k, = 0 where v_k > margin (GEM's
       "no conflict with any neighbour" direction).
    4. Momentum as the reference code (buffer h_j, `momentum_buffer`): h_j <- beta h_j + g~_j,
       u_j = g~_j + beta h_j (Nesterov, `nesterov=True`; `False`: u_j = h_j), then
       x_j^{t+1} = sum_k w_jk x_k^t - lr u_j.

Vectorized: every directed edge i -> j's (receiver model, sender batch) pair is one
row of an (E + n, d) stack with the n self rows, and `privbench.engine.batch_grads` computes all
batch-mean gradients in one vmap; the QPs of all receivers and layers are one batched solver
(`solve_dual_qp`: Lawson-Hanson's exact active-set method, as `scipy.optimize.nnls`, in Gram
form with masks, one batched K x K solve per iteration), the received rows padded to
the largest in-degree with zero rows, which do not change g~ (a zero row contributes nothing to
M^T v, and its v_k sits at the margin). Loops run over parameter tensors and solver iterations
only.

Privacy (sample-level, agent i's local data, DPDL's Definition 3; readings as in
`defenses/dpdl.py`):
per round agent i's data enters its n_i - 1 outgoing cross-gradients and its noisy self-gradient
(n_i = |N_i|, self included, in the worst graph period). Everything else it releases or
influences is post-processing: its broadcast model x_i^{t+1} is a function of ddot g^{ii}, of
the neighbours' cross-gradients (their own releases) and of public models, and a receiver's QP
output is a function of the releases it received. The n_i releases are Gaussian mechanisms with
independent noise on ONE batch, so they are one subsampled Gaussian release of the concatenated
vector with noise multiplier z_release / sqrt(n_i) (sensitivities add in squares; amplification
by Poisson subsampling applies to any function of the subsample with bounded sensitivity:
Mironov, Talwar, Zhang 2019, "Renyi DP of the Sampled Gaussian Mechanism", Def. 3 / Thm. 4, for
RDP; Zhu, Dong, Wang 2022, dominating pairs of Poisson subsampling, for `accountant="pld"`).
The per-release multiplier z_release (noise std / sensitivity, in the ledger's convention: the
"fixed" ledger treats its sensitivity as 2C and halves z itself) has two readings:

- `paper`: the DP-SGD accounting the paper's baseline cites, as if the batch-level clip bounded
  one sample's effect on the mean by C / B_i: z_release = sigma (as DP-DPSGD's ledger). This is
  NOT an upper bound for batch-level clipping: one sample can move the unclipped mean without
  limit, so its effect on the clipped mean is bounded only by the clip ball. Reported with
  `approximate=True` and a note saying so; `mode="paper"`.
- `strict` (rigorous, `mode="calibrated"`): both clipped means lie in the C-ball, so the L2
  sensitivity of one release is 2C (add/remove and replace-one alike), with no 1/B_i factor.
  Poisson (add/remove): z_release = (sigma C / B_i) / (2C) = sigma / (2 B_i). Fixed
  (replace-one, sensitivity 2C, which the without-replacement ledger assumes as 2 x its unit):
  the unit is C, so the ledger gets z_release = sigma / B_i and halves it to sigma / (2 B_i)
  per unit of sensitivity. B_i = min(B, |D_i|) is the divisor (expected Poisson size or fixed
  batch size), known before training.

So the round's joint multiplier is z_i = sigma_i r_i with r_i = 1 / sqrt(n_i) (paper) and
r_i = 1 / (2 B_i sqrt(n_i)) (strict, Poisson) or 1 / (B_i sqrt(n_i)) (strict, fixed); n_i is
the node's largest neighbourhood over the graph periods. For the same epsilon the strict reading
needs 2 B_i (Poisson) or B_i (fixed: both readings then count replace-one sensitivity) times the
paper's sigma, since eps_i depends on sigma_i r_i and q_i only: batch-level clipping gets no 1/B
sensitivity reduction (DPDL's point against DP-CGA). `sigma=None` calibrates the smallest
sigma with max_i eps_i <= the run's epsilon under `calibrate_with` (default "strict", privbench's
rule), as DP-DPSGD does (`defenses.dpdl.calibrate_sigmas`, RDP integer orders 2..256 by
default); both readings are reported for every node (`privacy()`: keys node, reading).

Gradient view (DPDL's CG attack, Sec. VI-D): `cross_gradient`, the `cross_grad` message i -> j
itself (already a batch-mean gradient of the victim's batch, clipped and noised) at the receiver's
model x_j^t from j's `model` broadcast of the same round.

Choices and deviations:
- Mixing weights: `defenses.dpdl.mixing_matrix` (the CGA "Bipar" weights on two_hub,
  Metropolis-Hastings otherwise, equal to the CGA code's on ring and complete); undirected
  topologies only, as DPDL.
- beta = 0.9, DPDL's default here (DPDL uses one momentum for all methods; its value is lost
  from the text); the reference's default is 0.95. lr is the run's.
- The reference drops a neighbour whose row is all zero before `quadprog`; here zero rows stay
  (padding) and are inert, so the result is the same. Where `quadprog` fails the reference
  reuses the previous round's v; the batched solver always returns a feasible v.
- One batch per round shared by all cross-gradients and the self-gradient (the reference trims
  all agents' batches to a common size; here each keeps its own).
- Noise is drawn from the "noise" stream for all E + n rows at once; sigma = 0 and clip = inf
  give the non-private CGA.
- The Gram matrices are formed in the working precision (float32) and the QPs solved in float64;
  `qp_solved` (tap) flags a QP that hit `qp_iters` before the optimality test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from defenses._cga_direction import add_combination, block_grams, segments, solve_dual_qp
from defenses._cross_gradient import cross_gradient_rows, cross_gradient_view
from defenses._graph import WEIGHTS, canonical_weights, graph_periods, require_undirected
from defenses._node_dp import (
    SAMPLING_MODELS,
    calibrate_sigmas,
    check_gaussian_settings,
    gaussian_report,
    node_rates,
    reading_options,
    sample_round,
    sampling_rates,
    worst_node_readings,
)
from privbench.accounting import (
    PrivacyPlan,
)
from privbench.config import check_choices
from privbench.engine.grads import batch_grads, clip_l2
from privbench.engine.messages import MessageKind
from privbench.engine.planning import (
    config_settings,
    configured,
    graph_note,
    report_of,
    request_graph,
)
from privbench.engine.privacy import BOTH_MODES, Calibration, ClipBound, PlanRequest, PlanSettings
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, Observation

READINGS = ("paper", "strict")


@dataclass(frozen=True)
class DPCGAConfig:
    """DP-CGA hyper-parameters beyond the run's lr, batch size, epsilon and delta.

    Attributes:
        clip: batch-level L2 clipping threshold C of each batch-mean gradient (default 1.0);
            `inf` disables clipping (needs sigma = 0).
        momentum: beta (default 0.9).
        nesterov: u = g~ + beta m (the reference code's update) or u = m (False).
        margin: lower bound of the QP's dual variables (reference: 0.5).
        qp_eps: ridge added to the Gram matrix (reference: 1e-12).
        qp_scope: "layer" (one QP per parameter tensor, the reference) or "model" (one QP).
        qp_iters: most active-set iterations of the batched QP solver (each frees or binds
            one dual variable; the solver stops when every problem is solved, usually after
            about as many iterations as free variables).
        sigma: noise multiplier; None calibrates it to the run's (epsilon, delta); 0 = no noise.
        sigma_rule: "max" (one sigma, max_i eps_i <= target) or "per_node" (sigma_i per agent).
        calibrate_with: reading that sets sigma: "strict" (default, rigorous) or "paper".
        accountant: "rdp" (integer orders 2..256, as DPDL / DP-DPSGD) or "pld".
        sampling: "poisson" (default) or "fixed" (as DPDL, accounted without replacement).
        weights: "cga" or "metropolis" (as DPDL; "card", a deprecated name of "cga", is
            accepted until the next release).
        row_chunk: batch-gradient rows per call (0 = all E + n rows in one call).
    """

    clip: float = 1.0
    momentum: float = 0.9
    nesterov: bool = True
    margin: float = 0.5
    qp_eps: float = 1e-12
    qp_scope: str = "layer"
    qp_iters: int = 100
    sigma: float | None = None
    sigma_rule: str = "max"
    calibrate_with: str = "strict"
    accountant: str = "rdp"
    sampling: str = "poisson"
    weights: str = "cga"
    row_chunk: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", canonical_weights(self.weights))
        choices = {"qp_scope": ("layer", "model"), "sigma_rule": ("max", "per_node"),
                   "calibrate_with": READINGS, "accountant": ("rdp", "pld"),
                   "sampling": tuple(SAMPLING_MODELS), "weights": WEIGHTS,
                   "nesterov": (True, False)}
        check_choices("dp_cga", self, choices)
        check_gaussian_settings("dp_cga", self.clip, self.sigma, self.momentum)
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ConfigError(f"dp_cga margin must be a finite number >= 0, got {self.margin}")
        if not (math.isfinite(self.qp_eps) and self.qp_eps >= 0):
            raise ConfigError(f"dp_cga qp_eps must be a finite number >= 0, got {self.qp_eps}")
        if isinstance(self.qp_iters, bool) or not isinstance(self.qp_iters, int) \
                or self.qp_iters < 1:
            raise ConfigError(f"dp_cga qp_iters must be an integer >= 1, got {self.qp_iters!r}")
        if self.row_chunk < 0:
            raise ConfigError(f"dp_cga row_chunk must be >= 0, got {self.row_chunk}")

    @property
    def calibration_mode(self) -> str:
        """"calibrated" when the rigorous `strict` reading sets sigma, else "paper"."""
        return "calibrated" if self.calibrate_with == "strict" else "paper"


# ---------------------------------------------------------------- the QP (CGA's ProjSGA)


# ---------------------------------------------------------------- accounting


@dataclass(frozen=True)
class DPCGAPrivacy:
    """The noise DP-CGA uses and every node's ledger inputs.

    Attributes:
        sigma: (n,) noise multipliers sigma_i (noise std sigma_i C / B_i on each clipped mean).
        sample_rates: (n,) q_i.
        divisors: (n,) B_i = min(B, |D_i|), the batch-mean divisor.
        releases: (n,) n_i, Gaussian releases per round on the node's batch (self included).
        multipliers: per node and reading, the joint release's noise multiplier z.
    """

    sigma: tuple[float, ...]
    sample_rates: tuple[float, ...]
    divisors: tuple[float, ...]
    releases: tuple[int, ...]
    multipliers: tuple[dict[str, float], ...]


def unit_ratios(releases: Sequence[int], divisors: Sequence[float],
                sampling: str) -> list[dict[str, float]]:
    """Per node, the joint multiplier per unit of sigma under each reading (module docstring):
    paper 1 / sqrt(n_i); strict 1 / (2 B_i sqrt(n_i)) (Poisson) or 1 / (B_i sqrt(n_i)) (fixed:
    the without-replacement ledger halves it itself)."""
    unit = 2.0 if sampling == "poisson" else 1.0
    return [{"paper": 1.0 / math.sqrt(r), "strict": 1.0 / (unit * b * math.sqrt(r))}
            for r, b in zip(releases, divisors, strict=True)]


def plan_privacy(cfg: DPCGAConfig, ws: Sequence[Tensor], counts: Sequence[int], batch_size: int,
                 epsilon: float, delta: float, rounds: int) -> DPCGAPrivacy:
    """The noise multipliers (unless fixed in cfg) meeting `epsilon` under `cfg.calibrate_with`.

    Args:
        ws: every graph period's (n, n) mixing matrix; n_i is the worst period's |N_i|.
        counts: (n,) |D_i|.
    """
    rates = sampling_rates(counts, batch_size)
    divisors = tuple(float(max(1, min(batch_size, c))) for c in counts)
    releases = tuple(max(int((w[i] > 0).sum()) for w in ws) for i in range(len(counts)))
    unit = unit_ratios(releases, divisors, cfg.sampling)
    read = cfg.calibrate_with
    if cfg.sigma is not None:
        sigma = np.full(len(counts), float(cfg.sigma))
    else:
        acc = "rdp" if read == "paper" else cfg.accountant
        sigma = calibrate_sigmas(cfg.sigma_rule, epsilon, delta, rounds, rates,
                                 [u[read] for u in unit], acc, reading_options(acc),
                                 cfg.sampling)
    mult = tuple({r: float(s) * u[r] for r in READINGS} for s, u in zip(sigma, unit, strict=True))
    return DPCGAPrivacy(tuple(float(s) for s in sigma), rates, divisors, releases, mult)


NOTES = {
    "paper": "paper reading: DP-SGD accounting as if the batch-level clip bounded one sample's "
             "effect by C/B (z = sigma per release, n_i releases of one batch); NOT an upper "
             "bound for batch-level clipping",
    "strict": "strict reading: batch-level clipping, sensitivity 2C per clipped mean (no 1/B), "
              "n_i releases of one batch (n_i - 1 cross-gradients + the self-gradient)",
}


def privacy_reports(plan: DPCGAPrivacy, cfg: DPCGAConfig, delta: float,
                    rounds: int) -> list[dict[str, Any]]:
    """Per node, one report per reading (paper, strict), each with node / reading keys."""
    model = SAMPLING_MODELS[cfg.sampling]
    out = []
    for i, (q, m) in enumerate(zip(plan.sample_rates, plan.multipliers, strict=True)):
        for reading in READINGS:
            mode = "calibrated" if reading == "strict" else "paper"
            acc = "rdp" if reading == "paper" else cfg.accountant
            rep = gaussian_report(m[reading], q, rounds, delta, acc, mode, model,
                                  NOTES[reading], reading_options(acc), node=i)
            if m[reading] != 0:
                rep = replace(rep, approximate=rep.approximate or reading == "paper")
            out.append({**rep.to_dict(), "node": i, "reading": reading,
                        "sigma": plan.sigma[i], "sample_rate": q,
                        "noise_multiplier": m[reading], "releases": plan.releases[i],
                        "divisor": plan.divisors[i]})
    return out


# ---------------------------------------------------------------- trainer


@dataclass(frozen=True)
class EdgeGroups:
    """A graph period's directed edges ordered so that receivers of equal in-degree are
    contiguous: the rows received by the n_k receivers of in-degree k are one (n_k, k, d) view.

    Attributes:
        src, dst: (E,) sender and receiver of every edge (by in-degree, receiver, sender).
        groups: per distinct in-degree k: (k, receivers (n_k,), first edge, last edge + 1).
        width: K, the largest in-degree (at least 1).
    """

    src: Tensor
    dst: Tensor
    groups: tuple[tuple[int, Tensor, int, int], ...]
    width: int


def group_edges(src: Tensor, dst: Tensor, n: int) -> EdgeGroups:
    """Order the edges (src, dst) by (in-degree of dst, dst, src) and group the receivers."""
    indeg = torch.bincount(dst, minlength=n)  # (n,)
    key = (indeg[dst] * n + dst) * n + src
    order = torch.argsort(key)
    src, dst = src[order], dst[order]
    groups, start = [], 0
    for k in sorted(set(indeg.tolist()) - {0}):  # distinct in-degrees, once per run
        rcv = torch.nonzero(indeg == k).flatten()  # (n_k,) ascending, as the edge order
        groups.append((k, rcv, start, start + k * len(rcv)))
        start += k * len(rcv)
    return EdgeGroups(src, dst, tuple(groups), max(1, int(indeg.max())) if n else 1)


@DEFENSES.register("dp_cga")
class DPCGA(Trainer):
    """DP-CGA (DPDL's baseline): DP cross-gradients, CGA's QP per receiver, Nesterov momentum,
    gossip."""

    Config = DPCGAConfig
    kinds = (
        MessageKind("model", covered=True, description="x_j^t, the current model (step 1); "
                    "post-processing of the node's noisy self-gradients and received releases"),
        MessageKind("cross_grad", covered=True, per_edge=True,
                    description="ddot g^{ij}: clip_C(mean of i's batch gradient at x_j^t) + "
                    "N(0, (sigma C / B_i)^2), batch-level clipping; sensitivity 2C "
                    "(strict reading)"),
    )
    mixing = "doubly"
    private = True

    @classmethod
    def calibration(cls, cfg: DPCGAConfig) -> Calibration:
        """sigma set by the strict reading with `cfg.accountant`, or by the paper reading with
        RDP (`cfg.calibrate_with`)."""
        return Calibration(BOTH_MODES, "paper" if cfg.calibrate_with == "paper" else "calibrated",
                           cfg.accountant)

    @classmethod
    def plan_settings(cls, cfg: DPCGAConfig) -> PlanSettings:
        """The config fields a request may set (sampling, sigma_rule, weights)."""
        return config_settings(cfg, ("sampling", "sigma_rule", "weights"))

    @classmethod
    def privacy_plan(cls, cfg: DPCGAConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """The worst node of the request's graph, planned as the trainer plans (`plan_privacy`).
        The batch B is the train command's, |D| = B / q; sigma scales with B, the noise on each
        clipped batch mean (sigma C / B) does not."""
        cfg = configured(cfg, req)
        run, topo = request_graph(req, cls)
        cfg = replace(cfg, accountant=req.accountant,
                      calibrate_with="strict" if mode == "calibrated" else "paper")
        batch = run.batch_size
        size = max(batch, round(batch / req.sample_rate))
        ws = [g[0].cpu() for g in graph_periods(topo, cfg.weights, torch.device("cpu"))]
        plan = plan_privacy(cfg, ws, [size] * topo.n, batch, req.epsilon, req.delta, req.rounds)
        reports = privacy_reports(plan, cfg, req.delta, req.rounds)
        worst, mine = worst_node_readings(reports)
        sigma = plan.sigma[worst]
        noise = {"sigma": sigma, "noise_std_per_clip_on_mean": sigma / plan.divisors[worst],
                 "batch": plan.divisors[worst], "releases_per_round": plan.releases[worst],
                 "node": worst, "nodes": topo.n}
        return PrivacyPlan("dp_cga", noise, (report_of(mine["paper"]), report_of(mine["strict"])),
                           mode, req.epsilon, req.delta, req.rounds, plan.sample_rates[worst],
                           req.accountant, (
                               graph_note(run, topo, f"weights {cfg.weights}; worst node {worst}"),
                               f"batch B = {batch}, |D| = {size}: sigma scales with B, the noise "
                               "on each clipped batch mean (sigma C / B) does not"))

    @classmethod
    def clip_bound(cls, cfg: DPCGAConfig) -> ClipBound:
        """The L2 clip bound C of each batch-mean gradient (batch-level clipping)."""
        return ClipBound.of(cfg.clip)

    def __init__(self, cfg: DPCGAConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        require_undirected("dp_cga", ctx.topology)
        self.graphs = graph_periods(ctx.topology, cfg.weights, ctx.device)
        self.edges = [group_edges(g[2], g[3], ctx.n) for g in self.graphs]
        self.blocks = segments(ctx.fm, cfg.qp_scope)
        run = ctx.run
        self.counts, self.rates = node_rates(ctx)  # (n,), (n,)
        self.plan = plan_privacy(cfg, [g[0].cpu() for g in self.graphs], ctx.data.counts.tolist(),
                                 run.batch_size, run.epsilon, run.delta, run.rounds)
        self.sigma = torch.tensor(self.plan.sigma, dtype=torch.float32, device=ctx.device)  # (n,)
        self.x = self.init_params()  # (n, d)
        self.buf = torch.zeros_like(self.x)  # (n, d) momentum buffers h_j
        self.taps: dict[str, Tensor] = {}
        self._reports: list[dict[str, Any]] | None = None

    def models(self) -> Tensor:
        """(n, d) current models."""
        return self.x

    def _grad_means(self, params: Tensor, x: Tensor, y: Tensor, mask: Tensor,
                    denom: Tensor) -> Tensor:
        """(m, d) each row's batch gradient sum at its params divided by its divisor B_i
        (unclipped; `batch_grads` is the mean over the real samples)."""
        step = self.cfg.row_chunk or params.shape[0]
        out = []
        for s in range(0, params.shape[0], step):  # chunks of rows (memory), not nodes
            rows = slice(s, s + step)
            mean = batch_grads(self.ctx.fm, params[rows], x[rows], y[rows], mask[rows])
            factor = mask[rows].sum(1).to(mean.dtype) / denom[rows]  # (m',) realised / B_i
            out.append(mean * factor[:, None])  # (m', d)
        return torch.cat(out) if len(out) > 1 else out[0]

    def round(self, t: int) -> None:
        """One DP-CGA round for all agents (module docstring, steps 1-4)."""
        ctx, cfg = self.ctx, self.cfg
        period = t % len(self.graphs)
        w, adj = self.graphs[period][:2]  # (n, n), (n, n)
        edges = self.edges[period]
        src, dst, e = edges.src, edges.dst, edges.src.numel()  # (E,), (E,)
        x_recv = ctx.bus.broadcast(t, "model", self.x, adj)  # (n, d) step 1
        xb, yb, mask, denom = sample_round(ctx, t, cfg.sampling, self.rates, self.counts,
                                           self.x.dtype)
        owner, params = cross_gradient_rows(x_recv, self.x, src, dst)  # (E + n,), (E + n, d)
        means = self._grad_means(params, xb[owner], yb[owner], mask[owner], denom[owner])
        clipped, norms = clip_l2(means, cfg.clip)  # (E + n, d) batch-level clipping
        noise, noisy = None, clipped
        if bool((self.sigma > 0).any()):
            noise = torch.randn(clipped.shape, generator=ctx.streams.get("noise"),
                                device=clipped.device, dtype=clipped.dtype)
            noise *= (self.sigma * cfg.clip / denom)[owner, None]  # the sender's sigma C / B_i
            noisy = clipped + noise  # (E + n, d)
        cross = ctx.bus.per_edge(t, "cross_grad", noisy[:e], src, dst)  # (E, d) step 2
        self_noisy = noisy[e:]  # (n, d) ddot g^{jj}, never sent
        agg, qp = self._aggregate(w, edges, cross, self_noisy)  # (n, d) step 3
        self.buf = cfg.momentum * self.buf + agg  # (n, d) step 4
        u = agg + cfg.momentum * self.buf if cfg.nesterov else self.buf
        self.taps = {"src": src, "dst": dst, "means": means, "norms": norms, "denom": denom,
                     "noise": torch.zeros_like(noisy) if noise is None else noise,
                     "cross": noisy[:e], "self_grad_noisy": self_noisy, "agg_grad": agg,
                     "update": u, "x_prev": self.x, **qp}
        self.x = w @ x_recv - ctx.run.lr * u

    def _aggregate(self, w: Tensor, edges: EdgeGroups, cross: Tensor,
                   self_noisy: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Step 3 for every receiver: g~_j = M_j^T v*_j + w_jj ddot g^{jj} (CGA's `ProjSGA`).

        Each in-degree group's received rows are a view of `cross` (no padded copy); the QPs of
        all receivers and blocks are padded to K in the small (K x K) space and solved at once
        (zero rows and columns are inert). A receiver without neighbours keeps g0.

        Returns:
            (n, d) g~ and taps: g0 (n, d), gram (n, L, K, K), lin (n, L, K), v (n, L, K),
            qp_solved (n, L).
        """
        cfg, n, d = self.cfg, self.ctx.n, self.x.shape[1]
        g0 = torch.diagonal(w)[:, None] * self_noisy  # (n, d)
        w_edge = w[edges.dst, edges.src]  # (E,) receiver's weight of each sender
        size = (n, len(self.blocks), edges.width)
        gram = torch.zeros(*size, edges.width, dtype=g0.dtype, device=g0.device)
        lin = torch.zeros(size, dtype=g0.dtype, device=g0.device)
        parts = []
        for k, rcv, a, b in edges.groups:  # distinct in-degrees (one on regular graphs)
            rows, wk = cross[a:b].reshape(len(rcv), k, d), w_edge[a:b].reshape(len(rcv), k)
            gram[rcv, :, :k, :k], lin[rcv, :, :k] = block_grams(rows, g0[rcv], self.blocks, wk)
            parts.append((k, rcv, rows, wk))
        v, solved = solve_dual_qp(gram, lin, cfg.margin, cfg.qp_eps, cfg.qp_iters)
        out = g0.clone()
        for k, rcv, rows, wk in parts:
            coef = (v[rcv, :, :k] * wk[:, None, :]).to(g0.dtype)  # (n_k, L, k)
            out[rcv] = add_combination(out[rcv], rows, coef, self.blocks)
        return out, {"g0": g0, "gram": gram, "lin": lin, "v": v, "qp_solved": solved}

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: the paper and strict readings (module docstring) for the sigma used."""
        if self._reports is None:
            run = self.ctx.run
            self._reports = privacy_reports(self.plan, self.cfg, run.delta, run.rounds)
        return self._reports

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int],
                       view: str = "cross_gradient") -> list[GradientView]:
        """The victim's `cross_grad` messages, each at its receiver's model.

        Args:
            view: "cross_gradient" (the only one): ddot g^{ij}_t (a clipped, noisy batch-mean
                gradient of the victim's batch) at x_j^t from j's `model` broadcast of round t;
                the receiver is the lowest-numbered one whose model is observed.

        Raises:
            NotApplicable: when no cross_grad of the victim, or no receiver's model, is observed.
        """
        if view != "cross_gradient":
            raise NotApplicable(f"unknown dp_cga view {view!r}")
        return [cross_gradient_view(obs, victim, t, _cga_cross_source) for t in rounds]


def _cga_cross_source(i: int, j: int) -> str:
    return f"cross_grad {i}->{j} (batch-level clip + noise) at x_{j}^t"
