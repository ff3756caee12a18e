"""DPPS, the Differentially Private Perturbed Push-Sum protocol, and its SGP-DP instance.

Zhou, Xue, Chen, "Differentially Private Perturbed Push-Sum Protocol and Its Application in
Non-Convex Optimization" (2025), cited below as the DPPS paper. The authors' released code:
github.com/WearTheClo/PartPSP (consulted; nothing copied); "code" below means that code.

This module holds the DPPS mechanism once (Algorithm 1; Remark 1, Eq. 22) and the trainer that
applies it to SGD with a local / shared parameter split (PartPSP, Algorithm 2). The registry key
`dpps` shares **every** parameter: that is the paper's SGPDP baseline (Tables 2 and 4: SGP with
the same Laplace noise, all parameters communicated); `partpsp` (defenses/partpsp.py) is the same
trainer with the split of Sec. 5.4 (PartPSP-1 / -2).

One round t, all nodes at once (stacked: s (n, d_s), a (n,), l (n, d_l)):

    P2  l_i <- l_i - gamma_l grad_l F_i(y_i, l_i)              (Eq. 5, 23; skipped if d_l = 0)
    P3  h = grad_s F_i(y_i, l_i^{t+1})  (same batch, updated local part)
    P4  g = h / max(1, ||h||_1 / CLIP)                                  (Eq. 24; optional)
    D1  s_i^{t+1/2} = s_i + eps_i,  eps_i = -gamma_s g                   (Eq. 7, 25)
    D2  S_i = lambda S_i^{t-1} + 2C'(||eps_i||_1 + lambda gamma_n ||n_i^{t-1}||_1)   (Eq. 22)
        reset S_i = 2C' ||eps_i||_1 at t = 0 and every t mod SP == 0 (sync on; code behaviour)
        broadcast S_i (message `sensitivity`), S = max_i S_i
    D3  n_i ~ Lap(0, S / b) i.i.d. per coordinate;  s_i,noise = s_i^{t+1/2} + gamma_n n_i  (Eq. 8)
    D4-5 push-sum of (s_i,noise, a_i) (messages `shared`, `weight`)      (Eq. 9a, 9b)
    D6  y_i = s_i / a_i                                                  (Eq. 10)

So the Laplace scale per coordinate is gamma_n S / b, and Theorem 1 makes one round
(b / gamma_n)-DP with NODES as records (Definitions 2-5, Lemma 1, Eqs. 8, 27). **b is not
epsilon.**

Sync (the "synchronization interval" of Sec. 3.3 and 5.2-5.3, absent from Algorithms 1-2; as
in the code): when (t + 1) mod SP == 0 the round mixes over the complete graph
(W = 11^T / N, every node sends its noisy s to all others); noise is still added first.

Accounting (`defenses.dpps.plan`: `plan_dpps`, `plan_partpsp`): with `b` unset the per-round
epsilon is calibrated from the run's target epsilon (basic or advanced composition over the
rounds; `calibrate_with="paper"` reads the target as the paper's per-round budget) and
b(t) = epsilon_round * gamma_n(t). With `b` set (the paper's knob, e.g. 1, 2, 3 of Table 2) the
per-round epsilon is b / gamma_n(t). `privacy()` reports the paper reading (Theorem 1, per round,
not composed), the calibrated one (composed over the rounds run) and a third "realized" reading:
the composition of S_real(t) / scale(t), i.e. the epsilon w.r.t. the TRUE L1 sensitivity of the
noise actually drawn (larger than the calibrated one exactly when the estimate fell below the
truth). The broadcast scalar S_i is data-dependent (it reveals gamma_s ||g_i||_1) and is not
covered by any of them (the paper neither composes over rounds nor accounts for S_i).

Meaningful budgets (derived from Eq. 22, E||n||_1 = d_s S / b): the estimate grows by about rho =
lambda (1 + 2 C' d_s / eps_round) per round between resets, and the injected noise makes the real
sensitivity grow with it. At a calibrated eps_round << d_s (e.g. `--eps 8` over 500 rounds) S(t)
explodes within a sync period. Either the model overflows (the engine reports `diverged_round`,
`sensitivity_check` gives `first_non_finite_round`), or (tanh models) the shared weights blow up,
tanh saturates, the shared gradient becomes exactly 0, S(t) = 0 after the next reset and the noise
stops: the shared layers are frozen at a huge random value and only the local layers learn. Nothing
hides this: it is the protocol's behaviour at that budget.

Diagnostics (the paper's privacy validation, Fig. 2 and Table 3): every round records S_i (n,),
max_i S_i, the real sensitivity S_real = max_{i,j} ||s_i^{t+1/2} - s_j^{t+1/2}||_1, the S used for
the noise, the per-coordinate Laplace scale, ||eps_i||_1 and ||n_i||_1. `sensitivity_trace()`
returns them; `privacy()` carries a summary (`sensitivity_check`: rounds where the estimate < real,
the min ratio over the finite rounds with the non-finite rounds listed, and whether C' < 1 voids the
reset-round bound: at a reset S_real <= 2 gamma_s max ||g||_1 needs C' >= 1).
The realized reading is the headline (`reading: "realized"`): `privbench.results.claimed_eps`,
the gate and the report's verdict read it, not the assumed (calibrated) one.

Choices of this implementation, and deviations from the paper or the code:
- The mixing matrix is the run topology's column-stochastic push-sum matrix (privbench
  convention: sender-side 1/(out-degree + 1), the paper's convention, Definition 1). On a regular
  graph (the one-peer `exponential` graph = the paper's EXP for N = 10, or `circulant` registered
  here = the paper's d-Out) it is doubly stochastic and a_i == 1; on a `random_out` graph it is
  not, a_i moves, and Lemma 2's sensitivity argument does not apply. So a run with topology
  "auto" (the default) uses `exponential`, and a non-doubly-stochastic graph is refused unless
  `require_doubly_stochastic=false` (then `sensitivity_check.doubly_stochastic` is false).
- Sensitivity max (how S_i is broadcast on a directed graph is unspecified): simulated broadcast:
  every node sends S_i to every other node.
- `sensitivity_mode`: "estimated" (Eq. 22), "oracle" (noise from S_real, as
  Table 2 and "PartPSP-Real"; the oracle value is not a node's message so no `sensitivity`
  message is sent), "clipped", "none" (NoDP rows: no noise, epsilon infinite), or "auto"
  (default): "estimated" at the paper's knob b (or with `calibrate_with="paper"`), "clipped"
  when the run's ε is calibrated over the rounds. "clipped" is the rigorous reading of a
  calibrated claim: the shared gradient is L1-clipped to CLIP (Eq. 24; `clip`, else
  DEFAULT_L1_CLIP) and the noise is drawn for S(t) = 2 gamma_s(t) CLIP, the most one node's
  data can move its release eps_i (Eq. 25). A node's state s_i is a mix of messages already
  released (Eq. 9b), so under adaptive composition eps_i is the round's only fresh data
  dependence, and with nodes as the records (Definition 2) each round is
  (S / scale)-DP by Lemma 1 whatever the states' spread. No S_i is broadcast and nothing
  feeds the noise back into S, so the calibrated run neither leaks S_i nor diverges; the
  trace's S_real is then max_{i,j} ||eps_i - eps_j||_1 (the realized spread of the updates).
- S^(0) term of Eq. 22: dropped by default (code); `s0_term=True` adds 2C'||s_i^(0)||_1 at t = 0.
- Eq. 22 uses the current (decayed) gamma_n (code). Decay (code only): gamma_s, gamma_l and gamma_n
  are multiplied by `decay_factor` at each round in `decay_rounds`, with one global round counter
  (the released code restarts its counter; documented difference).
- gamma_s / gamma_l default to the run's lr (the code's default is 0.1 for both).
- C' = 0.78, lambda = 0.55: the paper's Fig 2 MLP-1 values (C' and lambda cannot be derived and
  are tuned per run; the code defaults 0.5 / 0.3 are used nowhere). CLIP off by default (the MLP
  runs use no clipping).
- Models: `psp_mlp` is the paper's MLP (Sec. 5.4: Linear(D->10)-tanh-Linear(10->D)-tanh-
  Linear(D->10)-tanh, D = input size, tanh on the logits as in the code) without the code's
  residual connections. The split takes the model's first `shared_layers` layers
  (the input-side extractor, Sec. 5.4: an MLP's or CNN's first parameterised modules; a ResNet's
  convolutional blocks, `FlatModel.layers`, so PartPSP-1 shares the stem with stage 1) or
  explicit `shared_prefixes`.
- Node i's initial models are identical (privbench's public shared initialisation, which dropping
  the S^(0) term assumes).
- Evaluation: privbench's engine evaluates every node's (y_i, l_i) and the average model; the paper
  evaluates (s_bar, l_i) (Sec. 5.4), which equals the engine's mean per-node accuracy right after a
  sync round. The engine's "average model" also averages the local parts, which PartPSP never
  does: read `mean_node_accuracy` for PartPSP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from defenses._dpps_mechanism import (
    SENSITIVITY_BASIS,
    SENSITIVITY_MODES,
    clip_bound,
    laplace,
    noise_feedback,
    resolved_mode,
    sensitivity_step,
)
from defenses._push_sum_schedule import is_sync, mixing_into, rates, real_sensitivity
from defenses.dpps.plan import plan_dpps
from privbench.accounting import (
    EpsilonReport,
    LaplaceEvent,
    PrivacyLedger,
    PrivacyPlan,
    account,
    dpps_round_epsilon,
)
from privbench.engine.grads import batch_grads, clip_l1
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, push_sum
from privbench.engine.privacy import (
    BOTH_MODES,
    Calibration,
    ClipBound,
    PlanFunction,
    PlanRequest,
    PlanSettings,
    formula_plan,
    formula_settings,
)
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError, NotApplicable
from privbench.models import FlatModel
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import observed_mix, observed_row
from privbench.topology import column_stochastic, complete

# --------------------------------------------------------------- model and topology (Sec. 2.1, 5.4)


# -------------------------------------------------------------- the mechanism (Algorithm 1, Eq. 22)




# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class DPPSConfig:
    """DPPS / PartPSP hyper-parameters (defaults: the paper's, else the code's, else
    this implementation's choice; see the module docstring).

    Attributes:
        shared_layers: number of the model's input-side layers shared (`FlatModel.layers`;
            -1: all = SGP-DP).
        shared_prefixes: explicit parameter-name prefixes of the shared part (overrides
            shared_layers when non-empty).
        b: the paper's privacy knob (NOT epsilon); None derives it from the run's epsilon.
        calibrate_with: with b unset, "calibrated" (run epsilon composed over the rounds) or
            "paper" (run epsilon read as the per-round Theorem 1 budget).
        composition: pure-epsilon composition for the calibrated reading, "basic" (default),
            "advanced" or "laplace_pld" (tight: dp-accounting's Laplace PLD, about 10x less
            noise than basic for the same (ε, δ) claim over hundreds of rounds).
        gamma_n: noise rate multiplying the raw Laplace draw.
        gamma_s: shared step size (None: the run's lr).
        gamma_l: local step size (None: the run's lr).
        clip: L1 clipping threshold CLIP of the shared gradient (None: off).
        c_prime: C' of Eq. 22.
        lam: lambda of Eq. 22.
        sensitivity_mode: "auto" (Eq. 22 at the paper's b, the clip bound when calibrated),
            "estimated" (Eq. 22), "clipped" (S = 2 gamma_s CLIP), "oracle" (real
            sensitivity), "none" (no noise).
        s0_term: add the paper's 2C'||s_i^(0)||_1 at t = 0 (the code drops it).
        sync: periodic complete-graph synchronisation with estimator reset (code).
        sync_period: SP (code default 4; 5 for Fig 2 / Table 3).
        decay_rounds: rounds at which gamma_s, gamma_l, gamma_n are multiplied by decay_factor.
        decay_factor: the decay (code: 0.1 at epochs 5 and 10).
        require_doubly_stochastic: refuse a topology whose push-sum matrix is not doubly
            stochastic (default; false runs it, with `sensitivity_check.doubly_stochastic`
            false and the realized ε saying what it cost).
        diagnostics: record the per-round sensitivity trace (real vs estimate).
    """

    shared_layers: int = -1
    shared_prefixes: tuple[str, ...] = ()
    b: float | None = None
    calibrate_with: str = "calibrated"
    composition: str = "basic"
    gamma_n: float = 1e-3
    gamma_s: float | None = None
    gamma_l: float | None = None
    clip: float | None = None
    c_prime: float = 0.78
    lam: float = 0.55
    sensitivity_mode: str = "auto"
    s0_term: bool = False
    sync: bool = True
    sync_period: int = 4
    decay_rounds: tuple[int, ...] = ()
    decay_factor: float = 0.1
    require_doubly_stochastic: bool = True
    diagnostics: bool = True


def shared_mask(fm: FlatModel, cfg: DPPSConfig) -> Tensor:
    """(d,) bool mask of the shared coordinates (Sec. 5.4: the input-side layers)."""
    if cfg.shared_prefixes:
        mask = fm.slice_of(cfg.shared_prefixes)
    else:
        layers = fm.layers
        k = len(layers) if cfg.shared_layers < 0 else cfg.shared_layers
        mask = fm.slice_of([p for layer in layers[:k] for p in layer])
    if not mask.any():
        raise ConfigError("the shared part is empty: set shared_layers >= 1 (or -1 for all) or "
                          "shared_prefixes to parameter-name prefixes of the model")
    return mask


def _check(cfg: DPPSConfig) -> None:
    checks = [
        (cfg.sensitivity_mode in SENSITIVITY_MODES,
         f"sensitivity_mode must be one of {', '.join(SENSITIVITY_MODES)}"),
        (cfg.calibrate_with in ("calibrated", "paper"),
         "calibrate_with must be calibrated or paper"),
        (cfg.composition in ("basic", "advanced", "laplace_pld"),
         "composition must be basic, advanced or laplace_pld"),
        (cfg.b is None or cfg.b > 0, "b must be > 0"),
        (cfg.gamma_n > 0, "gamma_n must be > 0"),
        (cfg.clip is None or cfg.clip > 0, "clip must be > 0"),
        (cfg.c_prime > 0 and 0 < cfg.lam < 1, "need C' > 0 and lambda in (0, 1)"),
        (cfg.sync_period >= 1, "sync_period must be >= 1"),
        (0 < cfg.decay_factor <= 1, "decay_factor must be in (0, 1]"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"defense config: {message}")


# ---------------------------------------------------------------- the trainer


@DEFENSES.register("dpps")
class DPPS(Trainer):
    """DPPS on SGD with a local/shared split (Algorithm 2); key `dpps` shares all = SGP-DP."""

    Config = DPPSConfig
    plan_function: ClassVar[PlanFunction] = staticmethod(plan_dpps)  # its accounting
    kinds = (
        MessageKind("shared", covered=True,
                    description="P_ji * s_i,noise^{t+1/2} = P_ji (s_i - gamma_s g_i,s + "
                                "gamma_n n_i), the noisy shared-parameter numerator (Eq. 8, 9b)"),
        MessageKind("weight", covered=False, data_dependent=False,
                    description="P_ji * a_i, push-sum weight (Eq. 9a)"),
        MessageKind("sensitivity", covered=False, data_dependent=True,
                    description="S_i^(t) of Eq. 22, broadcast to every node; reveals "
                                "gamma_s ||g_i,s||_1 (S_i^(t-1) is known and the noise term "
                                "concentrates)"),
    )
    mixing = "column"
    private = True
    default_topology = "exponential"  # doubly stochastic: Lemma 2's sensitivity bound applies

    @classmethod
    def structure(cls, fm: FlatModel, cfg: DPPSConfig) -> dict[str, Any]:
        """The model's structure and the shared coordinates d_s (what is sent and noised)."""
        return {**super().structure(fm, cfg), "shared": int(shared_mask(fm, cfg).sum())}

    @classmethod
    def calibration(cls, cfg: DPPSConfig) -> Calibration:
        """b from the run's epsilon composed over the rounds (`cfg.composition`) or read as the
        per-round Theorem 1 budget (`cfg.calibrate_with`)."""
        return Calibration(BOTH_MODES, cfg.calibrate_with, cfg.composition)

    @classmethod
    def plan_settings(cls, cfg: DPPSConfig) -> PlanSettings:
        """The plan function's settings (gamma_n)."""
        return formula_settings(cls.plan_function)

    @classmethod
    def privacy_plan(cls, cfg: DPPSConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """The plan function's plan for the request (with b unset: the knob it derives)."""
        return formula_plan(cls.plan_function, req, mode)

    @classmethod
    def clip_bound(cls, cfg: DPPSConfig) -> ClipBound:
        """None: the L1 clip CLIP (Eq. 24) bounds a node's shared gradient, not one sample's."""
        return ClipBound(None, "the Laplace noise is scaled to a node's L1 sensitivity S(t) "
                               "(node-level); CLIP bounds a node's shared gradient, not a sample's")

    def __init__(self, cfg: DPPSConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        _check(cfg)
        n, dev = ctx.n, ctx.device
        self.mode, self.clip = resolved_mode(cfg), clip_bound(cfg)
        # only Eq. 22's estimate broadcasts S_i (per-instance kinds: what results.json reports)
        self.kinds = tuple(k for k in type(self).kinds
                           if k.name != "sensitivity" or self.mode == "estimated")
        self.sh = shared_mask(ctx.fm, cfg).to(dev)  # (d,) bool
        self.loc = ~self.sh
        self.has_local = bool(self.loc.any())
        x0 = self.init_params()  # (n, d), identical rows
        self.s = x0[:, self.sh].clone()  # (n, d_s) push-sum numerators
        self.l = x0[:, self.loc].clone()  # (n, d_l) local parameters (never sent)
        self.a = torch.ones(n, device=dev)  # (n,) push-sum weights
        self.S_i = torch.zeros(n, device=dev)  # (n,) Eq. 22 state
        self.noise_norm = torch.zeros(n, device=dev)  # (n,) ||n_i^(t-1)||_1 of the raw draw
        self.s0_norm = self.s.abs().sum(dim=1)  # (n,)
        self.mixer = Mixer(ctx.topology, self.mixing, dev)
        self.sync_mixer = Mixer(complete(n, torch.Generator()), self.mixing, dev)
        self.all_adj = ~torch.eye(n, dtype=torch.bool, device=dev)  # (n, n) broadcast to all
        self.doubly = all(
            bool(torch.allclose(column_stochastic(ctx.topology.adjacency(p)).sum(dim=1),
                                torch.ones(n), atol=1e-6))
            for p in range(ctx.topology.graphs.shape[0]))
        if cfg.require_doubly_stochastic and not self.doubly:
            raise ConfigError(f"topology {ctx.topology.name!r} gives a push-sum matrix that is not "
                              "doubly stochastic, so the sensitivity bound (Lemma 2) does not "
                              "hold; use exponential or circulant (or set "
                              "defense.require_doubly_stochastic=false to run it anyway)")
        self.eps_rounds, self.b_base = self._budget()
        self.rounds_done = 0
        self.trace: dict[str, list[Tensor]] = {k: [] for k in (
            "S_i", "S_est", "S_real", "S_used", "scale", "eps_norm", "noise_norm")}

    # -- accounting -----------------------------------------------------------------------------

    def _budget(self) -> tuple[tuple[float, ...] | None, float | None]:
        """(the plan's per-round epsilons (T,) or None, fixed b or None)."""
        if self.mode == "none":
            return None, None
        if self.cfg.b is not None:
            return None, float(self.cfg.b)
        run = self.ctx.run
        plan = self.plan_function(run.epsilon, run.delta, run.rounds, 1.0, self.cfg.composition,
                                  gamma_n=self.cfg.gamma_n, calibrate_with=self.cfg.calibrate_with)
        return plan.schedule, None  # what the plan's reports compose, round by round

    def b_at(self, t: int) -> float:
        """The knob b of round t: fixed, or epsilon_round * gamma_n(t) when calibrated."""
        gn = rates(self.cfg, self.ctx.run.lr, t)[2]
        if self.b_base is not None:
            return self.b_base
        return self.eps_rounds[t] * gn  # type: ignore[index]

    def round_epsilons(self) -> list[float]:
        """Per-round Theorem 1 epsilon b(t) / gamma_n(t) for the rounds run (S >= truth assumed)."""
        return [dpps_round_epsilon(self.b_at(t), rates(self.cfg, self.ctx.run.lr, t)[2])
                for t in range(self.rounds_done)]

    # -- one round --------------------------------------------------------------------------------

    def _compose(self, y: Tensor, local: Tensor) -> Tensor:
        """(n, d) full models from shared y (n, d_s) and local parameters (n, d_l)."""
        p = torch.empty(y.shape[0], self.ctx.fm.d, device=y.device, dtype=y.dtype)
        p[:, self.sh] = y
        p[:, self.loc] = local
        return p

    def models(self) -> Tensor:
        """(n, d) the nodes' models (y_i = s_i / a_i, l_i)."""
        return self._compose(self.s / self.a[:, None], self.l)

    def round(self, t: int) -> None:
        """P1-P5 (local step, clipped shared gradient), then DPPS D1-D6."""
        cfg, ctx = self.cfg, self.ctx
        gs, gl, gn = rates(cfg, ctx.run.lr, t)
        x, yb, mask = self.sample_batch(t)
        y = self.s / self.a[:, None]  # (n, d_s)
        if self.has_local:  # P2, Eq. 23
            g = batch_grads(ctx.fm, self._compose(y, self.l), x, yb, mask)  # (n, d)
            self.l = self.l - gl * g[:, self.loc]
        h = batch_grads(ctx.fm, self._compose(y, self.l), x, yb, mask)[:, self.sh]  # (n, d_s), P3
        if self.clip is not None:
            h, _ = clip_l1(h, self.clip)  # P4, Eq. 24
        eps = -gs * h  # (n, d_s), Eq. 25
        s_half = self.s + eps  # D1, Eq. 7
        eps_norm = eps.abs().sum(dim=1)  # (n,)
        rows = ctx.comm.gather_rows  # oracle view of per-node values (identity in one process)
        s_used, s_real = self._sensitivity(t, s_half, eps, eps_norm, gs, gn)
        s_noisy, scale = self.perturb(s_half, s_used, t, gn)  # D3, Eq. 8
        self.s, self.a = push_sum(ctx.bus, self.mixer_at(t), t, s_noisy, self.a, "shared",
                                  "weight")  # D4-D5
        self.rounds_done = t + 1
        if cfg.diagnostics:
            self.record(rows(self.S_i), s_real, s_used, scale, rows(eps_norm))

    def _sensitivity(self, t: int, s_half: Tensor, eps: Tensor, eps_norm: Tensor, gs: float,
                     gn: float) -> tuple[Tensor | None, Tensor | None]:
        """(the S the round's noise is drawn for, or None: no noise; the real sensitivity, or
        None without diagnostics). s_half, eps (n, d_s); eps_norm (n,)."""
        cfg, ctx, rows = self.cfg, self.ctx, self.ctx.comm.gather_rows
        if self.mode == "clipped":  # a data-independent bound: nothing broadcast, no feedback
            s_used = torch.tensor(2 * gs * self.clip, device=ctx.device)  # type: ignore[operator]
            self.S_i = torch.full_like(self.S_i, float(s_used))
            return s_used, real_sensitivity(rows(eps)) if cfg.diagnostics else None
        reset = t == 0 or (cfg.sync and t % cfg.sync_period == 0)
        self.S_i = sensitivity_step(self.S_i, eps_norm, self.noise_norm, reset, cfg.c_prime,
                                    cfg.lam, gn, self.s0_norm if cfg.s0_term and t == 0 else None)
        s_real = (real_sensitivity(rows(s_half)) if cfg.diagnostics or self.mode == "oracle"
                  else None)
        if self.mode == "estimated":  # D2: broadcast S_i, S = max_i S_i
            s_recv = ctx.bus.broadcast(t, "sensitivity", self.S_i[:, None], self.all_adj)[:, 0]
            # node i: max(S_i, max_j S_j) (s_recv[i] is its own S_i), equal for all i
            return (torch.maximum(s_recv, (s_recv[None, :] * self.all_adj).amax(dim=1)).amax(),
                    s_real)
        return (s_real if self.mode == "oracle" else None), s_real

    def mixer_at(self, t: int) -> Mixer:
        """Round t's mixer: the complete graph in a sync round, else the topology's
        (the trainer's side of `mixing_into`)."""
        return self.sync_mixer if is_sync(self.cfg, t) else self.mixer

    def perturb(self, v: Tensor, s_used: Tensor | None, t: int,
                gn: float) -> tuple[Tensor, Tensor]:
        """v + gamma_n Lap(0, S / b(t)) per coordinate (Eq. 8), and the per-coordinate scale.

        Args:
            v: (n, d_s) the vectors about to be pushed.
            s_used: the sensitivity S the noise is drawn for, or None (no noise).

        Returns:
            (n, d_s) the noisy vectors and the scalar scale gamma_n S / b (0 without noise).
        """
        if s_used is None:
            return v, torch.zeros((), device=self.ctx.device)
        b = self.b_at(t)
        raw = laplace(tuple(v.shape), s_used / b, self.ctx.streams.get("noise"), self.ctx.device)
        self.noise_norm = raw.abs().sum(dim=1)  # (n,) of the raw draw, for Eq. 22 and the trace
        return v + gn * raw, gn * s_used / b

    def record(self, s_i: Tensor, s_real: Tensor, s_used: Tensor | None, scale: Tensor,
               eps_norm: Tensor) -> None:
        """Append one round's diagnostics: s_i and eps_norm (n,), the rest scalars."""
        nan = torch.full((), float("nan"), device=self.ctx.device)
        for k, v in (("S_i", s_i), ("S_est", s_i.amax()), ("S_real", s_real),
                     ("S_used", s_used if s_used is not None else nan), ("scale", scale),
                     ("eps_norm", eps_norm), ("noise_norm", self.ctx.comm.gather_rows(
                         self.noise_norm))):
            self.trace[k].append(v.detach())

    # -- reporting --------------------------------------------------------------------------------

    def sensitivity_trace(self) -> dict[str, Any]:
        """Per-round diagnostics (the paper's privacy validation): lists over rounds.

        Keys: S_i (per node, Eq. 22), S_est (max_i S_i), S_real (true L1 sensitivity of the
        clean half-step vectors), S_used (the S of the noise), scale (per-coordinate Laplace
        scale gamma_n S / b), eps_norm and noise_norm (per node), sync (bool per round).
        """
        out: dict[str, Any] = {k: torch.stack(v).cpu().tolist() if v else []
                               for k, v in self.trace.items()}
        out["sync"] = [is_sync(self.cfg, t) for t in range(len(out["S_est"]))]
        return out

    def sensitivity_check(self) -> dict[str, Any]:
        """Summary: in how many rounds the estimate max_i S_i stayed >= the real sensitivity."""
        if not self.cfg.diagnostics or not self.trace["S_est"]:
            return {"recorded": False}
        est = torch.stack(self.trace["S_est"]).cpu().double()
        real = torch.stack(self.trace["S_real"]).cpu().double()
        finite = torch.isfinite(est) & torch.isfinite(real)  # (T,)
        below = torch.nonzero(finite & (est < real)).flatten().tolist()
        bad = torch.nonzero(~finite).flatten().tolist()
        costly = finite & (real > 0)  # rounds whose ratio is defined
        ratio = est[costly] / real[costly]
        zero_est = torch.nonzero(costly & (est <= 0)).flatten().tolist()
        reset_void = self.cfg.c_prime < 1 and self.mode == "estimated"
        return {"recorded": True, "rounds": len(est), "estimate_below_real": len(below),
                "violation_rounds": below[:50],
                "min_ratio_est_over_real": float(ratio.min()) if len(ratio) else None,
                "ratio_over": "finite rounds with S_real > 0",
                "non_finite_rounds": bad[:50], "non_finite_count": len(bad),
                "estimate_zero_rounds": zero_est[:50],
                "max_real": float(real[finite].max()) if bool(finite.any()) else None,
                "max_estimate": float(est[finite].max()) if bool(finite.any()) else None,
                "first_non_finite_round": bad[0] if bad else None,
                "c_prime": self.cfg.c_prime, "c_prime_voids_reset_bound": reset_void,
                "doubly_stochastic": self.doubly, "sensitivity_mode": self.mode}

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: paper reading (Theorem 1, per round), calibrated (composed), realized."""
        cfg, run = self.cfg, self.ctx.run
        uncovered = ("sensitivity",) if self.mode == "estimated" else ()
        check = self.sensitivity_check()
        rounds = self.rounds_done
        if self.mode == "none" or rounds == 0:
            why = "no noise (sensitivity_mode=none)" if rounds else "no round run yet"
            reps = [EpsilonReport(math.inf, 0.0, "none", m, "node-level", uncovered, note=why)
                    for m in ("paper", "calibrated")]
            return [{"node": i, **r.to_dict()} for i in range(self.ctx.n) for r in reps]
        eps_r = self.round_epsilons()
        b0 = self.b_at(0)
        knob = (f"the paper's b = {b0:.6g} is a noise knob, NOT epsilon: Laplace scale per "
                f"coordinate = gamma_n S / b, per-round epsilon = b / gamma_n = {eps_r[0]:.6g}")
        if max(eps_r) != eps_r[0]:
            knob += f" at t = 0, up to {max(eps_r):.6g} after the gamma_n decays"
        paper = EpsilonReport(max(eps_r), 0.0, "closed-form (Theorem 1)", "paper", "node-level",
                              uncovered,
                              note=f"largest per-round budget, not composed over T; {knob}")
        events = [LaplaceEvent(e, 1) for e in eps_r]
        ledger = PrivacyLedger(unit="node-level", uncovered=uncovered).extend(events)
        holds = (f"S(t) = 2 gamma_s CLIP bounds one node's update (CLIP = {self.clip:g}, "
                 "Eq. 24-25; its state is post-processing of released messages)"
                 if self.mode == "clipped" else
                 "holds only if S(t) >= true L1 sensitivity every round")
        cal = account(ledger, run.delta, mode="calibrated", pure_composition=cfg.composition,
                      note=f"{cfg.composition} composition over {rounds} rounds; nodes are "
                           f"the records; {holds}; {knob}")
        readings = [(paper, "assumed"), (cal, "assumed")]
        if check.get("recorded") and self.mode != "clipped":  # a clip bound holds as claimed
            readings.append((self._realized(uncovered), "realized"))
        extra = {"b": b0, "gamma_n": cfg.gamma_n, "epsilon_round": eps_r[0],
                 "b_is_not_epsilon": True, "sensitivity_check": check,
                 "sensitivity_basis": SENSITIVITY_BASIS[self.mode]}
        if self.mode != "clipped":  # S(t) follows the states, so the noise feeds back into it
            extra["noise_feedback"] = noise_feedback(int(self.sh.sum()), eps_r[0],
                                                     self.mixer.matrix(0).cpu())
        return [{"node": i, **r.to_dict(), **extra, "reading": reading}
                for i in range(self.ctx.n) for r, reading in readings]

    def _realized(self, uncovered: tuple[str, ...]) -> EpsilonReport:
        """Composition of S_real(t) / scale(t) over the rounds run (rounds with S_real = 0 release
        nothing node-specific and cost 0; S_real > 0 with zero or non-finite noise costs inf)."""
        cfg, run = self.cfg, self.ctx.run
        real = torch.stack(self.trace["S_real"]).cpu().double()
        scale = torch.stack(self.trace["scale"]).cpu().double()
        note = ("realized: composition of S_real(t) / scale(t), the epsilon w.r.t. the TRUE L1 "
                "sensitivity of the noise actually drawn")
        costly = real > 0
        ratio = real[costly] / scale[costly]
        if not bool(torch.isfinite(ratio).all()) or not bool(torch.isfinite(real).all()):
            return EpsilonReport(math.inf, 0.0, cfg.composition, "calibrated", "node-level",
                                 uncovered, note=note + " (zero or non-finite noise in some round)")
        if len(ratio) == 0:
            return EpsilonReport(0.0, 0.0, cfg.composition, "calibrated", "node-level", uncovered,
                                 note=note + " (S_real = 0 in every round)")
        led = PrivacyLedger(unit="node-level", uncovered=uncovered).extend(
            [LaplaceEvent(float(e), 1) for e in ratio])
        return account(led, run.delta, mode="calibrated", pure_composition=cfg.composition,
                       note=note + f"; {int((~costly).sum())} rounds with S_real = 0 cost 0")

    # -- attacker side ----------------------------------------------------------------------------

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """Shared-coordinate gradient (s_i^t - s_i,noise^{t+1/2}) / gamma_s at y_i^t ("partial").

        s_i^t is rebuilt from the round t-1 `shared` / `weight` messages into the victim (the
        complete graph after a sync round); the victim's local parameters are never sent, so the
        view's local coordinates hold the public initialisation and the view is exact only when
        nothing is local (SGP-DP). The estimate includes the Laplace noise (gamma_n / gamma_s) n_i.

        Raises:
            NotApplicable: when the messages needed are not observed, or x0 is unknown.
        """
        if obs.x0 is None:
            raise NotApplicable("the shared public initialisation is unknown to this threat model")
        cfg: DPPSConfig = obs.defense_cfg
        mask = shared_mask(obs.fm, cfg).to(obs.x0.device)
        exact = bool(mask.all())
        views = []
        for t in rounds:
            s_pre, a_pre = _pre_step(obs, victim, t, cfg, mask)
            msg = observed_row(obs, t, "shared", victim)  # (d,) the victim's shared message
            gs = rates(cfg, obs.run.lr, t)[0]
            grad = torch.zeros_like(obs.x0)
            grad[mask] = (s_pre - msg.to(s_pre)) / gs
            params = obs.x0.clone()
            params[mask] = s_pre / a_pre
            views.append(GradientView(
                victim, t, params, grad, "partial", mask, obs.run.batch_size,
                "(s_i^t - s_i,noise^{t+1/2}) / gamma_s on the shared coordinates"
                + ("" if exact else "; local coordinates of params = public init (unknown)"),
                exact))
        return views


def _pre_step(obs: Observation, victim: int, t: int, cfg: DPPSConfig,
              mask: Tensor) -> tuple[Tensor, Tensor]:
    """(s_i^t (d_s,), a_i^t) of the victim from round t-1's messages into it (or x0 at t = 0)."""
    if t == 0:
        return obs.x0[mask], torch.ones((), dtype=obs.x0.dtype)  # type: ignore[index]
    return observed_mix(obs, victim, t - 1, *mixing_into(obs, cfg, t - 1, victim),
                        "shared", "weight")
