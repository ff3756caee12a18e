"""The runs a table still lacks, as the commands that train exactly those.

A table's grid at a scale is every row it runs, at each of its grid values, for each of the
scale's seeds (`runs.jobs`); its jobs with no line among the records are missing. `commands`
groups them into `privbench reproduce` commands (rows lacking the same grid values
for the same seeds share one), each training into a folder of its own, and the `--merge` that
adds their lines to the table's folder afterwards (on another machine, e.g. a lent GPU, the
lines are merged here). `privbench reproduce --summary` writes them for every committed table
to `missing.md`, which reports/reproduce/README.md quotes and a test regenerates: the list of
what is not run cannot drift from the committed lines.
"""

from __future__ import annotations

import shlex
import statistics

from privbench.reproduce.line import RunLine
from privbench.reproduce.runs import Job, jobs, line_key
from privbench.reproduce.spec import Reproduction, Scale
from privbench.results.store import counted

MISSING_HEAD = (
    "The runs the committed tables lack, computed from their committed lines by `privbench "
    "reproduce --summary`\n(which writes this file, `reports/reproduce/missing.md`; "
    "`--missing` prints it, or one table's with a\npaper's name). Each command trains only "
    "those runs, into a folder of its own, here or on a GPU machine;\nthe last line of each "
    "block merges them into the table. A command stopped midway continues its runs from\ntheir "
    "checkpoints when run again in the same folder, with the same code on the same kind of "
    "machine.")


def commands(repro: Reproduction, scale: Scale, todo: list[Job], out: str,
             records: list[RunLine], folder: str) -> list[str]:
    """`privbench reproduce` lines that train exactly `todo` into `out`, then the line that
    merges them into the table's `folder` (none when nothing is missing). A group's rows miss
    the same grid values for the same seeds: `--eps` is given only when that is not every
    value the row is run at (without it a row trains all of its values; with it a
    non-private row, which has none, trains nothing).
    Each line follows a comment with its run count and what the table's `records` of those
    rows took per run on each kind of device (to plan a lent GPU's minutes)."""
    if not todo:
        return []
    table = repro.at(scale)
    order = [m.label for m in table.methods]
    lacks: dict[tuple[str, int], list[float | None]] = {}  # (row, seed) -> its missing values
    for job in todo:
        lacks.setdefault((job.method.label, job.seed), []).append(job.eps)
    groups: dict[tuple[tuple[float | None, ...], tuple[int, ...]], list[str]] = {}
    for label in order:
        own = tuple(e for e in table.eps if table.runs_at(label, e)) \
            if table.method(label).private else (None,)
        by_values: dict[tuple[float | None, ...], list[int]] = {}
        for (row, seed), values in lacks.items():
            if row == label:
                by_values.setdefault(() if tuple(values) == own else tuple(values),
                                     []).append(seed)
        for flag, seeds in by_values.items():
            groups.setdefault((flag, tuple(sorted(seeds))), []).append(label)
    lines = []
    for (flag, seeds), rows in sorted(groups.items(),
                                      key=lambda g: (g[0][1], order.index(g[1][0]))):
        n = sum(1 for j in todo if j.method.label in rows and j.seed in seeds
                and (not flag or j.eps in flag))
        lines += [f"# {counted(n, 'run')}; {_took(records, rows)}",
                  _command(repro, scale, table, rows, flag, seeds, n, out)]
    return [*lines, f"privbench reproduce {repro.name} --scale {scale.name} "
                    f"--merge {shlex.quote(out + '/runs.jsonl')} --out {shlex.quote(folder)}"]


def _took(records: list[RunLine], rows: list[str]) -> str:
    """"these rows' lines took, per run (median), 74 min on cpu (4 lines), 0.6 min on cuda
    (3 lines)": the median seconds of the lines of `rows` in `records`, per kind of device."""
    secs: dict[str, list[float]] = {}
    for r in records:
        if r["method"] in rows:
            secs.setdefault(str(r["device"]).split(":")[0], []).append(float(r["seconds"]))
    if not secs:
        return "no line of these rows yet"
    parts = [f"{statistics.median(v) / 60:.{1 if statistics.median(v) < 600 else 0}f} min on "
             f"{kind} ({counted(len(v), 'line')})" for kind, v in sorted(secs.items())]
    return "these rows' lines took, per run (median), " + ", ".join(parts)


def _command(repro: Reproduction, scale: Scale, table: Reproduction, rows: list[str],
             flag: tuple[float | None, ...], seeds: tuple[int, ...], n: int, out: str) -> str:
    parts = ["OMP_NUM_THREADS=1 privbench reproduce", repro.name, "--scale", scale.name]
    if len(rows) < len(table.methods):
        parts += [f"--rows {shlex.quote(label)}" for label in rows]
    if flag:
        parts.append("--eps " + ",".join(f"{e:g}" for e in flag if e is not None))
    parts.append("--seeds " + ",".join(map(str, seeds)))
    if n > 1:
        parts.append(f"--jobs {n}")
    return " ".join([*parts, "--out", shlex.quote(out)])


def block(repro: Reproduction, scale: Scale, records: list[RunLine], out: str,
          folder: str) -> str:
    """One table's part of missing.md: how many of its grid's runs are missing from its
    `records` (the lines in `folder`), and the commands that train them into `out` and merge
    them into `folder` (a single line when none is missing)."""
    grid = jobs(repro.at(scale), scale.seeds)
    have = {line_key(r) for r in records}
    todo = [j for j in grid if j.key not in have]
    name = f"**{repro.name}**, scale '{scale.name}'"
    if not todo:
        return f"{name}: complete ({counted(len(grid), 'run')})."
    head = f"{name}: {len(todo)} of {counted(len(grid), 'run')} missing:"
    return "\n".join([head, "", "```bash", *commands(repro, scale, todo, out, records, folder),
                      "```"])


def missing_file(blocks: list[str]) -> str:
    """missing.md: the header, then one block per committed table."""
    return "\n\n".join([MISSING_HEAD, *blocks]) + "\n"
