"""The one-run white-box gradient-canary audit of every node: bound, cap and estimate.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023 (Theorem 3.1,
§6 white-box) with the Dirac gradient canaries of Nasr et al., "Tight Auditing of Differentially
Private Machine Learning", USENIX Security 2023 (`privbench.engine.canaries`). Each audited node i
gets m canaries on its own model coordinates (disjoint across nodes, so no canary moves another's
coordinate), each included with probability 1/2; the defense is trained once more; every canary is
scored from what the threat model around its node observes; the top k+ scores are guessed "in", the
bottom k- "out", the rest abstain; the exact binomial test gives each node's ε lower bound,
Bonferroni-corrected over the audited nodes.

Choices:

* **The sampling rate is the ledger's.** Canaries are not added to the node's dataset (that
  would grow |D_i| and lower the rate the sampler uses: 0.133 -> 0.025 for 500 included canaries
  at |D_i| = 120). They are stored beyond the node's member count, so the defense's own sampler
  never draws them and every real record keeps its rate; whenever the defense draws a batch, each
  included canary joins it independently with the rate that draw used for the node: the Poisson
  rate passed to `ctx.draw`, B / |D_i| for fixed-size batches, 1 for a local epoch. A canary is
  then a record sampled exactly as the ledger accounts (Poisson at q, add / remove adjacency); for
  ledgers of fixed-size batches (replace-one adjacency, sensitivity 2C) this mechanism is no less
  private than the accounted one, so a correct defense stays within its claim. A defense that
  passes a rate other than the one it accounts has its canaries drawn at the rate it uses.
  Replacing records by canaries would keep |D_i| too, but m / 2 included canaries do not fit in
  a node's 120 records.
* **Every node is audited** (`nodes = "all"`), each through the threat model around it, its
  bound against its own claim in this run; `"worst"` audits only the node with the largest claim
  (all m canaries on it: the choice when n m exceeds the model's coordinates).
* **Rounds are scored jointly**: a canary's T observed values are one vector, scored by the
  Gaussian log-likelihood ratio "in" N(q a, S + q (1 - q) diag(a^2)) vs "out" N(0, S), where
  a_t = C / B_t is one clipped canary's share of round t's mean, q the rate, and S the (T, T)
  covariance across rounds of the views' coordinates that hold no canary. Noise reused across
  rounds is in S, so the differences between rounds carry the evidence; with fresh noise S is
  diagonal and the score is the per-round one. Views that observe only some coordinates (or
  signs) are scored per round, the sum of each release's subsampled-Gaussian log-likelihood
  ratio (`privbench.audit.input_canary._view_llr`).
* **"out" guesses**: an included canary is drawn in some round with probability
  1 - (1 - q)^T (0.9998 at q = 0.133, T = 60), so low scores mean "out".
* **Estimate**: the μ-GDP fit of the scores, μ = (mean_in - mean_out) / pooled sd (the
  separation of the likelihood-ratio statistics of μ-GDP: Dong, Roth, Su, "Gaussian Differential
  Privacy", JRSS-B 2022, §2), with the normal 95 % interval of a standardized mean difference,
  turned into ε at the claim's δ (`gdp_epsilon`). It is an estimate, not a bound: it reads the
  scores' distributions, so a weaker score (a suboptimal view) lowers it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench import progress
from privbench.data.datasets import NodeData
from privbench.engine.trainer import Context
from privbench.errors import ConfigError, NotApplicable
from privbench.metrics.audit import one_run_audit, one_run_cap
from privbench.threat.observation import observe, threat_for

if TYPE_CHECKING:
    from privbench.audit.input_canary import ThreatJSON
    from privbench.config import JSONObject

NODE_CHOICES = ("all", "worst")
P_STAR = 0.05
Z95 = 1.959963984540054


@dataclass
class CanaryContext(Context):
    """A `Context` whose batches also carry the audited nodes' included canaries.

    Attributes:
        slots: node -> (k_i,) positions of its included canaries in its data row (beyond its
            member count, so the defense's sampler never draws them).
        canary_gen: the auditor's generator for the canaries' draws.
        drawn: node -> canary slots drawn so far (summed over rounds).
        offered: node -> canary slots offered so far (k_i per draw).
        rates: node -> the rates the draws used, one per draw.
        members_drawn: node -> its real members drawn so far (summed over rounds).
    """

    slots: dict[int, Tensor] = field(default_factory=dict)
    canary_gen: torch.Generator | None = None
    drawn: dict[int, int] = field(default_factory=dict)
    offered: dict[int, int] = field(default_factory=dict)
    rates: dict[int, list[float]] = field(default_factory=dict)
    members_drawn: dict[int, int] = field(default_factory=dict)

    def draw(self, t: int, rates: Tensor | None = None,
             batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """`Context.draw`, then each included canary of node i joins its batch with the rate
        the draw used for i (Poisson: rates[i]; fixed-size: min(1, B / |D_i|))."""
        x, y, mask = super().draw(t, rates, batch_size)
        counts = self.data.counts
        r = None if rates is None else torch.as_tensor(rates).reshape(-1).cpu()
        per_node = {}
        for i, slots in self.slots.items():
            if r is not None:
                q = float(r[i] if r.numel() > 1 else r[0])
            else:
                q = min(1.0, (batch_size or self.run.batch_size) / max(1, int(counts[i])))
            take = torch.rand(len(slots), generator=self.canary_gen) < q
            per_node[i] = slots[take]
            self._count(i, int(take.sum()), len(slots), q, int(mask[i].sum()))
        return _append(self.data, x, y, mask, per_node)

    def _count(self, i: int, drawn: int, offered: int, q: float, members: int) -> None:
        self.drawn[i] = self.drawn.get(i, 0) + drawn
        self.offered[i] = self.offered.get(i, 0) + offered
        self.rates.setdefault(i, []).append(q)
        self.members_drawn[i] = self.members_drawn.get(i, 0) + members

    def draw_epoch(self, t: int) -> tuple[Tensor, Tensor]:
        """`Context.draw_epoch` with every included canary among the epoch's members (rate 1)."""
        perm, members = super().draw_epoch(t)
        for i, slots in self.slots.items():
            real = int(members[i].sum())
            members[i] |= torch.isin(perm[i], slots.to(perm.device))
            self._count(i, len(slots), len(slots), 1.0, real)
        return perm, members


def _append(data: NodeData, x: Tensor, y: Tensor, mask: Tensor,
            per_node: dict[int, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """The batch (x (n, k, ...), y (n, k), mask (n, k)) with each node's drawn canary slots
    appended as extra masked-in columns."""
    width = max((len(s) for s in per_node.values()), default=0)
    if width == 0:
        return x, y, mask
    n = y.shape[0]
    extra = torch.zeros(n, width, dtype=torch.int64, device=data.y.device)
    live = torch.zeros(n, width, dtype=torch.bool, device=mask.device)
    for i, s in per_node.items():
        extra[i, :len(s)] = s.to(extra.device)
        live[i, :len(s)] = True
    xe, ye = data.gather(extra)
    return torch.cat([x, xe], dim=1), torch.cat([y, ye], dim=1), torch.cat([mask, live], dim=1)


def with_canary_rows(data: NodeData, rows: dict[int, Tensor]) -> tuple[NodeData, dict[int, Tensor]]:
    """A copy of `data` whose node i also stores the canary labels rows[i] (k_i,) beyond its
    member count (zero inputs; counts unchanged), and the positions where they lie."""
    width = max((len(v) for v in rows.values()), default=0)
    m = data.x.shape[1]
    pad = width
    x = torch.cat([data.x, data.x.new_zeros(data.n, pad, *data.x.shape[2:])], dim=1)
    y = torch.cat([data.y, data.y.new_zeros(data.n, pad)], dim=1)
    idx = torch.cat([data.idx, data.idx.new_full((data.n, pad), -1)], dim=1)
    slots = {}
    for i, labels in rows.items():
        y[i, m:m + len(labels)] = labels.to(y)
        slots[i] = torch.arange(m, m + len(labels))
    return dataclasses.replace(data, x=x, y=y, idx=idx), slots


# ----------------------------------------------------------------------------------- scoring
def joint_llr(views: list[Any], coords: Tensor, background: Tensor, clip: float,
              rate: float) -> np.ndarray:
    """(m,) each canary's Gaussian log-likelihood ratio over all observed rounds at once.

    Args:
        views: the node's "gradient" views (T of them, every coordinate observed).
        coords: (m,) the canaries' coordinates.
        background: (d,) bool coordinates that hold no canary (the noise's reference).
        clip: the claimed clip bound C; rate: the sampling rate q.
    """
    g = torch.stack([v.gradient.detach().double().cpu() for v in views])  # (T, d)
    g = g - g[:, background].median(dim=1, keepdim=True).values
    # a round whose view does not vary off the canaries (say a control variate still at its
    # start, h^0 = 0) or is not finite carries no evidence: it is left out of the joint score
    finite = torch.isfinite(g).all(dim=1)  # (T,)
    # the likelihood ratio is unchanged when x, the means and the covariance's root are divided
    # by one scale: views of order 1e160 and more would overflow their squares
    scale = float(g[finite][:, background].abs().max()) if bool(finite.any()) else 0.0
    keep = finite & (g[:, background].abs().amax(dim=1) > 0)
    if not bool(keep.any()) or not scale > 0:
        return np.zeros(len(coords))
    g, views = g[keep] / scale, [v for v, k in zip(views, keep.tolist(), strict=True) if k]
    bg = g[:, background]  # (T', N)
    cov = bg @ bg.T / bg.shape[1]  # (T', T')
    t = cov.shape[0]
    cov = cov + torch.eye(t, dtype=cov.dtype) * (1e-9 * float(cov.diagonal().mean()) + 1e-30)
    a = torch.tensor([clip / max(1, v.batch_size) / scale for v in views],
                     dtype=torch.float64)  # (T',) one canary's mean, in the scaled units
    q = min(max(rate, 1e-12), 1.0)
    x = g[:, coords].T  # (m, T)
    return (_log_normal(x, q * a, cov + torch.diag(q * (1 - q) * a * a))
            - _log_normal(x, torch.zeros_like(a), cov)).numpy()


def _log_normal(x: Tensor, mean: Tensor, cov: Tensor) -> Tensor:
    """(m,) log density of each row of x (m, T) under N(mean (T,), cov (T, T)), up to the
    constant shared by every covariance."""
    chol = torch.linalg.cholesky(cov)
    z = torch.linalg.solve_triangular(chol, (x - mean).T, upper=False)  # (T, m)
    return -0.5 * (z * z).sum(dim=0) - torch.log(chol.diagonal()).sum()


def node_scores(obs: Any, cls: type, node: int, coords: Tensor, background: Tensor,
                clip: float, rate: float, bank: Any) -> tuple[np.ndarray, str]:
    """(m,) scores of node `node`'s canaries and the scorer used ("joint" over rounds when every
    view is a whole gradient, else "per-round")."""
    from privbench.audit.input_canary import _all_victim_views, _view_llr

    views = _all_victim_views(obs, cls, node)
    if len(views) >= 2 and all(v.kind == "gradient" and v.mask is None for v in views):
        return joint_llr(views, coords, background, clip, rate), "joint"
    score = np.zeros(len(coords))
    for v in views:
        score += _view_llr(v, coords, clip, rate)
    return score, "per-round"


class GdpFit(TypedDict):
    """`gdp_fit`'s estimate."""

    mu: float
    mu_interval: list[float]  # normal 95 % interval
    epsilon: float  # at `delta`
    epsilon_interval: list[float]
    delta: float
    method: str


class CanaryRate(TypedDict):
    """How often a node's canaries were drawn, against the rate its ledger claims."""

    drawn: int
    offered: int
    realised: float | None
    rate: float
    ledger: float
    members_realised: float | None


class NodeCanaryResult(TypedDict):
    """One audited node's result (`_node_result`)."""

    node: int
    claimed_epsilon: dict[str, JSONObject]  # per mode, the node's claim
    delta: float
    one_run: dict[str, object]  # `metrics.audit.one_run_audit`
    estimate: GdpFit
    ratio: float  # the one-run bound over the claimed ε
    estimated_ratio: float
    scorer: str
    threat: ThreatJSON
    canary_rate: CanaryRate


class GradientCanaryAudit(TypedDict):
    """`gradient_canary_audit`'s JSON-ready result."""

    canaries: NotRequired[int]
    canary_norm: NotRequired[float]
    nodes_audited: NotRequired[str]
    p_star: NotRequired[float]
    guess_fraction: NotRequired[float]
    cap: NotRequired[float]
    nodes: NotRequired[list[NodeCanaryResult]]
    worst: NotRequired[NodeCanaryResult]
    threat: NotRequired[ThreatJSON]


# ---------------------------------------------------------------------------------- estimate
def gdp_fit(scores: np.ndarray, included: np.ndarray, delta: float) -> GdpFit:
    """The μ-GDP fit of canary scores: μ = (mean_in - mean_out) / pooled sd with its normal 95 %
    interval (se^2 = 1 / n_in + 1 / n_out + μ^2 / (2 (n_in + n_out))), and ε at `delta`."""
    from privbench.accounting.gdp import gdp_epsilon

    s, inc = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    a, b = s[inc], s[~inc]
    if len(a) < 2 or len(b) < 2:
        raise ConfigError("the μ-GDP fit needs at least 2 included and 2 excluded canaries")
    pooled = math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1))
                       / (len(a) + len(b) - 2))
    mu = (a.mean() - b.mean()) / pooled if pooled > 0 else (math.inf if a.mean() > b.mean()
                                                            else 0.0)
    se = math.sqrt(1 / len(a) + 1 / len(b) + (mu * mu if math.isfinite(mu) else 0)
                   / (2 * (len(a) + len(b))))
    lo, hi = max(0.0, mu - Z95 * se), max(0.0, mu + Z95 * se)

    def eps(m: float) -> float:
        return 0.0 if m <= 0 else gdp_epsilon(m, delta)

    return {"mu": float(mu), "mu_interval": [lo, hi], "epsilon": eps(max(0.0, mu)),
            "epsilon_interval": [eps(lo), eps(hi)], "delta": delta,
            "method": "μ-GDP fit of the canary scores (Dong, Roth, Su 2022)"}


def guesses(m: int, guess_fraction: float) -> tuple[int, int]:
    """k+ = k- = round(m guess_fraction / 2) (fixed before the scores are seen)."""
    k = round(m * guess_fraction / 2)
    return k, k


# ------------------------------------------------------------------------------------- audit
def audit_nodes(privacy: list[JSONObject], n: int, nodes: str) -> list[int]:
    """The nodes to audit: all, or the one with the largest calibrated claim."""
    from privbench.audit.candidates import claims

    if nodes not in NODE_CHOICES:
        raise ConfigError(f"canary nodes must be one of {', '.join(NODE_CHOICES)}, got {nodes!r}")
    if nodes == "all":
        return list(range(n))

    def claim(i: int) -> float:
        c = claims(privacy, i)
        return float(c.get("calibrated", c.get("paper", {})).get("epsilon", 0.0))

    return [max(range(n), key=claim)]


def gradient_canary_audit(run: Any, defense: str, canaries: int = 1000,
                          overrides: Mapping[str, object] | None = None,
                          gen: torch.Generator | None = None, threat: str = "eavesdropper",
                          norm_factor: float = 10.0, nodes: str = "all",
                          guess_fraction: float = 0.2) -> GradientCanaryAudit:
    """The audit of the module docstring.

    Args:
        run: the cell's run; defense / overrides: its defense and configuration.
        canaries: m per audited node.
        gen: the auditor's generator (canary coordinates, inclusion, draws).
        threat: the threat-model kind placed around each audited node (`threat_for`).
        norm_factor: canary norm / the claimed clip bound.
        nodes: "all" or "worst".
        guess_fraction: share of each node's canaries guessed (half "in", half "out").

    Returns:
        JSON-ready dict: nodes (per node: claimed, one_run, estimate, ratio, sampling), the
        worst node's entries, cap, p_star.

    Raises:
        NotApplicable: the canaries cannot be inserted or observed, or the run diverged.
    """
    from privbench.audit.candidates import claims
    from privbench.audit.input_canary import _gradient_canaries, _sample_rate, clip_or
    from privbench.engine.canaries import inserted
    from privbench.engine.runner import build
    from privbench.plugins import load_plugins

    if not 0 < guess_fraction <= 1:
        raise ConfigError(f"canary guess_fraction must be in (0, 1], got {guess_fraction}")
    load_plugins()
    base = build(run, defense, overrides)
    gen = gen or base.ctx.streams.fresh("mia", "canary", device="cpu")
    audited = audit_nodes(base.trainer.privacy(), base.ctx.n, nodes)
    total = canaries * len(audited)
    if total > base.ctx.fm.d:
        raise ConfigError(f"{canaries} canaries on each of {len(audited)} nodes need {total} "
                          f"distinct coordinates; the model has {base.ctx.fm.d} (lower "
                          "canary.canaries or set canary.nodes = \"worst\")")
    bank, _, labels = _gradient_canaries(base, total, norm_factor, gen)
    included = (torch.rand(len(audited), canaries, generator=gen) < 0.5)  # (A, m)
    ids = torch.arange(total).reshape(len(audited), canaries)
    rows = {v: labels[ids[a][included[a]]] for a, v in enumerate(audited)}
    with inserted(bank):
        built = _train(base, rows, gen)
    privacy = built.trainer.privacy()
    clip = clip_or(built.trainer, norm_factor)
    background = torch.ones(base.ctx.fm.d, dtype=torch.bool)
    background[bank.coords] = False
    p_star = P_STAR / len(audited)
    kp, km = guesses(canaries, guess_fraction)
    per_node: list[NodeCanaryResult] = []
    for a, v in enumerate(audited):
        tm = threat_for(threat, built.ctx.topology, v)
        obs = observe(built, tm)
        rate = float(np.mean(built.ctx.rates.get(v, [0.0]) or [0.0]))
        scores, scorer = node_scores(obs, type(built.trainer), v, bank.coords[ids[a]],
                                     background, clip, rate, bank)
        if not np.isfinite(scores).all():
            raise NotApplicable("non-finite canary scores: the run diverged (non-finite "
                                "messages)", non_finite=True)
        per_node.append(_node_result(v, claims(privacy, v), scores, included[a].numpy(), kp,
                                     km, p_star, run.delta, scorer, built.ctx,
                                     _sample_rate(privacy, v, built.ctx),
                                     {"kind": tm.kind, "observers": list(tm.observers)}))
    worst = max(per_node, key=lambda r: (r["ratio"], r["one_run"]["epsilon_lb"]))
    delta = worst["delta"]
    return {"canaries": canaries, "canary_norm": bank.norm,
            "nodes_audited": nodes, "p_star": p_star, "guess_fraction": guess_fraction,
            "cap": one_run_cap(canaries, kp + km, delta, p_star), "nodes": per_node,
            "worst": worst, "threat": worst["threat"]}


def _train(base: Any, rows: dict[int, Tensor], gen: torch.Generator) -> Any:
    """A fresh copy of `base`'s run with the canary rows stored and drawn, trained."""
    from privbench.engine.loop import train
    from privbench.engine.messages import MessageBus
    from privbench.engine.runner import Built
    from privbench.engine.truth import GroundTruth
    from privbench.registry import DEFENSES
    from privbench.seeding import Streams

    ctx = base.ctx
    cls = DEFENSES.get(base.defense)
    data, slots = with_canary_rows(ctx.data.to(torch.device("cpu")), rows)
    policy = ctx.bus.policy
    fields = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(Context)}
    fields.update(data=data.to(ctx.device), bus=MessageBus(cls.kinds, policy),
                  truth=GroundTruth(policy), streams=Streams(ctx.run.seed, ctx.device))
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    ctx2 = CanaryContext(**fields, slots=slots,
                         canary_gen=torch.Generator().manual_seed(seed))
    built = Built(type(base.trainer)(base.trainer.cfg, ctx2), ctx2, base.defense)
    progress.stage(ctx.run.rounds, "canary round")
    train(built.trainer, progress.advance, evaluations=False)  # trained for what it sends
    return built


def _node_result(node: int, claimed: dict[str, JSONObject], scores: np.ndarray,
                 included: np.ndarray, kp: int, km: int, p_star: float, run_delta: float,
                 scorer: str, ctx: CanaryContext, ledger_rate: float,
                 threat: ThreatJSON) -> NodeCanaryResult:
    """One audited node's bound, estimate, ratio to its own claim and realised canary rate."""
    head = claimed.get("calibrated", claimed.get("paper", {}))
    delta = float(head.get("delta", run_delta))
    eps = float(head.get("epsilon", math.nan))
    one = one_run_audit(scores, included, kp, km, delta, p_star)
    est = gdp_fit(scores, included, delta if 0 < delta < 1 else run_delta)  # no δ: the run's
    lb = float(one["epsilon_lb"])
    ratio = lb / eps if eps > 0 else (math.inf if lb > 0 else 0.0)
    offered, draws = ctx.offered.get(node, 0), len(ctx.rates.get(node, []))
    members = int(ctx.data.counts[node]) * draws
    return {"node": node, "claimed_epsilon": claimed, "delta": delta, "one_run": one,
            "estimate": est, "ratio": ratio,
            "estimated_ratio": est["epsilon"] / eps if eps > 0 else math.inf,
            "scorer": scorer, "threat": threat,
            "canary_rate": {"drawn": ctx.drawn.get(node, 0), "offered": offered,
                            "realised": ctx.drawn.get(node, 0) / offered if offered else None,
                            "rate": float(np.mean(ctx.rates.get(node, [math.nan]))),
                            "ledger": ledger_rate,
                            "members_realised": ctx.members_drawn.get(node, 0) / members
                            if members else None}}
