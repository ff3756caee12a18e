"""`privbench attack`: the audit sweep (defense x ε x attack), cell by cell, resumable.

For every (defense, ε) the defense is trained once while recording only the rounds the attacks
need; then every attack runs on what the threat model observes. Each finished piece is written
atomically as its own file under `<out>/cells/<defense>@<ε>/` (`train.json`, `<attack>.json`),
so an interrupted sweep loses at most the piece in progress and `--resume` skips what exists.
`results.json` (schema `privbench.results`) is assembled from the cell files in a fixed order
and holds no timestamps or timings (those go to `timings.json`), so the same seed gives
byte-identical results on CPU. `index.html` is rendered from `results.json` alone.
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

from privbench.config import RunConfig, json_ready, replace_checked, to_dict
from privbench.engine import train
from privbench.errors import ConfigError, PrivbenchError
from privbench.messages import GroundTruth, MessageLog, RecordPolicy
from privbench.registry import ATTACKS, DEFENSES, load_plugins
from privbench.results import (
    SCHEMA_VERSION,
    atomic_write_text,
    diverged_text,
    read_results,
    write_json,
)
from privbench.runner import Built, build, environment, train_result
from privbench.threat import THREATS, ThreatModel

# The default grid: the non-private baselines and the five papers' algorithms (their variants
# and ablations are registered too and run with `--defense all` or by name).
DEFAULT_DEFENSES = ("sgp", "d_psgd", "adp_vrsgp", "defl_vp", "dyn_d2p", "partpsp", "dpdl")

PRESETS: dict[str, dict[str, Any]] = {
    # A few minutes on 2 CPU cores: small graph, short training, fast attack settings.
    "quick": {
        "run": {"model": "mlp", "nodes": 6, "rounds": 60, "eval_every": 60, "batch_size": 16,
                "lr": 0.2, "delta": 1e-5, "holdout": 0.5},
        "eps": (1.0, 8.0),
        "attacks": ("idlg", "geiping", "mia_threshold", "mia_message"),
        "attack_config": {"geiping": {"steps": 300}, "idlg": {"adam_steps": 300}},
        "inversion_rounds": (1,),
        "reference_models": 4,
        # The victim's released gradient of a batch of 1 and of 4 (the regime where inversion
        # recovers recognisable images), each from the same defense at the same ε and length.
        "inversion_batch_sizes": (1, 4),
        # Membership candidates of every node pooled (holdout 0.5: 120 members and 120
        # non-members per node on digits, 720 + 720 over 6 nodes, enough for TPR at 1% FPR).
        "pool_victims": True,
        "paper_settings": {"partpsp": {"b": 5.0}},
    },
    # Closer to the papers' scale: longer training, the full attack set, a wider ε grid.
    "paper": {
        "run": {"model": "mlp", "nodes": 10, "rounds": 500, "eval_every": 100, "batch_size": 32,
                "lr": 0.2, "delta": 1e-5},
        "eps": (0.5, 1.0, 2.0, 4.0, 8.0),
        "attacks": ("dlg", "idlg", "geiping", "mia_threshold", "lira", "rmia", "mia_message"),
        "attack_config": {},
        "inversion_rounds": (1, 10),
        "reference_models": 16,
        "inversion_batch_sizes": (1, 4),
        "pool_victims": True,
        "paper_settings": {"partpsp": {"b": 5.0}},
    },
}


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

    def __post_init__(self) -> None:
        if any(b < 1 for b in self.inversion_batch_sizes):
            raise ConfigError(f"inversion_batch_sizes must be >= 1, got "
                              f"{list(self.inversion_batch_sizes)}")
        if self.threat not in THREATS:
            raise ConfigError(f"unknown threat model {self.threat!r}; accepted: "
                              f"{', '.join(THREATS)}")
        for e in self.eps:
            if not (e > 0 and math.isfinite(e)):
                raise ConfigError(f"every --eps must be a finite number > 0, got {e}")
        if not self.eps:
            raise ConfigError("--eps needs at least one value")


def _eps_key(eps: float | None) -> str:
    return "none" if eps is None else f"{eps:g}"


def threat_for(kind: str, built: Built, victim: int, t: int = 0) -> ThreatModel:
    """The concrete threat model around a victim."""
    topo = built.ctx.topology
    if kind == "neighbour":
        return ThreatModel("neighbour", (topo.out_neighbours(t, victim)[0],))
    if kind == "colluding":
        return ThreatModel("colluding", tuple(topo.in_neighbours(t, victim)) or (victim,))
    return ThreatModel()


def _is_membership(attack: str) -> bool:
    from attacks._mia import MessageAttack, ModelAttack

    return issubclass(ATTACKS.get(attack), (ModelAttack, MessageAttack))


def _gallery(inv_run: Any, built: Built) -> dict[str, Any] | None:
    """True vs matched reconstructed images of the first graded target (rounded, JSON-ready)."""
    from privbench.inversion import true_batch
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
    from privbench.inversion import grade, invert, observation

    threat = threat_for(audit.threat, built, audit.victim)
    obs = observation(built, threat)
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    inv = invert(obs, type(built.trainer), [audit.victim], list(audit.inversion_rounds), attack,
                 audit.attack_config.get(attack), gen, built.ctx.device,
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
    return {"kind": t.kind, "observers": list(t.observers)}


def run_membership_attack(built: Built, attack: str, audit: AuditConfig,
                          gen: torch.Generator) -> dict[str, Any]:
    """One membership attack on the victim, with ROC, TPR at low FPR and the empirical ε."""
    from privbench.membership import run_membership

    threat = None if audit.threat == "neighbour" else threat_for(audit.threat, built, audit.victim)
    pooled = audit.pool_victims and audit.threat != "colluding"
    victims = list(range(built.ctx.n)) if pooled else audit.victim
    res = run_membership(built, victims, attack, audit.attack_config.get(attack), gen,
                         threat=threat, reference_models=audit.reference_models)
    if not res.get("applicable", False):
        return {"kind": "membership", "status": f"not applicable: {res.get('reason')}",
                "uses": [], "metrics": {}}
    emp = res.get("empirical_epsilon")
    emp_value = emp.get("epsilon_lb") if isinstance(emp, dict) else emp
    metrics = {"auc": res.get("auc"), "tpr_at_0.1%_fpr": res.get("tpr_at_0.1%_fpr"),
               "tpr_at_1%_fpr": res.get("tpr_at_1%_fpr"), "empirical_epsilon": emp_value}
    roc = (res.get("roc") or {}).get("log") or (res.get("roc") or {}).get("linear")
    return {"kind": "membership", "status": "ok",
            "threat": res.get("threat"),
            "uses": _membership_uses(built, attack, audit),
            "metrics": metrics, "roc": roc, "empirical_epsilon_detail": emp,
            "n_members": res.get("n_members"), "n_nonmembers": res.get("n_nonmembers"),
            "tpr_at_0.1%_fpr_resolved": res.get("tpr_at_0.1%_fpr_resolved"),
            "tpr_at_1%_fpr_resolved": res.get("tpr_at_1%_fpr_resolved")}


def _membership_uses(built: Built, attack: str, audit: AuditConfig) -> list[str]:
    """The data-dependent message kinds a membership attack's input is derived from: the
    victim's gradient views (message-level attacks) or its observed model (model-level),
    derived once more on a log that records which kinds are read."""
    from attacks._mia import MessageAttack
    from privbench.inversion import observation
    from privbench.membership import observed_model
    from privbench.threat import NotApplicable

    obs = observation(built, threat_for(audit.threat, built, audit.victim))
    reading = ReadingLog(obs.log.records)
    obs = dataclasses.replace(obs, log=reading)
    defense = type(built.trainer)
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


def _needed_rounds(run: RunConfig, audit: AuditConfig) -> RecordPolicy:
    """Rounds to record: up to the last inversion target (push-sum views need round t-1) and
    the whole run for message-level MIA and the last round for model-level MIA."""
    if any(a == "mia_message" for a in audit.attacks):
        return RecordPolicy()
    rounds = set(range(max(audit.inversion_rounds, default=0) + 2))  # gossip views need t+1
    rounds |= {run.rounds - 1, run.rounds - 2}
    return RecordPolicy(rounds=frozenset(r for r in rounds if 0 <= r < run.rounds))


@dataclass
class Sweep:
    """An audit run writing into `out`."""

    base: RunConfig
    overrides: dict[str, Any]
    audit: AuditConfig
    out: Path
    resume: bool = False
    progress: bool = True
    command: str = "privbench attack"
    messages_dir: Path | None = None

    def cell_dir(self, defense: str, eps: float | None, setting: str | None = None) -> Path:
        return self.out / "cells" / f"{defense}@{setting or _eps_key(eps)}"

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
        (setting "paper", ε None: the ε it composes to is read after training)."""
        cells: list[tuple[str, float | None, str | None]] = []
        for name in self.audit.defenses:
            cls = DEFENSES.get(name)
            for eps in (self.audit.eps if cls.private else (None,)):
                cells.append((name, eps, None))
            if cls.private and name in self.audit.paper_settings and self.messages_dir is None:
                cells.append((name, None, PAPER))
        return cells

    def run(self) -> dict[str, Any]:
        """Train and attack every missing cell, then assemble results.json and index.html."""
        timings: dict[str, Any] = {}
        grid = self.grid()
        for k, (defense, eps, setting) in enumerate(grid, 1):
            if self.progress:
                print(f"cell {k} of {len(grid)}: {defense} {_setting_label(eps, setting)}",
                      file=sys.stderr, flush=True)
            self.run_cell(defense, eps, timings, setting)
        results = self.assemble()
        write_json(self.out / "results.json", results)
        write_json(self.out / "timings.json", timings)
        from privbench.report import render_html

        atomic_write_text(self.out / "index.html", render_html(results))
        return results

    def _missing(self, folder: Path) -> list[str]:
        names = ["train", *self.audit.attacks]
        if not self.resume:
            return names
        return [n for n in names if not (folder / f"{n}.json").is_file()]

    def run_cell(self, defense: str, eps: float | None, timings: dict[str, Any],
                 setting: str | None = None) -> None:
        folder = self.cell_dir(defense, eps, setting)
        missing = self._missing(folder)
        if not missing:
            return
        run = self.base if eps is None else dataclasses.replace(self.base, epsilon=eps)
        overrides = {**self.overrides_for(defense),
                     **(self.audit.paper_settings[defense] if setting else {})}
        built, train_cell = self._train(defense, run, overrides)
        if setting:
            train_cell.update(epsilon=None, setting=_paper_setting(
                self.audit.paper_settings[defense], train_cell))
        label = folder.name
        timings[label] = {"train_s": train_cell.pop("seconds", None)}
        if "train" in missing:
            write_json(folder / "train.json", train_cell)
        todo = [a for a in self.audit.attacks if a in missing]
        views = None
        if train_cell["status"] == "ok" and any(not _is_membership(a) for a in todo):
            start = time.perf_counter()
            views = self._inversion_views(defense, run, overrides)
            timings[label]["inversion_views_s"] = time.perf_counter() - start
        for attack in todo:
            start = time.perf_counter()
            if train_cell["status"] != "ok":
                result = {"status": f"skipped: training {train_cell['status']}", "uses": [],
                          "metrics": {}}
            else:
                result = run_attack(built, attack, self.audit, run.seed, views)
            result.pop("seconds", None)  # timings live in timings.json, not in results
            for view in result.get("views", []):
                view.pop("seconds", None)
            timings[label][attack] = time.perf_counter() - start
            write_json(folder / f"{attack}.json", result)

    def _inversion_views(self, defense: str, run: RunConfig,
                         overrides: dict[str, Any]) -> dict[int, Built | str] | None:
        """Per batch size of the audit's inversion views: the defense run at that batch size
        (same ε, same configured rounds, so the same calibration) for the first rounds the
        inversion needs, or the reason there is none. None: invert the cell's own run."""
        if not self.audit.inversion_batch_sizes or self.messages_dir is not None:
            return None
        stop = min(run.rounds, max(self.audit.inversion_rounds, default=0) + 2)
        policy = RecordPolicy(rounds=frozenset(range(stop)))
        views: dict[int, Built | str] = {}
        for b in self.audit.inversion_batch_sizes:
            vrun = dataclasses.replace(run, batch_size=b)
            try:
                built = build(vrun, defense, overrides, policy=policy)
            except ConfigError as exc:
                views[b] = f"not applicable: {exc}"
                continue
            res = train(built.trainer, rounds=stop)
            views[b] = (built if res.diverged_round is None else
                        f"skipped: the batch-{b} run {diverged_text(res.diverged_round, stop)}")
        return views

    def _train(self, defense: str, run: RunConfig,
               overrides: dict[str, Any]) -> tuple[Built, dict[str, Any]]:
        if self.messages_dir is not None:
            return self._load_messages(defense, run)
        built = build(run, defense, overrides, policy=_needed_rounds(run, self.audit))
        from tqdm import tqdm

        with tqdm(total=run.rounds, desc=f"train {defense}", unit="round", leave=False,
                  disable=not (self.progress and sys.stderr.isatty()), file=sys.stderr) as bar:
            res = train(built.trainer, progress=bar.update)
        status = ("ok" if res.diverged_round is None
                  else diverged_text(res.diverged_round, run.rounds))
        full = train_result(built, res)
        cell = {"defense": defense, "epsilon": run.epsilon if built.trainer.private else None,
                "status": status, "accuracy": res.average_accuracy,
                "node_accuracy": res.node_accuracy, "privacy": full["privacy"],
                "messages": full["messages"], "defense_config": full["defense_config"],
                "history": res.history, "seconds": res.seconds}
        return built, cell

    def _load_messages(self, defense: str, run: RunConfig) -> tuple[Built, dict[str, Any]]:
        """Rebuild a saved training run's context and attach its logged messages."""
        saved = read_results(self.messages_dir / "results.json")  # type: ignore[operator]
        built = build(run, defense, saved.get("defense_config", {}), policy=RecordPolicy.none())
        built.ctx.bus.log = MessageLog.load(self.messages_dir)  # type: ignore[arg-type]
        built.ctx.truth = GroundTruth.load(self.messages_dir)  # type: ignore[arg-type]
        privacy = saved.get("privacy", [])
        built.trainer.privacy = lambda: privacy  # type: ignore[method-assign]
        cell = {"defense": defense, "epsilon": run.epsilon if built.trainer.private else None,
                "status": "ok" if saved.get("diverged_round") is None else "diverged",
                "accuracy": saved["accuracy"]["average_model"],
                "node_accuracy": saved["accuracy"]["per_node"], "privacy": privacy,
                "messages": saved["messages"], "defense_config": saved["defense_config"],
                "history": saved.get("history", []), "source": str(self.messages_dir)}
        return built, cell

    def assemble(self) -> dict[str, Any]:
        """results.json from the cell files, in the grid's order."""
        cells = []
        for defense, eps, setting in self.grid():
            folder = self.cell_dir(defense, eps, setting)
            cell = json.loads((folder / "train.json").read_text())
            cell["attacks"] = {a: json.loads((folder / f"{a}.json").read_text())
                               for a in sorted(self.audit.attacks)}
            cells.append(cell)
        return {"schema_version": SCHEMA_VERSION, "kind": "audit", "run_name": self.out.name,
                "command": self.command,
                "config": {"run": to_dict(self.base), "defense_overrides": self.overrides,
                           "audit": to_dict(self.audit), "threat": self.audit.threat},
                "environment": environment(torch.device("cpu") if self.base.device == "cpu"
                                           else _device(self.base.device)),
                "cells": cells}


PAPER = "paper"


def _setting_label(eps: float | None, setting: str | None) -> str:
    return "at the paper's setting" if setting else "no DP" if eps is None else f"ε={eps:g}"


def _paper_setting(overrides: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """The paper-setting cell's description: its overrides and the ε it composes to."""
    from privbench.results import claimed_eps

    knobs = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in sorted(overrides.items()))
    return {"name": PAPER, "label": f"paper {knobs}", "overrides": overrides,
            "composed_epsilon": json_ready(claimed_eps(cell, "calibrated"))}


def _device(name: str) -> torch.device:
    from privbench.device import resolve_device

    return resolve_device(name)


def summary_table(results: dict[str, Any]) -> str:
    """The terminal summary: one row per (defense, ε)."""
    from privbench.results import attack_metric, claimed_eps, fmt_num

    def f(v: float | None, d: int = 3) -> str:
        return fmt_num(v, d, missing="-")

    head = (f"{'defense':<12} {'eps':>5} {'acc':>6} {'PSNR':>6} {'SSIM':>6} {'label':>6} "
            f"{'AUC':>6} {'TPR@1%':>7} {'eps_paper':>9} {'eps_cal':>8} {'eps_emp':>8}  status")
    lines = [head]
    for c in results["cells"]:
        eps = ("paper" if c.get("setting") else "-" if c.get("epsilon") is None
               else f"{c['epsilon']:g}")
        lines.append(
            f"{c['defense']:<12} {eps:>5} {f(c.get('accuracy')):>6} "
            f"{f(attack_metric(c, 'psnr'), 1):>6} {f(attack_metric(c, 'ssim')):>6} "
            f"{f(attack_metric(c, 'label_accuracy'), 2):>6} {f(attack_metric(c, 'auc')):>6} "
            f"{f(attack_metric(c, 'tpr_at_1%_fpr')):>7} {f(claimed_eps(c, 'paper'), 2):>9} "
            f"{f(claimed_eps(c, 'calibrated'), 2):>8} "
            f"{f(attack_metric(c, 'empirical_epsilon'), 2):>8}  {c['status']}")
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
        defenses=resolve_names(defenses, DEFAULT_DEFENSES, DEFENSES),
        eps=tuple(eps) if eps else tuple(p["eps"]),
        attacks=resolve_names(attacks, tuple(p["attacks"]), ATTACKS),
        threat=threat or "eavesdropper",
        inversion_rounds=tuple(p["inversion_rounds"]),
        reference_models=p["reference_models"],
        attack_config=attack_config,
    )
    return replace_checked(cfg, sets, where="audit") if sets else cfg

