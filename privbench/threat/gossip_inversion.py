"""Gossip inversion: what a set of nodes anywhere in the graph learns about any other node.

El Mrini, Cyffers, Bellet, "Privacy Attacks in Decentralized Learning", ICML 2024: in gossip
averaging every message is a known linear combination of the nodes' private values, so stacking
what a set of attackers receives over rounds gives a linear system; where it identifies a node's
value, least squares recovers it, even for a node that is not the attackers' neighbour. For
decentralized gradient descent the unknowns are the per-round gradients; the paper assumes they
change slowly (one gradient per node over a window), removes the attackers' own contributions,
and feeds the estimate to a gradient-inversion attack.

Model (a defense declares it through `linear_gossip(obs) -> LinearGossip`). In message round t
node i broadcasts row i of y^t (n, d), with

    y^t = A_t y^{t-1} - c_s r^s,      s = t - lag (no release term when s < 0),
    r^s = a_s g^s + b_s r^{s-1},      r^{-1} = 0,            y^{-1} = 1 x0^T,

where x0 is the public initial model, A_t the public mixing matrix (A_0 = I), g^s (n, d) the
nodes' released gradients of round s (clipped and noisy under DP), c_s the step size and (a_s,
b_s) a public release filter (heavy-ball momentum, ADP-VRSGP's PGF). D-PSGD-style gossip has
y^t = x^t and lag 1; push-sum broadcasts x^{t+1/2} and has lag 0. Every message is then

    y_j^t = alpha_t[j] x0 + sum_{v, s} M_t[j, (v, s)] g_v^s,

with alpha and M computed from public quantities by the same recursion.

Unknowns. Release g_v^s is written theta_{v, s // window}: `window = 1` assumes nothing (a
release is recovered exactly where the system identifies it), `window = None` is El Mrini et
al.'s assumption over the whole log (one gradient per node), anything between a piecewise-constant
compromise. The attackers' own releases always get one unknown per round: they computed them,
and their own messages determine them, so they are removed from what is left, as in the paper.

Solution. The observed messages (j, t) are the rows of K theta = Y (Y_j^t = y_j^t - alpha_t[j] x0,
one column per model coordinate, the same K for all). With the SVD K = U S V^T of rank r, the
victim's block c is identifiable iff e_c lies in the row space of K (||V_r^T e_c||^2 = 1); its
least-squares estimate is then (V_r S_r^-1 U_r^T)[c] Y, and the norm of that row is the noise
gain (how much observation noise, e.g. DP noise in others' releases, the estimate amplifies).
A block outside the row space is "not applicable (rank deficit)", never an invented estimate.
The model the victim's release was computed at (needed by the inversion) is estimated the same
way, and is exactly x0 for a window starting at round 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import GradientView, Observation

RANK_RTOL = 1e-9  # singular values below this fraction of the largest count as zero
IDENT_TOL = 1e-6  # a direction is in the row space when its residual is below this (relative)
MAX_UNKNOWNS = 6000  # the SVD of K is O(rows * unknowns^2): refuse beyond this


@dataclass(frozen=True)
class LinearGossip:
    """A defense's messages as a linear gossip of its releases (see the module docstring).

    Attributes:
        kind: the message kind that carries y^t.
        n: number of nodes.
        releases: number of release rounds S (the run's rounds).
        matrix: t -> A_t (n, n) float64 for message round t >= 1 (A_0 = I).
        step: (S,) c_s.
        gain: (S,) a_s of the release filter.
        carry: (S,) b_s of the release filter.
        lag: message round t carries release t - lag.
        evaluated_at: where release s was computed: "message" (at y^s, gossip) or "premix" (at
            A_s y^{s-1} divided by its push-sum weight, push-sum).
        release: what g is, in the defense's notation (for reports).
    """

    kind: str
    n: int
    releases: int
    matrix: Callable[[int], Tensor]
    step: np.ndarray
    gain: np.ndarray
    carry: np.ndarray
    lag: int
    evaluated_at: str
    release: str


def gossip_spec(obs: Observation, mixing: str, lag: int, evaluated_at: str, release: str,
                step: np.ndarray | float | None = None, gain: np.ndarray | float = 1.0,
                carry: np.ndarray | float = 0.0, kind: str = "model",
                matrices: Callable[[int], Tensor] | None = None) -> LinearGossip:
    """A `LinearGossip` over the run's topology (constant filter and step unless given per round).

    Args:
        mixing: "doubly" (gossip) or "column" (push-sum): A_t = the topology's matrix of round
            t - 1, unless `matrices(p)` gives the matrix of graph period p.
        step: c_s (default: the run's lr).
    """
    s = obs.run.rounds

    def per_round(v: np.ndarray | float) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=np.float64), (s,)).copy()

    topo = obs.topology
    periods = topo.graphs.shape[0]
    if matrices is None:
        cache = [topo.mixing(p, mixing).double() for p in range(periods)]
    else:
        cache = [matrices(p).double().cpu() for p in range(periods)]
    return LinearGossip(kind, topo.n, s, lambda t: cache[(t - 1) % periods],
                        per_round(obs.run.lr if step is None else step), per_round(gain),
                        per_round(carry), lag, evaluated_at, release)


@dataclass
class System:
    """The observed linear system of one threat model, with its SVD.

    Attributes:
        rows: (R, 2) the observed (sender j, round t) of each row of K.
        alpha: (R,) offset coefficient of x0 in each observed message.
        k: (R, U) float64 coefficients of the unknowns.
        columns: (U, 2) (node, block) of each unknown.
        blocks: per node, (S,) the block index of each release round.
        u, s, vh: the rank-r SVD factors of K.
        pre: per (node, release round) the (offset, coefficients (U,)) of the model that
            release was computed at (filled for the queried nodes).
    """

    rows: np.ndarray
    alpha: np.ndarray
    k: np.ndarray
    columns: np.ndarray
    blocks: dict[int, np.ndarray]
    u: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vh: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    pre: dict[tuple[int, int], tuple[float, np.ndarray]] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """Rank of K."""
        return len(self.s)

    def column(self, node: int, block: int) -> int:
        """Index of the unknown theta_{node, block}."""
        hit = np.nonzero((self.columns[:, 0] == node) & (self.columns[:, 1] == block))[0]
        return int(hit[0])

    def in_row_space(self, p: np.ndarray) -> bool:
        """Whether p'theta is determined by the observations (p in the row space of K)."""
        norm = float(np.linalg.norm(p))
        if norm == 0.0:
            return True
        resid = p - self.vh.T @ (self.vh @ p)
        return float(np.linalg.norm(resid)) <= IDENT_TOL * norm

    def weights(self, p: np.ndarray) -> np.ndarray:
        """(R,) w with p'theta_hat = w'Y (least squares, minimum norm)."""
        return self.u @ ((self.vh @ p) / self.s)

    def condition(self) -> float:
        """Condition number of K on its row space."""
        return float(self.s[0] / self.s[-1]) if self.rank else float("inf")


def _block_index(releases: int, window: int | None) -> np.ndarray:
    """(S,) block of each release round: one block (window None) or windows of `window`."""
    if window is None:
        return np.zeros(releases, dtype=np.int64)
    return np.arange(releases, dtype=np.int64) // window


def build_system(spec: LinearGossip, observed: list[tuple[int, int]], attackers: set[int],
                 window: int | None, last_round: int, track: set[int] = frozenset(),
                 svd: bool = True) -> System:
    """The coefficients of every observed message in the unknown (block) releases.

    Args:
        spec: the defense's linear gossip.
        observed: the (sender, message round) pairs the threat model observes.
        attackers: nodes whose releases get one unknown per round (their own, known to them).
        window: release rounds per unknown for the other nodes (None: one for all).
        last_round: the last message round to model.
        track: nodes whose pre-release models are kept (`System.pre`).
        svd: factor K (the least-squares solution needs it; coefficients alone do not).
    """
    n, s_total = spec.n, spec.releases
    blocks = {v: _block_index(s_total, 1 if v in attackers else window) for v in range(n)}
    columns = np.array([(v, b) for v in range(n) for b in range(int(blocks[v].max()) + 1)],
                       dtype=np.int64).reshape(-1, 2)
    if svd and len(columns) > MAX_UNKNOWNS:
        raise ConfigError(f"gossip inversion over {len(columns)} unknowns (nodes x windows) is "
                          f"too large (at most {MAX_UNKNOWNS}); use a larger window or fewer "
                          "rounds")
    start = {v: int(np.nonzero(columns[:, 0] == v)[0][0]) for v in range(n)}
    u_total = len(columns)
    by_round: dict[int, list[int]] = {}
    for j, t in observed:
        by_round.setdefault(t, []).append(j)
    alpha = np.ones(n)  # (n,) coefficient of x0 in y^{t-1}
    m = np.zeros((n, u_total))  # (n, U) coefficients of the unknowns in y^{t-1}
    filt = {v: np.zeros(int(blocks[v].max()) + 1) for v in range(n)}  # r^s in its blocks
    rows, alphas, ks = [], [], []
    pre: dict[tuple[int, int], tuple[float, np.ndarray]] = {}
    for t in range(last_round + 1):
        a_t = np.eye(n) if t == 0 else spec.matrix(t).numpy()
        alpha_pre, m_pre = a_t @ alpha, a_t @ m
        s = t - spec.lag
        if spec.evaluated_at == "premix" and 0 <= s < s_total:
            for v in track:  # release s was computed at A_s y^{s-1} / w_v^s
                pre[(v, s)] = (float(alpha_pre[v]), m_pre[v].copy())
        if 0 <= s < s_total:
            for v in range(n):
                f = filt[v] * spec.carry[s]
                f[blocks[v][s]] += spec.gain[s]
                filt[v] = f
                m_pre[v, start[v]:start[v] + len(f)] -= spec.step[s] * f
        alpha, m = alpha_pre, m_pre
        if spec.evaluated_at == "message" and t < s_total:
            for v in track:  # release t is computed at y^t
                pre[(v, t)] = (float(alpha[v]), m[v].copy())
        for j in by_round.get(t, []):
            rows.append((j, t))
            alphas.append(alpha[j])
            ks.append(m[j].copy())
    if not rows:
        raise NotApplicable("the threat model observes no message of the modelled kind")
    sys_ = System(np.array(rows), np.array(alphas), np.stack(ks), columns, blocks, pre=pre)
    if not svd:
        return sys_
    u, sv, vh = np.linalg.svd(sys_.k, full_matrices=False)
    r = int((sv > RANK_RTOL * sv[0]).sum()) if sv.size and sv[0] > 0 else 0
    sys_.u, sys_.s, sys_.vh = u[:, :r], sv[:r], vh[:r]
    return sys_


def observed_messages(obs: Observation, kind: str) -> tuple[list[tuple[int, int]],
                                                            dict[tuple[int, int], Tensor]]:
    """The (sender, round) pairs of `kind` the observation holds, and their payloads (d,)."""
    pairs, payloads = [], {}
    for t in obs.log.rounds(kind):
        rec = obs.log.get(t, kind)
        for j in rec.senders.tolist():  # type: ignore[union-attr]
            pairs.append((int(j), t))
            payloads[(int(j), t)] = rec.sent_by(int(j))  # type: ignore[union-attr]
    return pairs, payloads


class GossipDiagnostics(TypedDict, total=False):
    """The linear system's identifiability for one victim (JSON-ready)."""

    observed_messages: int
    unknowns: int
    rank: int
    condition: float
    window: int | None
    horizon: int
    victim_blocks: int
    victim_residual: float
    noise_gain: float
    assumption: str
    identified_blocks: int
    unidentified_blocks: list[str]


@dataclass
class Estimate:
    """The gossip inversion of one victim: views where identifiable, and the diagnostics."""

    views: list[GradientView]
    info: GossipDiagnostics


class GossipViews:
    """A view source (like a defense's `gradient_views`) built on gossip inversion.

    Args:
        defense_cls: the defense class; it must provide `linear_gossip(obs)`.
        window: release rounds per unknown (None: one per node, El Mrini et al.'s assumption;
            1: exact, no assumption).
        horizon: use the messages of rounds < horizon only (None: all). Under a window > 1 the
            first rounds carry the information and later ones add the releases' drift, which the
            system's noise gain amplifies: "auto" (default) takes the first round at which the
            victim's first block becomes identifiable (public information: the topology and
            what is observed), all rounds when it never does or when window = 1. On non-private
            D-PSGD (digits, ring of 8, batch 1, lr 0.01), a victim 2 hops from a single attacker:
            all 30 rounds give iDLG PSNR 7 dB, the first 3 (auto) 26 dB. The error is the
            releases' drift, so it shrinks with the step size (Fashion-MNIST, same setting:
            lr 0.01 18 dB, lr 0.003 33 dB).
    """

    def __init__(self, defense_cls: Any, window: int | None = None,
                 horizon: int | str | None = "auto") -> None:
        if window is not None and window < 1:
            raise ConfigError(f"gossip inversion window must be >= 1 or None, got {window}")
        if horizon not in (None, "auto") and not (isinstance(horizon, int) and horizon >= 1):
            raise ConfigError(f"gossip inversion horizon must be >= 1 or None, got {horizon}")
        self.defense_cls = defense_cls
        self.window = window
        self.horizon = horizon
        self._cache: dict[tuple[int, int], Estimate] = {}

    def estimate(self, obs: Observation, victim: int) -> Estimate:
        """The victim's identifiable release blocks as gradient views, with diagnostics.

        Raises:
            NotApplicable: the defense is not a linear gossip, nothing is observed, or no block
                of the victim is identifiable (the reason names the rank deficit).
        """
        key = (id(obs), victim)
        if key not in self._cache:
            self._cache[key] = self._estimate(obs, victim)
        return self._cache[key]

    def _estimate(self, obs: Observation, victim: int) -> Estimate:
        spec = self.defense_cls.linear_gossip(obs)
        if spec is None:
            raise NotApplicable(f"defense {obs.defense!r} is not a linear gossip of its releases "
                                "(its messages are compressed, per-edge or partial), so no "
                                "linear system over rounds relates them")
        attackers = set(obs.threat.observers)
        if victim in attackers:
            raise ConfigError(f"node {victim} is one of the attackers; choose another victim")
        if obs.x0 is None:
            raise NotApplicable("the public initial model is not known to this threat model")
        pairs, payloads = observed_messages(obs, spec.kind)
        if isinstance(self.horizon, int):
            pairs = [(j, t) for j, t in pairs if t < self.horizon]
        if not pairs:
            raise NotApplicable(f"no {spec.kind!r} message is observed")
        last = max(t for _, t in pairs)
        system = build_system(spec, pairs, attackers, self.window, last, {victim})
        if self.horizon == "auto" and self.window != 1:
            system = _earliest(system, spec, pairs, attackers, self.window, victim)
            last = int(system.rows[:, 1].max())
        info = _diagnostics(system, victim, self.window)
        views, reasons = [], []
        x0 = obs.x0.double()
        for b in range(int(system.blocks[victim].max()) + 1):
            rounds = np.nonzero(system.blocks[victim] == b)[0]
            s0 = int(rounds[0])
            if s0 + spec.lag > last:
                break  # releases never carried by an observed message
            c = system.column(victim, b)
            e = np.zeros(len(system.columns))
            e[c] = 1.0
            if not system.in_row_space(e):
                reasons.append(f"rounds {s0}-{int(rounds[-1])}")
                continue
            grad = _combine(system, system.weights(e), payloads, x0)
            params = self._params(system, victim, s0, payloads, x0)
            if params is None:
                reasons.append(f"rounds {s0}-{int(rounds[-1])} (model not identifiable)")
                continue
            views.append(GradientView(
                victim, s0, params.float(), grad.float(), "gradient", None, obs.run.batch_size,
                f"gossip inversion (El Mrini et al. 2024) of {spec.release} over releases "
                f"{s0}-{int(rounds[-1])}: least squares on {len(system.rows)} observed "
                f"messages, rank {system.rank}/{len(system.columns)}",
                exact=self.window == 1))
        info["identified_blocks"] = len(views)
        info["unidentified_blocks"] = reasons
        if not views:
            raise NotApplicable(
                f"node {victim}'s releases are not identifiable from what nodes "
                f"{sorted(attackers) or 'all'} observe: rank deficit (K has rank {system.rank} "
                f"for {len(system.columns)} unknowns; the victim's direction lies "
                f"{info['victim_residual']:.2f} outside its row space)")
        return Estimate(views, info)

    def _params(self, system: System, victim: int, s0: int,
                payloads: dict[tuple[int, int], Tensor], x0: Tensor) -> Tensor | None:
        """The model release s0 was computed at, or None when it is not identifiable."""
        offset, p = system.pre[(victim, s0)]
        if not system.in_row_space(p):
            return None
        base = x0 * offset
        if np.linalg.norm(p) > 0:
            base = base + _combine(system, system.weights(p), payloads, x0)
        return base / offset

    def gradient_views(self, obs: Observation, victim: int, rounds: list[int]
                       ) -> list[GradientView]:
        """For each of `rounds`, the estimate of the identified block holding that release
        round (its `round` is the block's first: where its model was estimated).

        Raises:
            NotApplicable: as `estimate`, or when a round lies in no identified block.
        """
        est = self.estimate(obs, victim)
        out = []
        for t in rounds:
            hit = [v for v in est.views if self._block_of(v.round) == self._block_of(t)]
            if not hit:
                raise NotApplicable(f"release round {t} of node {victim} lies in no identified "
                                    f"gossip-inversion block (identified blocks start at "
                                    f"{[v.round for v in est.views]})")
            out.append(hit[0])
        return out

    def _block_of(self, t: int) -> int:
        return 0 if self.window is None else t // self.window

    def all_views(self, obs: Observation, victim: int) -> list[GradientView]:
        """Every identified block of the victim (for message-level membership inference)."""
        return self.estimate(obs, victim).views


def _earliest(system: System, spec: LinearGossip, pairs: list[tuple[int, int]],
              attackers: set[int], window: int | None, victim: int) -> System:
    """The system of the messages up to the first round that identifies the victim's first
    block (the whole system when none does)."""
    c = system.column(victim, 0)
    for h in sorted({t for _, t in pairs}):
        keep = system.rows[:, 1] <= h
        _, sv, vh = np.linalg.svd(system.k[keep], full_matrices=False)
        r = int((sv > RANK_RTOL * sv[0]).sum()) if sv.size and sv[0] > 0 else 0
        if np.linalg.norm(vh[:r, c]) ** 2 >= 1 - IDENT_TOL:
            prefix = [(j, t) for j, t in pairs if t <= h]
            return build_system(spec, prefix, attackers, window, h, {victim})
    return system


def _combine(system: System, w: np.ndarray, payloads: dict[tuple[int, int], Tensor],
             x0: Tensor) -> Tensor:
    """sum_rows w_row (y_row - alpha_row x0) as a (d,) float64 tensor."""
    out = torch.zeros_like(x0)
    for (j, t), a, wi in zip(system.rows.tolist(), system.alpha, w, strict=True):
        if wi != 0.0:
            out += float(wi) * (payloads[(j, t)].double() - float(a) * x0)
    return out


def _diagnostics(system: System, victim: int, window: int | None) -> GossipDiagnostics:
    """Rank, conditioning, the victim's residual outside the row space and its noise gain."""
    cols = [system.column(victim, b) for b in range(int(system.blocks[victim].max()) + 1)]
    resid, gains = [], []
    for c in cols:
        e = np.zeros(len(system.columns))
        e[c] = 1.0
        resid.append(float(np.linalg.norm(e - system.vh.T @ system.vh[:, c])))
        gains.append(float(np.linalg.norm(system.weights(e))))
    return {"observed_messages": len(system.rows), "unknowns": len(system.columns),
            "rank": system.rank, "condition": system.condition(),
            "window": window, "horizon": int(system.rows[:, 1].max()) + 1,
            "victim_blocks": len(cols),
            "victim_residual": min(resid), "noise_gain": min(gains),
            "assumption": ("none (one unknown per release)" if window == 1 else
                           "releases constant over the whole log (El Mrini et al. 2024)"
                           if window is None else f"releases constant over {window} rounds")}


class BestViews:
    """The defense's own views where the threat model supports them, else gossip inversion.

    The view source of a threat model placed anywhere in the graph (`ThreatModel.placement`):
    a curious set adjacent to the victim may derive its exact per-round releases the usual way;
    beyond, only the linear system over rounds reaches it.
    """

    def __init__(self, defense_cls: Any, window: int | None = None,
                 horizon: int | str | None = "auto") -> None:
        self.defense_cls = defense_cls
        self.gossip = GossipViews(defense_cls, window, horizon)

    def _own(self, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        return self.defense_cls.gradient_views(obs, victim, rounds)

    def gradient_views(self, obs: Observation, victim: int, rounds: list[int]
                       ) -> list[GradientView]:
        """The defense's views of these rounds, or the gossip inversion's (see the class)."""
        try:
            return self._own(obs, victim, rounds)
        except NotApplicable as exc:
            first = str(exc)
        try:
            return self.gossip.gradient_views(obs, victim, rounds)
        except NotApplicable as exc:
            raise NotApplicable(f"{first}; gossip inversion: {exc}") from None

    def all_views(self, obs: Observation, victim: int) -> list[GradientView]:
        """The defense's views of every observed round, or (none) every gossip-inversion block."""
        views: list[GradientView] = []
        for t in obs.log.rounds():
            try:
                views += self._own(obs, victim, [t])
            except NotApplicable:
                continue
        return views or self.gossip.all_views(obs, victim)


def view_source(defense_cls: Any, obs: Observation) -> Any:
    """Where gradient views come from: the defense, or `BestViews` for a threat model placed
    anywhere in the graph."""
    return BestViews(defense_cls) if obs.threat.placement else defense_cls
