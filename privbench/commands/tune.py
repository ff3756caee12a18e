"""`privbench tune`: one defense's grid searched on a validation split carved from the members
(`privbench.pipeline.tuning`), or with `--all` every cell of an audit preset
(`privbench.pipeline.tune_preset`); prints the choice and writes tune.json."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from privbench.commands.common import (
    check_writable,
    claim_folder,
    command_line,
    ends_kept,
    on_interrupt,
    run_config_from_args,
)
from privbench.errors import PrivbenchError
from privbench.pipeline import tuning


def cmd_tune(args: argparse.Namespace) -> int:
    """`privbench tune`: grid search on a validation split carved from the members."""
    from privbench.config import to_dict
    from privbench.device import resolve_device
    from privbench.engine.runner import environment
    from privbench.pipeline.presets import PRESETS
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES
    from privbench.results.store import write_json

    load_plugins()
    if args.all:
        return _tune_preset(args)
    run, overrides = run_config_from_args(args, PRESETS[args.preset]["run"])
    candidates = tuning.parse_grid(args.grid, args.defense)
    out = Path(args.out or f"reports/tune-{args.preset}-{args.defense}-eps{run.epsilon:g}")
    on_interrupt(lambda: ends_kept(args, out / "tune.json"))
    with contextlib.ExitStack() as stack:  # the folder is this tune's until tune.json is in
        if (problem := claim_folder(stack, out, "tune.json", args.overwrite)) is not None:
            raise problem
        print(f"tune {args.defense} at eps={run.epsilon:g}: {len(candidates)} candidates, "
              f"validation = {args.validation:g} of each node's members")
        result = tuning.tune(run, args.defense, candidates, args.validation, overrides,
                             progress=not args.quiet, test=not args.skip_test)
        command = command_line(args)
        write_json(out / "tune.json", {**result, "command": command, "preset": args.preset,
                                       "run": to_dict(run), "defense_overrides": overrides,
                                       "environment": environment(resolve_device(run.device))})
    _print_tune(result)
    if args.save and result["best"] is not None:
        fixed = tuning.fixed_values(args.defense, overrides)
        paper = tuning.fixed_values(args.defense, PRESETS[args.preset].get(
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

    from privbench.pipeline import tune_preset
    from privbench.pipeline.presets import PRESETS

    given = [f for f in ("--defense", "--grid", "--eps") if any(
        a == f or a.startswith(f + "=") for a in args._argv)]
    given += ["--set defense.KEY"] * any(s.startswith("defense.") for s in args.sets)
    if given:
        raise PrivbenchError(f"--all tunes the preset's own cells with its grids "
                             f"(privbench/pipeline/presets.py TUNE_GRIDS); drop {given[0]}, or "
                             "tune one cell with --defense D --eps E --grid KEY=V1,V2")
    run, _ = run_config_from_args(args, PRESETS[args.preset]["run"])
    out = Path(args.out or f"reports/tune-{args.preset}")
    check_writable(out)
    start = time.perf_counter()
    rows = tune_preset.tune_preset(run, args.preset, out, command_line(args), args.validation,
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
