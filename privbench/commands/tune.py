"""`privbench tune --all`: every cell of an audit preset tuned in one resumable command.

The cells are those of the preset's default audit (`privbench attack --preset P`): each default
defense at every ε of the preset's grid, the non-private baselines once (their entry holds at
every ε), a private defense's paper setting (PartPSP's b: no ε target, its entry holds at every
ε) and its paper reading at every ε (DeFL-VP's per-coordinate ε), each with the defense's grid
of `audit_presets.TUNE_GRIDS` (`privbench.pipeline.tuning.tune`: chosen on a validation split of the
members). Each cell's result is written to `<out>/<cell>/tune.json` with the fingerprint of what
determines it; the same command again reuses the cells whose fingerprint matches and tunes the
rest. With `save`, each cell's best candidate is written to the tuned-values file as soon as
its cell is done, with the single-cell `privbench tune` command that gives the same entry.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from privbench.audit.config import DEFAULT_DEFENSES
from privbench.commands.common import (
    _check_writable,
    _claim,
    _command_line,
    _ends_kept,
    _on_interrupt,
    run_config_from_args,
)
from privbench.config import FieldValue, JSONObject, RunConfig, to_dict
from privbench.errors import ConfigError, PrivbenchError
from privbench.pipeline import tuning
from privbench.pipeline.presets import PRESETS, TUNE_GRIDS
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.results.records import Fingerprint


@dataclass(frozen=True)
class TuneCell:
    """One cell to tune: a defense, its ε (None: the entry holds at every ε) and the defense
    values held fixed (a paper setting or reading; empty for a calibrated cell)."""

    defense: str
    eps: float | None
    fixed: tuple[tuple[str, FieldValue], ...] = ()

    @property
    def name(self) -> str:
        """The cell's folder: 'dyn_d2p@eps1', 'sgp@any', 'defl_vp@eps8-paper'."""
        at = "any" if self.eps is None else f"eps{self.eps:g}"
        return f"{self.defense}@{at}{'-paper' if self.fixed else ''}"


class CellResult(tuning.TuneResult):
    """A cell's tune.json: the tune result, the cell, what determines it and its command."""

    cell: str
    fixed: dict[str, FieldValue]
    run: JSONObject  # the run config (`to_dict`)
    fingerprint: NotRequired[Fingerprint]  # added once tuned, with the two commands
    command: NotRequired[str]
    written_by: NotRequired[str]


class CellSummary(TypedDict):
    """One line of `tune_preset`'s summary."""

    cell: str
    reused: bool
    seconds: float  # this call's; 0 for a reused cell
    best: str | None  # the best candidate's label
    validation_accuracy: float | None
    untuned_test: float | None
    tuned_test: float | None


def preset_cells(preset: str, defenses: tuple[str, ...] = DEFAULT_DEFENSES) -> list[TuneCell]:
    """The cells of `preset`'s default audit, in the audit's order."""
    load_plugins()
    spec = PRESETS[preset]
    cells: list[TuneCell] = []
    for name in defenses:
        if name not in TUNE_GRIDS:
            raise ConfigError(f"no tuning grid for {name}; accepted: {', '.join(TUNE_GRIDS)}")
        if not DEFENSES.get(name).private:
            cells.append(TuneCell(name, None))
            continue
        cells += [TuneCell(name, float(e)) for e in spec["eps"]]
        if name in spec.get("paper_settings", {}):
            cells.append(TuneCell(name, None, tuple(spec["paper_settings"][name].items())))
        if name in spec.get("paper_readings", {}):
            fixed = tuple(spec["paper_readings"][name].items())
            cells += [TuneCell(name, float(e), fixed) for e in spec["eps"]]
    return cells


def cell_command(command: str, cell: TuneCell, save: str | None) -> str:
    """The single-cell `privbench tune` command that gives `cell`'s entry: `command` (the
    whole-preset one) with `--all` replaced by the cell's defense, ε, grid and fixed values."""
    parts = [f"--defense {cell.defense}"]
    if cell.eps is not None:
        parts.append(f"--eps {cell.eps:g}")
    parts += [f"--grid {g}" for g in TUNE_GRIDS[cell.defense]]
    parts += [f"--set defense.{k}={v:g}" if isinstance(v, float) else f"--set defense.{k}={v}"
              for k, v in cell.fixed]
    words = [w for w in command.split() if w != "--all"]
    if save is not None and "--save" not in words:
        words += ["--save", save]
    return " ".join([*words[:2], *parts, *words[2:]])


def cell_fingerprint(run: RunConfig, cell: TuneCell, validation: float, test: bool
                     ) -> Fingerprint:
    """What determines a cell's tune.json: run, defense, fixed values, the grid, the split,
    whether test accuracies are measured, the privbench and torch versions and thread count."""
    import torch

    import privbench
    from privbench.results.fingerprint import fingerprint

    return fingerprint({
        "run": {k: v for k, v in to_dict(run).items() if k not in ("data_root", "download")},
        "defense": cell.defense, "fixed": dict(cell.fixed), "grid": list(TUNE_GRIDS[cell.defense]),
        "validation": validation, "test": test,
        "version": {"privbench": privbench.__version__, "torch": torch.__version__},
        "threads": torch.get_num_threads()})


def _reusable(path: Path, want: Fingerprint) -> CellResult | None:
    """The tune.json at `path` when it is whole and its fingerprint is `want`'s, else None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("fingerprint", {}).get("sha256") == want["sha256"]
    return data if ok and "candidates" in data else None


def tune_preset(base: RunConfig, preset: str, out: Path, command: str, validation: float = 0.2,
                test: bool = True, save: Path | None = None, progress: bool = True,
                cells: list[TuneCell] | None = None) -> list[CellSummary]:
    """Tune every cell of `preset` (or `cells`) into `out/<cell>/tune.json`, reusing the cells
    whose fingerprint matches; with `save`, write each cell's best candidate to that file.

    Returns one summary per cell: name, reused, best label and validation accuracy, test
    accuracies (when measured), seconds (this call; 0 for a reused cell).
    """
    from privbench.results.fingerprint import folder_lock
    from privbench.results.store import write_json

    cells = preset_cells(preset) if cells is None else cells
    rows = []
    with folder_lock(out):
        for k, cell in enumerate(cells, 1):
            run = base if cell.eps is None else dataclasses.replace(base, epsilon=cell.eps)
            want = cell_fingerprint(run, cell, validation, test)
            path = out / cell.name / "tune.json"
            start = time.perf_counter()
            result = _reusable(path, want)
            reused = result is not None
            if progress:
                cands = tuning.parse_grid(list(TUNE_GRIDS[cell.defense]), cell.defense)
                print(f"cell {k} of {len(cells)}: {cell.name} ({len(cands)} candidates"
                      f"{', reused' if reused else ''})", flush=True)
            if result is None:
                result = _tune_cell(run, cell, validation, test, progress)
                result["fingerprint"] = want
                result["command"] = cell_command(command, cell, None if save is None
                                                 else str(save))
                result["written_by"] = command
                write_json(path, result)
            if save is not None and result["best"] is not None:
                text = tuning.toml_entry(preset, cell.defense, run, result, result["command"],
                                         fixed=dict(cell.fixed), eps_free=cell.eps is None,
                                         written_by=command)
                tuning.save_entry(save, text, preset, cell.defense)
            rows.append(_summary(cell, result, reused, time.perf_counter() - start))
    return rows


def _tune_cell(run: RunConfig, cell: TuneCell, validation: float, test: bool,
               progress: bool) -> CellResult:
    cands = tuning.parse_grid(list(TUNE_GRIDS[cell.defense]), cell.defense)
    result = tuning.tune(run, cell.defense, cands, validation, dict(cell.fixed),
                         progress=progress, test=test)
    return {**result, "cell": cell.name, "fixed": dict(cell.fixed), "run": to_dict(run)}


def _summary(cell: TuneCell, result: CellResult, reused: bool, seconds: float
             ) -> CellSummary:
    best = None if result["best"] is None else result["candidates"][result["best"]]
    return {"cell": cell.name, "reused": reused, "seconds": 0.0 if reused else seconds,
            "best": None if best is None else best["label"],
            "validation_accuracy": None if best is None else best["validation_accuracy"],
            "untuned_test": result.get("untuned_test", {}).get("accuracy"),
            "tuned_test": result.get("tuned_test", {}).get("accuracy")}


def cmd_tune(args: argparse.Namespace) -> int:
    """`privbench tune`: grid search on a validation split carved from the members."""
    from privbench.config import to_dict
    from privbench.device import resolve_device
    from privbench.engine.runner import environment
    from privbench.pipeline import sweep, tuning
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES
    from privbench.results.store import write_json

    load_plugins()
    if args.all:
        return _tune_preset(args)
    run, overrides = run_config_from_args(args, sweep.PRESETS[args.preset]["run"])
    candidates = tuning.parse_grid(args.grid, args.defense)
    out = Path(args.out or f"reports/tune-{args.preset}-{args.defense}-eps{run.epsilon:g}")
    _on_interrupt(lambda: _ends_kept(args, out / "tune.json"))
    with contextlib.ExitStack() as stack:  # the folder is this tune's until tune.json is in
        if (problem := _claim(stack, out, "tune.json", args.overwrite)) is not None:
            raise problem
        print(f"tune {args.defense} at eps={run.epsilon:g}: {len(candidates)} candidates, "
              f"validation = {args.validation:g} of each node's members")
        result = tuning.tune(run, args.defense, candidates, args.validation, overrides,
                             progress=not args.quiet, test=not args.skip_test)
        command = _command_line(args)
        write_json(out / "tune.json", {**result, "command": command, "preset": args.preset,
                                       "run": to_dict(run), "defense_overrides": overrides,
                                       "environment": environment(resolve_device(run.device))})
    _print_tune(result)
    if args.save and result["best"] is not None:
        fixed = tuning.fixed_values(args.defense, overrides)
        paper = tuning.fixed_values(args.defense, sweep.PRESETS[args.preset].get(
            "paper_settings", {}).get(args.defense, {}))
        eps_free = not DEFENSES.get(args.defense).private or (bool(paper) and fixed == paper)
        text = tuning.toml_entry(args.preset, args.defense, run, result, command, fixed=fixed,
                                 eps_free=eps_free)
        tuning.save_entry(Path(args.save), text, args.preset, args.defense)
        print(f"saved the best candidate to {args.save}")
    print(f"wrote {out / 'tune.json'}")
    return 0


def _tune_preset(args: argparse.Namespace) -> int:
    """`privbench tune --all`: every cell of the preset's default audit, resumable."""
    import time

    from privbench.commands import tune as tune_preset
    from privbench.pipeline import sweep

    given = [f for f in ("--defense", "--grid", "--eps") if any(
        a == f or a.startswith(f + "=") for a in args._argv)]
    given += ["--set defense.KEY"] * any(s.startswith("defense.") for s in args.sets)
    if given:
        raise PrivbenchError(f"--all tunes the preset's own cells with its grids "
                             f"(privbench/pipeline/presets.py TUNE_GRIDS); drop {given[0]}, or "
                             "tune one cell with --defense D --eps E --grid KEY=V1,V2")
    run, _ = run_config_from_args(args, sweep.PRESETS[args.preset]["run"])
    out = Path(args.out or f"reports/tune-{args.preset}")
    _check_writable(out)
    start = time.perf_counter()
    rows = tune_preset.tune_preset(run, args.preset, out, _command_line(args), args.validation,
                                   test=not args.skip_test,
                                   save=Path(args.save) if args.save else None,
                                   progress=not args.quiet)
    for r in rows:
        val = "-" if r["validation_accuracy"] is None else f"{r['validation_accuracy']:.4f}"
        print(f"  {r['cell']:<22} {r['best'] or 'no candidate finished':<32} validation {val}"
              f"{'  (reused)' if r['reused'] else ''}")
    reused = sum(r["reused"] for r in rows)
    print(f"tuned {len(rows) - reused} cell(s), reused {reused}, in "
          f"{time.perf_counter() - start:.0f} s; wrote {out}/<cell>/tune.json"
          + (f" and {args.save}" if args.save else ""))
    return 0


def _print_tune(result: tuning.TuneResult) -> None:
    def acc(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    if result["best"] is None:
        print("no candidate finished (all diverged)")
    else:
        best = result["candidates"][result["best"]]
        print(f"best on validation: {best['label']} ({acc(best['validation_accuracy'])})")
    for key in result.get("inert", []):
        print(f"note: {key} changed nothing: all candidates that differ in {key} alone trained "
              f"identical models (this {result['defense']} setting does not read it)")
    if "untuned_test" not in result:
        print("test accuracy: not measured (--skip-test)")
    else:
        tuned = result.get("tuned_test", {}).get("accuracy")
        print(f"test accuracy (not used for the choice): untuned "
              f"{acc(result['untuned_test']['accuracy'])}, tuned {acc(tuned)}")
    print(f"note: {result['privacy_note']}")
