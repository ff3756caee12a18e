"""The audit sweep (defense x ε x attack), cell by cell, resumable (`privbench attack`).

For every (defense, ε) the defense is trained once while recording only the rounds the attacks need;
then every attack runs on what the threat model observes. Each finished piece is written atomically
as its own file under `<out>/cells/<defense>@<ε>/` (`train.json`, `<attack>.json`), so an
interrupted sweep loses at most the piece in progress. Every file carries the fingerprint of what
determined it (`privbench.results.fingerprint`); `--resume` reuses a file only when it is valid
(`privbench.results.schema`) and its fingerprint matches, and stops with the first differing field
otherwise (`--resume=rerun-stale` recomputes the stale ones). One run writes into a folder at a time
(an advisory lock). `results.json` (schema `privbench.results`, strict JSON) is assembled from the
cell files in a fixed order and holds no timestamps, timings or output folder name (timings go to
`timings.json`, the run name to the page's title), so the same seed gives byte-identical results on
CPU wherever it is written. `index.html` is rendered from `results.json` alone; the three aggregate
files are written only once all of them are built.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch

from privbench.audit.attack import trains_its_own_run
from privbench.audit.config import DEFAULT_DEFENSES, AuditConfig
from privbench.audit.dispatch import audit_threat, is_inversion, run_attack
from privbench.config import Overrides, RunConfig, json_ready, replace_checked, to_dict
from privbench.data.datasets import recording_sampling
from privbench.device import machine_kind
from privbench.engine.loop import train
from privbench.engine.messages import MessageLog, RecordPolicy
from privbench.engine.runner import (
    RUN_ONLY,
    Built,
    build,
    check_split,
    environment,
    from_run_file,
    structure,
    train_result,
)
from privbench.engine.threads import ThreadChoice, choose_jobs, choose_threads, machine
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError, PrivbenchError
from privbench.pipeline.cells import (
    PAPER,
    Laps,
    cell_device,
    cell_key,
    cell_key_for,
    file_problem,
    holds,
    needed_rounds,
    paper_setting,
    placed_extra,
    read_cell_file,
    sensitivity_trace,
    setting_label,
)
from privbench.pipeline.jobs import Todo, announce, env_jobs, peak_memory_mib, run_parallel
from privbench.pipeline.presets import PRESETS  # plain data, no torch
from privbench.pipeline.tuning import PRIVACY_NOTE, TunedEntry, apply_tuned
from privbench.plugins import load_plugins
from privbench.progress import Phase
from privbench.registry import ATTACKS, DEFENSES
from privbench.results import fingerprint as fp
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.results.records import (
    AttackResult,
    AuditCell,
    AuditRun,
    AuditSettings,
    ConfigValue,
    Fingerprint,
    TrainedCell,
    TunedSummary,
)
from privbench.results.schema import ATTACK_FILE, TRAIN_FILE
from privbench.results.store import (
    SCHEMA_VERSION,
    atomic_write_text,
    dumps,
    read_results,
    remove_stale_temps,
    write_json,
)


def duplicate_eps(values: list[float] | None) -> list[float]:
    """The values of an ε grid that repeat an earlier one (removed from the grid)."""
    seen: set[float] = set()
    dups = []
    for v in values or []:
        if v in seen:
            dups.append(v)
        seen.add(v)
    return dups


RESUME_MODES = ("check", "rerun-stale")


class Timings(TypedDict, total=False):
    """timings.json of an audit (see `Sweep.run`)."""

    setup_s: float
    cells: dict[str, dict[str, float]]
    reused: list[str]
    report_s: float
    eval_within_train_s: dict[str, float]
    wall_s: float
    sum_s: float
    cells_s: float
    threads: ThreadChoice
    jobs: int
    peak_rss_mib: dict[str, float]


@dataclass
class Sweep:
    """An audit run writing into `out`.

    `resume`: None (compute every cell), "check" (reuse valid cells whose fingerprint matches;
    a mismatch is an error naming the first differing field) or "rerun-stale" (recompute those).
    """

    base: RunConfig
    overrides: Overrides
    audit: AuditConfig
    out: Path
    resume: str | None = None
    progress: bool = True
    command: str = "privbench attack"
    messages_dir: Path | None = None
    stats: dict[str, int] = dataclasses.field(default_factory=dict)
    tuned: dict[str, list[TunedEntry]] = dataclasses.field(default_factory=dict)
    eval_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    planned: int = 0  # cells of the grid, once `run` has planned them
    finished: int = 0  # of those, the cells whose files are all written (reused ones too)
    where: str = ""  # the cell in progress, for progress lines
    jobs: int | None = None  # worker processes (None: PRIVBENCH_JOBS, else `choose_jobs`)
    thread_choice: ThreadChoice | None = None  # how this process's threads were chosen

    def cell_dir(self, defense: str, eps: float | None, setting: str | None = None) -> Path:
        return self.out / "cells" / f"{defense}@{cell_key_for(eps, setting)}"

    def overrides_for(self, defense: str) -> Overrides:
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

    def _adds_cells(self, defense: str, table: dict[str, Overrides]) -> bool:
        """Whether `table` names overrides for `defense` that the sweep does not already apply
        (those would repeat the calibrated cells)."""
        over = table.get(defense)
        if not over:
            return False
        mine = self.overrides_for(defense)
        return any(k not in mine or mine[k] != v for k, v in over.items())

    def paper_overrides(self, defense: str, eps: float | None) -> Overrides:
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
                    raise type(exc)(f"{defense} {setting_label(eps, setting)}: {exc}") from None
                audit_threat(built, self.audit)
                bar.update()

    def phase(self, what: str, total: int | None = None, unit: str = "it") -> Phase:
        """A long part of the sweep: a bar on a terminal, a heartbeat line in a log."""
        label = f"{self.where}: {what}" if self.where else what
        return Phase(label, total, unit, enabled=self.progress)

    def fingerprints(self, defense: str, eps: float | None, setting: str | None = None
                     ) -> dict[str, Fingerprint]:
        """The fingerprint of each file of a cell ("train" and one per attack)."""
        import privbench

        run, over, _ = self.cell_run(defense, eps, setting)
        cfg = replace_checked(DEFENSES.get(defense).Config(), over, where="defense")
        fields: dict[str, ConfigValue] = {
            "run": {k: v for k, v in to_dict(run).items() if k not in ("data_root", "download")},
            "defense": {"name": defense, **to_dict(cfg)},
            # what the code makes of them (a changed split or model, the configuration equal)
            "structure": structure(run, defense, over),
            "setting": setting,
            "dataset": fp.dataset_identity(run.dataset, run.data_root, run.download),
            "version": {"privbench": privbench.__version__, "torch": torch.__version__},
            "threads": torch.get_num_threads(),
            # other vector kernels give other numbers at the same thread count
            "machine": machine_kind(cell_device(run.device)),
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
                 ) -> tuple[RunConfig, Overrides, Overrides | None]:
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

    def run(self) -> AuditRun:
        """Train and attack every cell to (re)compute, then write results.json (the returned
        record's JSON), timings.json and index.html, once all three are built. Holds the
        folder's lock throughout.

        `timings.json`: wall_s (this call), setup_s (validation, fingerprints), per cell build_s
        (data, model, the privacy plan), train_s (the round loop), summary_s (privacy report,
        message statistics), inversion_views_s (the small-batch runs inversion attacks read,
        when the audit has them) and one entry per attack, then report_s (results.json and
        index.html), sum_s the sum of what this call measured. The parts are consecutive laps of
        one clock, so they add up to wall_s (less the final write). With cells in worker
        processes (`jobs` > 1) each cell's parts are its worker's laps, which overlap, and
        cells_s is the parent's lap over all of them (the one that sum_s adds). Also: threads
        (the thread choice and why, `privbench.engine.threads`), jobs and peak_rss_mib (this process
        and its largest worker). A cell reused by --resume
        keeps the timings of the run that computed it and is listed under "reused"."""
        laps = Laps()
        with fp.folder_lock(self.out):
            remove_stale_temps(self.out)
            self.validate()
            grid = self.grid()
            plan = [(cell, self.plan_cell(*cell)) for cell in grid]  # before training
            self.check_cells([cell for cell, (todo, _) in plan if todo])  # before training too
            self.planned = len(grid)
            timings: Timings = {"setup_s": laps.lap(), "cells": {}, "reused": []}
            reused = [self._label(*cell) for cell, (todo, _) in plan if not todo]
            timings["reused"], self.finished = reused, len(reused)
            cells = [(k, cell, todo, prints)
                     for k, (cell, (todo, prints)) in enumerate(plan, 1) if todo]
            timings["jobs"] = jobs = self.job_count(len(cells))
            announce(self, cells, jobs, torch.get_num_threads())
            if jobs > 1:
                run_parallel(self, cells, jobs, torch.get_num_threads(), len(grid))
                measured = timings["cells_s"] = laps.lap()
            else:
                measured = self.run_cells(cells, len(grid), laps)
            results = self.assemble()
            for cell in grid:
                timings["cells"][self._label(*cell)] = self._read_timings(*cell)
            from privbench.report import render_html

            with self.phase("report (index.html)"):
                html = render_html(results, run_name=self.out.name)
            text = dumps(results.to_json())
            timings["report_s"] = laps.lap()
            timings["eval_within_train_s"] = dict(self.eval_seconds)
            timings["threads"] = self.thread_choice or choose_threads(
                machine(), None, torch.get_num_threads())
            timings["peak_rss_mib"] = peak_memory_mib()
            timings["wall_s"] = laps.total()
            timings["sum_s"] = timings["setup_s"] + measured + timings["report_s"]
            outputs = {"index.html": html, "results.json": text}  # results.json last: it ends
            if not cells:  # a finished audit resumed: a file is rewritten only if it changed
                outputs = {k: v for k, v in outputs.items() if not holds(self.out / k, v)}
            if cells or outputs:
                write_json(self.out / "timings.json", timings)
            for name, content in outputs.items():
                atomic_write_text(self.out / name, content)
        return results

    def job_count(self, cells: int) -> int:
        """Worker processes for `cells` cells to compute (1: this process computes them)."""
        if self.messages_dir is not None or cells < 2:
            return 1
        requested = self.jobs if self.jobs is not None else env_jobs()
        return choose_jobs(machine(), cells, torch.get_num_threads(), requested)

    def run_cells(self, cells: list[Todo], total: int, laps: Laps) -> float:
        """Compute `cells` one after the other in this process; the seconds measured."""
        measured = 0.0
        for k, cell, todo, prints in cells:
            self.where = f"cell {k} of {total} ({cell[0]} {setting_label(*cell[1:])})"
            if self.progress:
                print(f"cell {k} of {total}: {cell[0]} {setting_label(*cell[1:])}",
                      file=sys.stderr, flush=True)
            measured += sum(self.run_cell(*cell, todo, prints, laps).values())
            self.finished += 1
        self.where = ""
        return measured

    def _label(self, defense: str, eps: float | None, setting: str | None = None) -> str:
        return self.cell_dir(defense, eps, setting).name

    def _read_timings(self, defense: str, eps: float | None, setting: str | None = None
                      ) -> dict[str, float]:
        path = self.cell_dir(defense, eps, setting) / TIMINGS
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def plan_cell(self, defense: str, eps: float | None, setting: str | None = None
                  ) -> tuple[list[str], dict[str, Fingerprint]]:
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
            problem = file_problem(path, TRAIN_FILE if name == "train" else ATTACK_FILE)
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
                 prints: dict[str, Fingerprint], laps: Laps) -> dict[str, float]:
        """Compute the files `todo` of one cell; returns the laps measured (seconds by part)."""
        folder = self.cell_dir(defense, eps, setting)
        run, overrides, used = self.cell_run(defense, eps, setting)
        measured: dict[str, float] = {}
        built, cell = self._train(defense, run, overrides, measured, laps)
        # the seconds of evaluation within train_s (none for a saved run: nothing trained)
        self.eval_seconds[folder.name] = (0.0 if self.messages_dir is not None
                                          else cell.detail["eval_seconds"])
        cell = cell.without(*RUN_ONLY)
        if used is not None:
            cell = cell.with_detail(tuned=used)
        if setting:
            paper = paper_setting(self.paper_overrides(defense, eps), cell.to_json(), eps)
            cell = dataclasses.replace(cell, epsilon=None).with_detail(setting=paper)
        if "train" in todo:
            write_json(folder / "train.json", {**cell.to_json(), "fingerprint": prints["train"]})
        attacks = [a for a in self.audit.attacks if a in todo]
        views = None
        if cell.ok and any(is_inversion(a) for a in attacks):
            views = self._inversion_views(defense, run, overrides)
            measured["inversion_views_s"] = laps.lap()
        for attack in attacks:
            if not cell.ok and not trains_its_own_run(ATTACKS.get(attack)):
                result = AttackResult(status=outcome.skipped(f"training {cell.status}"))
            else:
                with self.phase(f"attack {attack} ({attacks.index(attack) + 1} of "
                                f"{len(attacks)})"):
                    result = run_attack(built, attack, self.audit, run.seed, views)
            result = result.without("seconds")  # timings live in timings.json, not in results
            write_json(folder / f"{attack}.json",
                       {**result.to_json(), "fingerprint": prints[attack]})
            measured[f"{attack}_s"] = laps.lap()
        write_json(folder / TIMINGS, {**self._read_timings(defense, eps, setting), **measured})
        return measured

    def _inversion_views(self, defense: str, run: RunConfig,
                         overrides: Overrides) -> dict[int, Built | Status] | None:
        """Per batch size of the audit's inversion views: the defense run at that batch size
        (same ε, same configured rounds, so the same calibration) for the first rounds the
        inversion needs, or the reason there is none. None: invert the cell's own run."""
        if not self.audit.inversion_batch_sizes or self.messages_dir is not None:
            return None
        stop = min(run.rounds, max(self.audit.inversion_rounds, default=0) + 2 +
                   placed_extra(run, self.audit))
        policy = RecordPolicy(rounds=frozenset(range(stop)))
        views: dict[int, Built | Status] = {}
        for b in self.audit.inversion_batch_sizes:
            vrun = dataclasses.replace(run, batch_size=b)
            try:
                built = build(vrun, defense, overrides, policy=policy)
            except ConfigError as exc:
                views[b] = outcome.not_applicable(exc)
                continue
            with self.phase(f"inversion view (batch {b})", stop, "round") as bar:
                res = train(built.trainer, rounds=stop, progress=bar.update)
            views[b] = (built if res.diverged_round is None else outcome.skipped(
                f"the batch-{b} run {outcome.diverged_in(res.diverged_round, stop)}"))
        return views

    def _tuned(self, defense: str, run: RunConfig, eps: float | None, setting: str | None,
               ) -> tuple[RunConfig, Overrides, Overrides | None]:
        """The cell's run and defense overrides with the entry tuned at the cell's own ε (and
        for its paper setting or reading, if any) applied, and the lookup's record (the entry
        used, or why none applies: the cell then runs the untuned defaults). None: the sweep
        has no tuned values (--untuned)."""
        if not self.tuned:
            return run, {}, None
        fixed = self.paper_overrides(defense, eps) if setting else {}
        return apply_tuned(self.tuned.get(defense, []), run, eps, defense, fixed)

    def _train(self, defense: str, run: RunConfig, overrides: Overrides,
               timing: dict[str, float], laps: Laps) -> tuple[Built, TrainedCell]:
        if self.messages_dir is not None:
            built, cell = self._load_messages(defense, run)
            timing["build_s"] = laps.lap()
            return built, cell
        built = build(run, defense, overrides, policy=needed_rounds(run, self.audit, defense))
        timing["build_s"] = laps.lap()
        with self.phase(f"train {defense}", run.rounds, "round") as bar, \
                recording_sampling() as drawn:
            res = train(built.trainer, progress=bar.update)
        timing["train_s"] = laps.lap()
        cell = train_result(built, res).with_detail(sampling_drawn=sorted(drawn))
        trace = sensitivity_trace(built)
        if trace is not None:
            cell = cell.with_detail(sensitivity_trace=trace)
        timing["summary_s"] = laps.lap()
        return built, cell

    def _load_messages(self, defense: str, run: RunConfig) -> tuple[Built, TrainedCell]:
        """Rebuild a saved training run's context and attach its logged messages; the
        member/non-member split rebuilt from the saved run config must be the one the run
        trained on (its digest is stored with the ground truth), or the attack is refused."""
        saved = read_results(self.messages_dir / "results.json")  # type: ignore[operator]
        built = build(run, defense, saved.get("defense_config", {}), policy=RecordPolicy.none())
        built.ctx.bus.log = MessageLog.load(self.messages_dir)  # type: ignore[arg-type]
        built.ctx.truth = GroundTruth.load(self.messages_dir)  # type: ignore[arg-type]
        check_split(built, self.messages_dir)  # type: ignore[arg-type]
        built.saved_privacy = saved.get("privacy", [])  # the claims it made, read by attacks
        cell = from_run_file(saved, run.epsilon if built.trainer.private else None)
        cell = cell.with_detail(source=str(self.messages_dir))
        return built, cell

    def assemble(self) -> AuditRun:
        """The audit's record from the cell files (each validated), in the grid's order."""
        cells, prints = [], []
        for defense, eps, setting in self.grid():
            folder = self.cell_dir(defense, eps, setting)
            trained = TrainedCell.from_json(read_cell_file(folder / "train.json", TRAIN_FILE))
            prints.append(trained.detail["fingerprint"]["sha256"])
            trained = trained.with_detail(fingerprint=prints[-1])
            attacks = {}
            for a in sorted(self.audit.attacks):
                att = AttackResult.from_json(read_cell_file(folder / f"{a}.json", ATTACK_FILE))
                prints.append(att.detail["fingerprint"]["sha256"])
                attacks[a] = dataclasses.replace(
                    att, detail={**att.detail, "fingerprint": prints[-1]})
            cells.append(AuditCell(trained, attacks))
        import hashlib

        run_print = hashlib.sha256(" ".join(prints).encode()).hexdigest()
        config = AuditSettings(
            run=to_dict(self.base), defense_overrides=self.overrides, audit=to_dict(self.audit),
            threat=self.audit.threat, fingerprint=run_print, threads=torch.get_num_threads(),
            tuned=self._tuned_summary(cells) if self.tuned else None)
        return AuditRun(tuple(cells), SCHEMA_VERSION, "audit", self.command, config,
                        environment(cell_device(self.base.device)))

    @staticmethod
    def _tuned_summary(cells: list[AuditCell]) -> TunedSummary:
        """Per cell, the tuned entry it ran with (its values, the ε it was tuned at, the
        command, the tuning's privacy cost) or, under `missing`, why none applied (for the
        terminal and the report)."""
        keys = ("entry", "run", "defense", "tuned_at_epsilon", "fixed", "command",
                "privacy_cost")
        looked = {f"{c.defense}@{cell_key(c.trained.to_json())}": c.trained.detail["tuned"]
                  for c in cells if c.trained.detail.get("tuned")}
        used = {cell: {k: t.get(k) for k in keys} for cell, t in looked.items()
                if t.get("entry") or t.get("command")}
        missing = {cell: {"reason": t.get("reason"), "privacy_cost": t.get("privacy_cost")}
                   for cell, t in looked.items() if cell not in used}
        return {"source": "privbench/presets/tuned.toml", "cells": used, "missing": missing,
                "privacy_note": PRIVACY_NOTE}


TIMINGS = "timings.json"


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
                 sets: Overrides) -> AuditConfig:
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
