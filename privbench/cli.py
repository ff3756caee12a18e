"""The `privbench` command: train, account, bench, list.

Every error caused by bad input (unknown names, out-of-range values, missing files) is printed as
one line, `privbench: error: ...`, with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from privbench.commands.hostmem import keep_freed_memory
from privbench.errors import ConfigError, PrivbenchError, Terminated

if TYPE_CHECKING:
    from privbench.reproduce.spec import Reproduction, Scale

    # a committed table: its folder, reproduction, scale and lines
    Table = tuple[Path, Reproduction, Scale, list[dict[str, Any]]]

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 1  # `privbench train`: the run diverged (its results are still written)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise PrivbenchError(f"{message} (see `{self.prog} --help`)")


class _PresetHelp(argparse.HelpFormatter):
    """Help of `attack`: a default marked PRESET_DEFAULT is the presets' value (a run value, the
    ε grid or the attacks, from `privbench.commands.presets`, plain data: the help imports neither
    the sweep nor torch)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and PRESET_DEFAULT in text:
            from privbench.commands.presets import PRESETS

            key = _PRESET_KEYS.get(action.dest)
            vals = "; ".join(f"{_help_value(p[key] if key else p['run'][action.dest])} in {name}"
                             for name, p in PRESETS.items()
                             if (key or action.dest in p["run"]))
            text = text.replace(PRESET_DEFAULT, f"the preset's: {vals}")
        return text


PRESET_DEFAULT = "<preset>"
# options whose preset default is a preset's own entry, not one of its run values
_PRESET_KEYS = {"eps_grid": "eps", "attack": "attacks"}


def _help_value(value: Any) -> str:
    """A preset's value as a user types it: "1, 8" for a grid, "idlg, geiping" for attacks."""
    if isinstance(value, (list, tuple)):
        return ", ".join(_help_value(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default(sweep: bool, run_default: str) -> str:
    """The help's default: the run config's for `train`, the preset's for `attack`."""
    return f"(default {PRESET_DEFAULT})" if sweep else f"(default {run_default})"


def _add_run_arguments(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Options shared by commands that build a run (train, attack)."""
    g = p.add_argument_group("run")
    if sweep:
        from privbench.audit.config import DEFAULT_DEFENSES  # plain data, no torch

        g.add_argument("--defense", action="append", help="defense(s) to audit, repeatable or "
                       "comma-separated; 'all' = every registered one (default: the non-private "
                       "baselines and the five papers' algorithms: "
                       f"{_help_value(DEFAULT_DEFENSES)})")
        g.add_argument("--eps", dest="eps_grid", action="append", help="ε grid, repeatable or "
                       f"comma-separated (default {PRESET_DEFAULT})")
    else:
        g.add_argument("--defense", default="sgp", help="defense registry key (`privbench list`)")
        g.add_argument("--eps", dest="epsilon", type=float, help="target epsilon per node")
    g.add_argument("--dataset", help="dataset registry key (default digits)")
    g.add_argument("--data-root", dest="data_root",
                   help="folder holding mnist / fashion-mnist idx files (flat or torchvision's "
                        "layout) or cifar-10-batches-py; default: $PRIVBENCH_DATA, then the "
                        "Debian package's folder (apt-get install dataset-fashion-mnist)")
    g.add_argument("--download", action="store_true", default=None,
                   help="allow torchvision to download the dataset into --data-root "
                        "(or $PRIVBENCH_DATA) when it is not found")
    g.add_argument("--model", help=f"model registry key {_default(sweep, 'mlp')}")
    g.add_argument("--nodes", type=int, help=f"number of nodes {_default(sweep, '8')}")
    g.add_argument("--topology", help="topology registry key (default auto: the defense's, "
                        "random_out; exponential for dpps / partpsp)")
    g.add_argument("--out-degree", dest="out_degree", type=int, help="k of random_out (default 2)")
    g.add_argument("--partition", help="iid or dirichlet")
    g.add_argument("--alpha", type=float, help="Dirichlet concentration")
    g.add_argument("--rounds", type=int, help=f"training rounds {_default(sweep, '500')}")
    g.add_argument("--batch-size", dest="batch_size", type=int,
                   help=f"batch size per node {_default(sweep, '32')}")
    g.add_argument("--lr", type=float, help=f"step size {_default(sweep, '0.2')}")
    g.add_argument("--delta", type=float, help=f"target delta {_default(sweep, '1e-05')}")
    g.add_argument("--device", help="auto (default), cpu, cuda[:N]")
    g.add_argument("--seed", type=int, help="seed (default 0)")
    g.add_argument("--config", help="TOML run file (run keys top-level, [defense] table)")
    g.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a run field (lr=0.1) or a defense field (defense.clip=1)")


_RUN_FLAGS = ("dataset", "data_root", "download", "model", "nodes", "topology", "out_degree",
              "partition", "alpha", "rounds", "batch_size", "lr", "epsilon", "delta", "device",
              "seed")


def run_config_from_args(args: argparse.Namespace, preset: dict[str, Any] | None = None,
                         ) -> tuple[Any, dict[str, Any]]:
    """RunConfig and defense overrides from defaults < preset < --config file < flags < --set;
    a data root given must be a folder (`datafiles.check_data_root`)."""
    from privbench.config import RunConfig, load_toml, parse_sets, replace_checked
    from privbench.data.files import check_data_root

    run_over: dict[str, Any] = dict(preset or {})
    def_over: dict[str, Any] = {}
    if args.config:
        file_run, def_over, _ = load_toml(args.config)
        run_over.update(file_run)
    flags = [k for k in _RUN_FLAGS if hasattr(args, k)]
    run_over.update({k: getattr(args, k) for k in flags if getattr(args, k) is not None})
    set_run, set_def = parse_sets([s for s in args.sets if not s.startswith("audit.")])
    run_over.update(set_run)
    def_over.update(set_def)
    run = replace_checked(RunConfig(), run_over, where="run")
    check_data_root(run.data_root, run.download)
    return run, def_over


def cmd_train(args: argparse.Namespace) -> int:
    """`privbench train`: train one defense, print accuracies, write results and messages.

    With `--backend distributed` this process is one rank of a torchrun launch: it runs its
    block of nodes, and rank 0 writes the merged output.
    """
    run, overrides = run_config_from_args(args)
    run, overrides, tuned = _train_tuned(args, run, overrides)
    if args.backend == "local":
        return _train(args, run, overrides, None, None, tuned)
    if args.checkpoint_every is not None:
        raise PrivbenchError("--checkpoint-every: accepted with --backend local only (a rank "
                             "holds its own nodes' state alone)")
    import os

    from privbench.engine.comm import DistComm, partition, process_group

    if args.dist_timeout <= 0:
        raise PrivbenchError(f"--dist-timeout must be > 0 seconds, got {args.dist_timeout}")
    partition(run.nodes, int(os.environ.get("WORLD_SIZE", "1")))  # fail before joining
    with process_group(run.device, args.dist_timeout) as device:
        return _train(args, run, overrides, DistComm(run.nodes, device), device, tuned)


def _train_tuned(args: argparse.Namespace, run: Any, overrides: dict[str, Any],
                 ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """Apply the committed tuned values (any preset's entry tuned for exactly these settings:
    dataset, model, nodes, rounds, batch size, partition, topology, at the run's own ε) to a
    `train` run; the user's flags, --set and --config win, --untuned ignores them. Says which
    entry was used, or why none applies (the run then keeps the untuned defaults)."""
    import os

    from privbench.commands.tuning import apply_tuned

    if args.untuned:
        return run, overrides, None
    mine = _tuned_entries(args, overrides, every_preset=True).get(args.defense, [])
    keys = {k for e in mine for k in e.get("fixed", {})}
    fixed = {k: v for k, v in overrides.items() if k in keys}  # a paper setting set by --set
    run, tuned, used = apply_tuned(mine, run, run.epsilon, args.defense, fixed)
    if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 says it
        if used["entry"] is not None:
            values = " ".join(f"{k}={v}" for k, v in {**used["run"], **used["defense"]}.items())
            print(f"tuned values for {args.defense} from {used['source']}: {values} (entry "
                  f"{used['entry']}, chosen on a validation split of the members by "
                  f"`{used['command']}`; --untuned ignores them; tuning's privacy cost: "
                  f"{_cost_text(used['privacy_cost'])})")
        elif mine:
            print(f"{args.defense}: {used['reason']} ({_TUNED_FILE})")
    return run, {**tuned, **overrides}, used


_TUNED_FILE = "privbench/presets/tuned.toml"


def _cost_text(cost: dict[str, Any]) -> str:
    """'not charged (30 candidates): the cell's ε covers ...' from `tuning.privacy_cost`."""
    k = cost.get("candidates")
    return f"{cost['rule']}{f' ({k} candidates)' if k else ''}: {cost['meaning']}"


def _train(args: argparse.Namespace, run: Any, overrides: dict[str, Any], comm: Any,
           device: Any, tuned: dict[str, Any] | None = None) -> int:
    """Build, train, save (`comm` None: every node in this process)."""
    rank0 = comm is None or comm.rank == 0
    out = Path(args.out)
    _on_interrupt(lambda: _train_kept(args, out))
    with contextlib.ExitStack() as stack:  # rank 0 holds the folder until it has written
        problem = _claim(stack, out, "results.json", args.overwrite) if rank0 else None
        agreed = comm.all_ok(problem is None) if comm is not None else problem is None
        if not agreed:  # every rank stops, not only rank 0
            raise problem or PrivbenchError(f"rank 0 cannot write the output folder {out}")
        return _train_into(args, run, overrides, comm, device, tuned, out)


def _train_into(args: argparse.Namespace, run: Any, overrides: dict[str, Any], comm: Any,
                device: Any, tuned: dict[str, Any] | None, out: Path) -> int:
    """`_train` once `out` is claimed: build, train, write, print (rank 0)."""
    from privbench.commands.progress import Phase
    from privbench.engine.checkpoint import prepare
    from privbench.engine.loop import train
    from privbench.engine.messages import parse_record_spec
    from privbench.engine.runner import build, save_run

    rank0 = comm is None or comm.rank == 0
    every = _checkpoint_seconds(args.checkpoint_every, default=0.0)
    built = build(run, args.defense, overrides, policy=parse_record_spec(args.record, run.rounds),
                  comm=comm, device=device)
    start, so_far, saver = 0, None, None
    if every > 0:
        start, so_far, saver = prepare(
            out / "checkpoint.ckpt", built, _train_fingerprint(args, built), every,
            None if args.quiet else
            (lambda note: print(f"train {built.defense}: {note}", file=sys.stderr)))
    with Phase(f"train {args.defense}", run.rounds, "round", initial=start,
               enabled=not args.quiet and rank0) as bar:
        res = train(built.trainer, progress=bar.update, start=start, result=so_far,
                    after_round=saver)
    result = save_run(built, res, out, extra={"tuned": tuned})
    if saver is not None:  # the run's results are written: its checkpoint has served
        saver.path.unlink(missing_ok=True)
    if rank0:
        _print_train(res, result, out, comm)
    return 0 if res.diverged_round is None else EXIT_DIVERGED


def _train_fingerprint(args: argparse.Namespace, built: Any) -> str:
    """What determines a `privbench train` run's result, hashed: the key of its checkpoint
    (with the code and device, `checkpoint.prepare`): defense, both configurations, the
    `--record` rounds, the dataset, the privbench and torch versions and the thread count."""
    import torch

    from privbench import __version__
    from privbench.config import to_dict
    from privbench.results.fingerprint import dataset_identity, fingerprint

    run = built.ctx.run
    return fingerprint({"command": "train", "defense": built.defense,
                        "run": {k: v for k, v in to_dict(run).items() if k != "device"},
                        "defense_config": to_dict(built.trainer.cfg), "record": args.record,
                        "data": dataset_identity(run.dataset, run.data_root, run.download),
                        "versions": {"privbench": __version__, "torch": torch.__version__},
                        "threads": torch.get_num_threads()})["sha256"]


def _print_train(res: Any, result: dict[str, Any], out: Path, comm: Any) -> None:
    from privbench.results.store import diverged_text, noise_feedback_text, privacy_line

    rounds = result["run"]["rounds"]
    if res.node_accuracy:
        nodes = " ".join(f"{a:.3f}" for a in res.node_accuracy)
        last = res.history[-1] if res.history else {}
        on = last.get("node_test_samples")
        where = (f" (on {on:,} test samples)" if on is not None
                 and on != last.get("test_samples") else "")
        print(f"per-node test accuracy{where}: {nodes}")
    where = f", {comm.world} ranks" if comm is not None else ""
    print(f"average-model test accuracy: {res.average_accuracy:.4f}  "
          f"({res.seconds:.1f} s, of which evaluation {res.eval_seconds:.1f} s; "
          f"device {result['environment']['device']}{where})")
    print(f"data: {result['run']['dataset']} from {result['data_source']}")
    for rep in result["privacy"]:
        if rep.get("node", 0) == 0:
            print(f"privacy (node 0): {privacy_line(rep)}")
    what = "the merged message log" if comm is not None else "the message log"
    print(f"wrote {out / 'results.json'}, models.safetensors and {what}")
    if res.diverged_round is not None:
        why = noise_feedback_text(result["privacy"])
        print(f"privbench: training diverged: {diverged_text(res.diverged_round, rounds)}"
              + (f"; {why}" if why else ""), file=sys.stderr)


def _check_writable(out: Path) -> None:
    """Fail early (before training) when the output folder cannot be created or written."""
    import os

    from privbench.results.fingerprint import make_folder

    try:
        make_folder(out)  # removed again if the command is refused (`main`)
    except OSError as exc:
        raise PrivbenchError(f"cannot create output folder {out}: {exc.strerror}") from None
    if not os.access(out, os.W_OK):
        raise PrivbenchError(f"output folder {out} is not writable")


def _refuse_existing(target: Path, overwrite: bool) -> None:
    """A result file is evidence: one that exists is replaced only with --overwrite."""
    if target.exists() and not overwrite:
        raise PrivbenchError(f"{target} exists (a result file is never overwritten silently); "
                             "choose another --out or pass --overwrite")


def _claim(stack: contextlib.ExitStack, out: Path, result_file: str,
           overwrite: bool) -> PrivbenchError | None:
    """Make `out` this run's alone until `stack` closes: writable, locked against a second
    writer (`fingerprint.folder_lock`), its result file absent unless --overwrite; the error
    instead, or None."""
    from privbench.results.fingerprint import folder_lock

    try:
        _check_writable(out)
        stack.enter_context(folder_lock(out))
        _refuse_existing(out / result_file, overwrite)
    except PrivbenchError as exc:
        return exc
    return None


def _floats(items: list[str] | None, what: str) -> list[float] | None:
    if not items:
        return None
    out = []
    for part in ",".join(items).split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise PrivbenchError(f"{what} must be numbers (e.g. --eps 1,8), got {part!r}") from None
    return out


def _command_line(args: argparse.Namespace) -> str:
    """The user's command without options that do not change results (--out, --resume,
    --quiet, --run-name, --overwrite), so that reruns give byte-identical results."""
    argv, keep, skip = list(args._argv), [], False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if item == "--resume" and argv[i + 1:i + 2] in (["check"], ["rerun-stale"]):
            skip = True
        if name in ("--out", "--run-name") and "=" not in item:
            skip = True
        elif name not in ("--out", "--run-name", "--resume", "--quiet", "--overwrite"):
            keep.append(item)
    return " ".join(["privbench", *keep])


def _add_audit_sets(audit_sets: dict[str, Any], sets: list[str]) -> None:
    """Merge `--set audit.KEY=VALUE` into `audit_sets` (the config file's [audit] table);
    `audit.attack_config.ATTACK.KEY=VALUE` sets one key of one attack's config."""
    for item in sets:
        key, sep, value = item.partition("=")
        if not key.startswith("audit.") or not sep:
            continue
        path = key.removeprefix("audit.").split(".")
        if path[0] != "attack_config" or len(path) == 1:
            audit_sets[".".join(path)] = value
        elif len(path) == 3 and all(path):
            table = audit_sets.setdefault("attack_config", {})
            if not isinstance(table, dict):
                raise ConfigError("[audit.attack_config] must be a table of attack tables")
            table.setdefault(path[1], {})[path[2]] = value
        else:
            raise ConfigError(f"--set {key} names no attack config key; accepted: "
                              "audit.attack_config.ATTACK.KEY=VALUE (e.g. "
                              "audit.attack_config.mia_message.rounds=100)")


def cmd_attack(args: argparse.Namespace) -> int:
    """`privbench attack`: the audit sweep; writes results.json and index.html, prints a table."""
    from privbench.commands import sweep
    from privbench.config import load_toml

    audit_sets: dict[str, Any] = load_toml(args.config)[2] if args.config else {}
    _add_audit_sets(audit_sets, args.sets)
    preset = sweep.PRESETS[args.preset]
    if args.messages:
        return _attack_saved(args, audit_sets)
    run, overrides = run_config_from_args(args, preset["run"])
    eps = _floats(args.eps_grid, "--eps")
    dups = sweep.duplicate_eps(eps)
    audit = sweep.audit_config(args.preset, args.defense, eps, args.attack, args.threat,
                               audit_sets)
    if dups:
        print(f"note: duplicate --eps value(s) {', '.join(map(repr, dups))} removed; the grid is "
              f"{', '.join(map(repr, audit.eps))}", file=sys.stderr)
    out = _out_folder(args, "audit-" + args.preset)
    tuned = _tuned_entries(args, overrides)
    runner = sweep.Sweep(run, overrides, audit, out, resume=args.resume, progress=not args.quiet,
                         command=_command_line(args), tuned=tuned)
    return _finish_sweep(runner, out, args)


def _out_folder(args: argparse.Namespace, default_name: str) -> Path:
    """--out, or reports/<run name>; a run name is one folder name, never a path. A folder
    holding a finished audit is refused unless --resume or --overwrite."""
    name = args.run_name
    if name is not None and (name in ("", ".", "..") or "/" in name or "\\" in name
                             or "\0" in name):
        raise PrivbenchError(f"--run-name must be a plain folder name (no '/', '..'), got "
                             f"{name!r}; use --out for another location")
    out = Path(args.out or f"reports/{name or default_name}")
    finished = [f for f in ("results.json", "index.html") if (out / f).exists()]
    if finished and not (args.resume or args.overwrite):
        raise PrivbenchError(f"{out} holds a finished audit ({' and '.join(finished)}; a result "
                             "is never replaced silently); pass --resume to reuse its cells, "
                             "--overwrite to replace it, or choose another --out")
    _check_writable(out)
    return out


def _finish_sweep(runner: Any, out: Path, args: argparse.Namespace) -> int:
    from privbench.report.summary import summary_table
    from privbench.report.verdicts import verdict_summary

    _on_interrupt(lambda: _sweep_kept(runner, out, args))
    results = runner.run()
    if runner.resume:
        st = runner.stats
        redo = st.get("missing", 0) + st.get("stale", 0) + st.get("damaged", 0)
        print(f"resume: reused {st.get('reused', 0)} cell file(s), recomputed {redo} "
              f"({st.get('missing', 0)} missing, {st.get('stale', 0)} stale, "
              f"{st.get('damaged', 0)} damaged)")
    print(summary_table(results))
    print(verdict_summary(results))
    _print_tuned(results)
    print(f"wrote {out / 'results.json'} and {out / 'index.html'}")
    return 0


def _tuned_entries(args: argparse.Namespace, overrides: dict[str, Any],
                   every_preset: bool = False) -> dict[str, list[dict[str, Any]]]:
    """The tuned values of `--preset` (or of every preset) in privbench/presets/tuned.toml,
    minus the keys the user set explicitly (flags, --set, --config win); empty with
    --untuned."""
    from privbench.commands.tuning import load_tuned
    from privbench.config import load_toml, parse_sets

    if args.untuned:
        return {}
    explicit = {k for k in _RUN_FLAGS if getattr(args, k, None) is not None}
    explicit |= set(parse_sets([s for s in args.sets if not s.startswith("audit.")])[0])
    if args.config:
        explicit |= set(load_toml(args.config)[0])
    out: dict[str, list[dict[str, Any]]] = {}
    tuned = load_tuned()
    for preset in tuned if every_preset else (args.preset,):
        for defense, entries in tuned.get(preset, {}).items():
            out.setdefault(defense, []).extend(
                {**e, "preset": preset,
                 "run": {k: v for k, v in e.get("run", {}).items() if k not in explicit},
                 "defense": {k: v for k, v in e.get("defense", {}).items()
                             if k not in overrides}} for e in entries)
    return out


def _print_tuned(results: dict[str, Any]) -> None:
    """Per cell, in the grid's order: the tuned entry it ran with and the tuning's privacy
    cost, or why it ran the untuned defaults."""
    from privbench.commands.cells import cell_key

    tuned = results["config"].get("tuned")
    if not tuned or not (tuned["cells"] or tuned.get("missing")):
        return
    print(f"tuned values from {tuned['source']} (each cell's own ε; chosen on a validation "
          f"split of the members; {tuned['privacy_note']}):")
    for c in results["cells"]:
        cell = f"{c['defense']}@{cell_key(c)}"
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


def cmd_tune(args: argparse.Namespace) -> int:
    """`privbench tune`: grid search on a validation split carved from the members."""
    from privbench.commands import sweep, tuning
    from privbench.config import to_dict
    from privbench.device import resolve_device
    from privbench.engine.runner import environment
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

    from privbench.commands import sweep
    from privbench.commands import tune as tune_preset

    given = [f for f in ("--defense", "--grid", "--eps") if any(
        a == f or a.startswith(f + "=") for a in args._argv)]
    given += ["--set defense.KEY"] * any(s.startswith("defense.") for s in args.sets)
    if given:
        raise PrivbenchError(f"--all tunes the preset's own cells with its grids "
                             f"(privbench/audit_presets.py TUNE_GRIDS); drop {given[0]}, or "
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


def _print_tune(result: dict[str, Any]) -> None:
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


def _attack_saved(args: argparse.Namespace, audit_sets: dict[str, str]) -> int:
    """Attack a message log written by `privbench train --out DIR`."""
    import dataclasses

    from privbench.commands import sweep
    from privbench.config import RunConfig, replace_checked
    from privbench.results.store import read_results

    folder = Path(args.messages)
    saved = read_results(folder / "results.json", "train",
                         "--messages reads the folder of a `privbench train` run")
    run = replace_checked(RunConfig(), saved["run"], where="run")
    if args.device:
        run = dataclasses.replace(run, device=args.device)
    audit = sweep.audit_config(args.preset, [saved["defense"]], [run.epsilon], args.attack,
                               args.threat, audit_sets)
    out = _out_folder(args, "audit-" + folder.name)
    runner = sweep.Sweep(run, saved.get("defense_config", {}), audit, out, resume=args.resume,
                         progress=not args.quiet, messages_dir=folder,
                         command=_command_line(args))
    return _finish_sweep(runner, out, args)


def cmd_list(args: argparse.Namespace) -> int:
    """`privbench list`: every registry, one line per entry with its description (the first
    line of its docstring); each defense marked DP (differentially private) or not."""
    from privbench import registry
    from privbench.plugins import load_plugins

    load_plugins()
    for reg in (registry.DEFENSES, registry.ATTACKS, registry.DATASETS, registry.MODELS,
                registry.TOPOLOGIES):
        names = reg.names()
        marked = reg is registry.DEFENSES
        key = " (DP: differentially private, -: not private)" if marked else ""
        print(f"{reg.plural}: {len(names) or '(none)'}{key}")
        width = max(map(len, names), default=0)
        for name in names:
            obj = reg.get(name)
            mark = f"{'DP' if getattr(obj, 'private', False) else '-':<4}" if marked else ""
            print(f"  {name:<{width}}  {mark}{registry.describe(name, obj)}")
    return 0


def _add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of `privbench bench` (declared here so that parsing never imports torch)."""
    p.add_argument("section",
                   choices=["engine", "attacks", "audit", "scale", "distributed", "plans"],
                   help="engine: one DP round, privbench vs Opacus vs torch.func per node vs "
                        "the non-private floor; "
                        "attacks: batched vs sequential inversion; audit: wall time of "
                        "`privbench attack`; scale: time per round vs n; distributed: one "
                        "process vs P torchrun ranks; plans: privacy-plan composition time")
    p.add_argument("--model", action="append", help="model(s), repeatable (default lenet, cnn)")
    p.add_argument("--nodes", type=int, action="append",
                   help="node count(s), repeatable (default 4, 16, 64; scale: up to 256)")
    p.add_argument("--defense", action="append",
                   help="defense(s) whose real round is timed, repeatable or comma-separated "
                        "(default: every private one; 'none': only the generic round; scale: "
                        "the first one, default dp_sgp)")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    p.add_argument("--method", action="append",
                   help="engine: round method(s), repeatable or comma-separated: privbench, "
                        "opacus_hooks, opacus_ghost, func_per_node, floor, naive_loop (default: "
                        "all but the naive per-sample loop, a reference only); plans: "
                        "privbench (default), dp_accounting (its PLDAccountant, interleaved)")
    p.add_argument("--k", type=int, action="append",
                   help="attacks: number of attacks K, repeatable (default 1, 8, 32, 128)")
    p.add_argument("--steps", type=int, default=25, help="attacks: optimisation steps")
    p.add_argument("--audit-preset", dest="audit_preset", default="quick",
                   help="audit: the `privbench attack` preset timed (default quick; its "
                        "defenses unless --defense is given)")
    p.add_argument("--plot", help="scale: write a PNG plot of time per round vs n here")
    p.add_argument("--max-stack-gib", dest="max_stack_gib", type=float, default=2.0,
                   help="scale: skip the defense round where its (n, B, d) per-sample gradient "
                        "stack would exceed this many GiB (default 2)")
    p.add_argument("--round-budget-s", dest="round_budget_s", type=float, default=5.0,
                   help="a round slower than this (its warm-up run) is timed once (default 5)")
    p.add_argument("--memory-limit-gib", dest="memory_limit_gib", type=float, default=12.0,
                   help="CPU: cap the process's address space (GiB, 0 = no cap); a defense round "
                        "that would exceed it is reported as skipped (default 12)")
    p.add_argument("--ranks", type=int, action="append",
                   help="distributed: torchrun process counts, repeatable (default 1, 2)")
    p.add_argument("--threads", type=int,
                   help="torch threads (torch.set_num_threads and OMP_NUM_THREADS; recorded in "
                        "the JSON); distributed: threads split over the ranks (default: all "
                        "cores)")
    p.add_argument("--rounds", type=int, default=20,
                   help="distributed: rounds per timed run; plans: rounds planned (default 20)")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", dest="json_out", help="also write the table as JSON here")


def cmd_bench(args: argparse.Namespace) -> int:
    """`privbench bench SECTION`: speed measurements (see privbench/bench.py)."""
    from privbench.commands.bench import run_bench

    _check_bench_args(args)
    return run_bench(args)


# bench option -> (smallest accepted value, what it is); checked before anything is timed.
_BENCH_MINIMA = {"nodes": (2, "node counts"), "repeats": (1, "--repeats"),
                 "batch_size": (1, "--batch-size"), "k": (1, "--k"), "steps": (1, "--steps"),
                 "ranks": (1, "--ranks"), "threads": (1, "--threads"), "rounds": (1, "--rounds")}


def _check_bench_args(args: argparse.Namespace) -> None:
    import math

    for key, (low, what) in _BENCH_MINIMA.items():
        value = getattr(args, key, None)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and v < low:
                raise PrivbenchError(f"bench {what} must be >= {low}, got {v}")
    for key in ("max_stack_gib", "round_budget_s", "memory_limit_gib"):
        v = getattr(args, key, None)
        positive = key != "memory_limit_gib"  # 0 GiB = no memory cap
        if v is not None and not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
            raise PrivbenchError(f"bench --{key.replace('_', '-')} must be a finite number "
                                 f"{'> 0' if positive else '>= 0'}, got {v}")


def cmd_report(args: argparse.Namespace) -> int:
    """`privbench report RESULTS.json [...] -o report.html`: render/merge without training code."""
    from privbench.report import merge_results
    from privbench.results.store import atomic_write_text, read_results

    items = [read_results(p, "audit", "`privbench report` renders audit results written by "
                          "`privbench attack`") for p in args.results]
    for path, item in zip(args.results, items, strict=True):  # named by its folder
        item.setdefault("run_name", Path(path).resolve().parent.name)
    merged = merge_results(items)
    atomic_write_text(args.output, _render(merged, merged["run_name"]))
    print(f"wrote {args.output}")
    return 0


def _render(results: dict[str, Any], name: str) -> str:
    """The report page; a results file that passes the schema check but still lacks what the
    page shows (hand-edited, another tool's) is a one-line error, never a traceback."""
    from jinja2.exceptions import UndefinedError

    from privbench.report import render_html

    try:
        return render_html(results, run_name=name)
    except (LookupError, TypeError, ValueError, AttributeError, UndefinedError) as exc:
        reason = str(exc).replace("\n", " ")[:200]
        raise PrivbenchError(f"cannot render the report: the results do not match the audit "
                             f"schema ({type(exc).__name__}: {reason})") from None


def cmd_check(args: argparse.Namespace) -> int:
    """`privbench check`: exit 0 when every policy bound holds, 1 when any is violated."""
    from privbench.report import gate
    from privbench.results.store import atomic_write_text, read_results

    if args.tolerance <= 0:
        raise PrivbenchError(f"--tolerance must be > 0, got {args.tolerance}")
    policy = gate.load_policy(args.policy)
    results = read_results(args.results)
    baseline = read_results(args.baseline) if args.baseline else None
    checks = gate.run_checks(results, policy, baseline, args.tolerance)
    print(gate.format_table(checks))
    if args.junit:
        atomic_write_text(args.junit, gate.junit_xml(checks))
    return 0 if all(c.passed for c in checks) else 1


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise PrivbenchError(f"{what} must be comma-separated integers (e.g. 1,2,3), got "
                             f"{text!r}") from None


def cmd_leakage(args: argparse.Namespace) -> int:
    """`privbench leakage`: the leakage map (attacks by hop distance, network DP)."""
    from privbench.audit.leakage import config_from, run_leakage
    from privbench.data.files import check_data_root
    from privbench.report.leakage import by_distance, markdown, render_leakage
    from privbench.results.store import atomic_write_text, dumps

    check_data_root(args.data_root)
    defenses = _names(args.defense)
    cfg = config_from({
        "dataset": args.dataset, "data_root": args.data_root, "model": args.model,
        "defenses": tuple(defenses) if defenses else None,
        "eps": tuple(e) if (e := _floats(args.eps_grid, "--eps")) else None,
        "nodes": args.nodes, "topology": args.topology, "rounds": args.rounds, "lr": args.lr,
        "members": args.members, "distances": _ints(args.distances, "--distances"),
        "sizes": _ints(args.sizes, "--sizes"), "victims": args.victims,
        "inversion_victims": args.inversion_victims,
        "inversion": args.inversion, "seed": args.seed})
    out = Path(args.out)
    target = out / "leakage.json"
    _on_interrupt(lambda: _ends_kept(args, target))
    with contextlib.ExitStack() as stack:  # the folder is this run's until it has written
        if (problem := _claim(stack, out, target.name, args.overwrite)) is not None:
            raise problem
        results = run_leakage(cfg, progress=None if args.quiet else
                              (lambda line: print(line, file=sys.stderr)))
        atomic_write_text(target, dumps(results))
        atomic_write_text(out / "leakage.html", render_leakage(results))
        atomic_write_text(out / "leakage.md", by_distance(results) + "\n" + markdown(results))
    print(f"wrote {target}, {out / 'leakage.html'} and {out / 'leakage.md'}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    """`privbench reproduce NAME`: a paper's table on real data. Trains the grid's missing runs
    (appending each to runs.jsonl as it ends) and writes table.md; `--render` re-renders
    table.md from runs.jsonl alone, without training; `--merge` appends other runs files'
    lines (each checked against this grid first) and renders."""
    from privbench.reproduce import REPRODUCTIONS, load
    from privbench.reproduce.missing import block, missing_file
    from privbench.reproduce.runs import RUNS_FILE, index, merge, read_runs, reproduce
    from privbench.reproduce.table import render
    from privbench.results.store import atomic_write_text, counted

    load()
    if args.summary:
        _takes_only(args, "--summary", ("summary",), _READS_ALL)
        return _reproduce_summary(Path(args.out or "reports/reproduce"))
    if args.missing and args.name is None:
        _takes_only(args, "--missing without a paper", ("missing",), _READS_ALL)
        print(missing_file(_missing_blocks(_committed_tables(
            Path(args.out or "reports/reproduce")))), end="")
        return 0
    if args.name is None:
        for name in REPRODUCTIONS.names():
            r = REPRODUCTIONS.get(name)
            print(f"{name}: {r.title} (scales: {', '.join(s.name for s in r.scales)})")
        return 0
    repro = REPRODUCTIONS.get(args.name)
    # the default scale's folder is the paper's; any other scale has its own subfolder
    own = "" if args.scale in (None, repro.scales[0].name) else f"/{repro.scale(args.scale).name}"
    out = Path(args.out or f"reports/reproduce/{repro.name}{own}")
    if args.missing:
        _takes_only(args, "--missing", ("name", "scale", "missing"),
                    "it reads the folder's runs.jsonl and trains nothing")
        scale = repro.scale(args.scale)
        records = list(index(read_runs(out / RUNS_FILE), repro, scale).values())
        print(block(repro, scale, records, f"more/{repro.name}/{scale.name}", str(out)))
        return 0
    if args.merge:
        _takes_only(args, "--merge", ("name", "scale", "merge"), "it trains nothing, it "
                    "appends the files' runs to the folder's runs.jsonl, then renders its table")
        scale = repro.scale(args.scale)
        _check_writable(out)
        added, already = merge(repro, scale, [Path(f) for f in args.merge], out)
        print(f"merged {counted(added, 'run')} into {out / RUNS_FILE} ({already} already there)",
              file=sys.stderr)
        records = list(index(read_runs(out / RUNS_FILE), repro, scale).values())
    elif args.render:
        _takes_only(args, "--render", ("name", "scale", "render"), "it trains nothing, it "
                    "re-renders every row of the folder's runs.jsonl")
        records = read_runs(out / RUNS_FILE)
        if not records:
            raise PrivbenchError(f"{out / RUNS_FILE} holds no runs to render; run `privbench "
                                 f"reproduce {repro.name}` first")
        scale = repro.scale(args.scale or records[0]["scale"])
        records = list(index(records, repro, scale).values())
    elif args.verify:
        return _reproduce_verify(args, repro, out)
    else:
        scale = repro.scale(args.scale)
        seeds = tuple(_ints(args.seeds, "--seeds") or scale.seeds)
        _check_writable(out)
        _on_interrupt(lambda: _reproduce_kept(args, out))
        records = reproduce(repro, scale, seeds, out, progress=None if args.quiet else
                            (lambda line: print(line, file=sys.stderr)), workers=args.jobs,
                            rows=_row_labels(args.rows, repro.at(scale)),
                            columns=tuple(_floats(args.eps, "--eps") or ()),
                            checkpoint_every=_checkpoint_seconds(args.checkpoint_every))
    atomic_write_text(out / "table.md", render(repro, scale, records))
    print(f"wrote {out / 'table.md'} from {counted(len(records), 'run')} in {out / RUNS_FILE}")
    return 0


def _reproduce_verify(args: argparse.Namespace, repro: Any, out: Path) -> int:
    """`privbench reproduce NAME --verify`: re-make the chosen committed lines here and compare;
    exit 1 when the table, with the re-made lines in place, reads otherwise (a line that
    differs below what the table prints is reported, with exit 0)."""
    from privbench.reproduce.runs import HEARTBEAT_SECONDS
    from privbench.reproduce.verify import summary, verify

    _takes_only(args, "--verify", ("name", "scale", "verify", "seeds", "rows", "eps", "jobs"),
                "it re-makes the folder's lines and writes nothing")
    scale = repro.scale(args.scale)
    found = verify(
        repro, scale, out, tuple(_ints(args.seeds, "--seeds") or ()),
        _row_labels(args.rows, repro.at(scale)), tuple(_floats(args.eps, "--eps") or ()),
        args.jobs, progress=print, heartbeat=None if args.quiet else HEARTBEAT_SECONDS)
    print(summary(found, out))
    return 1 if found.table_diff else 0


# `privbench reproduce`'s options that select what it does, as a user writes them; each mode
# refuses the ones it does not take (`_takes_only`) instead of ignoring them.
_REPRODUCE_OPTIONS = (("name", "paper name"), ("scale", "--scale"), ("summary", "--summary"),
                      ("missing", "--missing"), ("merge", "--merge"), ("render", "--render"),
                      ("seeds", "--seeds"), ("rows", "--rows"), ("eps", "--eps"),
                      ("jobs", "--jobs"), ("checkpoint_every", "--checkpoint-every"),
                      ("verify", "--verify"))
_READS_ALL = "it reads every runs.jsonl under --out (default reports/reproduce) and trains nothing"


def _takes_only(args: argparse.Namespace, mode: str, takes: tuple[str, ...], why: str) -> None:
    """One-line error naming every option given that `mode` does not take, and why."""
    given = [flag for key, flag in _REPRODUCE_OPTIONS if key not in takes
             and (args.jobs != 1 if key == "jobs" else bool(getattr(args, key)))]
    if given:
        raise PrivbenchError(f"{mode} takes no {_or_list(given)}: {why}")


def _checkpoint_seconds(text: str | None, default: float | None = None) -> float:
    """`--checkpoint-every MINUTES` in seconds (absent: `default`, else reproduce's
    `runs.CHECKPOINT_SECONDS`)."""
    if text is None:
        if default is not None:
            return default
        from privbench.reproduce.runs import CHECKPOINT_SECONDS

        return CHECKPOINT_SECONDS
    try:
        minutes = float(text)
    except ValueError:
        minutes = float("nan")
    if not math.isfinite(minutes) or minutes < 0:
        raise PrivbenchError(f"--checkpoint-every {text!r}: accepted: minutes between a running "
                             "job's checkpoints, a number >= 0 (0: none)")
    return 60.0 * minutes


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _reproduce_summary(root: Path) -> int:
    """`privbench reproduce --summary`: one line per committed table (paper, scale) with its
    headline claim, from the runs.jsonl files under `root`; writes root/summary.md, and
    root/missing.md with each table's runs not yet run (`privbench.reproduce.missing`)."""
    from privbench.reproduce.missing import missing_file
    from privbench.reproduce.table import summary, summary_row
    from privbench.results.store import atomic_write_text

    found = _committed_tables(root)
    rows = [summary_row(repro, scale, recs) for _, repro, scale, recs in found]
    _check_writable(root)
    atomic_write_text(root / "summary.md", summary(rows))
    atomic_write_text(root / "missing.md", missing_file(_missing_blocks(found)))
    print(f"wrote {root / 'summary.md'} and {root / 'missing.md'} from {len(rows)} tables "
          f"under {root}")
    return 0


def _committed_tables(root: Path) -> list[Table]:
    """(folder, reproduction, scale, its lines) for each runs.jsonl under `root`, in paper
    then scale order; one-line error when there is none."""
    from privbench.reproduce import REPRODUCTIONS
    from privbench.reproduce.runs import RUNS_FILE, index, read_runs

    found = []
    for path in sorted(root.rglob(RUNS_FILE)):
        records = read_runs(path)
        if not records:
            continue
        repro = REPRODUCTIONS.get(records[0]["reproduction"])
        scale = repro.scale(records[0]["scale"])
        found.append((path.parent, repro, scale, list(index(records, repro, scale).values())))
    if not found:
        raise PrivbenchError(f"no {RUNS_FILE} under {root}: run `privbench reproduce NAME` "
                             "first, or give the folder that holds them with --out")
    return sorted(found, key=lambda f: (f[1].name, f[1].scales.index(f[2])))


def _missing_blocks(found: list[Table]) -> list[str]:
    """Each table's part of missing.md (`privbench.reproduce.missing.block`)."""
    from privbench.reproduce.missing import block

    return [block(repro, scale, recs, f"more/{repro.name}/{scale.name}", str(folder))
            for folder, repro, scale, recs in found]


def _row_labels(items: list[str] | None, table: Reproduction) -> tuple[str, ...]:
    """--rows: each value a row's label as it is (DeFL-VP's "DeFL-VP, η_sign 0.003" holds a
    comma), else comma-separated labels."""
    labels = {m.label for m in table.methods}
    return tuple(name for item in items or ()
                 for name in ([item.strip()] if item.strip() in labels else _names([item])))


def _names(items: list[str] | None) -> list[str] | None:
    if not items:
        return None
    return [p.strip() for p in ",".join(items).split(",") if p.strip()]


class _Version(argparse.Action):
    """`--version`: the version and the commit of the checkout (`privbench.results.provenance`), the
    commit looked up only when asked for (a `git` call at every parse would slow each command)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from privbench import __version__
        from privbench.results.provenance import code_digest, code_revision

        print(f"privbench {__version__} ({code_revision()}; code sha256 {code_digest()})")
        parser.exit()


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench train`: the run's settings, where its results and messages go, the backend."""
    _add_run_arguments(p)
    p.add_argument("--out", default="reports/train", help="output folder (default reports/train)")
    p.add_argument("--record", default="0:10,-5:",
                   help="rounds whose messages are logged: all, none, or comma-separated "
                        "start:stop ranges / single rounds, negatives count from the end "
                        "(default 0:10,-5:)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--untuned", action="store_true",
                   help="ignore the tuned values committed for these exact settings "
                        "(privbench/presets/tuned.toml)")
    p.add_argument("--backend", choices=["local", "distributed"], default="local",
                   help="local: every node in this process (default); distributed: this process "
                        "is one rank of `torchrun --nproc-per-node P -m privbench train "
                        "--backend distributed ...` (gloo on CPU, NCCL on CUDA)")
    p.add_argument("--dist-timeout", dest="dist_timeout", type=float, default=300.0,
                   help="seconds a rank waits for the others before stopping (default 300)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results already in --out (refused otherwise)")
    p.add_argument("--checkpoint-every", metavar="MINUTES", help="save the run's state in "
                   "--out/checkpoint.ckpt at most this often (default: never; --backend local "
                   "only): the same command run again after a kill continues from it, to the "
                   "same results; deleted once results.json is written")


def _add_attack_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench attack`: the run's settings, attacks, threat model, preset and resuming."""
    _add_run_arguments(p, sweep=True)
    p.add_argument("--attack", action="append", help="attack(s), repeatable or comma-separated; "
                   f"'all' = every registered one (default {PRESET_DEFAULT})")
    p.add_argument("--threat", help="who observes: eavesdropper (default), neighbour, colluding, "
                   "or a curious set anywhere in the graph: node:K, nodes:A,B,..., hops:H[xM], "
                   "degree:M, random:M (attacked by gossip inversion beyond the victim's "
                   "neighbours)")
    p.add_argument("--preset", choices=["quick", "paper"], default="quick",
                   help="quick (minutes on a CPU, default) or paper (papers' scale)")
    p.add_argument("--messages", help="attack a message log written by `privbench train --out`")
    p.add_argument("--out", help="output folder (default reports/<run-name>)")
    p.add_argument("--run-name", dest="run_name",
                   help="run name (default: audit-quick for the quick preset, audit-paper for "
                        "the paper one; with --messages, audit-LOG for a log folder LOG)")
    p.add_argument("--resume", nargs="?", const="check", choices=["check", "rerun-stale"],
                   help="reuse the cells already in --out whose fingerprint (config, data, "
                        "versions, threads) matches; a stale cell is an error naming what "
                        "changed, or with --resume=rerun-stale is recomputed")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the finished audit in --out (refused otherwise; --resume "
                        "reuses its cells instead)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--untuned", action="store_true",
                   help="ignore the preset's tuned values (privbench/presets/tuned.toml)")


def _add_tune_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench tune`: the run's settings, the grid and the validation split."""
    _add_run_arguments(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a run field (lr) or defense field (clip, lr_constant, ...) and its "
                        "values, repeatable; candidates are the Cartesian product")
    p.add_argument("--preset", choices=["quick", "paper"], default="quick",
                   help="run settings to tune for (those of `privbench attack --preset`)")
    p.add_argument("--validation", type=float, default=0.2,
                   help="fraction of each node's members carved out for validation (default 0.2)")
    p.add_argument("--save", help="append the best candidate to this tuned-values TOML file "
                   "(the committed one is privbench/presets/tuned.toml)")
    p.add_argument("--out", help="output folder (default reports/tune-<preset>-<defense>-eps<E>)")
    p.add_argument("--quiet", action="store_true", help="no per-candidate lines")
    p.add_argument("--skip-test", dest="skip_test", action="store_true",
                   help="do not train the untuned and the chosen setting on the full members "
                        "to report their test accuracy (two more full runs; the choice never "
                        "uses them)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a tune.json already in --out (refused otherwise)")
    p.add_argument("--all", action="store_true",
                   help="tune every cell of the preset's default audit in one command: each "
                        "default defense at every ε of its grid, the non-private baselines, "
                        "the paper settings and readings, with the grids of "
                        "privbench/audit_presets.py (TUNE_GRIDS); resumable: the same command "
                        "again reuses the cells already in --out (default reports/tune-<preset>)"
                        "; with --save each cell's entry is written as soon as it is done")


def _add_leakage_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench leakage`: the runs, the curious placements and the output."""
    g = p.add_argument_group("runs")
    g.add_argument("--defense", action="append", help="defense(s), repeatable or comma-separated "
                   "(default: the baselines and the papers' linear-gossip and other defenses)")
    g.add_argument("--eps", dest="eps_grid", action="append", help="ε grid (default 1,8)")
    g.add_argument("--dataset", help="dataset registry key (default digits)")
    g.add_argument("--data-root", dest="data_root", help="folder of the dataset files")
    g.add_argument("--model", help="model registry key (default mlp)")
    g.add_argument("--nodes", type=int, help="nodes (default 8)")
    g.add_argument("--topology", help="topology (default ring)")
    g.add_argument("--rounds", type=int, help="rounds of each run (default 20)")
    g.add_argument("--lr", type=float, help="step size (default 0.003)")
    g.add_argument("--members", type=int, help="members per node of the membership run "
                   "(default 16)")
    g.add_argument("--distances", help="hop distances of one curious node (default 1,2,3)")
    g.add_argument("--sizes", help="colluding-set sizes of random non-neighbours (default 2,3)")
    g.add_argument("--victims", type=int, help="victims per placement: nodes 0..V-1 (default 8)")
    g.add_argument("--inversion-victims", dest="inversion_victims", type=int,
                   help="of those, attacked by inversion (default min(4, victims))")
    g.add_argument("--inversion", help="inversion attack on batch-1 views (default auto: "
                   "idlg on non-private defenses, geiping on private ones)")
    g.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--out", default="reports/leakage", help="output folder (default "
                   "reports/leakage): leakage.json, leakage.html, leakage.md")
    p.add_argument("--overwrite", action="store_true", help="replace an existing leakage.json")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_reproduce_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench reproduce`: which table, which runs, and what to do with them."""
    p.add_argument("name", nargs="?", help="the paper (omit to list them)")
    p.add_argument("--scale", help="the setting: each paper's 'reduced' (default: a 2-core CPU "
                   "finishes it), 'paper' (the paper's) or, where declared, 'headline' (the "
                   "paper's setting, the headline rows only)")
    p.add_argument("--seeds", help="seeds, comma-separated (default: the scale's)")
    p.add_argument("--rows", action="append", metavar="LABEL[,LABEL]", help="train these rows "
                   "only, by their table label (default: every row of the scale); the other "
                   "rows' lines are rendered as they are: a new row joins a table whose other "
                   "runs were made on another machine")
    p.add_argument("--eps", action="append", metavar="VALUE[,VALUE]", help="train the private "
                   "rows at these grid values only (the table's columns: epsilon, DPPS's b; "
                   "default: every one); the non-private rows are then not trained. With "
                   "--rows and --seeds: exactly the missing runs of a table, e.g. on a GPU")
    p.add_argument("--out", help="output folder (default reports/reproduce/NAME, and "
                   "reports/reproduce/NAME/SCALE for a scale other than the first): runs.jsonl, "
                   "table.md")
    p.add_argument("--render", action="store_true", help="only re-render table.md from the "
                   "folder's runs.jsonl")
    p.add_argument("--summary", action="store_true", help="one line per table under --out "
                   "(default reports/reproduce): its headline claim per column and verdict, "
                   "and the tally of all its claims; writes summary.md there, and missing.md "
                   "(each table's runs not yet run, as the commands that train them); trains "
                   "nothing")
    p.add_argument("--missing", action="store_true", help="print the commands that train the "
                   "runs the folder's table lacks (its scale's rows, grid values and seeds), "
                   "each into a folder of its own, and the --merge that adds them (no paper: "
                   "every table under --out, as --summary writes missing.md); trains nothing")
    p.add_argument("--merge", nargs="+", metavar="RUNS_JSONL", help="append these runs files' "
                   "lines (trained with another --out or on another machine) to the folder's "
                   "runs.jsonl and render its table; every line is checked first (this "
                   "reproduction, scale, grid and setting; a key already there must be the "
                   "same run) and a refused merge writes nothing")
    p.add_argument("--jobs", type=int, default=1, help="runs trained side by side in separate "
                   "processes (default 1; e.g. one per core, or 8-16 sharing one GPU); set "
                   "OMP_NUM_THREADS=1 so they do not fight over cores")
    p.add_argument("--verify", action="store_true", help="re-make the folder's lines (those "
                   "--seeds, --rows and --eps choose; default all) that this machine writes "
                   "with the same fingerprint, with this code, and compare every number the "
                   "table shows, exactly, and the table rendered with them; writes nothing, "
                   "exits 1 when the table would read otherwise")
    p.add_argument("--checkpoint-every", metavar="MINUTES", help="save each running job's "
                   "state in the folder's checkpoints/ at most this often (default 10; 0: "
                   "never): a job stopped midway (a kill, a lease's end) continues from it when "
                   "run again, to the same result, and its checkpoint is deleted once its "
                   "line is written")
    p.add_argument("--quiet", action="store_true", help="no per-run lines")


def _add_report_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench report`: the results files and the HTML file."""
    p.add_argument("results", nargs="+", help="results.json file(s) written by `privbench attack`")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write")


def _add_check_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench check`: the results, the policy and the baseline."""
    p.add_argument("results", help="results.json written by `privbench attack`")
    p.add_argument("--policy", required=True, help="policy TOML ([[bound]] tables, [tolerance])")
    p.add_argument("--baseline", help="earlier results.json to compare against")
    p.add_argument("--tolerance", type=float, default=1.0,
                   help="scale of the policy's per-metric baseline tolerances (default 1)")
    p.add_argument("--junit", help="also write JUnit XML here")



def _no_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench list` takes none."""


@dataclass(frozen=True)
class _Command:
    """One subcommand: its name, its line in `privbench --help`, what declares its options
    and what runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    formatter: type[argparse.HelpFormatter] = argparse.HelpFormatter


# In `privbench --help`'s order; `account` follows them (its options import the accountants).
_COMMANDS = (
    _Command("train", "train one defense and write results + message log", _add_train_arguments,
             cmd_train),
    _Command("attack", "audit: train each (defense, ε) once, run every attack, write "
             "results.json + index.html", _add_attack_arguments, cmd_attack, _PresetHelp),
    _Command("tune", "grid-search a defense's step size / clip bound on a validation split "
             "carved from the nodes' members (never the test set)", _add_tune_arguments,
             cmd_tune),
    _Command("leakage", "leakage map: inversion and membership attacks by a curious set 1, 2, 3 "
             "hops away, an eavesdropper and colluding sets (gossip inversion beyond the "
             "neighbours), with pairwise network DP", _add_leakage_arguments, cmd_leakage),
    _Command("reproduce", "a paper's table on real data: train its grid (resuming), write "
             "runs.jsonl and table.md; --render re-renders the table from runs.jsonl without "
             "training", _add_reproduce_arguments, cmd_reproduce),
    _Command("list", "print every registry: each entry with a line of description, the "
             "private defenses marked DP", _no_arguments, cmd_list),
    _Command("report", "render or merge audit results into one HTML report",
             _add_report_arguments, cmd_report),
    _Command("check", "privacy regression gate: check results against a policy",
             _add_check_arguments, cmd_check),
    _Command("bench", "speed benchmarks", _add_bench_arguments, cmd_bench),
)


def build_parser(account: bool = True) -> argparse.ArgumentParser:
    """The full command-line parser.

    Args:
        account: declare `privbench account`'s options (they import the accountants); `main`
            does so only when that command is run, so `--help` and `--version` stay instant.
    """
    parser = _Parser(prog="privbench", description="Attack-and-defense evaluation of "
                     "differentially private decentralized learning.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print privbench's version and its code's commit and digest, and "
                        "exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, required=True)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {}
    for command in _COMMANDS:
        command.add_arguments(sub.add_parser(command.name, help=command.help,
                                             formatter_class=command.formatter))
        commands[command.name] = command.run
    p = sub.add_parser("account", help="noise a defense uses for (eps, delta) and its epsilon")
    if account:
        from privbench.commands.account import add_account_arguments, run_account

        add_account_arguments(p)
        commands["account"] = run_account
    parser.set_defaults(_commands=commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run a command, turning bad input into a one-line error and exit code 2."""
    import logging

    # dp-accounting logs (via absl) every RDP order it drops at high sampling rates: noise for a
    # user, the ε it returns already accounts for it.
    logging.getLogger("absl").setLevel(logging.ERROR)
    from privbench.results.fingerprint import discard_created, forget_created

    forget_created()
    _KEPT.clear()
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        keep_freed_memory()  # before any tensor: see privbench.commands.hostmem
        args = build_parser(account=bool(given) and given[0] == "account").parse_args(given)
        _check_text(args)
        args._argv = given
        return args._commands[args.command](args)
    except PrivbenchError as exc:
        discard_created()  # a refused command leaves no empty output folder or lock file
        print(f"privbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated:
        print(f"privbench: stopped (SIGTERM); {_kept_text()}", file=sys.stderr)
        return 128 + 15
    except KeyboardInterrupt:
        print(f"privbench: interrupted; {_kept_text()}", file=sys.stderr)
        return 130


# What a stop (Ctrl-C, SIGTERM) keeps, as the running command describes it (`_on_interrupt`):
# the rest of `main`'s one line.
_KEPT: list[Callable[[], str]] = []


def _on_interrupt(describe: Callable[[], str]) -> None:
    """From now on, a stop says `describe()`: what was kept and how to continue."""
    _KEPT[:] = [describe]


def _kept_text() -> str:
    generic = "results already written are kept"
    try:
        return _KEPT[-1]() if _KEPT else generic
    except Exception:  # the description must never hide the stop itself
        return generic


def _again(args: argparse.Namespace, add: str = "") -> str:
    """The user's command, shell-quoted, with option `add` appended when it is not there."""
    import shlex

    argv = list(args._argv)
    if add and not any(a == add or a.startswith(add + "=") for a in argv):
        argv.append(add)
    return shlex.join(["privbench", *argv])


def _sweep_kept(runner: Any, out: Path, args: argparse.Namespace) -> str:
    """`attack` stopped: how many of its cells are done (their files are kept)."""
    again = _again(args, "--resume")
    if not runner.planned:
        return f"no cell had started, nothing new in {out}; `{again}` starts again"
    return (f"kept: {runner.finished} of {runner.planned} cells finished in {out}; `{again}` "
            "continues")


def _train_kept(args: argparse.Namespace, out: Path) -> str:
    """`train` stopped: its checkpoint, if it saved one, else nothing of the run."""
    ckpt = out / "checkpoint.ckpt"
    if args.checkpoint_every is not None and ckpt.is_file():
        return f"kept: the checkpoint {ckpt}; `{_again(args)}` continues from it"
    if args.checkpoint_every is not None:
        return f"no checkpoint was saved yet, nothing of the run is kept; `{_again(args)}` " \
               "starts again"
    return (f"nothing of the run is kept (results.json is written when it ends); "
            f"`{_again(args, '--checkpoint-every')} MINUTES` saves checkpoints a stopped run "
            "continues from")


def _ends_kept(args: argparse.Namespace, target: Path) -> str:
    """A command that writes its result once at the end (tune, leakage), stopped."""
    return f"nothing of the run is kept ({target} is written when it ends); `{_again(args)}` " \
           "starts again"


def _reproduce_kept(args: argparse.Namespace, out: Path) -> str:
    """`reproduce` stopped: the runs already in runs.jsonl and the stopped jobs' checkpoints."""
    from privbench.reproduce.runs import CHECKPOINTS, RUNS_FILE
    from privbench.results.store import counted

    path = out / RUNS_FILE
    runs = sum(1 for ln in path.read_text().splitlines() if ln.strip()) if path.is_file() else 0
    saved = len(list((out / CHECKPOINTS).glob("*.ckpt")))
    more = f" and {counted(saved, 'checkpoint')} in {out / CHECKPOINTS}" if saved else ""
    return f"kept: {counted(runs, 'run')} in {path}{more}; `{_again(args)}` trains the rest"


def _check_text(args: argparse.Namespace) -> None:
    """Every option value must be valid UTF-8 text (a path of undecodable bytes reaches Python
    as lone surrogates, which no JSON, HTML or terminal output can hold)."""
    for key, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise PrivbenchError(f"--{key.replace('_', '-')} is not valid UTF-8 text "
                                         f"({v!a}); use a UTF-8 name") from None


def run() -> NoReturn:
    """The `privbench` console script and `python -m privbench`: `main`, then exit."""
    code = main()
    # Only a process that ran a distributed command has loaded comm (and torch): importing it
    # here would cost every refused input or `--help` seconds of torch import.
    comm = sys.modules.get("privbench.engine.comm")
    if comm is None:
        sys.exit(code)
    comm.exit_process(code)


if __name__ == "__main__":
    run()
