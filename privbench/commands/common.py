"""What the command-line verbs share: the run configuration from options, output folders claimed,
option values parsed, and what a stop keeps."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from privbench.errors import ConfigError, PrivbenchError

if TYPE_CHECKING:
    from privbench.config import JSONObject, RunConfig
    from privbench.pipeline.tuning import TunedEntry

EXIT_BAD_INPUT = 2


EXIT_DIVERGED = 1  # `privbench train`: the run diverged (its results are still written)


RUN_FLAGS = ("dataset", "data_root", "download", "model", "nodes", "topology", "out_degree",
             "partition", "alpha", "rounds", "batch_size", "lr", "epsilon", "delta", "device",
             "seed")


def run_config_from_args(args: argparse.Namespace, preset: Mapping[str, object] | None = None,
                         ) -> tuple[RunConfig, dict[str, object]]:
    """RunConfig and defense overrides from defaults < preset < --config file < flags < --set;
    a data root given must be a folder (`datafiles.check_data_root`). The defense overrides
    are the user's values as given: the defense's config checks them when it is built."""
    from privbench.config import RunConfig, load_toml, parse_sets, replace_checked
    from privbench.data.files import check_data_root

    run_over: dict[str, object] = dict(preset or {})
    def_over: dict[str, object] = {}
    if args.config:
        file_run, def_over, _ = load_toml(args.config)
        run_over.update(file_run)
    flags = [k for k in RUN_FLAGS if hasattr(args, k)]
    run_over.update({k: getattr(args, k) for k in flags if getattr(args, k) is not None})
    set_run, set_def = parse_sets([s for s in args.sets if not s.startswith("audit.")])
    run_over.update(set_run)
    def_over.update(set_def)
    run = replace_checked(RunConfig(), run_over, where="run")
    check_data_root(run.data_root, run.download)
    if hasattr(args, "threads"):  # torch computes from here on: its threads, chosen once
        from privbench.engine.threads import settle

        args.thread_choice = settle(run, args.threads)
    return run, def_over


def tuned_entries_from_args(args: argparse.Namespace, overrides: Mapping[str, object],
                            every_preset: bool = False) -> dict[str, list[TunedEntry]]:
    """The tuned entries of `--preset` (or of every preset) without the keys the user set
    explicitly (flags, --set, --config win: `tuning.tuned_entries`); empty with --untuned."""
    from privbench.config import load_toml, parse_sets
    from privbench.pipeline.tuning import tuned_entries

    if args.untuned:
        return {}
    explicit = {k for k in RUN_FLAGS if getattr(args, k, None) is not None}
    explicit |= set(parse_sets([s for s in args.sets if not s.startswith("audit.")])[0])
    if args.config:
        explicit |= set(load_toml(args.config)[0])
    return tuned_entries(None if every_preset else (args.preset,), explicit, overrides)


def check_writable(out: Path) -> None:
    """Fail early (before training) when the output folder cannot be created or written."""
    import os

    from privbench.results.fingerprint import make_folder

    try:
        make_folder(out)  # removed again if the command is refused (`main`)
    except OSError as exc:
        raise PrivbenchError(f"cannot create output folder {out}: {exc.strerror}") from None
    if not os.access(out, os.W_OK):
        raise PrivbenchError(f"output folder {out} is not writable")


def refuse_existing(target: Path, overwrite: bool, flag: str = "--out") -> None:
    """A result file is evidence: one that exists is replaced only with --overwrite (`flag`:
    the option that names another place)."""
    if target.exists() and not overwrite:
        raise PrivbenchError(f"{target} exists (a result file is never overwritten silently); "
                             f"choose another {flag} or pass --overwrite")


def claim_folder(stack: contextlib.ExitStack, out: Path, result_file: str,
           overwrite: bool) -> PrivbenchError | None:
    """Make `out` this run's alone until `stack` closes: writable, locked against a second
    writer (`fingerprint.folder_lock`), its result file absent unless --overwrite; the error
    instead, or None."""
    from privbench.results.fingerprint import folder_lock

    try:
        check_writable(out)
        stack.enter_context(folder_lock(out))
        refuse_existing(out / result_file, overwrite)
    except PrivbenchError as exc:
        return exc
    return None


def float_list(items: list[str] | None, what: str) -> list[float] | None:
    if not items:
        return None
    out = []
    for part in ",".join(items).split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise PrivbenchError(f"{what} must be numbers (e.g. --eps 1,8), got {part!r}") from None
    return out


def command_line(args: argparse.Namespace) -> str:
    """The user's command without options that do not change results (--out, --resume,
    --quiet, --run-name, --overwrite, --jobs), so that reruns give byte-identical results."""
    argv, keep, skip = list(args._argv), [], False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if item == "--resume" and argv[i + 1:i + 2] in (["check"], ["rerun-stale"]):
            skip = True
        if name in ("--out", "--run-name", "--jobs") and "=" not in item:
            skip = True
        elif name not in ("--out", "--run-name", "--resume", "--quiet", "--overwrite", "--jobs"):
            keep.append(item)
    return " ".join(["privbench", *keep])


def add_audit_sets(audit_sets: JSONObject, sets: list[str]) -> None:
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


def out_folder(args: argparse.Namespace, default_name: str) -> Path:
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
    check_writable(out)
    return out


def int_tuple(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise PrivbenchError(f"{what} must be comma-separated integers (e.g. 1,2,3), got "
                             f"{text!r}") from None


def checkpoint_seconds(text: str | None, default: float | None = None) -> float:
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


def or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def name_list(items: list[str] | None) -> list[str] | None:
    if not items:
        return None
    return [p.strip() for p in ",".join(items).split(",") if p.strip()]


# What a stop (Ctrl-C, SIGTERM) keeps, as the running command describes it (`on_interrupt`):
# the rest of `main`'s one line.
KEPT: list[Callable[[], str]] = []


def on_interrupt(describe: Callable[[], str]) -> None:
    """From now on, a stop says `describe()`: what was kept and how to continue."""
    KEPT[:] = [describe]


def kept_text() -> str:
    generic = "results already written are kept"
    try:
        return KEPT[-1]() if KEPT else generic
    except Exception:  # the description must never hide the stop itself
        return generic


def again_command(args: argparse.Namespace, add: str = "") -> str:
    """The user's command, shell-quoted, with option `add` appended when it is not there."""
    import shlex

    argv = list(args._argv)
    if add and not any(a == add or a.startswith(add + "=") for a in argv):
        argv.append(add)
    return shlex.join(["privbench", *argv])


def ends_kept(args: argparse.Namespace, target: Path) -> str:
    """A command that writes its result once at the end (tune, leakage), stopped."""
    return (f"nothing of the run is kept ({target} is written when it ends); "
            f"`{again_command(args)}` starts again")
