"""`privbench attack`: the audit sweep (defense x ε x attack), cell by cell, resumable.

For every (defense, ε) the defense is trained once while recording only the rounds the attacks
need; then every attack runs on what the threat model observes. Each finished piece is written
atomically as its own file under `<out>/cells/<defense>@<ε>/` (`train.json`, `<attack>.json`),
so an interrupted sweep loses at most the piece in progress. Every file carries the fingerprint
of what determined it (`privbench.results.fingerprint`); `--resume` reuses a file only when it is
valid
(`privbench.results.schema`) and its fingerprint matches, and stops with the first differing field
otherwise (`--resume=rerun-stale` recomputes the stale ones). One run writes into a folder at a
time (an advisory lock). `results.json` (schema `privbench.results`, strict JSON) is assembled from
the cell files in a fixed order and holds no timestamps, timings or output folder name (timings go
to `timings.json`, the run name to the page's title), so the same seed gives byte-identical results
on CPU wherever it is written. `index.html` is rendered from `results.json` alone; the three
aggregate files are written only once all of them are built.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from privbench.commands.presets import DEFAULT_DEFENSES, PRESETS  # plain data, no torch
from privbench.commands.progress import Phase
from privbench.config import RunConfig, json_ready, replace_checked, to_dict
from privbench.data.datasets import recording_sampling
from privbench.device import machine_kind, resolve_device
from privbench.engine.loop import train
from privbench.engine.messages import MessageLog, RecordPolicy
from privbench.engine.runner import Built, build, check_split, environment, structure, train_result
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError, DataError, PrivbenchError
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS, DEFENSES
from privbench.results import fingerprint as fp
from privbench.results.schema import ATTACK_FILE, TRAIN_FILE
from privbench.results.store import (
    SCHEMA_VERSION,
    atomic_write_text,
    diverged_text,
    dumps,
    eps_label,
    eps_text,
    read_json_file,
    read_results,
    remove_stale_temps,
    unstrict,
    write_json,
)
from privbench.threat.gossip_inversion import view_source
from privbench.threat.observation import (
    PLACEMENTS,
    THREATS,
    ThreatModel,
    is_threat,
    observe,
    threat_for,
)


@dataclass(frozen=True)
class AuditConfig:
    """What to sweep.

    Attributes:
        defenses: registry keys ("all" = every registered defense).
        eps: target ε grid for private defenses (non-private ones run once).
        attacks: attack registry keys.
        threat: "eavesdropper", "neighbour" (the victim's first out-neighbour) or "colluding"
            (all of the victim's in-neighbours).
        victim: the attacked node.
        inversion_rounds: rounds whose released gradient is inverted.
        reference_models: reference systems trained for LiRA / RMIA.
        attack_config: per-attack config overrides.
        inversion_batch_sizes: batch sizes of the inversion views: for each, the cell's defense
            (same ε, same rounds, so the same calibration per round) is run with that batch size
            for the first `max(inversion_rounds) + 2` rounds and its released gradients are
            inverted; empty: invert the cell's own run.
        pool_victims: membership attacks pool the candidates of every node, each scored against
            its own node (False: `victim` only). The colluding threat always uses `victim`.
        paper_settings: per defense, defense overrides of the paper's own setting, audited as
            one extra cell (e.g. PartPSP at the paper's b) next to the calibrated-ε cells.
        paper_readings: per defense, defense overrides under which the run's ε means what the
            paper's claim means (DeFL-VP: ε per coordinate per round), audited at every ε of
            the grid as extra cells next to the calibrated-ε cells, each with the ε it
            composes to. A setting or reading the sweep's own overrides already apply adds no
            cell.
    """

    defenses: tuple[str, ...] = DEFAULT_DEFENSES
    eps: tuple[float, ...] = (1.0, 8.0)
    attacks: tuple[str, ...] = ("idlg", "geiping", "mia_threshold", "mia_message")
    threat: str = "eavesdropper"
    victim: int = 0
    inversion_rounds: tuple[int, ...] = (1,)
    reference_models: int = 4
    attack_config: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    inversion_batch_sizes: tuple[int, ...] = ()
    pool_victims: bool = False
    paper_settings: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    paper_readings: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(b < 1 for b in self.inversion_batch_sizes):
            raise ConfigError(f"inversion_batch_sizes must be >= 1, got "
                              f"{list(self.inversion_batch_sizes)}")
        if not is_threat(self.threat):
            raise ConfigError(f"unknown threat model {self.threat!r}; accepted: "
                              f"{', '.join(THREATS)} or a placement {', '.join(PLACEMENTS)}")
        for e in self.eps:
            if not (e > 0 and math.isfinite(e)):
                raise ConfigError(f"every --eps must be a finite number > 0, got {e}")
        if not self.eps:
            raise ConfigError("--eps needs at least one value")
        if not self.defenses:
            raise ConfigError("--defense needs at least one defense (see `privbench list`)")
        if not self.attacks:
            raise ConfigError("--attack needs at least one attack (see `privbench list`)")
        if self.reference_models < 1:
            raise ConfigError(f"audit.reference_models must be >= 1, got {self.reference_models}")
        if self.victim < 0:
            raise ConfigError(f"audit.victim must be >= 0, got {self.victim}")
        if any(r < 0 for r in self.inversion_rounds):
            raise ConfigError(f"audit.inversion_rounds must be >= 0, got {self.inversion_rounds}")
        # Equal values are one cell (1 and 1.0): keep the first of each.
        object.__setattr__(self, "eps", tuple(dict.fromkeys(float(e) for e in self.eps)))

    def attack_cfg(self, attack: str) -> Any:
        """The attack's config: its defaults with this audit's `attack_config` overrides."""
        return replace_checked(ATTACKS.get(attack).Config(), self.attack_config.get(attack) or {},
                               where="attack")


def _eps_key(eps: float | None) -> str:
    """The cell name of ε: short when that is exact, else repr (lossless: distinct ε, distinct
    names, e.g. 1.0000001 and 1.0000004)."""
    return "none" if eps is None else eps_label(eps)


def duplicate_eps(values: list[float] | None) -> list[float]:
    """The values of an ε grid that repeat an earlier one (removed from the grid)."""
    seen: set[float] = set()
    dups = []
    for v in values or []:
        if v in seen:
            dups.append(v)
        seen.add(v)
    return dups


def _audit_threat(built: Built, audit: AuditConfig) -> ThreatModel:
    """The audit's threat model around its victim, on the run's graph."""
    return threat_for(audit.threat, built.ctx.topology, audit.victim)


def _is_membership(attack: str) -> bool:
    from attacks._mia import MessageAttack, ModelAttack

    return issubclass(ATTACKS.get(attack), (ModelAttack, MessageAttack))


def _is_inversion(attack: str) -> bool:
    """Whether an attack inverts released gradients (not membership, not a training audit)."""
    return not (_is_membership(attack)
                or getattr(ATTACKS.get(attack), "level", None) == "training")


def _gallery(inv_run: Any, built: Built) -> dict[str, Any] | None:
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
                         views: dict[int, Built | str] | None = None) -> dict[str, Any]:
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
        res = (_invert_view(run, attack, audit, gen) if not isinstance(run, str)
               else {"status": run, "metrics": {}, "gallery": None})
        out.append({"batch_size": b, **res})
    head = next((v for v in out if v["status"] == "ok"), out[0])
    return {"kind": "inversion", **{k: v for k, v in head.items() if k != "gallery"},
            "views": out}


def _invert_view(built: Built, attack: str, audit: AuditConfig,
                 gen: torch.Generator) -> dict[str, Any]:
    """The attack on one run's released gradients of the victim, graded."""
    from privbench.audit.inversion import grade, invert

    threat = _audit_threat(built, audit)
    obs = observe(built, threat)
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    inv = invert(obs, view_source(type(built.trainer), obs), [audit.victim],
                 list(audit.inversion_rounds), attack, audit.attack_config.get(attack), gen,
                 built.ctx.device,
                 input_shape=built.ctx.data.input_shape)
    graded = grade(inv, built.ctx.data, built.ctx.truth)
    statuses = [p["status"] for p in graded["per_target"]]
    ok = graded["n_graded"] > 0
    metrics = {k: graded.get(k) for k in ("mse", "psnr", "ssim", "lpips", "label_accuracy")}
    uses = sorted(reading.read & _data_kinds(built))  # the kinds the views were derived from
    return {"status": "ok" if ok else statuses[0], "threat": _threat(threat),
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


def _threat(t: ThreatModel) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": t.kind, "observers": list(t.observers)}
    if t.placement:
        out["placement"] = t.placement
    return out


def run_membership_attack(built: Built, attack: str, audit: AuditConfig,
                          gen: torch.Generator) -> dict[str, Any]:
    """One membership attack on the victim, with ROC, TPR at low FPR and the empirical ε."""
    from privbench.audit.membership import run_membership

    threat = None if audit.threat == "neighbour" else _audit_threat(built, audit)
    # a colluding or placed set is chosen around the audited victim: it attacks that one only
    pooled = audit.pool_victims and audit.threat in ("eavesdropper", "neighbour")
    victims = list(range(built.ctx.n)) if pooled else audit.victim
    res = run_membership(built, victims, attack, audit.attack_config.get(attack), gen,
                         threat=threat, reference_models=audit.reference_models)
    if not res.get("applicable", False):
        return {"kind": "membership", "status": f"not applicable: {res.get('reason')}",
                "uses": [], "metrics": {}}
    emp = res.get("empirical_epsilon")
    emp_value = emp.get("epsilon_lb") if isinstance(emp, dict) else emp
    rates = ("auc", "tpr_at_0.1%_fpr", "tpr_at_1%_fpr", "tpr_at_10%_fpr", "tpr_at_0_fpr")
    metrics = {**{k: res.get(k) for k in rates}, "empirical_epsilon": emp_value,
               "empirical_epsilon_cap": _roc_cap(res)}
    roc = (res.get("roc") or {}).get("log") or (res.get("roc") or {}).get("linear")
    return {"kind": "membership", "status": "ok",
            "threat": res.get("threat"),
            "uses": _membership_uses(built, attack, audit),
            "metrics": metrics, "intervals": {k: res.get(f"{k}_ci") for k in rates},
            "roc": roc, "roc_steps": res.get("roc_steps"), "tpr_at_fpr": res.get("tpr_at_fpr"),
            "empirical_epsilon_detail": emp,
            "n_members": res.get("n_members"), "n_nonmembers": res.get("n_nonmembers"),
            "tpr_at_0.1%_fpr_resolved": res.get("tpr_at_0.1%_fpr_resolved"),
            "tpr_at_1%_fpr_resolved": res.get("tpr_at_1%_fpr_resolved"),
            "attack_config": res.get("attack_config_resolved"),
            **{k: res[k] for k in MEMBERSHIP_DETAIL if k in res}}


# What a membership result adds when it has it: the message attack's statistics and rule, the
# rounds it used and skipped (with why), the model attack's observed round and references.
MEMBERSHIP_DETAIL = ("statistic", "statistics", "statistic_rule", "reference_auc", "regression_fit",
                     "selected_of", "ci_level", "rounds_attacked", "rounds_not_applicable",
                     "not_applicable_reasons", "observed_round", "reference_models", "online")


def run_canary_audit(built: Built, attack: str, audit: AuditConfig,
                     gen: torch.Generator) -> dict[str, Any]:
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
    if not res.get("applicable", False):
        return {"kind": "canary", "status": f"not applicable: {res.get('reason')}", "uses": [],
                "metrics": {}}
    worst, nodes = res["worst"], res["nodes"]
    top = max(nodes, key=lambda r: r["estimated_ratio"])
    metrics = {"empirical_epsilon": max(r["one_run"]["epsilon_lb"] for r in nodes),
               "empirical_epsilon_cap": res["cap"], "empirical_ratio": worst["ratio"],
               "estimated_epsilon": top["estimate"]["epsilon"],
               "estimated_ratio": top["estimated_ratio"]}
    return {"kind": "canary", "status": "ok", "threat": res["threat"],
            "uses": sorted(_data_kinds(built) & set(built.ctx.bus.log.kinds())),
            "metrics": metrics,
            "intervals": {"estimated_epsilon": top["estimate"]["epsilon_interval"]},
            "canaries": res["canaries"], "canary_norm": res["canary_norm"],
            "victim": worst["node"], "one_run": worst["one_run"],
            "claimed_epsilon": worst["claimed_epsilon"], "p_star": res["p_star"],
            "nodes": nodes}


def run_mechanism_audit(built: Built, attack: str, audit: AuditConfig) -> dict[str, Any]:
    """The mechanism audit of the cell's run (`privbench.audit.mechanism`): its measurements,
    findings, and the measured ε against the claim."""
    from privbench.audit.mechanism import audit_mechanism

    res = audit_mechanism(built.ctx.run, built.defense, to_dict(built.trainer.cfg),
                          audit.attack_cfg(attack).settings())
    if not res.get("applicable", False):
        return {"kind": "mechanism", "status": f"not applicable: {res.get('reason')}",
                "uses": [], "metrics": {}}
    eps = res["epsilon"]
    metrics = ({"measured_epsilon": eps["epsilon"], "measured_ratio": eps["ratio"],
                "measured_ratio_low": eps["ratio_interval"][0]} if eps["applicable"] else {})
    return {"kind": "mechanism", "status": "ok", "uses": sorted(_data_kinds(built)),
            "metrics": metrics, "mechanism": res}


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
    from attacks._mia import MessageAttack
    from privbench.audit.membership import observed_model
    from privbench.errors import NotApplicable

    obs = observe(built, _audit_threat(built, audit))
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    defense = view_source(type(built.trainer), obs)
    try:
        if issubclass(ATTACKS.get(attack), MessageAttack):
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


def run_attack(built: Built, attack: str, audit: AuditConfig, seed: int,
               views: dict[int, Built | str] | None = None) -> dict[str, Any]:
    """Run one attack; a diverging or crashing attack is recorded as failed with its reason.

    `views`: the inversion views (`run_inversion_attack`); membership attacks use `built`.
    """
    from privbench.seeding import derive_seed

    gen = torch.Generator().manual_seed(derive_seed(seed, "attack", attack))
    try:
        level = getattr(ATTACKS.get(attack), "level", None)
        if level == "training":
            return run_canary_audit(built, attack, audit, gen)
        if level == "mechanism":
            return run_mechanism_audit(built, attack, audit)
        if _is_membership(attack):
            return run_membership_attack(built, attack, audit, gen)
        return run_inversion_attack(built, attack, audit, gen, views)
    except PrivbenchError:
        raise
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        return {"status": f"failed: {type(exc).__name__}: {exc} ({where})".replace("\n", " "),
                "uses": [], "metrics": {}}


def _placed_extra(run: RunConfig, audit: AuditConfig) -> int:
    """Rounds beyond an inversion target that a threat placed anywhere in the graph needs: its
    gossip inversion identifies a victim H hops away from about H + 1 rounds (H < nodes)."""
    return run.nodes if ":" in audit.threat else 0


def _needed_rounds(run: RunConfig, audit: AuditConfig, defense: str) -> RecordPolicy:
    """Rounds to record: up to the last inversion target (gossip views need round t+1, a placed
    threat's gossip inversion more), the last rounds for model-level MIA, and for message-level
    MIA the whole run, or its attacked rounds with the rounds a view of each reads when it
    attacks a subset (`mia_message.rounds`: from t - `view_lookback` of the defense, for the
    victim's pre-step model, to t + 1, gossip's next message; a placed threat's gossip
    inversion still needs every round)."""
    from attacks._mia import MessageAttack

    rounds = set(range(max(audit.inversion_rounds, default=0) + 2 + _placed_extra(run, audit)))
    rounds |= {run.rounds - 1, run.rounds - 2}
    for name in (a for a in audit.attacks if issubclass(ATTACKS.get(a), MessageAttack)):
        picked = ATTACKS.get(name)(audit.attack_cfg(name)).attacked_rounds(run.rounds)
        if picked is None or _placed_extra(run, audit):
            return RecordPolicy()
        back = DEFENSES.get(defense).view_lookback
        rounds |= {t + k for t in picked for k in range(-back, 2)}
    return RecordPolicy(rounds=frozenset(r for r in rounds if 0 <= r < run.rounds))


RESUME_MODES = ("check", "rerun-stale")


class Laps:
    """Consecutive laps of one clock: every instant since creation lands in exactly one lap."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or creation)."""
        now = time.perf_counter()
        out, self.last = now - self.last, now
        return out

    def total(self) -> float:
        """Seconds since creation."""
        return time.perf_counter() - self.start


def sensitivity_trace(built: Built) -> dict[str, Any] | None:
    """Per round, a data-dependent sensitivity estimate vs the real value (DPPS / PartPSP's
    `sensitivity_trace`: S_est, S_real, sync), non-finite values as None (strict JSON)."""
    if not hasattr(built.trainer, "sensitivity_trace"):
        return None
    tr = built.trainer.sensitivity_trace()
    if not tr.get("S_est"):
        return None

    def clean(xs: list[float]) -> list[float | None]:
        return [float(x) if math.isfinite(x) else None for x in xs]

    return {"S_est": clean(tr["S_est"]), "S_real": clean(tr["S_real"]), "sync": tr["sync"]}


@dataclass
class Sweep:
    """An audit run writing into `out`.

    `resume`: None (compute every cell), "check" (reuse valid cells whose fingerprint matches;
    a mismatch is an error naming the first differing field) or "rerun-stale" (recompute those).
    """

    base: RunConfig
    overrides: dict[str, Any]
    audit: AuditConfig
    out: Path
    resume: str | None = None
    progress: bool = True
    command: str = "privbench attack"
    messages_dir: Path | None = None
    stats: dict[str, int] = dataclasses.field(default_factory=dict)
    tuned: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    eval_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    planned: int = 0  # cells of the grid, once `run` has planned them
    finished: int = 0  # of those, the cells whose files are all written (reused ones too)
    where: str = ""  # the cell in progress, for progress lines

    def cell_dir(self, defense: str, eps: float | None, setting: str | None = None) -> Path:
        return self.out / "cells" / f"{defense}@{_cell_key(eps, setting)}"

    def overrides_for(self, defense: str) -> dict[str, Any]:
        """The defense-config overrides that apply to `defense` (a sweep may mix defenses: a
        key applies to every defense whose config has that field, and must fit at least one)."""
        fields = {f.name for f in dataclasses.fields(DEFENSES.get(defense).Config)}
        for key in self.overrides:
            if not any(key in {f.name for f in dataclasses.fields(DEFENSES.get(d).Config)}
                       for d in self.audit.defenses):
                raise ConfigError(f"unknown defense key {key!r} for "
                                  f"{', '.join(self.audit.defenses)}")
        return {k: v for k, v in self.overrides.items() if k in fields}

    def grid(self) -> list[tuple[str, float | None, str | None]]:
        """The (defense, ε, setting) cells in their fixed order: every ε of the grid for a
        private defense (setting None), then its paper setting if the audit names one
        (setting "paper", ε None: the ε it composes to is read after training), then its paper
        reading at every ε of the grid (setting "paper", that ε)."""
        cells: list[tuple[str, float | None, str | None]] = []
        for name in self.audit.defenses:
            cls = DEFENSES.get(name)
            for eps in (self.audit.eps if cls.private else (None,)):
                cells.append((name, eps, None))
            if not cls.private or self.messages_dir is not None:
                continue
            if self._adds_cells(name, self.audit.paper_settings):
                cells.append((name, None, PAPER))
            if self._adds_cells(name, self.audit.paper_readings):
                cells.extend((name, eps, PAPER) for eps in self.audit.eps)
        return cells

    def _adds_cells(self, defense: str, table: dict[str, dict[str, Any]]) -> bool:
        """Whether `table` names overrides for `defense` that the sweep does not already apply
        (those would repeat the calibrated cells)."""
        over = table.get(defense)
        if not over:
            return False
        mine = self.overrides_for(defense)
        return any(k not in mine or mine[k] != v for k, v in over.items())

    def paper_overrides(self, defense: str, eps: float | None) -> dict[str, Any]:
        """The overrides of a paper cell: the fixed setting (ε None) or the reading at ε."""
        table = self.audit.paper_settings if eps is None else self.audit.paper_readings
        return dict(table[defense])

    def run_for(self, eps: float | None) -> RunConfig:
        return self.base if eps is None else dataclasses.replace(self.base, epsilon=eps)

    def validate(self) -> None:
        """Every check that needs no training, so that bad options fail before any cell runs."""
        for attack in self.audit.attacks:  # each attack's config keys and values
            self.audit.attack_cfg(attack)
        if self.audit.victim >= self.base.nodes:
            raise ConfigError(f"audit.victim must be a node index in 0..{self.base.nodes - 1}, "
                              f"got {self.audit.victim}")
        late = [r for r in self.audit.inversion_rounds if r >= self.base.rounds]
        if late:
            raise ConfigError(f"audit.inversion_rounds must be < rounds ({self.base.rounds}), "
                              f"got {late[0]}")

    def check_cells(self, cells: list[tuple[str, float | None, str | None]]) -> None:
        """Build each cell as it will train (data, model, graph, the privacy plan's
        calibration) and place the threat model on its graph, without training, so that an ε
        no noise reaches or a curious node outside the graph fails before any cell trains."""
        with self.phase(f"checking {len(cells)} cell(s) before training", len(cells),
                        "cell") as bar:
            for defense, eps, setting in cells:
                run, overrides, _ = self.cell_run(defense, eps, setting)
                try:
                    built = build(run, defense, overrides, policy=RecordPolicy.none())
                except PrivbenchError as exc:  # name the cell: the grid may hold many
                    raise type(exc)(f"{defense} {_setting_label(eps, setting)}: {exc}") from None
                _audit_threat(built, self.audit)
                bar.update()

    def phase(self, what: str, total: int | None = None, unit: str = "it") -> Phase:
        """A long part of the sweep: a bar on a terminal, a heartbeat line in a log."""
        label = f"{self.where}: {what}" if self.where else what
        return Phase(label, total, unit, enabled=self.progress)

    def fingerprints(self, defense: str, eps: float | None, setting: str | None = None
                     ) -> dict[str, dict[str, Any]]:
        """The fingerprint of each file of a cell ("train" and one per attack)."""
        import privbench

        run, over, _ = self.cell_run(defense, eps, setting)
        cfg = replace_checked(DEFENSES.get(defense).Config(), over, where="defense")
        fields: dict[str, Any] = {
            "run": {k: v for k, v in to_dict(run).items() if k not in ("data_root", "download")},
            "defense": {"name": defense, **to_dict(cfg)},
            # what the code makes of them (a changed split or model, the configuration equal)
            "structure": structure(run, defense, over),
            "setting": setting,
            "dataset": fp.dataset_identity(run.dataset, run.data_root, run.download),
            "version": {"privbench": privbench.__version__, "torch": torch.__version__},
            "threads": torch.get_num_threads(),
            # other vector kernels give other numbers at the same thread count
            "machine": machine_kind(_cell_device(run.device)),
        }
        if self.messages_dir is not None:  # a saved log: its files determine the cell
            fields["source"] = {name: fp.file_sha256(self.messages_dir / name) for name in
                                ("results.json", "messages.safetensors",
                                 "ground_truth.safetensors")}
        out = {"train": fp.fingerprint(fields)}
        audit = {k: json_ready(getattr(self.audit, k))
                 for k in ("threat", "victim", "inversion_rounds", "reference_models",
                           "inversion_batch_sizes", "pool_victims")}
        for attack in self.audit.attacks:
            out[attack] = fp.fingerprint({**fields, "audit": audit, "attack": {
                "name": attack, "config": self.audit.attack_config.get(attack, {})}})
        return out

    def cell_run(self, defense: str, eps: float | None, setting: str | None = None
                 ) -> tuple[RunConfig, dict[str, Any], dict[str, Any] | None]:
        """A cell's run config and defense overrides, and the tuned-values lookup's record
        (the entry used, or why none; None when the sweep has no tuned values).

        Overrides, later ones winning: the preset's tuned values, the sweep's own overrides,
        the paper setting's (if any). A saved message log keeps its own configuration."""
        run = self.run_for(eps)
        if self.messages_dir is not None:
            return run, self.overrides, None
        run, tuned, used = self._tuned(defense, run, eps, setting)
        return run, {**tuned, **self.overrides_for(defense),
                     **(self.paper_overrides(defense, eps) if setting else {})}, used

    def run(self) -> dict[str, Any]:
        """Train and attack every cell to (re)compute, then write results.json, timings.json and
        index.html, once all three are built. Holds the folder's lock throughout.

        `timings.json`: wall_s (this call), setup_s (validation, fingerprints), per cell build_s
        (data, model, the privacy plan), train_s (the round loop), summary_s (privacy report,
        message statistics), inversion_views_s (the small-batch runs inversion attacks read,
        when the audit has them) and one entry per attack, then report_s (results.json and
        index.html), sum_s the sum of what this call measured. The parts are consecutive laps of
        one clock, so they add up to wall_s (less the final write). A cell reused by --resume
        keeps the timings of the run that computed it and is listed under "reused"."""
        laps = Laps()
        with fp.folder_lock(self.out):
            remove_stale_temps(self.out)
            self.validate()
            grid = self.grid()
            plan = [(cell, self.plan_cell(*cell)) for cell in grid]  # before training
            self.check_cells([cell for cell, (todo, _) in plan if todo])  # before training too
            self.planned = len(grid)
            timings: dict[str, Any] = {"setup_s": laps.lap(), "cells": {}, "reused": []}
            measured = 0.0
            for k, (cell, (todo, prints)) in enumerate(plan, 1):
                if not todo:
                    timings["reused"].append(self._label(*cell))
                    self.finished += 1
                    continue
                self.where = f"cell {k} of {len(grid)} ({cell[0]} {_setting_label(*cell[1:])})"
                if self.progress:
                    print(f"cell {k} of {len(grid)}: {cell[0]} {_setting_label(*cell[1:])}",
                          file=sys.stderr, flush=True)
                measured += sum(self.run_cell(*cell, todo, prints, laps).values())
                self.finished += 1
            self.where = ""
            results = self.assemble()
            for cell in grid:
                timings["cells"][self._label(*cell)] = self._read_timings(*cell)
            from privbench.report import render_html

            with self.phase("report (index.html)"):
                html = render_html(results, run_name=self.out.name)
            text = dumps(results)
            timings["report_s"] = laps.lap()
            timings["eval_within_train_s"] = dict(self.eval_seconds)
            timings["wall_s"] = laps.total()
            timings["sum_s"] = timings["setup_s"] + measured + timings["report_s"]
            write_json(self.out / "timings.json", timings)
            atomic_write_text(self.out / "index.html", html)
            atomic_write_text(self.out / "results.json", text)
        return unstrict(results)

    def _label(self, defense: str, eps: float | None, setting: str | None = None) -> str:
        return self.cell_dir(defense, eps, setting).name

    def _read_timings(self, defense: str, eps: float | None, setting: str | None = None
                      ) -> dict[str, Any]:
        path = self.cell_dir(defense, eps, setting) / TIMINGS
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def plan_cell(self, defense: str, eps: float | None, setting: str | None = None
                  ) -> tuple[list[str], dict[str, dict[str, Any]]]:
        """Which of a cell's files to compute, and the fingerprints they must carry."""
        prints = self.fingerprints(defense, eps, setting)
        stat = self.stats
        if not self.resume:
            return list(prints), prints
        todo = []
        for name, want in prints.items():
            path = self.cell_dir(defense, eps, setting) / f"{name}.json"
            if not path.is_file():
                todo.append(name)
                stat["missing"] = stat.get("missing", 0) + 1
                continue
            problem = _file_problem(path, TRAIN_FILE if name == "train" else ATTACK_FILE)
            if problem is None:
                have = json.loads(path.read_text())["fingerprint"]
                if have["sha256"] == want["sha256"]:
                    continue
                diff = fp.first_difference(have["fields"], want["fields"]) or "its hash"
                if self.resume == "check":
                    raise PrivbenchError(
                        f"--resume: {path} is stale ({diff}); rerun with "
                        "--resume=rerun-stale to recompute stale cells, or choose another --out")
                stat["stale"] = stat.get("stale", 0) + 1
            else:
                print(f"privbench: warning: {path} is damaged ({problem}); recomputing it",
                      file=sys.stderr)
                stat["damaged"] = stat.get("damaged", 0) + 1
            todo.append(name)
        stat["reused"] = stat.get("reused", 0) + (len(prints) - len(todo))
        return todo, prints

    def run_cell(self, defense: str, eps: float | None, setting: str | None, todo: list[str],
                 prints: dict[str, dict[str, Any]], laps: Laps) -> dict[str, float]:
        """Compute the files `todo` of one cell; returns the laps measured (seconds by part)."""
        folder = self.cell_dir(defense, eps, setting)
        run, overrides, used = self.cell_run(defense, eps, setting)
        measured: dict[str, float] = {}
        built, train_cell = self._train(defense, run, overrides, measured, laps)
        train_cell.pop("seconds", None)
        self.eval_seconds[folder.name] = train_cell.pop("eval_seconds", 0.0)  # within train_s
        if used is not None:
            train_cell["tuned"] = used
        if setting:
            train_cell.update(epsilon=None, setting=_paper_setting(
                self.paper_overrides(defense, eps), train_cell, eps))
        if "train" in todo:
            write_json(folder / "train.json", {**train_cell, "fingerprint": prints["train"]})
        attacks = [a for a in self.audit.attacks if a in todo]
        views = None
        if train_cell["status"] == "ok" and any(_is_inversion(a) for a in attacks):
            views = self._inversion_views(defense, run, overrides)
            measured["inversion_views_s"] = laps.lap()
        for attack in attacks:
            if train_cell["status"] != "ok":
                result = {"status": f"skipped: training {train_cell['status']}", "uses": [],
                          "metrics": {}}
            else:
                with self.phase(f"attack {attack} ({attacks.index(attack) + 1} of "
                                f"{len(attacks)})"):
                    result = run_attack(built, attack, self.audit, run.seed, views)
            result.pop("seconds", None)  # timings live in timings.json, not in results
            for view in result.get("views", []):
                view.pop("seconds", None)
            write_json(folder / f"{attack}.json", {**result, "fingerprint": prints[attack]})
            measured[f"{attack}_s"] = laps.lap()
        write_json(folder / TIMINGS, {**self._read_timings(defense, eps, setting), **measured})
        return measured

    def _inversion_views(self, defense: str, run: RunConfig,
                         overrides: dict[str, Any]) -> dict[int, Built | str] | None:
        """Per batch size of the audit's inversion views: the defense run at that batch size
        (same ε, same configured rounds, so the same calibration) for the first rounds the
        inversion needs, or the reason there is none. None: invert the cell's own run."""
        if not self.audit.inversion_batch_sizes or self.messages_dir is not None:
            return None
        stop = min(run.rounds, max(self.audit.inversion_rounds, default=0) + 2 +
                   _placed_extra(run, self.audit))
        policy = RecordPolicy(rounds=frozenset(range(stop)))
        views: dict[int, Built | str] = {}
        for b in self.audit.inversion_batch_sizes:
            vrun = dataclasses.replace(run, batch_size=b)
            try:
                built = build(vrun, defense, overrides, policy=policy)
            except ConfigError as exc:
                views[b] = f"not applicable: {exc}"
                continue
            with self.phase(f"inversion view (batch {b})", stop, "round") as bar:
                res = train(built.trainer, rounds=stop, progress=bar.update)
            views[b] = (built if res.diverged_round is None else
                        f"skipped: the batch-{b} run {diverged_text(res.diverged_round, stop)}")
        return views

    def _tuned(self, defense: str, run: RunConfig, eps: float | None, setting: str | None,
               ) -> tuple[RunConfig, dict[str, Any], dict[str, Any] | None]:
        """The cell's run and defense overrides with the entry tuned at the cell's own ε (and
        for its paper setting or reading, if any) applied, and the lookup's record (the entry
        used, or why none applies: the cell then runs the untuned defaults). None: the sweep
        has no tuned values (--untuned)."""
        from privbench.commands.tuning import apply_tuned

        if not self.tuned:
            return run, {}, None
        fixed = self.paper_overrides(defense, eps) if setting else {}
        return apply_tuned(self.tuned.get(defense, []), run, eps, defense, fixed)

    def _train(self, defense: str, run: RunConfig, overrides: dict[str, Any],
               timing: dict[str, float], laps: Laps) -> tuple[Built, dict[str, Any]]:
        if self.messages_dir is not None:
            built, cell = self._load_messages(defense, run)
            timing["build_s"] = laps.lap()
            return built, cell
        built = build(run, defense, overrides, policy=_needed_rounds(run, self.audit, defense))
        timing["build_s"] = laps.lap()
        with self.phase(f"train {defense}", run.rounds, "round") as bar, \
                recording_sampling() as drawn:
            res = train(built.trainer, progress=bar.update)
        timing["train_s"] = laps.lap()
        status = ("ok" if res.diverged_round is None
                  else diverged_text(res.diverged_round, run.rounds))
        full = train_result(built, res)
        cell = {"defense": defense, "epsilon": run.epsilon if built.trainer.private else None,
                "status": status, "accuracy": res.average_accuracy,
                "node_accuracy": res.node_accuracy, "privacy": full["privacy"],
                "messages": full["messages"], "defense_config": full["defense_config"],
                "history": res.history, "sampling_drawn": sorted(drawn),
                "seconds": res.seconds, "eval_seconds": res.eval_seconds}
        trace = sensitivity_trace(built)
        if trace is not None:
            cell["sensitivity_trace"] = trace
        timing["summary_s"] = laps.lap()
        return built, cell

    def _load_messages(self, defense: str, run: RunConfig) -> tuple[Built, dict[str, Any]]:
        """Rebuild a saved training run's context and attach its logged messages; the
        member/non-member split rebuilt from the saved run config must be the one the run
        trained on (its digest is stored with the ground truth), or the attack is refused."""
        saved = read_results(self.messages_dir / "results.json")  # type: ignore[operator]
        built = build(run, defense, saved.get("defense_config", {}), policy=RecordPolicy.none())
        built.ctx.bus.log = MessageLog.load(self.messages_dir)  # type: ignore[arg-type]
        built.ctx.truth = GroundTruth.load(self.messages_dir)  # type: ignore[arg-type]
        check_split(built, self.messages_dir)  # type: ignore[arg-type]
        privacy = saved.get("privacy", [])
        built.saved_privacy = privacy  # the claims the saved run made, read by the attacks
        cell = {"defense": defense, "epsilon": run.epsilon if built.trainer.private else None,
                "status": "ok" if saved.get("diverged_round") is None else "diverged",
                "accuracy": saved["accuracy"]["average_model"],
                "node_accuracy": saved["accuracy"]["per_node"], "privacy": privacy,
                "messages": saved["messages"], "defense_config": saved.get("defense_config", {}),
                "history": saved.get("history", []), "source": str(self.messages_dir)}
        return built, cell

    def assemble(self) -> dict[str, Any]:
        """results.json from the cell files (each validated), in the grid's order."""
        cells, prints = [], []
        for defense, eps, setting in self.grid():
            folder = self.cell_dir(defense, eps, setting)
            cell = _read_cell_file(folder / "train.json", TRAIN_FILE)
            cell["fingerprint"] = cell["fingerprint"]["sha256"]
            prints.append(cell["fingerprint"])
            cell["attacks"] = {}
            for a in sorted(self.audit.attacks):
                att = _read_cell_file(folder / f"{a}.json", ATTACK_FILE)
                att["fingerprint"] = att["fingerprint"]["sha256"]
                prints.append(att["fingerprint"])
                cell["attacks"][a] = att
            cells.append(cell)
        import hashlib

        run_print = hashlib.sha256(" ".join(prints).encode()).hexdigest()
        return {"schema_version": SCHEMA_VERSION, "kind": "audit",
                "command": self.command,
                "config": {"run": to_dict(self.base), "defense_overrides": self.overrides,
                           "audit": to_dict(self.audit), "threat": self.audit.threat,
                           "fingerprint": run_print, "threads": torch.get_num_threads(),
                           **({"tuned": self._tuned_summary(cells)} if self.tuned else {})},
                "environment": environment(_cell_device(self.base.device)),
                "cells": cells}

    @staticmethod
    def _tuned_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
        """Per cell, the tuned entry it ran with (its values, the ε it was tuned at, the
        command, the tuning's privacy cost) or, under `missing`, why none applied (for the
        terminal and the report)."""
        from privbench.commands.tuning import PRIVACY_NOTE

        keys = ("entry", "run", "defense", "tuned_at_epsilon", "fixed", "command",
                "privacy_cost")
        looked = {f"{c['defense']}@{cell_key(c)}": c["tuned"] for c in cells if c.get("tuned")}
        used = {cell: {k: t.get(k) for k in keys} for cell, t in looked.items()
                if t.get("entry") or t.get("command")}
        missing = {cell: {"reason": t.get("reason"), "privacy_cost": t.get("privacy_cost")}
                   for cell, t in looked.items() if cell not in used}
        return {"source": "privbench/presets/tuned.toml", "cells": used, "missing": missing,
                "privacy_note": PRIVACY_NOTE}


TIMINGS = "timings.json"


def _file_problem(path: Path, schema: Any) -> str | None:
    """What is wrong with a cell file (unreadable, not strict JSON, off-schema), or None."""
    try:
        data = read_json_file(path, "cell file")
    except DataError as exc:
        return str(exc).split(f"{path} ", 1)[-1]
    return schema(data)


def _read_cell_file(path: Path, schema: Any) -> dict[str, Any]:
    problem = _file_problem(path, schema)
    if problem:
        raise DataError(f"{path} is damaged ({problem}); rerun with --resume to recompute it")
    return read_json_file(path, "cell file")


PAPER = "paper"


def _cell_key(eps: float | None, setting: str | None) -> str:
    """A cell's name after "defense@": its ε ("none" without DP), "paper" (a fixed paper
    setting) or "paper-eps8" (the paper's reading of ε = 8)."""
    if not setting:
        return _eps_key(eps)
    return setting if eps is None else f"{setting}-eps{_eps_key(eps)}"


def cell_key(cell: dict[str, Any]) -> str:
    """`_cell_key` of a cell of results.json."""
    setting = cell.get("setting") or {}
    return str(setting["name"]) if setting else _eps_key(cell.get("epsilon"))


def _setting_label(eps: float | None, setting: str | None) -> str:
    if not setting:
        return eps_text(eps)
    return "at the paper's setting" if eps is None else f"at the paper's reading of {eps_text(eps)}"


def _paper_setting(overrides: dict[str, Any], cell: dict[str, Any], eps: float | None
                   ) -> dict[str, Any]:
    """The paper cell's description: its overrides, the ε the paper reads the run as (None for
    a fixed setting) and the ε the run composes to."""
    from privbench.results.store import claimed_eps

    knobs = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in sorted(overrides.items()))
    label = f"paper {knobs}" if eps is None else f"paper {knobs}, {eps_text(eps)}"
    out = {"name": _cell_key(eps, PAPER), "label": label, "overrides": overrides,
           "composed_epsilon": json_ready(claimed_eps(cell, "calibrated"))}
    return out if eps is None else {**out, "epsilon": eps}


def _cell_device(name: str) -> torch.device:
    """The device a cell's run trains on (`cpu` without probing CUDA)."""
    return torch.device("cpu") if name == "cpu" else resolve_device(name)


def _eps_column(cell: dict[str, Any]) -> str:
    """A summary row's ε: "1", "-" (no DP), "paper" (a fixed paper setting) or "paper@8" (the
    paper's reading of ε = 8)."""
    setting = cell.get("setting") or {}
    if setting:
        return "paper" if setting.get("epsilon") is None else f"paper@{setting['epsilon']:g}"
    return "-" if cell.get("epsilon") is None else f"{cell['epsilon']:g}"


def summary_table(results: dict[str, Any]) -> str:
    """The terminal summary: one row per (defense, ε), in the report's number format, with the
    cell's verdict and what happened to its training (a diverged cell shows no attack result)."""
    from privbench.report.verdicts import verdicts
    from privbench.results.store import attack_interval, attack_metric, claimed_eps, fmt_num

    judged = {id(c): v for name, d in verdicts(results).items()
              for c, v in zip([c for c in results["cells"] if c["defense"] == name],
                              d["cells"], strict=True)}

    def f(v: float | None) -> str:
        return fmt_num(v, missing="-")

    def ci(c: dict[str, Any], key: str) -> str:
        iv = attack_interval(c, key)
        return "-" if iv is None else f"[{fmt_num(iv[0])},{fmt_num(iv[1])}]"

    head = (f"{'defense':<12} {'eps':>9} {'acc':>6} {'PSNR':>6} {'SSIM':>8} {'label':>6} "
            f"{'AUC':>6} {'95% CI':>15} {'TPR@1%':>7} {'95% CI':>15} {'eps_paper':>9} "
            f"{'eps_cal':>8} {'eps_emp':>8} {'cap':>5}  {'verdict':<13} training")
    lines = [head]
    for c in results["cells"]:
        v = judged[id(c)]
        ran = v["state"]["kind"] != "diverged"

        def m(key: str) -> str:
            return f(attack_metric(c, key)) if ran else "-"  # noqa: B023 (used in this loop)

        lines.append(
            f"{c['defense']:<12} {_eps_column(c):>9} {f(c.get('accuracy')):>6} "
            f"{m('psnr'):>6} {m('ssim'):>8} {m('label_accuracy'):>6} {m('auc'):>6} "
            f"{ci(c, 'auc') if ran else '-':>15} {m('tpr_at_1%_fpr'):>7} "
            f"{ci(c, 'tpr_at_1%_fpr') if ran else '-':>15} {f(claimed_eps(c, 'paper')):>9} "
            f"{f(claimed_eps(c, 'calibrated')):>8} {m('empirical_epsilon'):>8} "
            f"{m('empirical_epsilon_cap'):>5}  {v['level'].replace('_', '-'):<13} "
            f"{v['state']['text']}")
    return "\n".join(lines)


def resolve_names(names: list[str] | None, default: tuple[str, ...],
                  registry: Any) -> tuple[str, ...]:
    """Expand "all", check every name against the registry (one-line error listing known ones)."""
    load_plugins()
    if not names:
        return tuple(n for n in default if n in registry)
    out: list[str] = []
    for item in names:
        for name in item.split(","):
            name = name.strip()
            if name == "all":
                out.extend(registry.names())
            elif name:
                registry.get(name)
                out.append(name)
    return tuple(dict.fromkeys(out))


def audit_config(preset: str, defenses: list[str] | None, eps: list[float] | None,
                 attacks: list[str] | None, threat: str | None,
                 sets: dict[str, Any]) -> AuditConfig:
    """The sweep's config from a preset and the command line."""
    p = PRESETS[preset]
    sets = dict(sets)
    attack_config = {k: dict(v) for k, v in p["attack_config"].items()}
    for name, over in sets.pop("attack_config", {}).items():
        if not isinstance(over, dict):
            raise ConfigError(f"[audit.attack_config.{name}] must be a table of config keys")
        attack_config.setdefault(name, {}).update(over)
    cfg = AuditConfig(
        inversion_batch_sizes=tuple(p.get("inversion_batch_sizes", ())),
        pool_victims=bool(p.get("pool_victims", False)),
        paper_settings={k: dict(v) for k, v in p.get("paper_settings", {}).items()},
        paper_readings={k: dict(v) for k, v in p.get("paper_readings", {}).items()},
        defenses=resolve_names(defenses, DEFAULT_DEFENSES, DEFENSES),
        eps=tuple(eps) if eps else tuple(p["eps"]),
        attacks=resolve_names(attacks, tuple(p["attacks"]), ATTACKS),
        threat=threat or "eavesdropper",
        inversion_rounds=tuple(p["inversion_rounds"]),
        reference_models=p["reference_models"],
        attack_config=attack_config,
    )
    return replace_checked(cfg, sets, where="audit") if sets else cfg

