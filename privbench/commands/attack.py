"""`privbench attack`: the audit sweep from the command line, or the attacks on a saved message
log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from privbench.commands.common import (
    add_audit_sets,
    again_command,
    command_line,
    float_list,
    on_interrupt,
    out_folder,
    run_config_from_args,
    tuned_entries_from_args,
)

if TYPE_CHECKING:
    from privbench.config import Overrides
    from privbench.pipeline.sweep import Sweep
    from privbench.results.records import AuditRun


def cmd_attack(args: argparse.Namespace) -> int:
    """`privbench attack`: the audit sweep; writes results.json and index.html, prints a table."""
    from privbench.config import load_toml
    from privbench.pipeline import sweep

    audit_sets: Overrides = load_toml(args.config)[2] if args.config else {}
    add_audit_sets(audit_sets, args.sets)
    preset = sweep.PRESETS[args.preset]
    if args.messages:
        return _attack_saved(args, audit_sets)
    run, overrides = run_config_from_args(args, preset["run"])
    eps = float_list(args.eps_grid, "--eps")
    dups = sweep.duplicate_eps(eps)
    audit = sweep.audit_config(args.preset, args.defense, eps, args.attack, args.threat,
                               audit_sets)
    if dups:
        print(f"note: duplicate --eps value(s) {', '.join(map(repr, dups))} removed; the grid is "
              f"{', '.join(map(repr, audit.eps))}", file=sys.stderr)
    out = out_folder(args, "audit-" + args.preset)
    tuned = tuned_entries_from_args(args, overrides)
    runner = sweep.Sweep(run, overrides, audit, out, resume=args.resume, progress=not args.quiet,
                         command=command_line(args), tuned=tuned, jobs=args.jobs,
                         thread_choice=args.thread_choice)
    return _finish_sweep(runner, out, args)


def _finish_sweep(runner: Sweep, out: Path, args: argparse.Namespace) -> int:
    from privbench.report.summary import summary_table
    from privbench.report.verdicts import verdict_summary

    on_interrupt(lambda: _sweep_kept(runner, out, args))
    results = runner.run()
    if runner.resume:
        st = runner.stats
        redo = st.get("missing", 0) + st.get("stale", 0) + st.get("damaged", 0)
        print(f"resume: reused {st.get('reused', 0)} cell file(s), recomputed {redo} "
              f"({st.get('missing', 0)} missing, {st.get('stale', 0)} stale, "
              f"{st.get('damaged', 0)} damaged)")
    print(summary_table(results, wide=args.wide))
    print(verdict_summary(results))
    _print_tuned(results)
    print(f"wrote {out / 'results.json'} and {out / 'index.html'}")
    return 0


def _print_tuned(results: AuditRun) -> None:
    """Per cell, in the grid's order: the tuned entry it ran with and the tuning's privacy
    cost, or why it ran the untuned defaults."""
    from privbench.pipeline.cells import cell_key

    tuned = results.config.tuned if results.config else None
    if not tuned or not (tuned["cells"] or tuned.get("missing")):
        return
    print(f"tuned values from {tuned['source']} (each cell's own ε; chosen on a validation "
          f"split of the members; {tuned['privacy_note']}):")
    for c in results.cells:
        cell = f"{c.defense}@{cell_key(c.trained.to_json())}"
        used, missing = tuned["cells"].get(cell), tuned.get("missing", {}).get(cell)
        if used is not None:
            values = " ".join(f"{k}={v}" for k, v in {**used["run"], **used["defense"]}.items())
            cost = used.get("privacy_cost") or {}
            k = cost.get("candidates")
            print(f"  {cell}: {values or '(the defaults won)'} (entry {used.get('entry')}; "
                  f"privacy cost {cost.get('rule', 'not charged')}"
                  f"{f', {k} candidates' if k else ''})")
        elif missing is not None:
            print(f"  {cell}: {missing['reason']}")


def _attack_saved(args: argparse.Namespace, audit_sets: dict[str, str]) -> int:
    """Attack a message log written by `privbench train --out DIR`."""
    import dataclasses

    from privbench.config import RunConfig, replace_checked
    from privbench.pipeline import sweep
    from privbench.results.store import read_results

    folder = Path(args.messages)
    saved = read_results(folder / "results.json", "train",
                         "--messages reads the folder of a `privbench train` run")
    run = replace_checked(RunConfig(), saved["run"], where="run")
    if args.device:
        run = dataclasses.replace(run, device=args.device)
    from privbench.engine.threads import settle

    args.thread_choice = settle(run, args.threads)
    audit = sweep.audit_config(args.preset, [saved["defense"]], [run.epsilon], args.attack,
                               args.threat, audit_sets)
    out = out_folder(args, "audit-" + folder.name)
    runner = sweep.Sweep(run, saved.get("defense_config", {}), audit, out, resume=args.resume,
                         progress=not args.quiet, messages_dir=folder,
                         command=command_line(args), thread_choice=args.thread_choice)
    return _finish_sweep(runner, out, args)


def _sweep_kept(runner: Sweep, out: Path, args: argparse.Namespace) -> str:
    """`attack` stopped: how many of its cells are done (their files are kept)."""
    again = again_command(args, "--resume")
    if not runner.planned:
        return f"no cell had started, nothing new in {out}; `{again}` starts again"
    return (f"kept: {runner.finished} of {runner.planned} cells finished in {out}; `{again}` "
            "continues")
