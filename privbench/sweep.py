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
from privbench.results import SCHEMA_VERSION, atomic_write_text, read_results, write_json
from privbench.runner import Built, build, environment, train_result
from privbench.threat import THREATS, ThreatModel

# The default grid: the non-private baselines and the five papers' algorithms (their variants
# and ablations are registered too and run with `--defense all` or by name).
DEFAULT_DEFENSES = ("sgp", "d_psgd", "adp_vrsgp", "defl_vp", "dyn_d2p", "partpsp", "dpdl")

PRESETS: dict[str, dict[str, Any]] = {
    # A few minutes on 2 CPU cores: small graph, short training, fast attack settings.
    "quick": {
        "run": {"model": "mlp", "nodes": 6, "rounds": 60, "eval_every": 60, "batch_size": 16,
                "lr": 0.2, "delta": 1e-5},
        "eps": (1.0, 8.0),
        "attacks": ("idlg", "geiping", "mia_threshold", "mia_message"),
        "attack_config": {"geiping": {"steps": 300}, "idlg": {"adam_steps": 300}},
        "inversion_rounds": (1,),
        "reference_models": 4,
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
    """

    defenses: tuple[str, ...] = DEFAULT_DEFENSES
    eps: tuple[float, ...] = (1.0, 8.0)
    attacks: tuple[str, ...] = ("idlg", "geiping", "mia_threshold", "mia_message")
    threat: str = "eavesdropper"
    victim: int = 0
    inversion_rounds: tuple[int, ...] = (1,)
    reference_models: int = 4
    attack_config: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
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
        return {"true": [json_ready(t.round(decimals=3).tolist()) for t in true],
                "reconstructed": [json_ready(t.round(decimals=3).tolist()) for t in rec]}
    return None


def run_inversion_attack(built: Built, attack: str, audit: AuditConfig,
                         gen: torch.Generator) -> dict[str, Any]:
    """One inversion attack on the victim's released gradients, graded against ground truth."""
    from privbench.inversion import grade, invert, observation

    threat = threat_for(audit.threat, built, audit.victim)
    obs = observation(built, threat)
    inv = invert(obs, type(built.trainer), [audit.victim], list(audit.inversion_rounds), attack,
                 audit.attack_config.get(attack), gen, built.ctx.device,
                 input_shape=built.ctx.data.input_shape)
    graded = grade(inv, built.ctx.data, built.ctx.truth)
    statuses = [p["status"] for p in graded["per_target"]]
    ok = graded["n_graded"] > 0
    metrics = {k: graded.get(k) for k in ("mse", "psnr", "ssim", "lpips", "label_accuracy")}
    uses = sorted(set(obs.log.kinds()) & _data_kinds(built))  # what the views are derived from
    return {"kind": "inversion", "status": "ok" if ok else statuses[0], "threat": _threat(threat),
            "uses": uses, "metrics": metrics, "lpips_status": graded.get("lpips_status"),
            "targets": [{k: v for k, v in p.items() if k not in ("true_labels",)}
                        for p in graded["per_target"]],
            "gallery": _gallery(inv, built) if ok else None, "image_range": [0.0, 1.0],
            "seconds": graded.get("seconds")}


def _data_kinds(built: Built) -> set[str]:
    return {k.name for k in built.trainer.kinds if k.data_dependent}


def _threat(t: ThreatModel) -> dict[str, Any]:
    return {"kind": t.kind, "observers": list(t.observers)}


def run_membership_attack(built: Built, attack: str, audit: AuditConfig,
                          gen: torch.Generator) -> dict[str, Any]:
    """One membership attack on the victim, with ROC, TPR at low FPR and the empirical ε."""
    from privbench.membership import run_membership

    threat = None if audit.threat == "neighbour" else threat_for(audit.threat, built, audit.victim)
    res = run_membership(built, audit.victim, attack, audit.attack_config.get(attack), gen,
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
            "uses": sorted(_data_kinds(built) & set(built.ctx.bus.log.kinds())),
            "metrics": metrics, "roc": roc, "empirical_epsilon_detail": emp,
            "n_members": res.get("n_members"), "n_nonmembers": res.get("n_nonmembers"),
            "tpr_at_0.1%_fpr_resolved": res.get("tpr_at_0.1%_fpr_resolved"),
            "tpr_at_1%_fpr_resolved": res.get("tpr_at_1%_fpr_resolved")}


def run_attack(built: Built, attack: str, audit: AuditConfig, seed: int) -> dict[str, Any]:
    """Run one attack; a diverging or crashing attack is recorded as failed with its reason."""
    from privbench.seeding import derive_seed

    gen = torch.Generator().manual_seed(derive_seed(seed, "attack", attack))
    try:
        if _is_membership(attack):
            return run_membership_attack(built, attack, audit, gen)
        return run_inversion_attack(built, attack, audit, gen)
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
    tuned: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)

    def cell_dir(self, defense: str, eps: float | None) -> Path:
        return self.out / "cells" / f"{defense}@{_eps_key(eps)}"

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

    def grid(self) -> list[tuple[str, float | None]]:
        """The (defense, ε) cells in their fixed order."""
        cells = []
        for name in self.audit.defenses:
            cls = DEFENSES.get(name)
            for eps in (self.audit.eps if cls.private else (None,)):
                cells.append((name, eps))
        return cells

    def run(self) -> dict[str, Any]:
        """Train and attack every missing cell, then assemble results.json and index.html."""
        timings: dict[str, Any] = {}
        for defense, eps in self.grid():
            self.run_cell(defense, eps, timings)
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

    def run_cell(self, defense: str, eps: float | None, timings: dict[str, Any]) -> None:
        folder = self.cell_dir(defense, eps)
        missing = self._missing(folder)
        if not missing:
            return
        run = self.base if eps is None else dataclasses.replace(self.base, epsilon=eps)
        run, extra, used = self._tuned(defense, run, eps)
        built, train_cell = self._train(defense, run, extra)
        if used is not None:
            train_cell["tuned"] = used
        label = f"{defense}@{_eps_key(eps)}"
        timings[label] = {"train_s": train_cell.pop("seconds", None),
                          "eval_s": train_cell.pop("eval_seconds", None)}
        if "train" in missing:
            write_json(folder / "train.json", train_cell)
        from tqdm import tqdm

        todo = [a for a in self.audit.attacks if a in missing]
        with tqdm(todo, desc=f"attacks {label}", unit="attack", leave=False,
                  disable=not self.progress, file=sys.stderr) as bar:
            for attack in bar:
                bar.set_postfix_str(attack)
                start = time.perf_counter()
                if train_cell["status"] != "ok":
                    result = {"status": f"skipped: training {train_cell['status']}", "uses": [],
                              "metrics": {}}
                else:
                    result = run_attack(built, attack, self.audit, run.seed)
                result.pop("seconds", None)  # timings live in timings.json, not in results
                timings[label][attack] = time.perf_counter() - start
                write_json(folder / f"{attack}.json", result)

    def _tuned(self, defense: str, run: RunConfig, eps: float | None,
               ) -> tuple[RunConfig, dict[str, Any], dict[str, Any] | None]:
        """The cell's run and defense overrides with the preset's tuned values applied (the
        user's own defense overrides win), and what was used (None: nothing tuned applies)."""
        from privbench.tuning import PRIVACY_NOTE, entry_for

        entry, _ = entry_for(self.tuned.get(defense, []), run, eps)
        if entry is None:
            return run, {}, None
        used = {"run": dict(entry.get("run", {})), "defense": dict(entry.get("defense", {})),
                "tuned_at_epsilon": entry["epsilon"], "command": entry.get("command"),
                "validation_accuracy": entry.get("validation_accuracy"),
                "source": "privbench/presets/tuned.toml", "note": PRIVACY_NOTE}
        return replace_checked(run, used["run"], where="run"), used["defense"], used

    def _train(self, defense: str, run: RunConfig,
               tuned: dict[str, Any] | None = None) -> tuple[Built, dict[str, Any]]:
        if self.messages_dir is not None:
            return self._load_messages(defense, run)
        built = build(run, defense, {**(tuned or {}), **self.overrides_for(defense)},
                      policy=_needed_rounds(run, self.audit))
        from tqdm import tqdm

        eps = "no DP" if not built.trainer.private else f"ε={run.epsilon:g}"
        with tqdm(total=run.rounds, desc=f"train {defense} {eps}", unit="round", leave=False,
                  disable=not self.progress, file=sys.stderr) as bar:
            res = train(built.trainer, progress=bar.update)
        status = ("ok" if res.diverged_round is None
                  else f"diverged (NaN/Inf) at round {res.diverged_round}")
        full = train_result(built, res)
        cell = {"defense": defense, "epsilon": run.epsilon if built.trainer.private else None,
                "status": status, "accuracy": res.average_accuracy,
                "node_accuracy": res.node_accuracy, "privacy": full["privacy"],
                "messages": full["messages"], "defense_config": full["defense_config"],
                "history": res.history, "seconds": res.seconds,
                "eval_seconds": res.eval_seconds}
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
        for defense, eps in self.grid():
            folder = self.cell_dir(defense, eps)
            cell = json.loads((folder / "train.json").read_text())
            cell["attacks"] = {a: json.loads((folder / f"{a}.json").read_text())
                               for a in sorted(self.audit.attacks)}
            cells.append(cell)
        return {"schema_version": SCHEMA_VERSION, "kind": "audit", "run_name": self.out.name,
                "command": self.command,
                "config": {"run": to_dict(self.base), "defense_overrides": self.overrides,
                           "audit": to_dict(self.audit), "threat": self.audit.threat,
                           **({"tuned": self._tuned_summary(cells)} if self.tuned else {})},
                "environment": environment(torch.device("cpu") if self.base.device == "cpu"
                                           else _device(self.base.device)),
                "cells": cells}


    @staticmethod
    def _tuned_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
        """Which cells ran with tuned values, which values, from where (for the report)."""
        from privbench.tuning import PRIVACY_NOTE

        used = {f"{c['defense']}@{_eps_key(c.get('epsilon'))}": {
                    k: c["tuned"][k] for k in ("run", "defense", "tuned_at_epsilon", "command")}
                for c in cells if c.get("tuned")}
        return {"source": "privbench/presets/tuned.toml", "cells": used,
                "privacy_note": PRIVACY_NOTE}


def _device(name: str) -> torch.device:
    from privbench.device import resolve_device

    return resolve_device(name)


def summary_table(results: dict[str, Any]) -> str:
    """The terminal summary: one row per (defense, ε)."""
    from privbench.results import attack_metric, claimed_eps

    def f(v: float | None, d: int = 3) -> str:
        return "-" if v is None else "inf" if v == float("inf") else f"{v:.{d}f}"

    head = (f"{'defense':<12} {'eps':>5} {'acc':>6} {'PSNR':>6} {'SSIM':>6} {'label':>6} "
            f"{'AUC':>6} {'TPR@1%':>7} {'eps_paper':>9} {'eps_cal':>8} {'eps_emp':>8}  status")
    lines = [head]
    for c in results["cells"]:
        eps = "-" if c.get("epsilon") is None else f"{c['epsilon']:g}"
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
        defenses=resolve_names(defenses, DEFAULT_DEFENSES, DEFENSES),
        eps=tuple(eps) if eps else tuple(p["eps"]),
        attacks=resolve_names(attacks, tuple(p["attacks"]), ATTACKS),
        threat=threat or "eavesdropper",
        inversion_rounds=tuple(p["inversion_rounds"]),
        reference_models=p["reference_models"],
        attack_config=attack_config,
    )
    return replace_checked(cfg, sets, where="audit") if sets else cfg

