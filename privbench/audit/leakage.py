"""The leakage map: how far a leak travels through the graph, per defense and epsilon.

For each defense and epsilon, a curious set is placed around each of several victims: one node
at 1, 2, 3 hops (along the message flow), an eavesdropper on every edge, and colluding sets of M
random non-neighbours. Each placement attacks every victim with what it observes:

* inversion (iDLG on batch-1 views, by default) of the victim's released gradient, from the
  defense's own views where the set observes enough (its exact per-round derivation), else from
  gossip inversion (`privbench.threat.gossip_inversion`, El Mrini et al. 2024), or "not applicable"
  with the reason (not a linear gossip, rank deficit);
* message-level membership inference (mia_message) on the same views, pooled over the victims;
* for linear-gossip DP defenses, the pairwise network-DP epsilon (`privbench.audit.network_dp`) of
  each victim towards the set, beside the paper's and the calibrated epsilon and the empirical lower
  bound from the membership ROC.

Two small runs per (defense, epsilon) serve the two attacks (`LeakageConfig`): a batch-1 run where
every node holds one member (the victim's releases are all of that one sample: the batch-1 view,
full batch as in El Mrini et al.'s D-GD), and a membership run where every node holds
`members` members and as many held-out samples and uses them all every round. The step size is
small (0.003) because gossip inversion over rounds assumes slowly changing releases; the DP noise
is calibrated to the run's own (short) length, so per-round noise is lower than in a long run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, replace
from typing import Any, TypedDict, cast

import numpy as np
import torch

from privbench.audit import dispatch
from privbench.audit.candidates import claims
from privbench.audit.config import AuditConfig
from privbench.audit.network_dp import NetworkEpsilon, pairwise_epsilon
from privbench.config import RunConfig, to_dict
from privbench.engine.loop import train
from privbench.engine.runner import Built, build, environment
from privbench.errors import ConfigError, NotApplicable, PrivbenchError
from privbench.plugins import load_plugins
from privbench.progress import Phase
from privbench.registry import ATTACKS, DEFENSES
from privbench.results import outcome
from privbench.threat.gossip_inversion import BestViews, GossipDiagnostics, LinearGossip
from privbench.threat.observation import (
    Observation,
    ThreatModel,
    hop_distances,
    observe,
    placed,
)

LEAKAGE_FORMAT = "privbench-leakage/1"
DEFAULT_DEFENSES = ("d_psgd", "sgp", "dp_dpsgd", "dp_sgp", "adp_vrsgp", "dyn_d2p", "defl_vp",
                    "partpsp", "dpdl")
# The audit the dispatch reads here: only its (empty) per-attack overrides, so every attack the
# map mounts runs with its defaults; the threat model is each placement's (`dispatch.Mount`).
ATTACKS_AS_DEFAULTS = AuditConfig()


@dataclass(frozen=True)
class LeakageConfig:
    """What the leakage map runs.

    Attributes:
        dataset, data_root, model: the data and architecture.
        defenses: registry keys; non-private ones run once (their epsilon is ignored).
        eps: the epsilon grid of the private defenses.
        nodes, topology: the graph (a ring by default: every distance up to nodes / 2 exists).
        rounds, lr: the runs' length and step size.
        members: members per node of the membership run (as many held out).
        distances: hop distances of a single curious node.
        sizes: sizes of the colluding sets of random non-neighbours.
        victims: the first `victims` nodes are attacked in every placement (membership).
        inversion_victims: the first of them attacked by inversion (None: min(4, victims);
            Inverting Gradients runs 4,800 steps per target: the map's cost).
        inversion: the inversion attack on batch-1 views; "auto": iDLG on non-private
            defenses, Inverting Gradients (geiping, cosine loss) on private ones, whose clipped
            releases are rescaled gradients that iDLG's Euclidean loss cannot match (DP-DPSGD
            with its noise switched off, 2 hops: iDLG 10 dB, geiping 29 dB).
        seed: the runs' seed.
    """

    dataset: str = "digits"
    data_root: str | None = None
    model: str = "mlp"
    defenses: tuple[str, ...] = DEFAULT_DEFENSES
    eps: tuple[float, ...] = (1.0, 8.0)
    nodes: int = 8
    topology: str = "ring"
    rounds: int = 20
    lr: float = 0.003
    members: int = 16
    distances: tuple[int, ...] = (1, 2, 3)
    sizes: tuple[int, ...] = (2, 3)
    victims: int = 8
    inversion_victims: int | None = None
    inversion: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.victims <= self.nodes:
            raise ConfigError(f"victims must be in [1, {self.nodes}], got {self.victims}")
        if self.inversion_victims is not None and \
                not 1 <= self.inversion_victims <= self.victims:
            raise ConfigError(f"inversion_victims must be in [1, {self.victims}], got "
                              f"{self.inversion_victims}")
        if self.members < 1 or self.rounds < 2:
            raise ConfigError("members must be >= 1 and rounds >= 2")
        if any(h < 1 for h in self.distances) or any(m < 1 for m in self.sizes):
            raise ConfigError("distances and colluding-set sizes must be >= 1")
        if any(not (e > 0 and np.isfinite(e)) for e in self.eps):
            raise ConfigError(f"every epsilon must be a finite number > 0, got {list(self.eps)}")

    def run(self, eps: float, members: int, batch: int) -> RunConfig:
        """The run of one regime: `members` members and as many held out per node."""
        return RunConfig(dataset=self.dataset, data_root=self.data_root, model=self.model,
                         nodes=self.nodes, topology=self.topology, rounds=self.rounds,
                         batch_size=batch, lr=self.lr, epsilon=eps, seed=self.seed,
                         max_per_node=2 * members, holdout=0.5, eval_every=self.rounds,
                         device="cpu")


class Identifiability(TypedDict):
    """The gossip inversion's linear system for a victim (median over the victims)."""

    rank: float
    unknowns: float
    condition: float
    noise_gain: float
    horizon: float


class InversionSummary(TypedDict, total=False):
    """A placement's inversion: mean (and worst) grades over its victims, or why none."""

    status: str
    victims: int
    not_applicable: int
    psnr: float | None
    psnr_min: float | None
    ssim: float | None
    ssim_min: float | None
    label_accuracy: float | None
    label_accuracy_min: float | None
    via: str
    identifiability: Identifiability
    attack: str


# A placement's pooled membership attack: ROC summary, empirical epsilon and candidates counted,
# or why not applicable (functional form: keys such as "tpr_at_1%_fpr" are not identifiers).
MembershipSummary = TypedDict("MembershipSummary", {
    "status": str, "auc": float | None, "auc_ci": list[float] | None,
    "tpr_at_1%_fpr": float | None, "tpr_at_1%_fpr_ci": list[float] | None,
    "tpr_at_10%_fpr": float | None, "statistic": str | None,
    "empirical_epsilon": float | None, "n_members": int, "n_nonmembers": int, "victims": int,
}, total=False)


class NetworkRecord(TypedDict, total=False):
    """A placement's network-DP epsilon as the map writes it: the mean over the victims of
    `pairwise_epsilon`'s readings, or `applicable` false with the reason."""

    applicable: bool
    reason: str
    network_mu: float
    network_epsilon: float
    local_full_epsilon: float
    calibrated_epsilon: float
    epsilon: float
    visibility: float
    assumptions: list[str]


class LeakageRow(TypedDict):
    """One placement of one (defense, epsilon)."""

    placement: str
    spec: str
    distance: int | None
    size: int
    inversion: InversionSummary
    membership: MembershipSummary
    network_dp: NetworkRecord | None


class LeakageCell(TypedDict):
    """One (defense, epsilon): its claimed epsilons, graph and every placement's row."""

    defense: str
    epsilon: float | None
    claimed_epsilon: dict[str, float | None]
    topology: list[list[int]]
    rows: list[LeakageRow]


class PlacementRecord(TypedDict):
    """A placement as the map records it."""

    label: str
    spec: str
    distance: int | None
    size: int


class LeakageConfigDict(TypedDict):
    """A `LeakageConfig` as JSON (`config.to_dict`)."""

    dataset: str
    data_root: str | None
    model: str
    defenses: list[str]
    eps: list[float]
    nodes: int
    topology: str
    rounds: int
    lr: float
    members: int
    distances: list[int]
    sizes: list[int]
    victims: int
    inversion_victims: int | None
    inversion: str
    seed: int


class LeakageMap(TypedDict):
    """The leakage map (format LEAKAGE_FORMAT), JSON-ready."""

    format: str
    config: LeakageConfigDict
    environment: dict[str, str]
    placements: list[PlacementRecord]
    cells: list[LeakageCell]


def placements(cfg: LeakageConfig) -> list[tuple[str, str, int | None, int]]:
    """(label, spec, distance, size) of every placement; spec "eavesdropper" or a placement."""
    out = [(f"{h} hop{'s' if h > 1 else ''}", f"hops:{h}", h, 1) for h in cfg.distances]
    out.append(("eavesdropper", "eavesdropper", None, 0))
    out += [(f"{m} colluding", f"random:{m}", None, m) for m in cfg.sizes]
    return out


def _threat(spec: str, built: Built, victim: int) -> ThreatModel:
    return ThreatModel("eavesdropper") if spec == "eavesdropper" else \
        placed(spec, built.ctx.topology, victim)


def _train(cfg: LeakageConfig, defense: str, eps: float, members: int, batch: int,
           phase: Phase) -> Built:
    with phase as bar:
        built = build(cfg.run(eps, members, batch), defense)
        train(built.trainer, progress=bar.update)
    return built


def _inversions(built: Built, cfg: LeakageConfig) -> dict[str, InversionSummary]:
    """Per placement spec: the inversion attack on each victim's batch-1 view, graded (every
    placement and victim attacked in one batched call); mean PSNR / SSIM / label accuracy."""
    source = BestViews(type(built.trainer))
    targets, where, refused = [], [], {}
    for _, spec, _, _ in placements(cfg):
        refused[spec] = []
        for v in range(cfg.inversion_victims or min(4, cfg.victims)):
            try:
                targets.append((observe(built, _threat(spec, built, v)), v, 0))
                where.append(spec)
            except ConfigError as exc:
                refused[spec].append(str(exc))
    attack = cfg.inversion if cfg.inversion != "auto" else \
        ("geiping" if type(built.trainer).private else "idlg")
    res = dispatch.run_attack(built, attack, ATTACKS_AS_DEFAULTS, cfg.seed,
                              mount=_mount(targets, source, cfg, lpips=False))
    graded = res.detail.get("targets") or [{"status": res.status.text}] * len(targets)
    out = {}
    for spec, reasons in refused.items():
        rows, sources, diag = [], set(), []
        for i in (i for i, s in enumerate(where) if s == spec):
            if graded[i].get("psnr") is not None:
                rows.append({k: graded[i].get(k) for k in ("psnr", "ssim", "label_accuracy")})
                sources.add(graded[i].get("source", ""))
                diag.append(_diagnostics(source, targets[i][0], targets[i][1]))
            else:
                reasons.append(str(graded[i]["status"]))
        out[spec] = {**_summary(rows, reasons, sources, diag, ("psnr", "ssim", "label_accuracy")),
                     "attack": attack}
    return out


def _mount(targets: list[tuple[Observation, int, int]], source: BestViews, cfg: LeakageConfig,
           lpips: bool = True) -> dispatch.Mount:
    """The placements' observations as the dispatch mounts them: views from the defense or
    gossip inversion, the attack's generator seeded with the map's seed."""
    return dispatch.Mount(tuple(targets), source, cfg.seed, lpips)


def _diagnostics(source: BestViews, obs: Observation, victim: int) -> GossipDiagnostics | None:
    """The gossip inversion's rank / conditioning when it produced the view, else None."""
    est = source.gossip._cache.get((id(obs), victim))
    return None if est is None else {k: est.info[k] for k in
                                     ("rank", "unknowns", "condition", "noise_gain", "horizon")}


def _summary(rows: list[dict[str, float | None]], reasons: list[str], sources: set[str],
             diag: list[GossipDiagnostics | None], keys: tuple[str, ...]) -> InversionSummary:
    if not rows:
        return {"status": outcome.not_applicable(reasons[0] if reasons else "no victim").text,
                "victims": 0}
    out: InversionSummary = {"status": outcome.OK.text, "victims": len(rows),
                           "not_applicable": len(reasons)}
    for k in keys:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[k] = float(np.mean(vals)) if vals else None
        out[f"{k}_min"] = float(np.min(vals)) if vals else None
    out["via"] = "gossip inversion" if any("gossip inversion" in s for s in sources) else \
        "the defense's views"
    used = [d for d in diag if d]
    if used:
        out["identifiability"] = {k: float(np.median([d[k] for d in used])) for k in used[0]}
    return out


def _membership(built: Built, cfg: LeakageConfig, spec: str) -> MembershipSummary:
    """mia_message on every victim's views, pooled; ROC summary and empirical epsilon."""
    observations, reasons = {}, []
    for v in range(cfg.victims):
        try:
            observations[v] = observe(built, _threat(spec, built, v))
        except ConfigError as exc:
            reasons.append(str(exc))
    if not observations:
        return {"status": outcome.not_applicable(reasons[0]).text}
    mount = _mount([(o, v, 0) for v, o in observations.items()], BestViews(type(built.trainer)),
                   cfg)
    res = dispatch.run_attack(built, "mia_message", ATTACKS_AS_DEFAULTS, cfg.seed, mount=mount)
    if not res.ok:
        return {"status": res.status.text}
    m, ci = res.metrics, res.intervals or {}
    return {"status": outcome.OK.text, "auc": m["auc"], "auc_ci": ci["auc"],
            "tpr_at_1%_fpr": m["tpr_at_1%_fpr"], "tpr_at_1%_fpr_ci": ci["tpr_at_1%_fpr"],
            "tpr_at_10%_fpr": m["tpr_at_10%_fpr"], "statistic": res.detail["statistic"],
            "empirical_epsilon": m["empirical_epsilon"],
            **{k: res.detail[k] for k in ("n_members", "n_nonmembers", "victims")}}


def _network(built: Built, cfg: LeakageConfig, spec: str) -> NetworkRecord | None:
    """Mean over the victims of the pairwise network-DP epsilon (linear-gossip DP defenses), or
    why it does not apply; None for a defense without linear gossip or noise multipliers, or
    where no victim has the placement."""
    trainer = built.trainer
    z = trainer.release_noise()
    gossip = None if z is None else type(trainer).linear_gossip(observe(built))
    if gossip is None:
        return None
    try:
        out = _pairwise(built, cfg, spec, gossip, z)
    except NotApplicable as why:
        return {"applicable": False, "reason": str(why)}
    if not out:
        return None
    keys = ("network_mu", "network_epsilon", "local_full_epsilon", "calibrated_epsilon",
            "epsilon", "visibility")
    return {**{k: float(np.mean([o[k] for o in out])) for k in keys},
            "assumptions": out[0]["assumptions"]}


def _pairwise(built: Built, cfg: LeakageConfig, spec: str, gossip: LinearGossip,
              z: np.ndarray) -> list[NetworkEpsilon]:
    """`pairwise_epsilon` of each victim that has the placement `spec`."""
    out = []
    for v in range(cfg.victims):
        try:
            th = _threat(spec, built, v)
        except ConfigError:
            continue
        cal = claims(built.privacy(), v).get("calibrated", {}).get("epsilon")
        out.append(pairwise_epsilon(gossip, built.ctx.topology, th, v, z, built.ctx.run.delta,
                                    cal))
    return out


def _epsilons(built: Built) -> dict[str, float | None]:
    c = claims(built.privacy(), 0)
    return {m: c[m].get("epsilon") for m in ("paper", "calibrated") if m in c}


def _check_distances(cfg: LeakageConfig, built: Built) -> None:
    """Refuse a hop distance at which no victim has a curious node on the run's graph (it would
    train for nothing); a distance some victims lack is "not applicable" for those alone."""
    reach = [hop_distances(built.ctx.topology, v) for v in range(cfg.victims)]
    farthest = max(max(dist) for dist in reach)
    for h in cfg.distances:
        if not any(h in dist for dist in reach):
            raise ConfigError(f"--distances {h}: no victim has a node {h} hops away on the "
                              f"{built.ctx.run.topology} graph of {cfg.nodes} nodes (distances "
                              f"there: 1..{farthest}); accepted: 1..{farthest}")


def run_leakage(cfg: LeakageConfig, progress: Any = None) -> LeakageMap:
    """The leakage map of every (defense, epsilon): JSON-ready results (format LEAKAGE_FORMAT).

    Args:
        progress: optional callable taking one line of text per finished (defense, epsilon);
            given, every phase (the checks, each run's training, the inversions, the
            placements' attacks) also shows as a bar on a terminal, a heartbeat line in a log
            (`privbench.progress`).
    """
    load_plugins()
    for d in cfg.defenses:
        DEFENSES.get(d)  # unknown names fail before any training
    if cfg.inversion != "auto":
        ATTACKS.get(cfg.inversion)
    grid = [(d, eps) for d in cfg.defenses
            for eps in (cfg.eps if DEFENSES.get(d).private
                        else (float("inf"),))]
    show = progress is not None
    # every run built (data, graph, privacy calibration) before any trains
    with Phase(f"checking {len(grid)} cell(s) before training", len(grid), "cell",
               enabled=show) as bar:
        for d, eps in grid:
            for members, batch in ((1, 1), (cfg.members, cfg.members)):
                try:
                    _check_distances(cfg, build(cfg.run(eps, members, batch), d))
                except PrivbenchError as exc:  # name the run: the grid may hold many
                    raise type(exc)(f"{d} eps={eps:g}: {exc}") from None
            bar.update()
    cells = []
    for k, (d, eps) in enumerate(grid, 1):
        start = time.perf_counter()
        setting = "no DP" if np.isinf(eps) else f"ε={eps:g}"
        cells.append(_cell(cfg, d, eps, f"cell {k} of {len(grid)} ({d} {setting})"
                           if show else None))
        if progress:
            progress(f"{d} eps={eps:g}: {time.perf_counter() - start:.0f} s")
    return {"format": LEAKAGE_FORMAT, "config": cast(LeakageConfigDict, to_dict(cfg)),
            "environment": environment(torch.device("cpu")),  # every cell trains on the CPU
            "placements": [{"label": lab, "spec": s, "distance": h, "size": m}
                           for lab, s, h, m in placements(cfg)],
            "cells": cells}


def _cell(cfg: LeakageConfig, defense: str, eps: float, where: str | None = None
          ) -> LeakageCell:
    """One (defense, epsilon): both runs, then every placement; `where` names the cell in its
    phases' progress (None: no progress shown)."""
    def phase(what: str, total: int | None = None, unit: str = "it") -> Phase:
        return Phase(f"{where}: {what}", total, unit, enabled=where is not None)

    inv_run = _train(cfg, defense, eps, 1, 1,
                     phase("train (batch-1 run)", cfg.rounds, "round"))
    mia_run = _train(cfg, defense, eps, cfg.members, cfg.members,
                     phase(f"train (membership run, {cfg.members} members per node)",
                           cfg.rounds, "round"))
    with phase("inversion of every placement's views"):
        inversions = _inversions(inv_run, cfg)
    rows = []
    spots = placements(cfg)
    with phase("membership attack and network DP", len(spots), "placement") as bar:
        for label, spec, h, m in spots:
            rows.append({"placement": label, "spec": spec, "distance": h, "size": m,
                         "inversion": inversions[spec],
                         "membership": _membership(mia_run, cfg, spec),
                         "network_dp": _network(mia_run, cfg, spec)})
            bar.update()
    return {"defense": defense, "epsilon": None if np.isinf(eps) else eps,
            "claimed_epsilon": _epsilons(mia_run) if np.isfinite(eps) else {},
            "topology": mia_run.ctx.topology.graphs.any(dim=0).int().tolist(),
            "rows": rows}


def config_from(overrides: dict[str, Any]) -> LeakageConfig:
    """A `LeakageConfig` from CLI-style overrides (unknown keys are an error)."""
    names = {f.name for f in dataclasses.fields(LeakageConfig)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ConfigError(f"unknown leakage option(s) {bad}; accepted: {sorted(names)}")
    cfg = replace(LeakageConfig(), **{k: v for k, v in overrides.items() if v is not None})
    load_plugins()
    for d in cfg.defenses:
        DEFENSES.get(d)  # unknown names fail before any training or writing
    if cfg.inversion != "auto":
        ATTACKS.get(cfg.inversion)
    return cfg
