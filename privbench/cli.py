"""The `privbench` command: train, account, bench, list.

Every error caused by bad input (unknown names, out-of-range values, missing files) is printed as
one line, `privbench: error: ...`, with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from privbench.commands.common import (
    EXIT_BAD_INPUT,
    KEPT,
    kept_text,
)
from privbench.engine.hostmem import keep_freed_memory
from privbench.errors import PrivbenchError, Terminated, sigterm_raises


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise PrivbenchError(f"{message} (see `{self.prog} --help`)")


class _PresetHelp(argparse.HelpFormatter):
    """Help of `attack`: a default marked PRESET_DEFAULT is the presets' value (a run value, the
    ε grid or the attacks, from `privbench.pipeline.presets`, plain data: the help imports neither
    the sweep nor torch)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and PRESET_DEFAULT in text:
            from privbench.pipeline.presets import PRESETS

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
        g.add_argument("--defense", help="defense registry key (`privbench list`; default sgp, "
                       "which is not private)")
        g.add_argument("--eps", dest="epsilon", type=float,
                       help="target epsilon per node (default 8)")
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
    g.add_argument("--partition", help="iid or dirichlet (default iid)")
    g.add_argument("--alpha", type=float,
                   help="Dirichlet concentration of --partition dirichlet (default 0.5)")
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
    g.add_argument("--threads", type=_positive_int, help=THREADS_HELP)


THREADS_HELP = ("torch threads of the computation (default: chosen from the work's size and the "
                "cores this process may use, its CPU affinity, cgroup quota and load: one "
                "thread for small models; privbench/engine/threads.py); recorded in timings.json")


def _positive_int(text: str) -> int:
    """A count option's value: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of `privbench bench` (declared here so that parsing never imports torch)."""
    p.add_argument("section",
                   choices=["engine", "attacks", "audit", "scale", "distributed", "plans",
                            "contention"],
                   help="engine: one DP round, privbench vs Opacus vs torch.func per node vs "
                        "the non-private floor; "
                        "attacks: batched vs sequential inversion; audit: wall time of "
                        "`privbench attack`; scale: time per round vs n; distributed: one "
                        "process vs P torchrun ranks; plans: privacy-plan composition time; "
                        "contention: the audit beside busy processes, default threads vs one")
    p.add_argument("--model", action="append", help="model(s), repeatable (default lenet, cnn)")
    p.add_argument("--nodes", type=int, action="append",
                   help="node count(s), repeatable (default 4, 16, 64; scale: up to 256)")
    p.add_argument("--defense", action="append",
                   help="defense(s) whose real round is timed, repeatable or comma-separated "
                        "(default: every private one; 'none': only the generic round; scale: "
                        "the first one, default dp_sgp)")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=32,
                   help="batch size per node (default 32)")
    p.add_argument("--repeats", type=int, default=5,
                   help="timed repeats, the median reported (default 5)")
    p.add_argument("--method", action="append",
                   help="engine: round method(s), repeatable or comma-separated: privbench, "
                        "opacus_hooks, opacus_ghost, func_per_node, floor, naive_loop (default: "
                        "all but the naive per-sample loop, a reference only); plans: "
                        "privbench (default), dp_accounting (its PLDAccountant, interleaved)")
    p.add_argument("--k", type=int, action="append",
                   help="attacks: number of attacks K, repeatable (default 1, 8, 32, 128)")
    p.add_argument("--steps", type=int, default=25,
                   help="attacks: optimisation steps (default 25)")
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
    p.add_argument("--jobs", type=_positive_int,
                   help="audit: worker processes of the timed audit (default: as `attack`)")
    p.add_argument("--busy", type=int, default=2,
                   help="contention: busy processes started beside the audit (default 2)")
    p.add_argument("--rounds", type=int, default=20,
                   help="distributed: rounds per timed run; plans: rounds planned (default 20)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda[:N]")
    p.add_argument("--json", dest="json_out", help="also write the table as JSON here")


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
    p.add_argument("--jobs", type=_positive_int,
                   help="cells computed side by side, each in a worker process of its own with "
                        "--threads threads (default: the usable cores' worth, as many as the "
                        "free memory holds at 2 GiB each; 1: every cell in this process); the "
                        "results are the same files, byte for byte")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--wide", action="store_true", help="the summary table with every column "
                   "(default: the columns that fit 100 characters)")
    p.add_argument("--untuned", action="store_true",
                   help="ignore the preset's tuned values (privbench/presets/tuned.toml)")


def _add_tune_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench tune`: the run's settings, the grid and the validation split."""
    _add_run_arguments(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a run field (lr) or defense field (clip, lr_constant, ...) and its "
                        "values, repeatable; candidates are the Cartesian product")
    p.add_argument("--preset", choices=["quick", "paper"], default="quick",
                   help="run settings to tune for (those of `privbench attack --preset`; "
                        "default quick)")
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
                        "privbench/pipeline/presets.py (TUNE_GRIDS); resumable: the same command "
                        "again reuses the cells already in --out (default reports/tune-<preset>)"
                        "; with --save each cell's entry is written as soon as it is done")


def _add_leakage_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench leakage`: the runs, the curious placements and the output."""
    g = p.add_argument_group("runs")
    g.add_argument("--defense", action="append", help="defense(s), repeatable or comma-separated "
                   "(default: the baselines and the papers' linear-gossip and other defenses)")
    g.add_argument("--eps", dest="eps_grid", action="append", help="ε grid (default 1,8)")
    g.add_argument("--dataset", help="dataset registry key (default digits)")
    g.add_argument("--data-root", dest="data_root",
                   help="folder holding mnist / fashion-mnist idx files (flat or torchvision's "
                        "layout) or cifar-10-batches-py; default: $PRIVBENCH_DATA, then the "
                        "Debian package's folder (apt-get install dataset-fashion-mnist)")
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
    g.add_argument("--threads", type=_positive_int, help=THREADS_HELP.replace(
        "; recorded in timings.json", ""))
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
    p.add_argument("--verify", action="store_true", help="train the folder's lines again (those "
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
    p.add_argument("-o", "--output", default="report.html",
                   help="HTML file to write (default report.html)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing -o (or --csv) file")
    p.add_argument("--compare", action="store_true", help="two results files, earlier then "
                   "later: print and render what moved toward less privacy, with intervals")
    p.add_argument("--csv", help="also write the summary table (one row per cell, every "
                   "column, numbers at full precision) as CSV here")


def _add_check_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench check`: the results, the policy and the baseline."""
    p.add_argument("results", help="results.json written by `privbench attack`")
    p.add_argument("--policy", required=True, help="policy TOML ([[bound]] tables, [tolerance])")
    p.add_argument("--baseline", help="earlier results.json to compare against")
    p.add_argument("--tolerance", type=float, default=1.0,
                   help="scale of the policy's per-metric baseline tolerances (default 1)")
    p.add_argument("--junit", help="also write JUnit XML here")
    p.add_argument("--markdown", help="also write the checks as a Markdown summary here (it is "
                   "appended to $GITHUB_STEP_SUMMARY whenever that is set)")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    """`privbench list` takes none."""


@dataclass(frozen=True)
class _Command:
    """One subcommand: its name, its line in `privbench --help`, what declares its options
    and what runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    verb: str  # the module of privbench.commands that runs it (its `cmd_<name>` or `run`)
    formatter: type[argparse.HelpFormatter] = argparse.HelpFormatter

    def run(self, args: argparse.Namespace) -> int:
        """Import the verb's module (only the command run loads what it needs) and run it."""
        import importlib

        module = importlib.import_module(f"privbench.commands.{self.verb}")
        return getattr(module, f"cmd_{self.name}")(args)


# In `privbench --help`'s order; `account` follows them (its options import the accountants).
_COMMANDS = (
    _Command("train", "train one defense and write results + message log", _add_train_arguments,
             "train"),
    _Command("attack", "audit: train each (defense, ε) once, run every attack, write "
             "results.json + index.html", _add_attack_arguments,
             "attack", _PresetHelp),
    _Command("tune", "grid-search a defense's step size / clip bound on a validation split "
             "carved from the nodes' members (never the test set)", _add_tune_arguments,
             "tune"),
    _Command("leakage", "leakage map: inversion and membership attacks by a curious set 1, 2, 3 "
             "hops away, an eavesdropper and colluding sets (gossip inversion beyond the "
             "neighbours), with pairwise network DP", _add_leakage_arguments,
             "leakage"),
    _Command("reproduce", "a paper's table on real data: train its grid (resuming), write "
             "runs.jsonl and table.md; --render re-renders the table from runs.jsonl without "
             "training", _add_reproduce_arguments,
             "reproduce"),
    _Command("list", "print every registry: each entry with a line of description, the "
             "private defenses marked DP", _no_arguments,
             "listing"),
    _Command("report", "render or merge audit results into one HTML report",
             _add_report_arguments,
             "report"),
    _Command("check", "privacy regression gate: check results against a policy",
             _add_check_arguments,
             "check"),
    _Command("bench", "speed benchmarks", _add_bench_arguments,
             "bench"),
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
    KEPT.clear()
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        keep_freed_memory()  # before any tensor: see privbench.engine.hostmem
        args = build_parser(account=bool(given) and given[0] == "account").parse_args(given)
        _check_text(args)
        args._argv = given
        with sigterm_raises():  # a `kill` or a CI timeout stops as Ctrl-C does, said below
            return args._commands[args.command](args)
    except PrivbenchError as exc:
        discard_created()  # a refused command leaves no empty output folder or lock file
        print(f"privbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated:
        discard_created()  # a stop that kept nothing leaves no empty folder or lock file
        print(f"privbench: stopped (SIGTERM); {kept_text()}", file=sys.stderr)
        return 128 + 15
    except KeyboardInterrupt:
        discard_created()
        print(f"privbench: interrupted; {kept_text()}", file=sys.stderr)
        return 130


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
