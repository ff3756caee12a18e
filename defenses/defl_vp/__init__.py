"""DeFL-VP: decentralized learning with variance reduction, sign randomized response and rand-k.

Xiu, Liu, Zhang, Liao, Sakurai, "DeFL-VP: Decentralized Federated Learning with Variance Reduction
and Differential Privacy", J. Machine Learning and Information Security 2026, 2(2), 12
(doi:10.53941/jmlis.2026.100012); cited below as the DeFL-VP paper.

One round t, all M nodes at once (Alg. 1 lines 3-10, Alg. 3, Eqs. 10-17; the order "VR before
RR" of Sec. 3):

    A. node i broadcasts x_i^t (`model`) and h_i^t (`control_variate`) to its neighbours
    1. g_i^t                      local stochastic (pseudo-)gradient at x_i^t       (Alg. 1 l.3)
    2. h̄_i^t = sum_j w_ij h_j^t                                                     (Eq. 10)
    3. v_i^t = g_i^t - h_i^t + h̄_i^t                                                (Eq. 11)
    4. h_i^{t+1} = (1 - a) h_i^t + a g_i^t        a = alpha_cv                      (Alg. 1 l.6)
    5. s = sign(v), sign(0) := +1                                                   (Eq. 12)
    6. keep each coordinate w.p. p = e^eps/(e^eps+1), else flip                     (Eqs. 13-14)
    7. ṽ = s̃ / (2p - 1)                                                             (Eq. 15)
    8. q_i^t = C(ṽ), C = unbiased rand-k: (d/k) u on k uniform coordinates       (Eq. 16, Alg. 2)
    B. node i broadcasts the same q_i^t (`update`) to every neighbour
    9. x_i^{t+1} = sum_j w_ij x_j^t - eta sum_j w_ij q_j^t                          (Eq. 17)

W is symmetric and doubly stochastic (Metropolis-Hastings on the runner's undirected graph), so
the network average moves exactly as x̄^{t+1} = x̄^t - eta mean_i q_i^t (Eq. 19).

Messages, all broadcast (the same payload to every neighbour). Alg. 1 line 9 lists only q_j as
received, but lines 4 and 10 need the neighbours' h_j^t and x_j^t:

* `model` x_i^t: DP post-processing of past q's (x^0 is public, x changes only by Eq. 17).
* `control_variate` h_i^t: an EMA of RAW gradients sent in the clear; NOT covered by the RR
  guarantee (Sec. 4.2 privatizes the sign vector only) and data dependent. A single curious
  neighbour gets the exact raw gradient g_i^t = (h_i^{t+1} - (1 - a) h_i^t) / a
  (`gradient_views`).
* `update` q_i^t: covered by RR. Stored in the log as a dense (d,) float32 row (zeros off the
  rand-k support), not as (indices, values): the log is for attacks, and the support is exactly
  `q != 0` (every kept value is +-(d/k)/(2p-1) != 0). The wire size (k int32 indices + k float32
  values) is counted in `comm_bytes`.

Every setting the paper leaves open is a `DeFLVPConfig` field (defaults below); the baselines
and ablations of Tables 1, 4 and 5 are switches that each add or remove exactly one module (a
choice of this implementation: the paper does not define them further):

| paper's name      | vr    | dp   | compressor | --defense / --set                                |
|-------------------|-------|------|------------|--------------------------------------------------|
| DeFL-VP           | true  | rr   | rand_k     | defl_vp                                          |
| D-PSGD            | false | none | none       | defl_vp + vr=false dp=none compressor=none       |
| D-PSGD+RR         | false | rr   | none       | d_psgd_rr (alias)                                |
| DFL+Compression   | false | none | rand_k     | dfl_compression (alias)                          |
| DFL+VR            | true  | none | none       | dfl_vr (alias)                                   |
| w/o DP            | true  | none | rand_k     | defl_vp + dp=none (or dp=sign: eps = inf)        |
| w/o VR            | false | rr   | rand_k     | defl_vp + vr=false                               |
| w/o Comp.         | true  | rr   | none       | defl_vp + compressor=none                        |

(`defenses/d_psgd.py` is Lian et al.'s single-gradient D-PSGD, not the epoch-then-gossip
baseline above, which is Eq. 17 with raw local-epoch updates.) With dp=sign, vr=false,
compressor=none the update is sign(g): decentralized signSGD.

Choices of this implementation, where the paper is silent or inconsistent:

* `gradient`: Alg. 1 uses one gradient per round, Sec. 5.1 one local epoch per round. G2
  (default) one local epoch of momentum SGD (lr `local_lr`, momentum `local_momentum`, batch =
  the run's `batch_size`, buffer reset every round) from x_i^t, then
  g = (x_i^t - x̂_i^t) / local_lr and x̂ is discarded; G1 one mini-batch gradient per round; G3
  (every mini-batch step is one Alg.-1 iteration) is computed exactly like G1: the run's
  `rounds` then counts mini-batch iterations, not epochs. The epoch is vectorized over nodes:
  max_i ceil(|D_i| / B) steps, and a node whose epoch has ended stops moving (masked step).
* Step sizes: Sec. 5.1 gives one lr (0.01). Raw-update methods (dp=none) use eta = local_lr;
  sign methods (dp=rr/sign) use eta = `eta_sign` (paper-literal 0.01). The run's `lr` (--lr) is
  not used by this trainer.
* `eps_mode`: per_run (default, the accounting package's calibration: eps0 = eps / (d T), the
  whole run eps-LDP, so a cell `defl_vp@1` spends 1), per_coordinate (Alg. 3 / Eq. 14:
  p = sigmoid(eps) per coordinate per round, which composes to d T eps: ~10^6 at eps = 1 for the
  MLP; the reading under which the paper's accuracies are reachable) or per_vector (Theorem 1,
  Eq. 28: eps0 = eps / d, so each round's whole message is eps-LDP, T eps over the run,
  Corollary 2). The run's --eps is that budget. Both readings (per coordinate and composed over
  d coordinates and T rounds) are reported by `privacy()` for every mode.
* `protect_control_variate`: false is VR -> RR as in Sec. 3 and Eqs. 11-16 (h from raw g,
  leaks); true is RR -> VR, the order that Lemmas 4-5 (Sec. 4.3) assume:
  a = RR(sign(g)) / (2p - 1), v = a - h + h̄, q = C(v), h^{t+1} = (1 - a) h + a * a_i, so the
  exchanged h is post-processing of RR outputs. Unset (default): true where the run's ε is the
  whole run's (eps_mode per_run, the calibrated reading: a claim that covers every
  data-dependent message), false under the paper's readings (per_coordinate, per_vector: the
  algorithm as Sec. 3 writes it, its leak reported).
* alpha_cv = 0.5 (not given); h^0 = 0, x^0 shared and public; rand-k with k = ceil(0.2 d) (the
  paper asks only for an unbiased compressor, Eqs. 8-9; 0.2 matches the time ratio of Table 5);
  topology: the runner's symmetric random graph (Metropolis-Hastings weights); sign(0) = +1
  (Def. 1: ties broken deterministically); every trainable parameter is randomized.
* RR uniforms are float64 so the realised keep probability equals p to ~1e-16 (float32 uniforms
  would round p up by up to 6e-8, a small unaccounted privacy loss, and destroy per_vector mode).
* Randomness: RR flips use stream ("noise", "rr"), rand-k supports ("noise", "compress"),
  batches "batch": independent of each other and of the data (what makes compression
  post-processing).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from defenses.defl_vp.plan import plan_defl_vp
from privbench.accounting import EpsilonReport, PrivacyPlan
from privbench.config import replace_checked
from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, gossip
from privbench.engine.privacy import (
    BOTH_MODES,
    Calibration,
    ClipBound,
    PlanRequest,
    PlanSettings,
    Settings,
    formula_plan,
    formula_settings,
)
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, LocalSteps, Observation
from privbench.threat.rebuild import observed_row

VIEWS = ("control_variate", "sign", "model_difference")


# ---------------------------------------------------------------- mechanisms (pure functions)


def sign_pm1(v: Tensor) -> Tensor:
    """sign(v) in {-1, +1}, sign(0) := +1 (Def. 1: ties broken deterministically; torch: 0)."""
    return torch.where(v >= 0, 1.0, -1.0).to(v.dtype)


def rr_scale(coordinate_epsilon: float) -> float:
    """1 / (2p - 1) = 1 / tanh(eps / 2) for p = e^eps / (e^eps + 1) (Eq. 15), in float64."""
    return 1.0 / math.tanh(coordinate_epsilon / 2.0)


def randomized_response(s: Tensor, keep_prob: float, gen: torch.Generator) -> Tensor:
    """Keep each +-1 coordinate of s w.p. `keep_prob`, flip it otherwise (Alg. 3 l.2-5, Eq. 13).

    Args:
        s: (..., d) signs in {-1, +1}.
        keep_prob: p in [1/2, 1].
        gen: generator on s's device (float64 uniforms: P(keep) = p up to 2^-53).

    Returns:
        (..., d) randomized signs s̃, same dtype as s.
    """
    u = torch.rand(s.shape, generator=gen, device=s.device, dtype=torch.float64)
    return torch.where(u < keep_prob, s, -s)


def privatize_sign(v: Tensor, coordinate_epsilon: float, gen: torch.Generator) -> Tensor:
    """ṽ = RR(sign(v)) / (2p - 1), p = sigmoid(eps) (Alg. 3; Eqs. 12-15).

    Every output coordinate is +-1/(2p-1), E[ṽ | s] = s and ||ṽ||^2 = d / (2p-1)^2 exactly.

    Args:
        v: (..., d) values whose signs are released.
        coordinate_epsilon: eps per coordinate per release (math.inf: no flips, plain sign).
        gen: the RR stream.
    """
    s = sign_pm1(v)
    if math.isinf(coordinate_epsilon):
        return s
    keep = 1.0 / (1.0 + math.exp(-coordinate_epsilon))
    return randomized_response(s, keep, gen) * rr_scale(coordinate_epsilon)


def rand_k_count(d: int, ratio: float) -> int:
    """k = ceil(ratio * d), at least 1."""
    return max(1, min(d, math.ceil(ratio * d)))


def rand_k(u: Tensor, k: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Unbiased random-k sparsification, a fresh support per row (Eqs. 8-9).

    C(u)_j = (d/k) u_j on k coordinates drawn uniformly without replacement, else 0, so
    E[C(u)] = u and E||C(u) - u||^2 = (d/k - 1) ||u||^2.

    Args:
        u: (m, d) rows to compress.
        k: coordinates kept per row.
        gen: the compression stream (independent of data and RR).

    Returns:
        C(u) (m, d) and the support mask (m, d) bool.
    """
    m, d = u.shape
    keys = torch.rand(m, d, generator=gen, device=u.device)
    idx = keys.topk(k, dim=1).indices  # (m, k)
    mask = torch.zeros(m, d, dtype=torch.bool, device=u.device).scatter_(1, idx, True)
    return torch.where(mask, u * (d / k), torch.zeros_like(u)), mask


# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class DeFLVPConfig:
    """DeFL-VP switches and hyper-parameters (defaults: Sec. 5.1 where the paper gives a
    value, otherwise this implementation's choice, see the module docstring).

    Attributes:
        vr: variance reduction with exchanged control variates (Eqs. 10-11, Alg. 1 l.4-6).
        dp: "rr" sign + randomized response + debias (Alg. 3); "sign" sign without flips
            (eps = inf, the other reading of "w/o DP"); "none" the raw (VR-corrected) update.
        compressor: "rand_k" (unbiased, Eqs. 8-9) or "none" (identity).
        compress_ratio: k / d of rand-k (a choice of this implementation, default 0.2: beta = 4).
        gradient: meaning of g_i^t (Alg. 1 l.3 vs Sec. 5.1): "G2" one local epoch
            pseudo-gradient, "G1" one mini-batch gradient, "G3" like G1 with rounds counting
            mini-batch iterations.
        alpha_cv: control-variate EMA rate (not given in the paper; default 0.5).
        local_lr: local SGD lr eta_l of G2, and eta of Eq. 17 for raw updates (Sec. 5.1: 0.01).
        local_momentum: momentum of the local epoch (G2 only; Sec. 5.1: 0.9).
        eta_sign: eta of Eq. 17 for sign updates (paper-literal 0.01).
        eps_mode: what the run's epsilon means (Alg. 3 vs Theorem 1): "per_run" (default:
            eps / (d T) per coordinate, so the whole run's messages compose to eps, the cell's
            label),
            "per_coordinate" (Alg. 3: eps per coordinate per round; the run then composes to
            d T eps) or "per_vector" (Theorem 1, eps / d per coordinate; composes to T eps).
        protect_control_variate: order rr_vr (Lemmas 4-5, Sec. 4.3): RR before VR, control
            variates built from privatized signs (privacy-clean h); None: true under the
            calibrated eps_mode per_run, false under the paper's readings (`protects`).
        composition: pure-epsilon composition rule of the calibrated report ("basic"/"advanced").
        weight_decay: L2 term added to every local gradient (not given in the paper; 0).
    """

    vr: bool = True
    dp: Literal["rr", "sign", "none"] = "rr"
    compressor: Literal["rand_k", "none"] = "rand_k"
    compress_ratio: float = 0.2
    gradient: Literal["G1", "G2", "G3"] = "G2"
    alpha_cv: float = 0.5
    local_lr: float = 0.01
    local_momentum: float = 0.9
    eta_sign: float = 0.01
    eps_mode: Literal["per_coordinate", "per_vector", "per_run"] = "per_run"
    protect_control_variate: bool | None = None
    composition: Literal["basic", "advanced"] = "basic"
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        checks = [
            (0 < self.compress_ratio <= 1, f"compress_ratio must be in (0, 1], got "
                                           f"{self.compress_ratio}"),
            (0 < self.alpha_cv <= 1, f"alpha_cv must be in (0, 1], got {self.alpha_cv}"),
            (self.local_lr > 0, f"local_lr must be > 0, got {self.local_lr}"),
            (0 <= self.local_momentum < 1, f"local_momentum must be in [0, 1), got "
                                           f"{self.local_momentum}"),
            (self.eta_sign > 0, f"eta_sign must be > 0, got {self.eta_sign}"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}"),
            (not self.protect_control_variate or (self.vr and self.dp != "none"),
             "protect_control_variate (order rr_vr) needs vr=true and dp=rr or sign"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    @property
    def signed(self) -> bool:
        """Whether the update is a (debiased) sign vector, stepped with eta_sign."""
        return self.dp != "none"

    @property
    def calibration_mode(self) -> str:
        """"calibrated" when the whole run composes to the budget (per_run), else "paper"."""
        return "calibrated" if self.eps_mode == "per_run" else "paper"

    @property
    def protects(self) -> bool:
        """Whether the control variate is built from privatized signs (order rr_vr)."""
        if self.protect_control_variate is not None:
            return self.protect_control_variate
        return self.eps_mode == "per_run" and self.vr and self.dp != "none"

    @property
    def order(self) -> str:
        """Order of VR and RR (Sec. 3 vs Lemmas 4-5): "rr_vr" when the control variate is protected.
        """
        return "rr_vr" if self.protects else "vr_rr"


def message_kinds(cfg: DeFLVPConfig) -> tuple[MessageKind, ...]:
    """The message kinds sent under `cfg`, with their DP coverage (Alg. 1; Sec. 4.2).

    Without VR no control variate is sent, so none is declared (nor flagged uncovered).
    """
    dp = cfg.dp == "rr"
    model = MessageKind("model", covered=dp,
                        description="x_i^t, the model (post-processing of past q's when dp=rr)")
    cv = MessageKind("control_variate", covered=dp and cfg.protects,
                     description="h_i^t, EMA of raw local gradients, sent in the clear (the leak)"
                     if not cfg.protects else
                     "h_i^t, EMA of privatized debiased signs (order rr_vr)")
    update = MessageKind("update", covered=dp,
                         description="q_i^t = C(RR(sign(v_i^t)) / (2p-1)), dense (d,) with zeros "
                                     "off the rand-k support")
    return (model, cv, update) if cfg.vr else (model, update)


# ---------------------------------------------------------------- trainer


@DEFENSES.register("defl_vp")
class DeFLVP(Trainer):
    """DeFL-VP (and, by its switches, the paper's baselines and ablations) on gossip."""

    Config: ClassVar[type] = DeFLVPConfig
    kinds = message_kinds(DeFLVPConfig())
    mixing = "doubly"
    private = True

    @classmethod
    def calibration(cls, cfg: DeFLVPConfig) -> Calibration:
        """The keep probability from the run's epsilon composed over d T coordinate releases
        (eps_mode per_run, `cfg.composition`) or read per coordinate (Alg. 3)."""
        return Calibration(BOTH_MODES, "calibrated" if cfg.eps_mode == "per_run" else "paper",
                           cfg.composition)

    @staticmethod
    def fixed_settings(cfg: DeFLVPConfig, mode: str) -> Settings:
        """Without VR (D-PSGD+RR) no control variates are sent; with VR the order of VR and RR
        is the config's under the calibration: its calibrated default (eps_mode per_run)
        protects the control variates (rr_vr), the paper's Alg. 3 reading (eps_mode
        per_coordinate) sends them in the clear (vr_rr)."""
        if not cfg.vr:
            return {"control_variates": False}
        if mode == "paper" and cfg.eps_mode == "per_run":
            cfg = replace(cfg, eps_mode="per_coordinate")
        return {"order": cfg.order}

    @classmethod
    def plan_settings(cls, cfg: DeFLVPConfig) -> PlanSettings:
        """`plan_defl_vp`'s settings (dim), less what the config fixes."""
        return formula_settings(plan_defl_vp,
                                cls.fixed_settings(cfg, cls.calibration(cfg).default_mode))

    @classmethod
    def privacy_plan(cls, cfg: DeFLVPConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """`plan_defl_vp` for the request with the config's order (or no control variates)."""
        return formula_plan(plan_defl_vp, req, mode, cls.fixed_settings(cfg, mode))

    @classmethod
    def clip_bound(cls, cfg: DeFLVPConfig) -> ClipBound:
        """None: randomized response bounds each coordinate's sign, whatever the gradient."""
        return ClipBound(None, "randomized response on the sign of each coordinate bounds a "
                               "message's likelihood ratio (node-level): no clip bound")

    def __init__(self, cfg: DeFLVPConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.kinds = message_kinds(cfg)  # per-instance coverage (what results.json reports)
        self.mixer = Mixer(ctx.topology, self.mixing, ctx.device)
        self.x = self.init_params()  # (n, d) models, x^0 shared and public
        self.h = torch.zeros_like(self.x)  # (n, d) control variates, h^0 = 0
        self.d = ctx.fm.d
        self.k = rand_k_count(self.d, cfg.compress_ratio)
        self.eta = cfg.eta_sign if cfg.signed else cfg.local_lr
        counts = ctx.data.counts.cpu()
        b = ctx.run.batch_size
        self.epoch_steps = int(((counts + b - 1) // b).max())
        self.plan = self._plan()
        # (T,) per-round coordinate epsilon: the plan's schedule, the one its reports compose
        self.coordinate_epsilons = (self.plan.schedule if cfg.dp == "rr"
                                    else (math.inf,) * ctx.run.rounds)
        self.coordinate_epsilon = self.coordinate_epsilons[0]  # round 0's, for the report
        self.comm_bytes = {"model": 0, "control_variate": 0, "update": 0}
        self.last: dict[str, Tensor] = {}  # round t's g, v, q (n, d) for tests and diagnostics

    # ----------------------------------------------------------- one round

    def models(self) -> Tensor:
        """(n, d) current models x_i^t."""
        return self.x

    def round(self, t: int) -> None:
        """Alg. 1 lines 3-10: messages A, local gradient, VR, RR, rand-k, message B, Eq. 17."""
        cfg, bus, mixer = self.cfg, self.ctx.bus, self.mixer
        w = mixer.matrix(t)  # (n, n) doubly stochastic
        x_mix = gossip(bus, mixer, t, self.x, "model")  # (n, d) sum_j w_ij x_j^t
        g = self._local_gradient(t, self.x)  # (n, d)
        if cfg.vr:
            h_bar = gossip(bus, mixer, t, self.h, "control_variate")  # (n, d) Eq. 10
        if cfg.protects:  # order rr_vr (Lemmas 4-5)
            a = privatize_sign(g, self.coordinate_epsilons[t], self._gen("rr"))  # (n, d)
            v = a - self.h + h_bar
            msg, cv_input = v, a
        else:  # order vr_rr (Sec. 3, Eqs. 11-16)
            v = g - self.h + h_bar if cfg.vr else g  # (n, d) Eq. 11
            msg = (privatize_sign(v, self.coordinate_epsilons[t], self._gen("rr")) if cfg.signed
                   else v)
            cv_input = g
        if cfg.compressor == "rand_k":
            q, _ = rand_k(msg, self.k, self._gen("compress"))  # (n, d) Eq. 16
        else:
            q = msg
        q_mix = w @ bus.broadcast(t, "update", q, mixer.adjacency(t))  # (n, d)
        self.x = x_mix - self.eta * q_mix  # Eq. 17
        if cfg.vr:
            self.h = (1.0 - cfg.alpha_cv) * self.h + cfg.alpha_cv * cv_input  # Alg. 1 l.6
        self.last = {"g": g, "v": v, "q": q}
        self._count_bytes(t)

    def _gen(self, purpose: str) -> torch.Generator:
        # Randomized response draws from the DP "noise" stream; the rand-k compressor's
        # randomness is not a privacy mechanism and has its own stream.
        return self.ctx.streams.get("noise", purpose) if purpose == "rr" else \
            self.ctx.streams.get(purpose)

    def _local_gradient(self, t: int, x: Tensor) -> Tensor:
        """g_i^t for every node (Alg. 1 l.3, read by `gradient`): (n, d)."""
        if self.cfg.gradient != "G2":  # G1 / G3: one mini-batch gradient at x_i^t
            xb, yb, mb = self.sample_batch(t)
            return batch_grads(self.ctx.fm, x, xb, yb, mb) + self.cfg.weight_decay * x
        return self._epoch_pseudo_gradient(t, x)

    def _epoch_pseudo_gradient(self, t: int, x: Tensor) -> Tensor:
        """G2: one epoch of momentum SGD from x over each node's members, g = (x - x̂) / eta_l."""
        data, b = self.ctx.data, self.ctx.run.batch_size
        perm, members = self.ctx.draw_epoch(t)  # (n, M) each, padding slots last
        x_hat, buf = x.clone(), torch.zeros_like(x)  # (n, d) each; buffer reset every round
        for s in range(self.epoch_steps):
            cols = slice(s * b, (s + 1) * b)
            mask = members[:, cols]  # (n, B') real samples
            xb, yb = data.gather(perm[:, cols])
            live = mask.any(dim=1)  # (n,) nodes whose epoch has not ended (padding is last)
            if bool(live.all()):
                self._momentum_step(x_hat, buf, xb, yb, mask)
                continue
            # A node whose epoch has ended stops moving: step only the others, on copies of
            # their rows (k, d), so the step's (n, d) passes shrink as the nodes finish.
            rows = live.nonzero().squeeze(1)  # (k,)
            xh, bf = x_hat[rows], buf[rows]
            self._momentum_step(xh, bf, xb[rows], yb[rows], mask[rows])
            x_hat[rows], buf[rows] = xh, bf
        return (x - x_hat) / self.cfg.local_lr

    def _momentum_step(self, x_hat: Tensor, buf: Tensor, xb: Tensor, yb: Tensor,
                       mask: Tensor) -> None:
        """One momentum-SGD step of the rows of x_hat and buf (k, d), in place, on their batches
        xb (k, B, ...), yb (k, B) with real samples mask (k, B)."""
        cfg = self.cfg
        gs = batch_grads(self.ctx.fm, x_hat, xb, yb, mask)  # (k, d), a fresh tensor
        if cfg.weight_decay:  # (adding 0 * x_hat would change nothing but the time)
            gs.add_(cfg.weight_decay * x_hat)
        # In place (the same values as the out-of-place form): up to 206 steps a round on
        # (n, d) = 16.6 M floats for the CNN, where the out-of-place form allocated six such
        # tensors a step.
        buf.mul_(cfg.local_momentum).add_(gs)
        x_hat.sub_(cfg.local_lr * buf)

    def _count_bytes(self, t: int) -> None:
        """Wire bytes: float32 dense x and h, rand-k q as k int32 + k float32."""
        edges = int(self.mixer.adjacency(t).sum())
        dense = 4 * self.d
        self.comm_bytes["model"] += edges * dense
        if self.cfg.vr:
            self.comm_bytes["control_variate"] += edges * dense
        self.comm_bytes["update"] += edges * (8 * self.k if self.cfg.compressor == "rand_k"
                                              else dense)

    # ----------------------------------------------------------- privacy

    def _plan(self) -> Any:
        """privbench.accounting's defl_vp plan for this run's eps and eps_mode (Lemma 1, Theorem 1,
        Corollary 2)."""
        run, cfg = self.ctx.run, self.cfg
        eps = run.epsilon / self.d if cfg.eps_mode == "per_vector" else run.epsilon
        return plan_defl_vp(eps, run.delta, run.rounds, 1.0, cfg.composition, dim=self.d,
                         order=cfg.order, control_variates=cfg.vr,
                         calibrate_with="calibrated" if cfg.eps_mode == "per_run" else "paper")

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: the paper per-coordinate reading, the composed d*T reading (calibrated,
        basic/advanced composition, node-level LDP) and the paper's per-vector total.

        Every entry names its `reading`, the `eps_mode` that set the keep probability, and the
        message kinds outside the guarantee (control variates unless protected).
        """
        cfg = self.cfg
        uncovered = ("control_variate",) if cfg.vr and not cfg.protects else ()
        if cfg.dp != "rr":
            sent = ("model", "control_variate", "update") if cfg.vr else ("model", "update")
            rep = EpsilonReport(math.inf, 0.0, "none", "paper", "node-level", sent,
                                note=f"dp={cfg.dp}: no randomized response, no guarantee")
            reports = [(rep, "none"), (dataclasses.replace(rep, mode="calibrated"), "none")]
        else:
            names = ("per_coordinate_per_round", "composed_d_coordinates_T_rounds",
                     "per_vector_T_rounds")
            reports = [(dataclasses.replace(r, uncovered=uncovered), name)
                       for r, name in zip(self.plan.reports, names, strict=True)]
        warning = ("control variates h_i (EMA of raw gradients) are sent in the clear and are "
                   "NOT covered by this epsilon (only the sign vector is randomized)"
                   ) if uncovered else ""
        extra = {"eps_mode": cfg.eps_mode, "order": cfg.order,
                 "coordinate_epsilon": (self.coordinate_epsilon if cfg.dp == "rr" else None),
                 "keep_prob": (float(self.plan.noise["keep_prob"]) if cfg.dp == "rr" else 1.0),
                 "warning": warning}
        return [{"node": i, "reading": name, **rep.to_dict(), **extra}
                for i in range(self.ctx.n) for rep, name in reports]

    # ----------------------------------------------------------- attacker's views

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int],
                       view: str | None = None) -> list[GradientView]:
        """What an observer derives about the victim's round-t gradient, from messages only.

        Args:
            obs: observed messages and public context (defense config, topology, x^0).
            victim: the node attacked.
            rounds: rounds t to derive.
            view: None (default) = "control_variate", or "sign" when the config exchanges no
                control variates (vr=false: D-PSGD+RR, DFL+Compression), so view-less callers
                (privbench.audit.membership / inversion) get the most informative view.
                "control_variate": g_i^t = (h_i^{t+1} - (1 - alpha_cv) h_i^t) /
                alpha_cv from two successive `control_variate` messages, the victim's exact raw
                gradient (kind "gradient"; under protect_control_variate the exact debiased RR
                sign a_i^t, kind "sign"); needs rounds t and t+1, works for one curious neighbour.
                "sign": the `update` message q_i^t itself (kind "sign" for dp=rr/sign with
                `mask` = the rand-k support, or the raw v / "partial" for dp=none).
                "model_difference": (sum_j w_ij x_j^t - x_i^{t+1}) / eta = sum_j w_ij q_j^t, the
                neighbourhood-mixed update (not exact for the victim alone); needs every
                in-neighbour's round-t model.
            All views are taken at params = x_i^t (the victim's round-t `model` message);
            under G2 each carries its local epoch (`LocalSteps`: momentum SGD of lr local_lr
            over the victim's members in batches of the run's size), which a multi-step
            inversion unrolls.

        Raises:
            NotApplicable: when a needed message is not observed or not sent under this config.
        """
        cfg = _config_of(obs, cls)
        if view is None:
            view = "control_variate" if cfg.vr else "sign"
        if view not in VIEWS:
            raise ConfigError(f"unknown DeFL-VP gradient view {view!r}; accepted: "
                              f"{', '.join(VIEWS)}")
        return [_view(obs, cfg, victim, t, view) for t in rounds]


def _config_of(obs: Observation, cls: type) -> DeFLVPConfig:
    """The defense config from an observation (a config object or its JSON dict)."""
    c = obs.defense_cfg
    if isinstance(c, DeFLVPConfig):
        return c
    return replace_checked(cls.Config(), dict(c or {}), where="defense")


def _epoch_steps(obs: Observation, cfg: DeFLVPConfig, victim: int) -> LocalSteps | None:
    """G2's local epoch as the attacker knows it: momentum SGD from x_i^t over the victim's
    members in consecutive batches of the run's size, released as (x_i^t - x̂_i) / local_lr
    (None under G1/G3, or when the victim's member count is not known)."""
    if cfg.gradient != "G2" or obs.node_sizes is None:
        return None
    return LocalSteps.epoch(obs.node_sizes[victim], obs.run.batch_size, cfg.local_lr,
                            cfg.local_lr, cfg.local_momentum, cfg.weight_decay)


def _view(obs: Observation, cfg: DeFLVPConfig, victim: int, t: int, view: str) -> GradientView:
    """One round's view (see DeFLVP.gradient_views); G2 views carry the epoch's steps."""
    params = observed_row(obs, t, "model", victim)  # (d,) x_i^t
    b = obs.run.batch_size
    g2 = cfg.gradient == "G2"
    local = _epoch_steps(obs, cfg, victim)
    epoch = " (G2: pseudo-gradient of one local epoch)" if g2 else ""
    if view == "control_variate":
        if not cfg.vr:
            raise NotApplicable("no control variates are exchanged (vr=false)")
        a = cfg.alpha_cv
        h0 = observed_row(obs, t, "control_variate", victim)
        h1 = observed_row(obs, t + 1, "control_variate", victim)
        g = (h1 - (1.0 - a) * h0) / a
        kind = "sign" if cfg.protects else "gradient"
        what = "a_i^t = RR(sign(g))/(2p-1)" if cfg.protects else "raw g_i^t"
        return GradientView(victim, t, params, g, kind, None, b,
                            f"(h_i^(t+1) - (1-alpha_cv) h_i^t) / alpha_cv = {what}{epoch}",
                            local_epoch=g2, local=local)
    eta = cfg.eta_sign if cfg.signed else cfg.local_lr
    if view == "sign":
        q = observed_row(obs, t, "update", victim)
        mask = q != 0 if cfg.compressor == "rand_k" else None
        kind = "sign" if cfg.signed else ("partial" if mask is not None else "gradient")
        return GradientView(victim, t, params, q, kind, mask, b,
                            f"update message q_i^t (dp={cfg.dp}, vr={cfg.vr}, "
                            f"compressor={cfg.compressor}){epoch}", local_epoch=g2, local=local)
    w = obs.topology.mixing(t, "doubly")
    mix = w[victim, victim] * params
    for j in obs.topology.in_neighbours(t, victim):
        mix = mix + w[victim, j] * observed_row(obs, t, "model", j)
    g = (mix - observed_row(obs, t + 1, "model", victim)) / eta
    return GradientView(victim, t, params, g, "sign" if cfg.signed else "gradient", None, b,
                        "(sum_j w_ij x_j^t - x_i^(t+1)) / eta = sum_j w_ij q_j^t "
                        f"(neighbourhood-mixed update){epoch}", exact=False, local_epoch=g2,
                        local=local)
