"""MUFFLIATO: a local DP-SGD step, then accelerated gossip of the noisy models (DPDL's baseline).

Cyffers, Even, Bellet, Massoulié, "Muffliato: Peer-to-Peer Privacy Amplification for
Decentralized Optimization and Averaging", NeurIPS 2022, as the DPDL paper describes its baseline
(Yuan et al., arXiv 2606.04399, Sec. VI-A, ref. [27]: it "adds Gaussian noises to the updated
model parameters without clipping, followed by multi-rounds gossip averaging based on the
spectral gap"; Chebyshev-accelerated gossip is Muffliato's own). One engine round is one
communication step; a gradient step opens every block of K rounds:

    round t = sK (release):  y_i^0 = x_i - eta (1/B) (sum_b clip_C(grad l(x_i; xi_{i,b})) + z_i^s),
                             z_i^s ~ N(0, sigma^2 C^2 I_d);  send y^0;  y^1 = W y^0
    round t = sK + k, 1 <= k < K (gossip):  send y^k;  y^{k+1} = omega W y^k + (1 - omega) y^{k-1}
    x <- y^K (the model the next block's gradient is taken at)

Noise on the updated parameters with std eta sigma C / B is the same as noise on the clipped
gradient sum, which is how it is drawn here. omega = 2 / (1 + sqrt(1 - mu^2)) is the Chebyshev
(heavy-ball) constant of W, mu its second largest eigenvalue modulus (Muffliato's gamma for its
lazy walk, whose mu is 1 - lambda_2 / 2), and K the accelerated mixing time ceil(1 / sqrt(1 - mu)).
With several graph periods, mu is their largest; on disjoint copies of a graph (LiRA's reference
runs), that of one copy.

Privacy: node i's only data-dependent release of block s is y_i^0, a (Poisson-)subsampled
Gaussian of multiplier sigma at rate q_i = B / |D_i|; every later message is post-processing of
the noisy releases, so a run of T rounds is ceil(T / K) releases, calibrated and accounted exactly
as DP-DPSGD's (`defenses/dp_dpsgd.py`, RDP over integer orders, per-sample level, sigma the
smallest with max_i eps_i <= target). Muffliato's own network-DP amplification (a distant node
sees a value averaged with others' noise) is not claimed: the reported epsilon is the local one,
the guarantee against any observer of node i's messages.

Choices of this implementation (DPDL describes the baseline in one line):
* `clip` C = 1 per sample. The DPDL paper runs MUFFLIATO "without clipping", which bounds no
  sensitivity (no finite epsilon); the clip is the same as DP-DPSGD's so the two compare at
  equal budgets.
* `gossip_steps` K: 0 (default) = ceil(1 / sqrt(1 - mu)) from the spectral gap (3 on the
  CGA two-hub graph with N = 10); `acceleration` "chebyshev" (default) or "none" (K plain
  gossip steps y^{k+1} = W y^k).
* Weights and sampling as DP-DPSGD's (`weights` "cga": CGA's on two_hub, else
  Metropolis-Hastings; `sampling` "poisson" or "fixed").
A table that compares MUFFLIATO with a method taking one gradient step per round gives it K
times the rounds (the same number of gradient steps and releases).
"""

from __future__ import annotations

import math
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
from privbench.engine.planning import config_settings, configured, graph_note, request_graph
from privbench.engine.privacy import Calibration, ClipBound, PlanRequest, PlanSettings
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import observed_row


@dataclass(frozen=True)
class MuffliatoConfig:
    """MUFFLIATO hyper-parameters beyond the run's lr, batch size, epsilon and delta.

    Attributes:
        clip: per-sample L2 clipping threshold C (ours: 1.0, DP-DPSGD's).
        gossip_steps: communication rounds per gradient step K; 0 = ceil(1 / sqrt(1 - mu)).
        acceleration: "chebyshev" (Muffliato's) or "none" (plain gossip steps).
        sigma: noise multiplier; None calibrates it to the run's (epsilon, delta); 0 = no noise.
        sigma_rule: "max" (one sigma, max_i eps_i <= target) or "per_node" (sigma_i per node).
        accountant: "rdp" (integer orders 2..256, as DP-DPSGD) or "pld".
        sampling: "poisson" (default) or "fixed" (accounted without replacement).
        weights: "cga" or "metropolis" (as DP-DPSGD; "card", a deprecated name of "cga", is
            accepted until the next release).
    """

    clip: float = 1.0
    gossip_steps: int = 0
    acceleration: str = "chebyshev"
    sigma: float | None = None
    sigma_rule: str = "max"
    accountant: str = "rdp"
    sampling: str = "poisson"
    weights: str = "cga"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", canonical_weights(self.weights))
        check_choices("muffliato", self,
                      {**GAUSSIAN_CHOICES, "acceleration": ("chebyshev", "none")})
        check_gaussian_settings("muffliato", self.clip, self.sigma)
        if isinstance(self.gossip_steps, bool) or not isinstance(self.gossip_steps, int) \
                or self.gossip_steps < 0:
            raise ConfigError(f"muffliato gossip_steps must be an integer >= 0 (0: from the "
                              f"spectral gap), got {self.gossip_steps!r}")


def second_eigenvalue(ws: list[Tensor]) -> float:
    """mu: the largest, over the graph periods, modulus of the symmetric W's (n, n) eigenvalues
    other than its 1s (one per connected component: LiRA's reference runs train disjoint copies
    of the graph at once, and each copy mixes at its own rate).

    Raises:
        ConfigError: W has an eigenvalue -1 (a periodic walk, e.g. a bipartite graph without
            self-weights), which no gossip averages.
    """
    mus = []
    for w in ws:
        ev = torch.linalg.eigvalsh(w.double().cpu())  # (n,) ascending
        if float(ev[0]) <= -1.0 + 1e-6:
            raise ConfigError("muffliato needs a gossip matrix without an eigenvalue -1 (a "
                              "periodic walk never averages); use weights with self-loops")
        ones = int((ev >= 1.0 - 1e-6).sum())  # connected components
        rest = ev[: len(ev) - ones]
        mus.append(float(rest.abs().max()) if len(rest) else 0.0)
    return max(mus)


def chebyshev_omega(mu: float) -> float:
    """The Chebyshev / heavy-ball constant 2 / (1 + sqrt(1 - mu^2)) (1 on a complete graph)."""
    return 2.0 / (1.0 + math.sqrt(max(0.0, 1.0 - mu * mu)))


def mixing_steps(mu: float) -> int:
    """K = ceil(1 / sqrt(1 - mu)), the accelerated mixing time (1 when mu = 0)."""
    return max(1, math.ceil(1.0 / math.sqrt(1.0 - mu) - 1e-9))


def gossip_constants(cfg: MuffliatoConfig, ws: list[Tensor]) -> tuple[float, int, float]:
    """(mu, K, omega) of the gossip matrices `ws` under `cfg` (K from the gap unless fixed;
    omega 1 without acceleration): what the trainer runs and an observer recomputes."""
    mu = second_eigenvalue(ws)
    steps = cfg.gossip_steps or mixing_steps(mu)
    return mu, steps, chebyshev_omega(mu) if cfg.acceleration == "chebyshev" else 1.0


@DEFENSES.register("muffliato")
class Muffliato(Trainer):
    """Local DP-SGD step, then K rounds of Chebyshev-accelerated gossip (DPDL's baseline)."""

    Config = MuffliatoConfig
    kinds = (
        MessageKind("model", covered=True, description="y_i^0 = x_i - eta (clipped gradient "
                    "sum + Gaussian noise) / B, the block's noisy release"),
        MessageKind("gossip", covered=True, description="y_i^k (1 <= k < K), the accelerated "
                    "gossip iterate: post-processing of the noisy releases"),
    )
    mixing = "doubly"
    private = True
    view_lookback = 2  # x_i^t = omega sum_j w_ij y_j^{t-1} + (1 - omega) y_i^{t-2}

    @classmethod
    def calibration(cls, cfg: MuffliatoConfig) -> Calibration:
        """sigma set by `cfg.accountant` only (the paper states no formula of its own)."""
        return Calibration(("calibrated",), "calibrated", cfg.accountant)

    @classmethod
    def plan_settings(cls, cfg: MuffliatoConfig) -> PlanSettings:
        """The config fields a request may set (sampling, gossip_steps, weights)."""
        return config_settings(cfg, ("sampling", "gossip_steps", "weights"))

    @classmethod
    def privacy_plan(cls, cfg: MuffliatoConfig, req: PlanRequest, mode: str) -> PrivacyPlan:
        """ceil(T / K) releases, K the accelerated mixing time of the request's graph."""
        cfg = configured(cfg, req)
        run, topo = request_graph(req, cls)
        mu, steps, omega = gossip_constants(
            cfg, [g[0] for g in graph_periods(topo, cfg.weights, torch.device("cpu"))])
        releases = math.ceil(req.rounds / steps)
        sigma, reports = gaussian_release_plan(
            req, cfg, releases, f"one subsampled Gaussian per gradient step, every K = {steps} "
            f"rounds (omega = {omega:.4f}); local DP, no network amplification claimed")
        return PrivacyPlan(
            "muffliato", {"sigma": sigma, "releases": releases, "gossip_steps": steps}, reports,
            mode, req.epsilon, req.delta, req.rounds, req.sample_rate, req.accountant,
            (graph_note(run, topo, f"weights {cfg.weights}; mu = {mu:.4f}, K = {steps}: "
                        f"{releases} releases in {req.rounds} rounds"),))

    @classmethod
    def clip_bound(cls, cfg: MuffliatoConfig) -> ClipBound:
        """The per-sample L2 clip bound C."""
        return ClipBound.of(cfg.clip)

    def __init__(self, cfg: MuffliatoConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        require_undirected("muffliato", ctx.topology)
        self.graphs = graph_periods(ctx.topology, cfg.weights, ctx.device)
        self.mu, self.steps, self.omega = gossip_constants(cfg, [g[0] for g in self.graphs])
        self.releases = math.ceil(ctx.run.rounds / self.steps)  # gradient steps in the run
        self.counts, self.rates = node_rates(ctx)  # (n,), (n,)
        self.sigma = node_sigmas(cfg, ctx, self.rates, self.releases)  # (n,)
        self.x = self.init_params()  # (n, d): the current iterate y^k
        self.prev = self.x.clone()  # (n, d): y^{k-1}
        self.taps: dict[str, Tensor] = {}
        self._reports: list[dict[str, Any]] | None = None

    def models(self) -> Tensor:
        """(n, d) current models (the latest gossip iterate)."""
        return self.x

    def samples_in(self, t: int) -> bool:
        """Only the release rounds (t mod K = 0) draw a batch."""
        return t % self.steps == 0

    def round(self, t: int) -> None:
        """A release round (t mod K = 0): noisy local step, send, first gossip step; otherwise
        one accelerated gossip step."""
        ctx = self.ctx
        w, adj, _, _ = self.graphs[t % len(self.graphs)]
        if t % self.steps == 0:
            half = self.x - ctx.run.lr * self._noisy_gradient(t)  # (n, d) y^0
            self.prev, self.x = half, w @ ctx.bus.broadcast(t, "model", half, adj)
            return
        sent = ctx.bus.broadcast(t, "gossip", self.x, adj)  # (n, d) y^k
        new = self.omega * (w @ sent) + (1.0 - self.omega) * self.prev
        self.prev, self.x = self.x, new

    def _noisy_gradient(self, t: int) -> Tensor:
        """(n, d) (sum_b clip_C(g_b) + z) / B at the current models, as DP-DPSGD draws it."""
        self.taps = noisy_clipped_mean(self.ctx, self.x, t, self.cfg, self.rates, self.counts,
                                       self.sigma)
        return self.taps["noisy"]

    def release_noise(self) -> np.ndarray:
        """(T, n) the noise multiplier of every node's release in every round (0 in the
        gossip rounds, which release nothing new)."""
        out = np.zeros((self.ctx.run.rounds, self.ctx.n))
        out[::self.steps] = self.sigma.double().cpu().numpy()
        return out

    def privacy(self) -> list[dict[str, Any]]:
        """Per node: RDP (paper) and the configured accountant (calibrated) over the run's
        ceil(T / K) releases."""
        if self._reports is None:
            self._reports = gaussian_node_reports(
                self.rates.tolist(), self.sigma.tolist(), self.ctx.run.delta, self.releases,
                self.cfg.accountant, self.cfg.sampling,
                f"one subsampled Gaussian per gradient step, every K = {self.steps} rounds "
                f"(omega = {self.omega:.4f}); local DP, no network amplification claimed")
        return self._reports

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """g_i^t = (x_i^t - y_i^0) / lr in a release round t, with x_i^t rebuilt from round
        t - 1's messages and the victim's own of round t - 2 (x0 at t = 0).

        Raises:
            NotApplicable: for a gossip round (no release), or a message not observed.
        """
        cfg, lr = obs.defense_cfg, obs.run.lr
        topo = obs.topology
        ws = [mixing_matrix(topo, p, cfg.weights) for p in range(topo.graphs.shape[0])]
        _, steps, omega = gossip_constants(cfg, ws)

        def sent(t: int, k: int) -> Tensor:
            return observed_row(obs, t, "model" if t % steps == 0 else "gossip", k)

        def start(t: int) -> Tensor:  # x_i^t, the model the release of round t is taken at
            if t == 0:
                if obs.x0 is None:
                    raise NotApplicable("the public initial model is not known")
                return obs.x0
            w = ws[(t - 1) % len(ws)]
            mixed = sum(float(w[victim, k]) * sent(t - 1, k)
                        for k in torch.nonzero(w[victim]).flatten().tolist())
            if steps == 1 or omega == 1.0:
                return mixed  # type: ignore[return-value]
            return omega * mixed + (1.0 - omega) * sent(t - 2, victim)  # type: ignore[operator]

        views = []
        for t in rounds:
            if t % steps:
                raise NotApplicable(f"round {t} is gossip step {t % steps} of K = {steps}: no "
                                    "gradient is released")
            x = start(t)
            views.append(GradientView(victim, t, x, (x - sent(t, victim)) / lr, "gradient", None,
                                      obs.run.batch_size, "(x_i^t - y_i^0) / lr, x_i^t from "
                                      "the accelerated gossip of round t - 1"))
        return views
