"""`privbench reproduce`: a paper's table trained, rendered, verified or summarised."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privbench.commands.common import (
    again_command,
    check_writable,
    checkpoint_seconds,
    float_list,
    int_tuple,
    name_list,
    on_interrupt,
    or_list,
)
from privbench.errors import PrivbenchError

if TYPE_CHECKING:
    from privbench.reproduce.line import RunLine
    from privbench.reproduce.spec import Reproduction, Scale

    # a committed table: its folder, reproduction, scale and lines
    Table = tuple[Path, Reproduction, Scale, list[RunLine]]


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
        check_writable(out)
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
        seeds = tuple(int_tuple(args.seeds, "--seeds") or scale.seeds)
        check_writable(out)
        on_interrupt(lambda: _reproduce_kept(args, out))
        records = reproduce(repro, scale, seeds, out, progress=None if args.quiet else
                            (lambda line: print(line, file=sys.stderr)), workers=args.jobs,
                            rows=_row_labels(args.rows, repro.at(scale)),
                            columns=tuple(float_list(args.eps, "--eps") or ()),
                            checkpoint_every=checkpoint_seconds(args.checkpoint_every))
    atomic_write_text(out / "table.md", render(repro, scale, records))
    print(f"wrote {out / 'table.md'} from {counted(len(records), 'run')} in {out / RUNS_FILE}")
    return 0


def _reproduce_verify(args: argparse.Namespace, repro: Any, out: Path) -> int:
    """`privbench reproduce NAME --verify`: train the chosen committed lines again here and
    compare; exit 1 when the table, with the retrained lines in place, reads otherwise (a line
    that differs below what the table prints is reported, with exit 0)."""
    from privbench.reproduce.runs import HEARTBEAT_SECONDS
    from privbench.reproduce.verify import summary, verify

    _takes_only(args, "--verify", ("name", "scale", "verify", "seeds", "rows", "eps", "jobs"),
                "it retrains the folder's lines and writes nothing")
    scale = repro.scale(args.scale)
    found = verify(
        repro, scale, out, tuple(int_tuple(args.seeds, "--seeds") or ()),
        _row_labels(args.rows, repro.at(scale)), tuple(float_list(args.eps, "--eps") or ()),
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


def _reproduce_summary(root: Path) -> int:
    """`privbench reproduce --summary`: one line per committed table (paper, scale) with its
    headline claim, from the runs.jsonl files under `root`; writes root/summary.md, and
    root/missing.md with each table's runs not yet run (`privbench.reproduce.missing`)."""
    from privbench.reproduce.missing import missing_file
    from privbench.reproduce.table import summary, summary_row
    from privbench.results.store import atomic_write_text

    found = _committed_tables(root)
    rows = [summary_row(repro, scale, recs) for _, repro, scale, recs in found]
    check_writable(root)
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
                 for name in ([item.strip()] if item.strip() in labels else name_list([item])))


def _reproduce_kept(args: argparse.Namespace, out: Path) -> str:
    """`reproduce` stopped: the runs already in runs.jsonl and the stopped jobs' checkpoints."""
    from privbench.reproduce.runs import CHECKPOINTS, RUNS_FILE
    from privbench.results.store import counted

    path = out / RUNS_FILE
    runs = sum(1 for ln in path.read_text().splitlines() if ln.strip()) if path.is_file() else 0
    saved = len(list((out / CHECKPOINTS).glob("*.ckpt")))
    more = f" and {counted(saved, 'checkpoint')} in {out / CHECKPOINTS}" if saved else ""
    return f"kept: {counted(runs, 'run')} in {path}{more}; `{again_command(args)}` trains the rest"


def _takes_only(args: argparse.Namespace, mode: str, takes: tuple[str, ...], why: str) -> None:
    """One-line error naming every option given that `mode` does not take, and why."""
    given = [flag for key, flag in _REPRODUCE_OPTIONS if key not in takes
             and (args.jobs != 1 if key == "jobs" else bool(getattr(args, key)))]
    if given:
        raise PrivbenchError(f"{mode} takes no {or_list(given)}: {why}")
