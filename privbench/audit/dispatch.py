"""The one attack dispatch: an attack of any kind run on a trained cell and graded against its
ground truth, used by the audit sweep and the leakage map alike.

The sweep mounts an attack through the audit's threat model around its victim; the leakage map
mounts it on explicit observations (`Mount`: every placement's curious set around each victim).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from privbench.audit.attack import reads_messages
from privbench.audit.config import AuditConfig
from privbench.config import json_ready, to_dict
from privbench.engine.messages import MessageLog
from privbench.engine.runner import Built
from privbench.errors import ConfigError, NotApplicable, PrivbenchError
from privbench.registry import ATTACKS
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.results.records import AttackResult, ThreatRecord
from privbench.threat.gossip_inversion import view_source
from privbench.threat.observation import (
    Observation,
    ThreatModel,
    observe,
    threat_for,
)

if TYPE_CHECKING:
    from privbench.audit.inversion import GradedTarget


@dataclass(frozen=True)
class Mount:
    """An attack mounted on explicit observations instead of the audit's threat model around
    its victim (the leakage map's placements, each victim seen by its own curious set).

    Attributes:
        targets: (observation, victim, round): an inversion attacks every one (batched); a
            membership attack pools the victims, each scored against its own observation
            (rounds: every round its attack reads).
        source: where gradient views come from (e.g. `gossip_inversion.BestViews`).
        generator_seed: the seed of the attack's generator as given (None: derived from the
            run's seed and the attack's name, as for the sweep).
        lpips: whether inversions are graded with LPIPS too.
    """

    targets: tuple[tuple[Observation, int, int], ...]
    source: Any
    generator_seed: int | None = None
    lpips: bool = True


def audit_threat(built: Built, audit: AuditConfig) -> ThreatModel:
    """The audit's threat model around its victim, on the run's graph."""
    return threat_for(audit.threat, built.ctx.topology, audit.victim)


def is_inversion(attack: str) -> bool:
    """Whether a registered attack inverts released gradients (its views are trained for it)."""
    return ATTACKS.get(attack).kind == "inversion"


class Gallery(TypedDict):
    """True vs matched reconstructed images of one graded target, with their PSNRs."""

    true: list[Any]
    reconstructed: list[Any]
    psnr: list[float]
    victim: int
    round: int


class InversionView(TypedDict, total=False):
    """One view's inversion (`_invert_view`): status, grades, targets and gallery."""

    status: Status
    threat: ThreatRecord
    uses: list[str]
    metrics: dict[str, float | None]
    lpips_status: str | None
    targets: list[GradedTarget]
    gallery: Gallery | None
    image_range: list[float]
    seconds: float | None


def _gallery(inv_run: Any, built: Built) -> Gallery | None:
    """True vs matched reconstructed images of the first graded target (rounded, JSON-ready)."""
    from privbench.audit.inversion import true_batch
    from privbench.metrics import image as im

    for tgt, x in zip(inv_run.targets, inv_run.images, strict=True):
        tb = true_batch(built.ctx.data, built.ctx.truth, tgt["victim"], tgt["round"])
        if x is None or tb is None:
            continue
        r, c = im.match(x, tb[0])
        true = [tb[0][j].clamp(0, 1) for j in c[:8]]
        rec = [x[i].clamp(0, 1) for i in r[:8]]
        psnr = [im.psnr(a, b) for a, b in zip(rec, true, strict=True)]
        return {"true": [json_ready(t.round(decimals=3).tolist()) for t in true],
                "reconstructed": [json_ready(t.round(decimals=3).tolist()) for t in rec],
                "psnr": json_ready([round(float(p), 2) for p in psnr]),
                "victim": tgt["victim"], "round": tgt["round"]}
    return None


def run_inversion_attack(built: Built, attack: str, audit: AuditConfig,
                         gen: torch.Generator,
                         views: dict[int, Built | Status] | None = None) -> AttackResult:
    """One inversion attack on the victim's released gradients, graded against ground truth.

    Args:
        views: batch size -> the run whose released gradients are inverted (or why there is
            none, e.g. "skipped: the batch-1 run diverged ..."); None: `built` itself.

    Returns:
        The headline view's result (the smallest batch size that was graded, else the first)
        with `views`: every view's batch size, status, metrics, targets and gallery.
    """
    views = views or {built.ctx.run.batch_size: built}
    out = []
    for b, run in sorted(views.items()):
        res = (_invert_view(run, attack, audit, gen) if not isinstance(run, Status)
               else {"status": run, "metrics": {}, "gallery": None})
        out.append({"batch_size": b, **res})
    head = next((v for v in out if v["status"] == outcome.OK), out[0])
    typed = {k: head[k] for k in ("uses", "metrics", "threat") if k in head}
    return AttackResult(
        status=head["status"], kind="inversion", **typed,
        detail={"views": [{**v, "status": v["status"].text} for v in out],
                **{k: v for k, v in head.items() if k not in ("gallery", "status", *typed)}})


def _invert_view(built: Built, attack: str, audit: AuditConfig,
                 gen: torch.Generator) -> InversionView:
    """The attack on one run's released gradients of the victim, graded."""
    from privbench.audit.inversion import graded_inversions

    threat = audit_threat(built, audit)
    obs = observe(built, threat)
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    targets = [(obs, audit.victim, t) for t in audit.inversion_rounds]
    inv, graded = graded_inversions(targets, view_source(type(built.trainer), obs), attack,
                                    audit.attack_config.get(attack), gen, built.ctx.data,
                                    built.ctx.truth, built.ctx.device)
    ok = graded["n_graded"] > 0
    metrics = {k: graded.get(k) for k in ("mse", "psnr", "ssim", "lpips", "label_accuracy")}
    uses = sorted(reading.read & _data_kinds(built))  # the kinds the views were derived from
    return {"status": outcome.OK if ok else inv.status[0], "threat": _threat(threat),
            "uses": uses, "metrics": metrics, "lpips_status": graded.get("lpips_status"),
            "targets": [{k: v for k, v in p.items() if k not in ("true_labels",)}
                        for p in graded["per_target"]],
            "gallery": _gallery(inv, built) if ok else None, "image_range": [0.0, 1.0],
            "seconds": graded.get("seconds")}


@dataclass
class ReadingLog(MessageLog):
    """A message log that remembers the kinds whose payloads were read (`get`): what an
    inversion's gradient views were derived from, so a verdict can name the message exploited."""

    read: set[str] = dataclasses.field(default_factory=set)

    def get(self, t: int, kind: str) -> Any:
        rec = super().get(t, kind)
        if rec is not None:
            self.read.add(kind)
        return rec


def _data_kinds(built: Built) -> set[str]:
    return {k.name for k in built.trainer.kinds if k.data_dependent}


def _threat(t: ThreatModel) -> ThreatRecord:
    out: ThreatRecord = {"kind": t.kind, "observers": list(t.observers)}
    if t.placement:
        out["placement"] = t.placement
    return out


def run_membership_attack(built: Built, attack: str, audit: AuditConfig,
                          gen: torch.Generator) -> AttackResult:
    """One membership attack on the victim, with ROC, TPR at low FPR and the empirical ε."""
    from privbench.audit.membership import run_membership

    threat = None if audit.threat == "neighbour" else audit_threat(built, audit)
    # a colluding or placed set is chosen around the audited victim: it attacks that one only
    pooled = audit.pool_victims and audit.threat in ("eavesdropper", "neighbour")
    victims = list(range(built.ctx.n)) if pooled else audit.victim
    res = run_membership(built, victims, attack, audit.attack_config.get(attack), gen,
                         threat=threat, reference_models=audit.reference_models)
    emp = res.get("empirical_epsilon")
    emp_value = emp.get("epsilon_lb") if isinstance(emp, dict) else emp
    rates = ("auc", "tpr_at_0.1%_fpr", "tpr_at_1%_fpr", "tpr_at_10%_fpr", "tpr_at_0_fpr")
    metrics = {**{k: res.get(k) for k in rates}, "empirical_epsilon": emp_value,
               "empirical_epsilon_cap": _roc_cap(res)}
    roc = (res.get("roc") or {}).get("log") or (res.get("roc") or {}).get("linear")
    return AttackResult(
        status=outcome.OK, uses=tuple(_membership_uses(built, attack, audit)), metrics=metrics,
        kind="membership", threat=res.get("threat"),
        intervals={k: res.get(f"{k}_ci") for k in rates},
        detail={"roc": roc, "roc_steps": res.get("roc_steps"), "tpr_at_fpr": res.get("tpr_at_fpr"),
         "empirical_epsilon_detail": emp,
         "n_members": res.get("n_members"), "n_nonmembers": res.get("n_nonmembers"),
         "tpr_at_0.1%_fpr_resolved": res.get("tpr_at_0.1%_fpr_resolved"),
         "tpr_at_1%_fpr_resolved": res.get("tpr_at_1%_fpr_resolved"),
         "attack_config": res.get("attack_config_resolved"),
         **{k: res[k] for k in MEMBERSHIP_DETAIL if k in res}})


# What a membership result adds when it has it: the candidates sampled (how many of how many, the
# rule and the FPR interval it resolves), the message attack's statistics and rule, the rounds it
# used and skipped (with why), the model attack's observed round and references (and what it
# chose from their number: LiRA's variance and the rule).
MEMBERSHIP_DETAIL = ("sample", "statistic", "statistics", "statistic_rule", "reference_auc",
                     "regression_fit", "selected_of", "ci_level", "rounds_attacked",
                     "rounds_not_applicable", "not_applicable_reasons", "observed_round",
                     "reference_models", "online", "variance", "variance_rule")


def run_canary_audit(built: Built, attack: str, audit: AuditConfig,
                     gen: torch.Generator) -> AttackResult:
    """The one-run white-box gradient-canary audit (`attacks/canary.py`) of every node (or the
    worst): the defense retrained with m canaries per node; the worst node's ε lower bound, the
    cap a perfect guesser reaches, the μ-GDP estimate with its interval, and the bound over the
    audited node's own claim (`empirical_ratio`)."""
    from privbench.audit.canary_audit import gradient_canary_audit

    cfg = audit.attack_cfg(attack)
    res = gradient_canary_audit(built.ctx.run, built.defense, cfg.canaries,
                                overrides=to_dict(built.trainer.cfg), gen=gen,
                                threat=audit.threat, norm_factor=cfg.norm_factor,
                                nodes=cfg.nodes, guess_fraction=cfg.guess_fraction)
    worst, nodes = res["worst"], res["nodes"]
    top = max(nodes, key=lambda r: r["estimated_ratio"])
    metrics = {"empirical_epsilon": max(r["one_run"]["epsilon_lb"] for r in nodes),
               "empirical_epsilon_cap": res["cap"], "empirical_ratio": worst["ratio"],
               "estimated_epsilon": top["estimate"]["epsilon"],
               "estimated_ratio": top["estimated_ratio"]}
    return AttackResult(
        status=outcome.OK, uses=tuple(sorted(_data_kinds(built) & set(built.ctx.bus.log.kinds()))),
        metrics=metrics, kind="canary", threat=res["threat"],
        intervals={"estimated_epsilon": top["estimate"]["epsilon_interval"]},
        detail={"canaries": res["canaries"], "canary_norm": res["canary_norm"],
         "victim": worst["node"], "one_run": worst["one_run"],
         "claimed_epsilon": worst["claimed_epsilon"], "p_star": res["p_star"], "nodes": nodes})


def run_mechanism_audit(built: Built, attack: str, audit: AuditConfig) -> AttackResult:
    """The mechanism audit of the cell's run (`privbench.audit.mechanism`): its measurements,
    findings, and the measured ε against the claim."""
    from privbench.audit.mechanism import audit_mechanism

    res = audit_mechanism(built.ctx.run, built.defense, to_dict(built.trainer.cfg),
                          audit.attack_cfg(attack).settings())
    eps = res["epsilon"]
    metrics = ({"measured_epsilon": eps["epsilon"], "measured_ratio": eps["ratio"],
                "measured_ratio_low": eps["ratio_interval"][0]} if eps["applicable"] else {})
    return AttackResult(status=outcome.OK, uses=tuple(sorted(_data_kinds(built))),
                        metrics=metrics, kind="mechanism", detail={"mechanism": res})


def _roc_cap(res: dict[str, Any]) -> float | None:
    """The Clopper-Pearson bound a perfect attack reaches with this many members / non-members."""
    from privbench.metrics.audit import roc_cap

    n1, n0, emp = res.get("n_members"), res.get("n_nonmembers"), res.get("empirical_epsilon")
    if not (n1 and n0 and isinstance(emp, dict)):
        return None
    claimed = res.get("claimed_epsilon") or {}
    delta = claimed.get("calibrated", claimed.get("paper", {})).get("delta", 0.0)
    return roc_cap(int(n1), int(n0), float(delta), float(emp["alpha"]))


def _membership_uses(built: Built, attack: str, audit: AuditConfig) -> list[str]:
    """The data-dependent message kinds a membership attack's input is derived from: the
    victim's gradient views (message-level attacks) or its observed model (model-level),
    derived once more on a log that records which kinds are read."""
    from privbench.audit.candidates import observed_model

    obs = observe(built, audit_threat(built, audit))
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    defense = view_source(type(built.trainer), obs)
    try:
        if reads_messages(ATTACKS.get(attack)):
            for t in reading.rounds():
                try:
                    if defense.gradient_views(obs, audit.victim, [t]):
                        break
                except NotApplicable:
                    continue
        else:
            observed_model(obs, audit.victim)
    except NotApplicable:
        pass
    return sorted(reading.read & _data_kinds(built))


INVERSION_METRICS = ("mse", "psnr", "ssim", "lpips", "label_accuracy")
MEMBERSHIP_RATES = ("auc", "tpr_at_0.1%_fpr", "tpr_at_1%_fpr", "tpr_at_10%_fpr", "tpr_at_0_fpr")


def run_mounted_inversion(built: Built, attack: str, audit: AuditConfig, gen: torch.Generator,
                          mount: Mount) -> AttackResult:
    """One inversion attack on every mounted target, graded; `targets` in the result: each
    target's status, view source and metrics (its true labels left out)."""
    from privbench.audit.inversion import graded_inversions

    inv, graded = graded_inversions(list(mount.targets), mount.source, attack,
                                  audit.attack_config.get(attack), gen, built.ctx.data,
                                  built.ctx.truth, built.ctx.device, use_lpips=mount.lpips)
    per = [{k: v for k, v in p.items() if k != "true_labels"} for p in graded["per_target"]]
    ok = graded["n_graded"] > 0
    return AttackResult(status=outcome.OK if ok else inv.status[0],
                        metrics={k: graded.get(k) for k in INVERSION_METRICS}, kind="inversion",
                        detail={"targets": per, "lpips_status": graded.get("lpips_status"),
                                "seconds": graded.get("seconds")})


def run_mounted_membership(built: Built, attack: str, audit: AuditConfig, gen: torch.Generator,
                           mount: Mount) -> AttackResult:
    """One membership attack pooled over the mounted victims, graded: ROC rates with their
    intervals, the empirical ε, the statistic graded, the candidates counted and the sample
    they are (`candidates.draw_sample`)."""
    from privbench.audit.candidates import claims
    from privbench.audit.membership import graded_membership

    observations = {v: o for o, v, _ in mount.targets}
    if not observations:
        return AttackResult(status=outcome.not_applicable("no victim observed"),
                            kind="membership")
    claimed = claims(built.privacy(), next(iter(observations)))
    _, labels, info, g = graded_membership(
        observations, built.ctx.data, attack, audit.attack_config.get(attack), gen,
        built.ctx.device, claimed, built.ctx.run.delta, audit.reference_models,
        source=mount.source)
    if g is None:
        raise NotApplicable("non-finite scores (the run diverged)", non_finite=True)
    emp = g.get("empirical_epsilon")
    metrics = {**{k: g.get(k) for k in MEMBERSHIP_RATES},
               "empirical_epsilon": emp.get("epsilon_lb") if isinstance(emp, dict) else emp}
    return AttackResult(
        status=outcome.OK, metrics=metrics, kind="membership",
        intervals={k: g.get(f"{k}_ci") for k in MEMBERSHIP_RATES},
        detail={"statistic": info.get("statistic"), "n_members": int(labels.sum()),
         "n_nonmembers": int((~labels).sum()), "victims": len(observations),
         "sample": info.get("sample"),
         **{k: info[k] for k in ("variance", "variance_rule") if k in info}})


# A mounted attack's `run`, by its kind: (built, attack, audit, generator, mount) -> its result.
MOUNTED: dict[str, Callable[..., AttackResult]] = {
    "inversion": run_mounted_inversion,
    "membership": run_mounted_membership,
}


# An attack's `run`, by its declared kind (`privbench.audit.attack.KINDS`): (built, attack,
# audit, generator, inversion views) -> its result.
RUNNERS: dict[str, Callable[..., AttackResult]] = {
    "inversion": lambda built, attack, audit, gen, views: run_inversion_attack(
        built, attack, audit, gen, views),
    "membership": lambda built, attack, audit, gen, views: run_membership_attack(
        built, attack, audit, gen),
    "canary": lambda built, attack, audit, gen, views: run_canary_audit(built, attack, audit, gen),
    "mechanism": lambda built, attack, audit, gen, views: run_mechanism_audit(built, attack, audit),
}


def run_attack(built: Built, attack: str, audit: AuditConfig, seed: int,
               views: dict[int, Built | Status] | None = None,
               mount: Mount | None = None) -> AttackResult:
    """Run one attack by its kind; a diverging or crashing attack is recorded as failed with
    its reason.

    Args:
        views: the inversion views (`run_inversion_attack`); the other kinds use `built`.
        mount: explicit observations to attack (`Mount`; inversion and membership attacks)
            instead of the audit's threat model around its victim; `views` is then unused.
    """
    from privbench.seeding import derive_seed

    kind = ATTACKS.get(attack).kind
    if mount is not None and kind not in MOUNTED:
        raise ConfigError(f"attack {attack!r} ({kind}) cannot be mounted on explicit "
                          f"observations; accepted kinds: {', '.join(MOUNTED)}")
    gen = torch.Generator().manual_seed(
        derive_seed(seed, "attack", attack) if mount is None or mount.generator_seed is None
        else mount.generator_seed)
    try:
        if mount is not None:
            return MOUNTED[kind](built, attack, audit, gen, mount)
        return RUNNERS[kind](built, attack, audit, gen, views)
    except NotApplicable as exc:
        return AttackResult(status=outcome.not_applicable(exc, exc.non_finite), kind=kind)
    except PrivbenchError:
        raise
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        return AttackResult(status=outcome.failed(
            f"{type(exc).__name__}: {exc} ({where})".replace("\n", " ")))
