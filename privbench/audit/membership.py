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
  calibrated, from `Built.privacy()`), n_members, n_nonmembers and the sample they are
  (`candidates.draw_sample`: how many of how many, the rule, the FPR interval it resolves).

Candidates and observed models live in `candidates`, reference systems in `reference`, the
input-canary audit in `input_canary`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np
import torch
from torch import Tensor

from privbench import progress
from privbench.audit.attack import reads_messages
from privbench.audit.candidates import (
    Claim,
    Sample,
    SampleRule,
    _victim_views,
    candidates,
    claims,
    draw_sample,
    last_observed_round,
    observed_model,
    sample_generator,
    take,
)
from privbench.audit.reference import (
    DEFAULT_REFERENCE_MODELS,
    STATISTIC_COPIES,
    choose_statistic,
    train_reference_models,
)
from privbench.config import RunConfig, replace_checked
from privbench.data.datasets import NodeData
from privbench.engine.trainer import provides
from privbench.errors import ConfigError, NotApplicable
from privbench.metrics.audit import eps_lower_bound_roc
from privbench.metrics.roc import CI_LEVEL, roc_curve, roc_steps, roc_summary
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS, DEFENSES
from privbench.threat.gossip_inversion import view_source
from privbench.threat.observation import Observation, ThreatModel, observe, threat_for

DEFAULT_SAMPLE = SampleRule()  # k / f non-members at the lowest FPR shown (`SampleRule`)


class EmpiricalEpsilon(TypedDict):
    """The Clopper-Pearson epsilon lower bound over a ROC (`metrics.audit.eps_lower_bound_roc`)."""

    epsilon_lb: float
    threshold: float
    side: str
    tpr_lo: float
    fpr_hi: float
    alpha: float
    correction: str
    tests: int
    point_estimate: float
    method: str


_CI = list[float] | None

# A graded membership attack (`grade`): the ROC summary (`metrics.roc.roc_summary`), whether each
# low-FPR rate is resolved, the empirical epsilon and the victim's claims (functional form: keys
# such as "tpr_at_1%_fpr" are not identifiers).
MembershipGrade = TypedDict("MembershipGrade", {
    "auc": float, "auc_ci": list[float], "tpr_at_fpr": list[dict[str, object]],
    "tpr_at_0.1%_fpr": float | None, "tpr_at_0.1%_fpr_ci": _CI,
    "tpr_at_1%_fpr": float | None, "tpr_at_1%_fpr_ci": _CI,
    "tpr_at_10%_fpr": float | None, "tpr_at_10%_fpr_ci": _CI,
    "tpr_at_0_fpr": float, "tpr_at_0_fpr_ci": list[float], "n_members": int,
    "n_nonmembers": int, "roc": dict[str, dict[str, list[float]]], "ci_level": float,
    "roc_steps": dict[str, list[float]], "tpr_at_0.1%_fpr_resolved": bool,
    "tpr_at_1%_fpr_resolved": bool, "tpr_at_10%_fpr_resolved": bool,
    "empirical_epsilon": EmpiricalEpsilon, "claimed_epsilon": dict[str, Claim],
})

# One statistic's AUC and TPRs with their intervals (`_brief`), or why none.
StatisticBrief = TypedDict("StatisticBrief", {
    "auc": float | None, "reason": str, "auc_ci": list[float],
    "tpr_at_0.1%_fpr": float | None, "tpr_at_0.1%_fpr_ci": _CI,
    "tpr_at_1%_fpr": float | None, "tpr_at_1%_fpr_ci": _CI,
    "tpr_at_10%_fpr": float | None, "tpr_at_10%_fpr_ci": _CI, "tpr_at_0_fpr": float,
}, total=False)


class MembershipInfo(TypedDict, total=False):
    """How a membership attack scored: its level and what it read (message level: the rounds,
    the statistics and the rule choosing one; model level: the observed round and references)."""

    level: str
    rounds_attacked: int
    rounds_not_applicable: int
    not_applicable_reasons: dict[str, int]
    statistic: str
    statistic_rule: str
    regression_fit: dict[str, float]
    scores_by_statistic: dict[str, np.ndarray]
    candidate_cap: int
    sample: Sample
    selected_of: int
    reference_auc: dict[str, float] | None
    observed_round: int
    reference_models: int
    online: bool
    variance: str
    variance_rule: str
    statistics: dict[str, StatisticBrief]


def ci_level(selected_of: int = 1) -> float:
    """The confidence of each interval when the graded scores are the best of `selected_of`
    score vectors picked on the same labels: Bonferroni, 1 - 0.05 / m, so that what is graded
    still holds at 95 %."""
    return 1 - (1 - CI_LEVEL) / selected_of


def grade(scores: np.ndarray, labels: np.ndarray, claimed: dict[str, Claim],
          delta: float, level: float = CI_LEVEL) -> MembershipGrade:
    """ROC summary + empirical epsilon lower bound (JSON-ready), every interval and the bound's
    confidence at `level` (`ci_level`)."""
    out = cast(MembershipGrade, roc_summary(scores, labels, level=level))
    out["ci_level"] = level
    out["roc_steps"] = roc_steps(roc_curve(scores, labels))
    for f in ("0.1%", "1%", "10%"):
        out[f"tpr_at_{f}_fpr_resolved"] = out[f"tpr_at_{f}_fpr"] is not None
    d = claimed.get("calibrated", claimed.get("paper", {})).get("delta", delta)
    out["empirical_epsilon"] = cast(EmpiricalEpsilon, eps_lower_bound_roc(scores, labels, delta=d,
                                                                       alpha=1 - level))
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


def _message_scores(atk: Any, observations: dict[int, Observation],
                    cands: list[tuple[Tensor, Tensor, np.ndarray]], device: torch.device,
                    source: Any = None) -> tuple[dict[str, np.ndarray], MembershipInfo]:
    """Per statistic, the message-level scores of every victim's candidates (concatenated), and
    info: views used, rounds not applicable (with their reasons), the statistic graded and the
    regression fit its label-free rule read (`attacks.mia_message`)."""
    obs = observations[next(iter(observations))]
    defense = source or view_source(DEFENSES.get(obs.defense), obs)
    if isinstance(defense, type) and not provides(defense, "gradient_views"):
        raise NotApplicable(f"defense {obs.defense!r} provides no gradient views")
    parts: list[dict[str, np.ndarray]] = []
    used, reasons, explained, chance = 0, [], [], []
    rounds = atk.attacked_rounds(obs.run.rounds)
    every: list[list[Any]] = []
    for v in observations:
        views, mine = _victim_views(defense, observations[v], v, rounds)
        if not views:
            raise NotApplicable(mine[0] if mine else f"no round of node {v} observed")
        every.append(views)
        reasons += mine
    progress.stage(sum(len(views) for views in every), "view")  # the score counts each
    for views, (x, y, _) in zip(every, cands, strict=True):
        scores, fit = atk.score_all(obs.fm, views, x.to(device), y.to(device))
        parts.append(scores)
        explained.append(fit["explained"])
        chance.append(fit["chance"])
        used += len(views)
    fit = {"explained": float(np.mean(explained)), "chance": float(np.mean(chance))}
    chosen = atk.choose(fit)
    info: MembershipInfo = {
        "level": "message", "rounds_attacked": used, "rounds_not_applicable": len(reasons),
        "not_applicable_reasons": _not_applicable_summary(reasons), "statistic": chosen,
        "statistic_rule": ("label-free: regression when the candidates' gradients explain "
                           "R^2 >= (1 + N/d) / 2 of the views (raw batch gradients), else "
                           "cosine (noise-dominated views)")
        if len(atk.statistics()) > 1 else "configured", "regression_fit": fit}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, info


def membership_scores(observations: dict[int, Observation], data: NodeData, attack: str,
                      attack_cfg: dict[str, Any] | None, gen: torch.Generator,
                      device: torch.device, reference_models: int = DEFAULT_REFERENCE_MODELS,
                      source: Any = None, rule: SampleRule = DEFAULT_SAMPLE
                      ) -> tuple[np.ndarray, np.ndarray, MembershipInfo]:
    """Scores of a sample of the victims' candidates under `attack` (each scored against its
    own node).

    The sample (`candidates.draw_sample`) is stratified by node and by member / non-member and
    sized by `rule` for the lowest FPR shown, drawn by a generator of the cell's seed alone
    (`sample_generator`), so every membership attack of a cell scores the same candidates and
    `gen` (the attack's own randomness: reference systems) is untouched by it.

    Args:
        observations: victim -> what the attacker of that victim observes (its threat model).
        source: where message-level attacks get gradient views (default: the defense, or
            gossip inversion for a placed threat model: `gossip_inversion.view_source`).
        rule: how many candidates to score.

    Returns:
        scores (N,), labels (N,) and info (attack level, rounds used, the sample, ...),
        candidates ordered victim by victim, members first.

    Raises:
        NotApplicable: when the threat model cannot observe what the attack needs.
    """
    load_plugins()
    victims = list(observations)
    cls = ATTACKS.get(attack)
    atk = cls(replace_checked(cls.Config(), attack_cfg or {}, where="attack"))
    cap = atk.candidate_cap() if reads_messages(type(atk)) else 0
    seed = observations[victims[0]].run.seed
    picks, sample = draw_sample(data, victims, rule, sample_generator(seed), cap)
    cands = [take(candidates(data, v), idx) for v, idx in zip(victims, picks, strict=True)]
    labels = np.concatenate([c[2] for c in cands])
    if reads_messages(type(atk)):
        scores, info = _message_level(atk, observations, data, cands, picks, labels, cap, gen,
                                      device, source)
    else:
        scores, info = _model_level(atk, observations, data, cands, picks, gen, device,
                                    reference_models)
    info["sample"] = sample
    return scores, labels, info


def _message_level(atk: Any, observations: dict[int, Observation], data: NodeData,
                   cands: list[tuple[Tensor, Tensor, np.ndarray]], picks: list[np.ndarray],
                   labels: np.ndarray, cap: int,
                   gen: torch.Generator, device: torch.device,
                   source: Any) -> tuple[np.ndarray, MembershipInfo]:
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
        pick = choose_statistic(observations, data, atk, gen, device, picks)
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
                 cands: list[tuple[Tensor, Tensor, np.ndarray]], picks: list[np.ndarray],
                 gen: torch.Generator,
                 device: torch.device, reference_models: int) -> tuple[np.ndarray, MembershipInfo]:
    """`membership_scores` for a model-level attack: each victim's candidates scored against
    the victim's last observed model (and reference models where the attack needs them)."""
    from privbench.threat.signals import ModelMIAInput, model_signals

    victims = list(observations)
    obs = observations[victims[0]]  # public context (run, defense, topology, model) is shared
    fm = obs.fm
    t_obs = max(last_observed_round(observations[v], v) for v in victims)
    targets = torch.stack([observed_model(observations[v], v, t_obs)
                           for v in victims]).to(device)  # (V, d)
    info: MembershipInfo = {"level": "model", "observed_round": t_obs}
    refs, masks = None, None
    if atk.needs_reference:
        refs, masks = train_reference_models(obs, data, victims, reference_models,
                                             atk.needs_in_models, gen, device, t_obs, picks)
        refs = refs.to(device)  # (K, V, d)
        info.update(reference_models=reference_models, online=atk.needs_in_models,
                    **atk.reference_detail(reference_models))  # e.g. LiRA's variance and why
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


def graded_membership(observations: dict[int, Observation], data: NodeData, attack: str,
                      attack_cfg: dict[str, Any] | None, gen: torch.Generator,
                      device: torch.device, claimed: dict[str, Claim], delta: float,
                      reference_models: int = DEFAULT_REFERENCE_MODELS, source: Any = None
                      ) -> tuple[np.ndarray, np.ndarray, MembershipInfo, MembershipGrade | None]:
    """One membership attack scored (`membership_scores`) and graded against who was a member:
    the path of every membership attack, in the audit sweep (`run_membership`) and the leakage
    map alike.

    Returns:
        scores, labels, info and the grade (`grade`, at the level the statistic's selection
        needs), None when a score is not finite (the observed run diverged).

    Raises:
        NotApplicable: when the threat model cannot observe what the attack needs.
    """
    scores, labels, info = membership_scores(observations, data, attack, attack_cfg, gen, device,
                                             reference_models, source)
    if not np.isfinite(scores).all():
        return scores, labels, info, None
    level = ci_level(info.get("selected_of", 1))
    return scores, labels, info, grade(scores, labels, claimed, delta, level)


def run_membership(built: Any, victims: int | list[int], attack: str,
                   attack_cfg: dict[str, Any] | None = None, gen: torch.Generator | None = None,
                   threat: ThreatModel | None = None,
                   reference_models: int = DEFAULT_REFERENCE_MODELS) -> dict[str, Any]:
    """Grade `attack` against one victim node (or several, pooled) of a built, trained run.

    The threat model defaults, for each victim, to a curious neighbour: the victim's first
    out-neighbour (each victim is attacked by its own neighbour). Pooling victims scores each
    candidate against its own node's observed model and concatenates, which buys enough
    non-members to resolve low FPRs. When the threat model cannot observe what the attack needs
    it raises `NotApplicable` with why.

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
    scores, labels, info, graded = graded_membership(
        observations, ctx.data, attack, attack_cfg, gen, ctx.device, claimed, ctx.run.delta,
        reference_models)
    if graded is None:
        raise NotApplicable(f"{int((~np.isfinite(scores)).sum())} non-finite scores: the observed "
                            "model or messages are not finite (training diverged)",
                            non_finite=True)
    by_stat = info.pop("scores_by_statistic", None)
    level = ci_level(info.get("selected_of", 1))
    if by_stat is not None and len(by_stat) > 1:
        info["statistics"] = {k: _brief(v, labels, level) for k, v in by_stat.items()}
    return {**head, **info, **graded}


BRIEF_KEYS = ("auc", "auc_ci", "tpr_at_0.1%_fpr", "tpr_at_0.1%_fpr_ci", "tpr_at_1%_fpr",
              "tpr_at_1%_fpr_ci", "tpr_at_10%_fpr", "tpr_at_10%_fpr_ci", "tpr_at_0_fpr")


def _brief(scores: np.ndarray, labels: np.ndarray, level: float = CI_LEVEL) -> StatisticBrief:
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
