"""Membership inference glue: candidates, observed models, reference runs, scores -> JSON.

What the CLI / runner calls to grade a membership attack against a victim node (or several,
pooled: each candidate is scored against its own node, which buys the non-members needed to
resolve low FPRs):

* candidates: the victim's members `NodeData.x[v, :counts[v]]` (label 1) and its held-out samples
  `NodeData.x_out[v, :counts_out[v]]` (label 0), the foundation's split;
* the target model *as the attacker observes it* (`observed_model`): from the recorded messages,
  push-sum `model` payload / `weight` payload of the victim's last recorded round (the de-biased
  model z = x^{t+1/2} / w the victim broadcast), or the gossip `model` payload;
* model-level attacks (mia_threshold, lira, rmia) get signals of that model and, when they need
  them, of reference models; message-level attacks (mia_message) get the defense's
  `gradient_views` of the victim for every observed round;
* the result: AUC, TPR at 0.1% / 1% FPR (resolved or not), downsampled ROC curves, the empirical
  epsilon lower bound (Clopper-Pearson over the ROC) next to the victim's claimed epsilon (paper and
  calibrated, from `Built.privacy()`), n_members, n_nonmembers.

This module is composition (like the runner): it imports the registries' attacks and defenses
through `load_plugins` and `attacks._mia`'s signal helpers.

Reference models (the faithful choice). The victim's model is not a model
trained alone on its data: it is one node of a decentralized run, mixing every node's updates. A
reference model must be produced by the same process, so each reference model is one whole copy of
the victim's system: the same defense and hyper-parameters, the same (public) topology, the same
number of nodes with the same local dataset sizes, trained for the same rounds, and read off the
same way (`observed_model` of the victim's slot). In copy k each victim's slot trains on a random
subset of that victim's candidates of its member count (online: balanced membership, every
candidate IN in the same number of copies, K c / N of them up to one; with holdout = 0.5 that is
exactly half, as paired complementary halves: copy 2k + 1 trains on the candidates copy 2k left
out, as in Carlini et al. and Zarifzadeh et al.; in_mask records which; offline: population
samples only), and
every other slot on samples of the attacker's population: the dataset's training split minus the
victims' candidates. All K copies are trained
at once as ONE run of K * n nodes on a block-diagonal topology (K disjoint copies of the victim's
graph), so node state is stacked (K n, d) and nothing loops over reference models. Offline
attacks use only the OUT entries of the same reference set (as LiRA's reference code does).
RMIA's population z is the dataset's test split, which no model trains on.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from privbench.audit.attack import reads_messages
from privbench.config import RunConfig, replace_checked
from privbench.data.datasets import NodeData, load_dataset
from privbench.engine.messages import MessageBus, RecordPolicy
from privbench.engine.trainer import Context
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError, NotApplicable
from privbench.metrics.audit import eps_lower_bound_roc
from privbench.metrics.roc import CI_LEVEL, roc_curve, roc_steps, roc_summary
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS, DEFENSES
from privbench.seeding import Streams
from privbench.threat.gossip_inversion import view_source
from privbench.threat.observation import Observation, ThreatModel, observe, threat_for
from privbench.topology import Topology

DEFAULT_REFERENCE_MODELS = 16


# ----------------------------------------------------------------------------------- observation
MODEL_KINDS = ("model", "shared")


def observed_model(obs: Observation, victim: int, round: int | None = None,
                   model_kind: str | None = None, weight_kind: str = "weight") -> Tensor:
    """The victim's model as the attacker sees it in messages.

    Push-sum (a `weight` record exists for the round): the victim's model payload divided by its
    `weight` payload (x_i^{t+1/2} / w_i^t, the de-biased model it broadcast). Gossip: the model
    payload itself. The model payload is the `model` kind, else `shared` (DPPS, whose `shared`
    numerator is the whole model when every layer is shared). `round=None` takes the last round
    in which the victim's model is observed.

    Raises:
        NotApplicable: when no model message of the victim is observed (in that round), or the
            message carries only part of the model (PartPSP's shared layers).
    """
    kind = model_kind or next((k for k in MODEL_KINDS if obs.log.rounds(k)), MODEL_KINDS[0])
    rounds = obs.log.rounds(kind) if round is None else [round]
    for t in reversed(rounds):
        rec = obs.log.get(t, kind)
        x = rec.sent_by(victim) if rec is not None else None
        if x is None:
            continue
        if x.numel() != obs.fm.d:
            raise NotApplicable(f"node {victim}'s {kind!r} message holds {x.numel()} of the "
                                f"model's {obs.fm.d} parameters, not a whole model")
        wrec = obs.log.get(t, weight_kind)
        if wrec is None:
            return x.float()
        w = wrec.sent_by(victim)
        if w is None:
            raise NotApplicable(f"node {victim}'s round-{t} {weight_kind!r} message is not "
                                "observed, so its de-biased model is unknown")
        return (x / w.reshape(-1)[0]).float()
    where = "any round" if round is None else f"round {round}"
    raise NotApplicable(f"no {kind!r} message of node {victim} is observed in {where}")


def last_observed_round(obs: Observation, victim: int, model_kind: str | None = None) -> int:
    """The last round in which a model message of the victim is observed."""
    kind = model_kind or next((k for k in MODEL_KINDS if obs.log.rounds(k)), MODEL_KINDS[0])
    for t in reversed(obs.log.rounds(kind)):
        rec = obs.log.get(t, kind)
        if rec is not None and rec.sent_by(victim) is not None:
            return t
    raise NotApplicable(f"no {kind!r} message of node {victim} is observed")


def candidates(data: NodeData, victim: int) -> tuple[Tensor, Tensor, np.ndarray]:
    """The victim's members then held-out samples.

    Returns:
        x (N, C, H, W), y (N,), labels (N,) True for members.
    """
    c, co = int(data.counts[victim]), int(data.counts_out[victim])
    if c == 0 or co == 0:
        raise ConfigError(f"node {victim} needs members and held-out samples for membership "
                          f"inference (has {c} and {co}; set holdout > 0)")
    x = torch.cat([data.x[victim, :c], data.x_out[victim, :co]])
    y = torch.cat([data.y[victim, :c], data.y_out[victim, :co]])
    return x, y, np.r_[np.ones(c, dtype=bool), np.zeros(co, dtype=bool)]


def subsample(cands: tuple[Tensor, Tensor, np.ndarray], cap: int,
              gen: torch.Generator) -> tuple[Tensor, Tensor, np.ndarray]:
    """At most `cap` members and `cap` held-out samples of `candidates`, drawn uniformly without
    replacement by `gen` (members still first; `cap` 0: all of them, `gen` untouched)."""
    x, y, labels = cands
    if cap <= 0 or (labels.sum() <= cap and (~labels).sum() <= cap):
        return cands
    keep = []
    for side in (np.flatnonzero(labels), np.flatnonzero(~labels)):
        pick = torch.randperm(len(side), generator=gen)[:cap].sort().values.numpy()
        keep.append(side[pick])
    idx = torch.from_numpy(np.concatenate(keep))
    return x[idx], y[idx], labels[idx.numpy()]


# ------------------------------------------------------------------------------ reference runs
def block_topology(topo: Topology, copies: int) -> Topology:
    """`copies` disjoint copies of `topo` (node k * n + i is node i of copy k)."""
    graphs = torch.stack([torch.block_diag(*([g] * copies)) for g in topo.graphs])
    return Topology(f"{topo.name}x{copies}", topo.n * copies, graphs, topo.undirected)


def _stack(xs: list[Tensor], ys: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Pad per-node sample lists to (m, M, ...) with counts."""
    m = max(len(y) for y in ys)
    x = torch.zeros(len(xs), m, *xs[0].shape[1:], dtype=xs[0].dtype)
    y = torch.zeros(len(ys), m, dtype=torch.int64)
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        x[i, :len(yi)], y[i, :len(yi)] = xi, yi
    return x, y, torch.tensor([len(v) for v in ys])


def reference_data(data: NodeData, victims: list[int], pool_x: Tensor, pool_y: Tensor,
                   cands: list[tuple[Tensor, Tensor]], copies: int, online: bool,
                   gen: torch.Generator) -> tuple[NodeData, list[np.ndarray]]:
    """Node data of `copies` reference systems and, per victim, the (copies, N_v) IN mask.

    Slot (k, v) of a victim trains on a subset of v's candidates of v's member count c_v (online)
    or on population samples (offline); every other slot (k, j) on counts[j] population samples,
    drawn without replacement within a copy. Online membership is balanced: each copy takes the
    c_v candidates that are IN in the fewest copies so far (random order among equals), so every
    candidate is IN in floor or ceil(copies * c_v / N_v) copies; when N_v = 2 c_v, copies 2k and
    2k + 1 are complementary halves and every candidate is IN in exactly half of an even number
    of copies.
    """
    n = data.n
    counts = data.counts.cpu().tolist()
    own = {v: i for i, v in enumerate(victims)} if online else {}
    need = sum(c for j, c in enumerate(counts) if j not in own)
    if need > len(pool_y):
        raise ConfigError(f"reference copies need {need} population samples per copy; the "
                          f"population holds {len(pool_y)} (lower nodes or max_per_node)")
    masks = [np.zeros((copies, len(c[1])), dtype=bool) for c in cands]
    times_in = [torch.zeros(len(c[1])) for c in cands]  # per victim: copies each candidate is IN
    xs, ys = [], []
    for k in range(copies):  # builds data once per copy; training itself is one stacked run
        perm = torch.randperm(len(pool_y), generator=gen)
        pos = 0
        for j in range(n):
            if j in own:
                cx, cy = cands[own[j]]
                ti = times_in[own[j]]
                pick = torch.argsort(ti + torch.rand(len(cy), generator=gen))[:counts[j]]
                ti[pick] += 1
                masks[own[j]][k, pick.numpy()] = True
                xs.append(cx[pick])
                ys.append(cy[pick])
            else:
                idx = perm[pos:pos + counts[j]]
                pos += counts[j]
                xs.append(pool_x[idx])
                ys.append(pool_y[idx])
    x, y, cnt = _stack(xs, ys)
    empty_i = torch.zeros(n * copies, 0, dtype=torch.int64)
    nd = NodeData(x, y, torch.full(y.shape, -1), cnt, x[:, :0], empty_i, empty_i,
                  torch.zeros(n * copies, dtype=torch.int64), data.x_test.cpu(),
                  data.y_test.cpu(), data.num_classes)
    return nd, masks


def population(run: RunConfig, data: NodeData, victims: list[int]) -> tuple[Tensor, Tensor]:
    """The attacker's population: the dataset's training split minus the victims' candidates."""
    ds = load_dataset(run.dataset, run.data_root, run.download)
    used = torch.cat([torch.cat([data.idx[v], data.idx_out[v]]) for v in victims]).cpu()
    keep = torch.ones(len(ds.y_train), dtype=torch.bool)
    keep[used[used >= 0]] = False
    return ds.x_train[keep], ds.y_train[keep]


def _reference_system(obs: Observation, data: NodeData, victims: list[int], copies: int,
                      online: bool, gen: torch.Generator, device: torch.device,
                      policy: RecordPolicy, last_round: int) -> tuple[Any, list[np.ndarray]]:
    """Train `copies` reference systems as one stacked run up to `last_round`, recording
    `policy`; return the trainer (its ctx holds the log) and per victim the (copies, N_v) IN
    mask."""
    load_plugins()
    run = obs.run
    cls = DEFENSES.get(obs.defense)
    cands = [tuple(t.cpu() for t in candidates(data, v)[:2]) for v in victims]
    pool_x, pool_y = population(run, data, victims)
    ref_data, masks = reference_data(data, victims, pool_x, pool_y, cands, copies, online, gen)
    ref_run = replace_checked(run, {"nodes": data.n * copies})
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    topo = block_topology(obs.topology, copies)
    ctx = Context(ref_run, obs.fm, ref_data.to(device), topo, MessageBus(cls.kinds, policy),
                  GroundTruth(RecordPolicy.none()), Streams(seed, device), device)
    trainer = cls(obs.defense_cfg, ctx)
    for t in range(last_round + 1):
        trainer.round(t)
    return trainer, masks


def train_reference_models(obs: Observation, data: NodeData, victims: list[int], copies: int,
                           online: bool, gen: torch.Generator, device: torch.device,
                           observe_round: int | None = None) -> tuple[Tensor, list[np.ndarray]]:
    """Train `copies` reference systems as one stacked run; return their victims' observed models.

    Returns:
        (copies, V, d) reference models (read like the target: `observed_model` of each copy's
        victim slots) and per victim the (copies, N_v) IN mask of its candidates.
    """
    n = data.n
    t_obs = obs.run.rounds - 1 if observe_round is None else observe_round
    slots = frozenset(k * n + v for k in range(copies) for v in victims)
    policy = RecordPolicy(rounds=frozenset({t_obs}), senders=slots)
    trainer, masks = _reference_system(obs, data, victims, copies, online, gen, device, policy,
                                       t_obs)
    ctx = trainer.ctx
    ref_obs = dataclasses.replace(obs, log=ctx.bus.log, topology=ctx.topology,
                                  threat=ThreatModel("eavesdropper"), run=ctx.run)
    models = torch.stack([torch.stack([observed_model(ref_obs, k * n + v, t_obs)
                                       for v in victims]) for k in range(copies)])
    return models, masks  # (copies, V, d)


STATISTIC_COPIES = 2  # reference systems the message attack picks its statistic on


def choose_statistic(observations: dict[int, Observation], data: NodeData, atk: Any,
                     gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    """Pick the message statistic on reference systems, never on the target's labels.

    Two reference copies of the whole system (same defense, config, topology and sizes; each
    victim slot trains on complementary halves of its candidates, the others on population
    data) are trained and recorded like the target; each victim's slot is attacked through the
    same threat model (observers mapped into the copy) with every statistic, and the one with
    the higher mean AUC over (copy, victim) pairs (each scored against its own known
    membership; not pooled, since the statistics' scales differ between models) is graded on
    the target.

    Returns:
        {"statistic": chosen, "reference_auc": {statistic: AUC}} (the label-free R^2 rule of
        `attacks.mia_message` decides, with "reference_auc" None, when no reference view exists
        or the reference run diverged).
    """
    victims = list(observations)
    obs = observations[victims[0]]
    n = data.n
    trainer, masks = _reference_system(obs, data, victims, STATISTIC_COPIES, True, gen, device,
                                       RecordPolicy(), obs.run.rounds - 1)
    ctx = trainer.ctx
    system = SimpleNamespace(trainer=trainer, ctx=ctx, defense=obs.defense)  # observe's input
    defense = DEFENSES.get(obs.defense)
    by_stat: dict[str, list[float]] = {}
    for k in range(STATISTIC_COPIES):
        for i, v in enumerate(victims):
            th = observations[v].threat
            ref_th = ThreatModel(th.kind, tuple(k * n + o for o in th.observers))
            ref_obs = observe(system, ref_th)
            views, _ = _victim_views(defense, ref_obs, k * n + v,
                                     atk.attacked_rounds(obs.run.rounds))
            if not views:
                continue
            lab = masks[i][k]
            if lab.all() or not lab.any():
                continue
            x, y, _ = candidates(data, v)
            scores, _ = atk.score_all(obs.fm, views, x.to(device), y.to(device))
            if not all(np.isfinite(sc).all() for sc in scores.values()):
                return {"statistic": None, "reference_auc": None}  # the reference run diverged
            for name, sc in scores.items():  # per (copy, victim): one model's power, unpooled
                if name in atk.statistics():  # the combined statistics the target always has
                    by_stat.setdefault(name, []).append(roc_curve(sc, lab).auc)
    if not by_stat or not all(by_stat.values()):
        return {"statistic": None, "reference_auc": None}
    aucs = {name: float(np.mean(v)) for name, v in by_stat.items()}
    return {"statistic": max(aucs, key=lambda name: aucs[name]), "reference_auc": aucs}


# --------------------------------------------------------------------------------- claims, JSON
def claims(privacy: list[dict[str, Any]], victim: int) -> dict[str, Any]:
    """The victim's claimed epsilon per mode ("paper", "calibrated") from `trainer.privacy()`."""
    from privbench.results.store import headline_reports

    out: dict[str, Any] = {}
    mine = [r for r in privacy if r.get("node", victim) == victim]
    for mode in ("paper", "calibrated"):
        for rep in headline_reports(mine, mode).values():
            eps = rep.get("epsilon")
            out[mode] = {"epsilon": math.inf if eps == "inf" else float(eps),
                         "delta": float(rep.get("delta", 0.0)),
                         "accountant": rep.get("accountant"), "unit": rep.get("unit"),
                         "uncovered": rep.get("uncovered", [])}
    return out


def ci_level(selected_of: int = 1) -> float:
    """The confidence of each interval when the graded scores are the best of `selected_of`
    score vectors picked on the same labels: Bonferroni, 1 - 0.05 / m, so that what is graded
    still holds at 95 %."""
    return 1 - (1 - CI_LEVEL) / selected_of


def grade(scores: np.ndarray, labels: np.ndarray, claimed: dict[str, Any],
          delta: float, level: float = CI_LEVEL) -> dict[str, Any]:
    """ROC summary + empirical epsilon lower bound (JSON-ready), every interval and the bound's
    confidence at `level` (`ci_level`)."""
    out = roc_summary(scores, labels, level=level)
    out["ci_level"] = level
    out["roc_steps"] = roc_steps(roc_curve(scores, labels))
    for f in ("0.1%", "1%", "10%"):
        out[f"tpr_at_{f}_fpr_resolved"] = out[f"tpr_at_{f}_fpr"] is not None
    d = claimed.get("calibrated", claimed.get("paper", {})).get("delta", delta)
    out["empirical_epsilon"] = eps_lower_bound_roc(scores, labels, delta=d, alpha=1 - level)
    out["claimed_epsilon"] = claimed
    return out


# ------------------------------------------------------------------------------------ the glue
def _not_applicable_summary(reasons: list[str]) -> dict[str, int]:
    """Count not-applicable reasons by kind (node and round numbers replaced by N)."""
    out: dict[str, int] = {}
    for r in reasons:
        key = re.sub(r"\d+", "N", r)
        out[key] = out.get(key, 0) + 1
    return out


def _victim_views(defense: Any, obs: Observation, victim: int,
                  rounds: frozenset[int] | None = None) -> tuple[list[Any], list[str]]:
    """The victim's gradient views in every recorded round (of `rounds` only, when given), and
    why the other rounds gave none (a source with `all_views`, e.g. gossip inversion, gives them
    all at once)."""
    if hasattr(defense, "all_views"):
        return [v for v in defense.all_views(obs, victim)
                if rounds is None or v.round in rounds], []
    views, reasons = [], []
    for t in obs.log.rounds():
        if rounds is not None and t not in rounds:
            continue
        try:
            views += defense.gradient_views(obs, victim, [t])
        except NotApplicable as exc:
            reasons.append(str(exc))
    return views, reasons


def _message_scores(atk: Any, observations: dict[int, Observation],
                    cands: list[tuple[Tensor, Tensor, np.ndarray]], device: torch.device,
                    source: Any = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Per statistic, the message-level scores of every victim's candidates (concatenated), and
    info: views used, rounds not applicable (with their reasons), the statistic graded and the
    regression fit its label-free rule read (`attacks.mia_message`)."""
    obs = observations[next(iter(observations))]
    defense = source or view_source(DEFENSES.get(obs.defense), obs)
    if not hasattr(defense, "gradient_views"):
        raise NotApplicable(f"defense {obs.defense!r} provides no gradient views")
    parts: list[dict[str, np.ndarray]] = []
    used, reasons, explained, chance = 0, [], [], []
    rounds = atk.attacked_rounds(obs.run.rounds)
    for v, (x, y, _) in zip(observations, cands, strict=True):
        views, mine = _victim_views(defense, observations[v], v, rounds)
        if not views:
            raise NotApplicable(mine[0] if mine else f"no round of node {v} observed")
        scores, fit = atk.score_all(obs.fm, views, x.to(device), y.to(device))
        parts.append(scores)
        explained.append(fit["explained"])
        chance.append(fit["chance"])
        used, reasons = used + len(views), reasons + mine
    fit = {"explained": float(np.mean(explained)), "chance": float(np.mean(chance))}
    chosen = atk.choose(fit)
    info = {"level": "message", "rounds_attacked": used, "rounds_not_applicable": len(reasons),
            "not_applicable_reasons": _not_applicable_summary(reasons), "statistic": chosen,
            "statistic_rule": ("label-free: regression when the candidates' gradients explain "
                               "R^2 >= (1 + N/d) / 2 of the views (raw batch gradients), else "
                               "cosine (noise-dominated views)")
            if len(atk.statistics()) > 1 else "configured", "regression_fit": fit}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, info


def membership_scores(observations: dict[int, Observation], data: NodeData, attack: str,
                      attack_cfg: dict[str, Any] | None, gen: torch.Generator,
                      device: torch.device, reference_models: int = DEFAULT_REFERENCE_MODELS,
                      source: Any = None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Scores of the victims' candidates under `attack` (each scored against its own node).

    Args:
        observations: victim -> what the attacker of that victim observes (its threat model).
        source: where message-level attacks get gradient views (default: the defense, or
            gossip inversion for a placed threat model: `gossip_inversion.view_source`).

    Returns:
        scores (N,), labels (N,) and info (attack level, rounds used, ...), candidates ordered
        victim by victim, members first.

    Raises:
        NotApplicable: when the threat model cannot observe what the attack needs.
    """
    load_plugins()
    victims = list(observations)
    cls = ATTACKS.get(attack)
    atk = cls(replace_checked(cls.Config(), attack_cfg or {}, where="attack"))
    cap = atk.candidate_cap() if reads_messages(type(atk)) else 0
    cands = [subsample(candidates(data, v), cap, gen) for v in victims]
    labels = np.concatenate([c[2] for c in cands])
    if reads_messages(type(atk)):
        scores, info = _message_level(atk, observations, data, cands, labels, cap, gen, device,
                                      source)
    else:
        scores, info = _model_level(atk, observations, data, cands, gen, device,
                                    reference_models)
    return scores, labels, info


def _message_level(atk: Any, observations: dict[int, Observation], data: NodeData,
                   cands: list[tuple[Tensor, Tensor, np.ndarray]], labels: np.ndarray, cap: int,
                   gen: torch.Generator, device: torch.device,
                   source: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """`membership_scores` for a message-level attack: every statistic's scores, and the one
    graded by the attack's `select` rule (the strongest on `labels`, or the one reference
    systems choose)."""
    scores_all, info = _message_scores(atk, observations, cands, device, source)
    info["scores_by_statistic"] = scores_all
    info["candidate_cap"] = cap
    if len(scores_all) > 1 and atk.cfg.select == "strongest":
        aucs = {k: roc_curve(v, labels).auc if np.isfinite(v).all() else -np.inf
                for k, v in scores_all.items()}
        info["statistic"] = max(aucs, key=lambda name: aucs[name])
        info["selected_of"] = len(scores_all)
        info["statistic_rule"] = (
            f"the stronger of {len(scores_all)} on the audited candidates (an auditor's "
            f"worst case); intervals and empirical ε at the Bonferroni level "
            f"1 - 0.05/{len(scores_all)} per statistic, so the graded one's hold at 95 %")
    elif len(scores_all) > 1 and atk.cfg.select == "reference":
        pick = choose_statistic(observations, data, atk, gen, device)
        info["reference_auc"] = pick["reference_auc"]
        if pick["statistic"] is not None:
            info["statistic"] = pick["statistic"]
            info["statistic_rule"] = (
                f"chosen on {STATISTIC_COPIES} reference systems (complementary halves of "
                "the candidates, trained and observed like the target): the higher "
                "reference AUC; no target label used")
        else:
            info["statistic_rule"] += " (fallback: no usable reference view)"
    return scores_all[info["statistic"]], info


def _model_level(atk: Any, observations: dict[int, Observation], data: NodeData,
                 cands: list[tuple[Tensor, Tensor, np.ndarray]], gen: torch.Generator,
                 device: torch.device, reference_models: int) -> tuple[np.ndarray, dict[str, Any]]:
    """`membership_scores` for a model-level attack: each victim's candidates scored against
    the victim's last observed model (and reference models where the attack needs them)."""
    from privbench.threat.signals import ModelMIAInput, model_signals

    victims = list(observations)
    obs = observations[victims[0]]  # public context (run, defense, topology, model) is shared
    fm = obs.fm
    t_obs = max(last_observed_round(observations[v], v) for v in victims)
    targets = torch.stack([observed_model(observations[v], v, t_obs)
                           for v in victims]).to(device)  # (V, d)
    info: dict[str, Any] = {"level": "model", "observed_round": t_obs}
    refs, masks = None, None
    if atk.needs_reference:
        refs, masks = train_reference_models(obs, data, victims, reference_models,
                                             atk.needs_in_models, gen, device, t_obs)
        refs = refs.to(device)  # (K, V, d)
        info.update(reference_models=reference_models, online=atk.needs_in_models)
    xt, yt = data.x_test.to(device), data.y_test.to(device)
    scores: list[np.ndarray] = []
    for i, (x, y, _) in enumerate(cands):
        x, y = x.to(device), y.to(device)
        target = targets[i:i + 1]
        if refs is None:
            inp = ModelMIAInput(model_signals(fm, target, x, y))
        else:
            in_mask = masks[i] if atk.needs_in_models else np.zeros((reference_models, len(y)),
                                                                    dtype=bool)
            inp = ModelMIAInput(model_signals(fm, target, x, y),
                                model_signals(fm, refs[:, i], x, y), in_mask,
                                model_signals(fm, target, xt, yt),
                                model_signals(fm, refs[:, i], xt, yt))
        scores.append(atk.score(inp))
    return np.concatenate(scores), info


def run_membership(built: Any, victims: int | list[int], attack: str,
                   attack_cfg: dict[str, Any] | None = None, gen: torch.Generator | None = None,
                   threat: ThreatModel | None = None,
                   reference_models: int = DEFAULT_REFERENCE_MODELS) -> dict[str, Any]:
    """Grade `attack` against one victim node (or several, pooled) of a built, trained run.

    The threat model defaults, for each victim, to a curious neighbour: the victim's first
    out-neighbour (each victim is attacked by its own neighbour). Pooling victims scores each
    candidate against its own node's observed model and concatenates, which buys enough
    non-members to resolve low FPRs. When the threat model cannot observe what the attack needs
    the result says {"applicable": False, "reason": ...}.

    Returns:
        JSON-ready dict: auc, tpr_at_0.1%_fpr / tpr_at_1%_fpr (None when unresolved) with
        *_resolved flags, tpr_at_0_fpr, roc {linear, log}, empirical_epsilon (Clopper-Pearson lower
        bound), claimed_epsilon {paper, calibrated} of the first victim, claimed_per_victim,
        n_members, n_nonmembers, and the attack / threat / victims used.
    """
    ctx = built.ctx
    vs = [victims] if isinstance(victims, int) else list(victims)
    for v in vs:
        if not 0 <= v < ctx.n:
            raise ConfigError(f"victim must be a node in [0, {ctx.n - 1}], got {v}")
    threats = {v: threat or threat_for("neighbour", ctx.topology, v) for v in vs}
    gen = gen or ctx.streams.fresh("mia", "attack", device="cpu")
    observations = {v: observe(built, th) for v, th in threats.items()}
    privacy = built.privacy()  # the trainer's reports, or a saved run's
    per_victim = {str(v): claims(privacy, v) for v in vs}
    claimed = per_victim[str(vs[0])]
    load_plugins()
    cls = ATTACKS.get(attack)
    resolved = dataclasses.asdict(replace_checked(cls.Config(), attack_cfg or {}, where="attack"))
    head = {"attack": attack, "attack_config": attack_cfg or {},
            "attack_config_resolved": resolved, "defense": built.defense,
            "victims": vs,
            "threat": [{"victim": v, "kind": th.kind, "observers": list(th.observers)}
                       for v, th in threats.items()],
            "claimed_per_victim": per_victim}
    try:
        scores, labels, info = membership_scores(observations, ctx.data, attack, attack_cfg, gen,
                                                 ctx.device, reference_models)
    except NotApplicable as exc:
        return {**head, "applicable": False, "reason": str(exc), "claimed_epsilon": claimed}
    if not np.isfinite(scores).all():
        return {**head, "applicable": False, "claimed_epsilon": claimed, **info,
                "reason": f"{int((~np.isfinite(scores)).sum())} non-finite scores: the observed "
                          "model or messages are not finite (training diverged)"}
    by_stat = info.pop("scores_by_statistic", None)
    level = ci_level(info.get("selected_of", 1))
    if by_stat is not None and len(by_stat) > 1:
        info["statistics"] = {k: _brief(v, labels, level) for k, v in by_stat.items()}
    return {**head, "applicable": True, **info,
            **grade(scores, labels, claimed, ctx.run.delta, level)}


BRIEF_KEYS = ("auc", "auc_ci", "tpr_at_0.1%_fpr", "tpr_at_0.1%_fpr_ci", "tpr_at_1%_fpr",
              "tpr_at_1%_fpr_ci", "tpr_at_10%_fpr", "tpr_at_10%_fpr_ci", "tpr_at_0_fpr")


def _brief(scores: np.ndarray, labels: np.ndarray, level: float = CI_LEVEL) -> dict[str, Any]:
    """AUC and TPRs with their intervals (at `level`) of one statistic's scores (None when not
    finite)."""
    if not np.isfinite(scores).all():
        return {"auc": None, "reason": "non-finite scores"}
    summ = roc_summary(scores, labels, level=level)
    return {k: summ[k] for k in BRIEF_KEYS}


def run_membership_saved(folder: str | Path, victims: int | list[int], attack: str,
                         attack_cfg: dict[str, Any] | None = None,
                         gen: torch.Generator | None = None, threat: ThreatModel | None = None,
                         reference_models: int = DEFAULT_REFERENCE_MODELS,
                         device: str | None = None) -> dict[str, Any]:
    """`run_membership` on a run saved by `privbench train --out folder`.

    The public context (data split, model, topology, shared initialisation) is rebuilt from the
    saved run configuration (all deterministic in its seed), the message log is read from
    `messages.safetensors`, and the claims from the saved `privacy` entries. Nothing is trained
    except reference models.
    """
    from privbench.engine.messages import MessageLog
    from privbench.engine.runner import build, check_split
    from privbench.results.store import read_results

    folder = Path(folder)
    saved = read_results(folder / "results.json")
    over = {} if device is None else {"device": device}
    run = replace_checked(RunConfig(), {**saved["run"], **over}, where="run")
    built = build(run, saved["defense"], saved.get("defense_config") or {})
    check_split(built, folder)
    built.ctx.bus.log = MessageLog.load(folder)
    built.saved_privacy = saved.get("privacy") or []
    return run_membership(built, victims, attack, attack_cfg, gen, threat, reference_models)


# ------------------------------------------------------------------------- one-run canary audit
def with_extra_members(data: NodeData, victim: int, x_extra: Tensor, y_extra: Tensor) -> NodeData:
    """A copy of `data` where node `victim` also trains on x_extra (k, C, H, W), y_extra (k,)."""
    c = int(data.counts[victim])
    k = len(y_extra)
    m = max(data.x.shape[1], c + k)
    pad = m - data.x.shape[1]
    x = torch.cat([data.x, data.x.new_zeros(data.n, pad, *data.x.shape[2:])], dim=1)
    y = torch.cat([data.y, data.y.new_zeros(data.n, pad)], dim=1)
    idx = torch.cat([data.idx, data.idx.new_full((data.n, pad), -1)], dim=1)
    x[victim, c:c + k] = x_extra.to(x)
    y[victim, c:c + k] = y_extra.to(y)
    idx[victim, c:c + k] = -1  # canaries are not dataset members
    counts = data.counts.clone()
    counts[victim] = c + k
    return dataclasses.replace(data, x=x, y=y, idx=idx, counts=counts)


def canary_audit(run: RunConfig, defense: str, victim: int, canaries: int = 200,
                 attack: str = "mia_message", attack_cfg: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None, gen: torch.Generator | None = None,
                 threat: ThreatModel | None = None, k_plus: int | None = None,
                 k_minus: int | None = None, mislabel: bool = True,
                 kind: str = "input") -> dict[str, Any]:
    """One-run audit (Steinke, Nasr, Jagielski 2023) of node `victim`'s sample-level claim with
    input-space canaries (the white-box gradient canaries are `privbench.audit.canary_audit`).

    `canaries` records, each added to the victim's training data with probability 1/2; the run is
    trained once; every canary is scored; the top k+ are guessed "in", the bottom k- "out" (fixed
    a priori: m / 4 each by default), and the exact binomial test gives the epsilon lower bound at
    the claim's delta. The victim's claim is re-read from the trained defense (its local dataset
    grew, so its sampling rate and calibration changed accordingly).

    kind "input": samples that no node holds (the dataset's training split minus every node's
    share), relabelled to a random wrong class when `mislabel` (the strongest input-space canary in
    ML Privacy Meter's DP-audit documentation), scored by `attack` (one without reference models:
    mia_threshold or mia_message).

    Returns:
        JSON-ready dict: applicable, one_run (`one_run_audit` result), one_run_sweep (best over a
        (k+, k-) grid; optimistic), cap (the bound a perfect guesser certifies with these m, k+,
        k- and delta), claimed_epsilon, canaries, included, attack, threat (or applicable False
        with the reason when the run diverged or canaries cannot be inserted).
    """
    from privbench.engine.runner import build
    from privbench.metrics.audit import one_run_audit, one_run_audit_sweep, one_run_cap

    if kind not in CANARY_KINDS:
        raise ConfigError(f"unknown canary kind {kind!r}; accepted: {', '.join(CANARY_KINDS)}")
    load_plugins()
    base = build(run, defense, overrides)
    ctx = base.ctx
    gen = gen or ctx.streams.fresh("mia", "canary", device="cpu")
    atk = _reference_free_attack(attack, attack_cfg)
    cx, cy = _input_canaries(run, ctx.data, canaries, mislabel, gen)
    included = (torch.rand(canaries, generator=gen) < 0.5).numpy()
    inc = torch.from_numpy(included)
    try:
        built = _train_with_members(base, victim, cx[inc], cy[inc])
    except NotApplicable as exc:
        return {"kind": kind, "defense": defense, "victim": victim, "canaries": canaries,
                "applicable": False, "reason": str(exc)}
    threat = threat or threat_for("neighbour", built.ctx.topology, victim)
    obs = observe(built, threat)
    privacy = built.trainer.privacy()  # the canary run's reports, composed once
    scores = _input_canary_scores(atk, obs, type(built.trainer), victim, cx, cy, ctx)
    claimed = claims(privacy, victim)
    delta = claimed.get("calibrated", claimed.get("paper", {})).get("delta", run.delta)
    kp = canaries // 4 if k_plus is None else k_plus
    km = canaries // 4 if k_minus is None else k_minus
    head = {"kind": kind, "attack": attack,
            "defense": defense, "victim": victim, "canaries": canaries,
            "included": int(included.sum()), "mislabelled": mislabel,
            "threat": {"kind": threat.kind, "observers": list(threat.observers)},
            "claimed_epsilon": claimed,
            "cap": one_run_cap(canaries, kp + km, delta)}
    if not np.isfinite(scores).all():
        return {**head, "applicable": False,
                "reason": "non-finite canary scores: the run diverged (non-finite messages)"}
    return {**head, "applicable": True,
            "one_run": one_run_audit(scores, included, kp, km, delta),
            "one_run_sweep": one_run_audit_sweep(scores, included, delta)}


CANARY_KINDS = ("input",)


def _reference_free_attack(attack: str, attack_cfg: dict[str, Any] | None) -> Any:
    cls_atk = ATTACKS.get(attack)
    atk = cls_atk(replace_checked(cls_atk.Config(), attack_cfg or {}, where="attack"))
    if getattr(atk, "needs_reference", False):
        raise ConfigError(f"the canary audit runs one training: attack {attack!r} needs reference "
                          "models (use mia_threshold or mia_message)")
    return atk


def _input_canaries(run: RunConfig, data: NodeData, canaries: int, mislabel: bool,
                    gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """`canaries` samples no node holds, (m, C, H, W) and (m,) (labels shifted when mislabel)."""
    ds = load_dataset(run.dataset, run.data_root, run.download)
    used = torch.cat([data.idx.flatten(), data.idx_out.flatten()]).cpu()
    free = torch.ones(len(ds.y_train), dtype=torch.bool)
    free[used[used >= 0]] = False
    pool = torch.nonzero(free).flatten()
    if len(pool) < canaries:
        raise ConfigError(f"{canaries} canaries need {canaries} samples no node holds; only "
                          f"{len(pool)} are free (lower nodes or max_per_node)")
    pick = pool[torch.randperm(len(pool), generator=gen)[:canaries]]
    cx, cy = ds.x_train[pick], ds.y_train[pick].clone()
    if mislabel:
        shift = torch.randint(1, data.num_classes, (canaries,), generator=gen)
        cy = (cy + shift) % data.num_classes
    return cx, cy


def claimed_clip(cfg: Any) -> float:
    """The defense's claimed per-sample clip bound: its largest finite `clip*` config field."""
    values = [float(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
              if f.name.startswith("clip") and isinstance(getattr(cfg, f.name), (int, float))
              and math.isfinite(float(getattr(cfg, f.name)))]
    if not values:
        raise NotApplicable("the defense declares no clip bound: gradient canaries need one")
    return max(values)


def _clip_or(cfg: Any, default: float) -> float:
    """The claimed clip bound, or `default` (the canary norm) for defenses without one."""
    try:
        return claimed_clip(cfg)
    except NotApplicable:
        return default


def _gradient_canaries(base: Any, canaries: int, norm_factor: float, gen: torch.Generator
                       ) -> tuple[Any, Tensor, Tensor]:
    """A `GradientCanaries` bank on distinct random coordinates, with the zero input records
    (and labels) that carry the canaries through the data stack."""
    from privbench.engine.canaries import GradientCanaries

    d = base.ctx.fm.d
    if not 0 < canaries <= d:
        raise ConfigError(f"gradient canaries need 1 <= m <= d = {d} distinct coordinates, "
                          f"got m = {canaries}")
    if not norm_factor >= 1:
        raise ConfigError(f"canary norm factor must be >= 1 (a canary at least as large as the "
                          f"clip bound), got {norm_factor}")
    coords = torch.randperm(d, generator=gen)[:canaries]
    clip = _clip_or(base.trainer.cfg, 1.0)
    bank = GradientCanaries(coords, norm_factor * clip)
    data = base.ctx.data
    cx = torch.zeros(canaries, *data.x.shape[2:], dtype=data.x.dtype)
    return bank, cx, bank.labels(torch.arange(canaries))


def _train_with_members(base: Any, victim: int, x_extra: Tensor, y_extra: Tensor) -> Any:
    """A fresh copy of `base`'s run where `victim` also holds (x_extra, y_extra), trained."""
    from privbench.engine.loop import train
    from privbench.engine.runner import Built

    ctx = base.ctx
    cls = DEFENSES.get(base.defense)
    new_data = with_extra_members(ctx.data.to(torch.device("cpu")), victim, x_extra,
                                  y_extra).to(ctx.device)
    policy = ctx.bus.policy
    ctx2 = dataclasses.replace(ctx, data=new_data, bus=MessageBus(cls.kinds, policy),
                               truth=GroundTruth(policy), streams=Streams(ctx.run.seed, ctx.device))
    built = Built(type(base.trainer)(base.trainer.cfg, ctx2), ctx2, base.defense)
    train(built.trainer)
    return built


def _sample_rate(privacy: list[dict[str, Any]], victim: int, ctx: Context) -> float:
    """The victim's claimed sampling rate (its privacy report's), else batch / members."""
    for rep in privacy:
        if rep.get("node", victim) == victim and isinstance(rep.get("sample_rate"), (int, float)):
            return float(rep["sample_rate"])
    return min(1.0, ctx.run.batch_size / max(1, int(ctx.data.counts[victim])))


def _all_victim_views(obs: Observation, cls: type, victim: int) -> list[Any]:
    """Every gradient view of the victim the observation supports (`_victim_views`), or
    NotApplicable when there is none."""
    if not hasattr(cls, "gradient_views"):
        raise NotApplicable(f"defense {obs.defense!r} provides no gradient views")
    views, _ = _victim_views(cls, obs, victim)
    if not views:
        raise NotApplicable(f"no gradient view of node {victim} is observed")
    return views


def _view_llr(view: Any, coords: Tensor, clip: float, rate: float) -> np.ndarray:
    """(m,) one view's evidence per canary (0 where the canary's coordinate is not observed).

    "gradient" / "partial" views: the subsampled-Gaussian log-likelihood ratio of one release,
    log((1 - q) + q exp((a x - a^2 / 2) / s^2)) with a = C / B the contribution of one sampled
    canary clipped to the claimed C and s the noise scale estimated over the observed coordinates
    (1.4826 x their median absolute deviation). "sign"
    views (randomized response on signs): the observed sign on the canary's coordinate (the
    canary pushes it to +1; the likelihood ratio of randomized response is monotone in it).
    """
    g = view.gradient.detach().double().cpu()  # (d,)
    seen = (torch.ones_like(g, dtype=torch.bool) if view.mask is None
            else view.mask.detach().cpu().bool())  # (d,)
    if view.kind == "sign":
        return (torch.sign(g[coords]) * seen[coords]).numpy()
    obs = g[seen]
    if obs.numel() == 0:
        return np.zeros(len(coords))
    a = clip / max(1, view.batch_size)  # one sampled canary's contribution to the mean
    s = max(1.4826 * float((obs - obs.median()).abs().median()), 1e-6 * a)
    llr = (a * g[coords] - a * a / 2) / (s * s)  # (m,)
    q = min(max(rate, 1e-12), 1.0)
    out = torch.logaddexp(torch.full_like(llr, math.log1p(-q) if q < 1 else -math.inf),
                          math.log(q) + llr)
    return (out * seen[coords]).numpy()


def _input_canary_scores(atk: Any, obs: Observation, cls: type, victim: int, cx: Tensor,
                         cy: Tensor, ctx: Context) -> np.ndarray:
    """Input-space canaries scored by a reference-free membership attack."""
    x, y = cx.to(ctx.device), cy.to(ctx.device)
    if reads_messages(type(atk)):
        return atk.score(ctx.fm, _all_victim_views(obs, cls, victim), x, y)
    from privbench.threat.signals import ModelMIAInput, model_signals

    target = observed_model(obs, victim).to(ctx.device)[None]
    return atk.score(ModelMIAInput(model_signals(ctx.fm, target, x, y)))
