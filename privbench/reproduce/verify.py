"""Is a committed table still what the code gives? Retrain chosen lines and compare.

A line's fingerprint hashes its configuration and the machine's torch build and thread count, not
the code (`runs` says why), so a change in what a trainer computes leaves an old line matching: a
table can go stale without anything saying so. `verify` retrains the chosen lines of a runs file
that this machine would write with the same fingerprint (a GPU's line is not retrained on a CPU:
its numbers would differ for that reason alone), with the code at hand, and compares every number
the table shows (the accuracies, both epsilons, the round it diverged in) and the structure the
code built (model and split sizes), exactly. The same seed and configuration give bit-equal results
on the same torch build, thread count and kind of machine (`privbench.device.machine_kind`: the
CPU's model and the vector kernels torch uses on it); on another kind they need not (forcing a
CPU's kernels down from AVX-512 to AVX2 alone moves an ADP-VRSGP reduced line by 0.06 to 0.1
points). So a difference is the code's only where both lines name the same kind of machine: each
differing line says what made it and where, and the summary counts the differences that may be the
machine's. The dataset's digest is in the fingerprint. It writes nothing (no line, no checkpoint).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privbench.errors import PrivbenchError
from privbench.reproduce.line import RunLine
from privbench.reproduce.runs import (
    RUNS_FILE,
    Job,
    chosen,
    index,
    job_fingerprint,
    jobs,
    read_runs,
    run_config,
    run_job,
    run_parallel,
)
from privbench.reproduce.spec import Reproduction, Scale
from privbench.reproduce.table import render
from privbench.results.fingerprint import first_difference

# what a table shows of a line, compared exactly, and the structure the code built (a model
# or split built otherwise explains any other difference)
COMPARED = ("accuracy", "node_accuracy_mean", "epsilon_paper", "epsilon_calibrated",
            "diverged_round", "structure")


@dataclass(frozen=True)
class Verdict:
    """One committed line against the same run made now."""

    name: str
    then: RunLine
    now: RunLine

    @property
    def differences(self) -> list[str]:
        """"accuracy 0.8200 then, 0.8198 now (-0.02 points)", one per field that differs
        (fields a line of an older format lacks are not compared)."""
        return [_difference(k, self.then[k], self.now.get(k)) for k in COMPARED
                if k in self.then and not _same(self.then[k], self.now.get(k))]

    def line(self) -> str:
        """The verdict as one line of output."""
        if not self.differences:
            return f"{self.name}: the same (accuracy {self.now['accuracy']:.4f})"
        return (f"{self.name}: differs: {'; '.join(self.differences)} (made by "
                f"{_code(self.then)} on {_machine(self.then)}; now {_code(self.now)} on "
                f"{_machine(self.now)})")

    @property
    def same_machine(self) -> bool:
        """Whether both lines name the same kind of machine (a line from before machines were
        recorded names none)."""
        return self.then.get("machine") is not None \
            and self.then.get("machine") == self.now.get("machine")


def _same(a: object, b: object) -> bool:
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b or both_nan


def _difference(key: str, a: object, b: object) -> str:
    if "accuracy" in key and isinstance(a, float) and isinstance(b, float):
        return f"{key} {a:.4f} then, {b:.4f} now ({100 * (b - a):+.2f} points)"
    return f"{key} {a!r} then, {b!r} now"


def _machine(rec: RunLine) -> str:
    return rec.get("machine") or "a machine not recorded (the line names none)"


def _code(rec: RunLine) -> str:
    code = rec.get("code")
    return code["revision"] if code else "code not recorded (the line names none)"


@dataclass(frozen=True)
class Verification:
    """The verdicts (in grid order), the chosen lines not retrained here (each with why), and
    the table's rendered lines that change with the retrained lines in place of the committed
    ones (a unified diff, empty when the table reads the same)."""

    verdicts: list[Verdict]
    skipped: list[str]
    table_diff: list[str]

    @property
    def stale(self) -> bool:
        """Whether any retrained line differs from its committed one."""
        return any(v.differences for v in self.verdicts)


def _moved(differ: list[Verdict]) -> str:
    """Which fields moved in how many lines: "accuracy in 1, by at most 0.02 points;
    epsilon_calibrated in 4"."""
    parts = []
    for key in COMPARED:
        hit = [v for v in differ if key in v.then and not _same(v.then[key], v.now.get(key))]
        if not hit:
            continue
        part = f"{key} in {len(hit)}"
        gaps = [abs(v.now[key] - v.then[key]) for v in hit if "accuracy" in key
                and isinstance(v.now.get(key), float) and isinstance(v.then[key], float)]
        if gaps and not any(math.isnan(g) for g in gaps):
            part += f", by at most {100 * max(gaps):.2f} points"
        parts.append(part)
    return "; ".join(parts)


def summary(found: Verification, folder: Path) -> str:
    """The last lines: how many are the same, how far the others moved, whether the table
    reads the same, and what was left out."""
    verdicts, skipped = found.verdicts, found.skipped
    differ = [v for v in verdicts if v.differences]
    text = (f"verified {len(verdicts)} of the lines in {folder / RUNS_FILE}: "
            f"{len(verdicts) - len(differ)} the same, {len(differ)} differ")
    if differ:
        text += f" ({_moved(differ)})"
        elsewhere = sum(not v.same_machine for v in differ)
        if elsewhere:
            text += (f"; {elsewhere} of the {len(differ)} made on another kind of machine or one "
                     "not recorded, where other kernels alone can move a number")
    if skipped:
        text += (f"; {len(skipped)} chosen made elsewhere, not retrained here (the first: "
                 f"{skipped[0]})")
    if not differ:
        return text
    if not found.table_diff:
        return text + ("\nwith the retrained lines in place of the committed ones, "
                       f"{folder / 'table.md'} reads the same")
    return "\n".join([text + f"\nwith the retrained lines in place of the committed ones, "
                      f"{folder / 'table.md'} changes:", *found.table_diff])


def verifiable(repro: Reproduction, scale: Scale,
               records: dict[tuple[str, float | None, int], RunLine],
               seeds: tuple[int, ...], rows: tuple[str, ...], columns: tuple[float, ...]
               ) -> tuple[list[Job], list[str]]:
    """(the chosen committed runs this machine can retrain with their fingerprint, and why
    each other chosen line cannot be)."""
    todo, skipped = [], []
    for job in chosen(jobs(repro.at(scale), seeds), rows, columns):
        rec = records.get(job.key)
        if rec is None:
            continue
        here = job_fingerprint(repro, scale, job, run_config(scale, job))
        if rec["fingerprint"] == here["sha256"]:
            todo.append(job)
        else:
            diff = first_difference(rec.get("fields", {}), here["fields"])
            skipped.append(f"{job.name} ({diff or 'its fingerprint'})")
    return todo, skipped


def verify(repro: Reproduction, scale: Scale, folder: Path, seeds: tuple[int, ...] = (),
           rows: tuple[str, ...] = (), columns: tuple[float, ...] = (), workers: int = 1,
           progress: Callable[[str], None] | None = None, heartbeat: float | None = None
           ) -> Verification:
    """Retrain the chosen lines of `folder/runs.jsonl` (every seed, row and grid value of it
    by default) that this machine would write with the same fingerprint and compare them
    (`Verification`). `progress` gets each verdict as its run ends; `heartbeat` as for
    `reproduce`.

    Raises:
        PrivbenchError: the folder holds no runs, or none of the chosen ones can be retrained
            here (a check that checks nothing does not pass).
    """
    records = index(read_runs(folder / RUNS_FILE), repro, scale)
    if not records:
        raise PrivbenchError(f"{folder / RUNS_FILE} holds no runs to verify")
    seeds = seeds or tuple(sorted({key[2] for key in records}))
    todo, skipped = verifiable(repro, scale, records, seeds, rows, columns)
    if not todo:
        why = f": {'; '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}" if skipped \
            else " (no committed line of these rows, grid values and seeds)"
        raise PrivbenchError(f"no line of {folder / RUNS_FILE} chosen can be retrained here{why}")
    verdicts: list[Verdict] = []

    def keep(k: int, job: Job, now: RunLine) -> None:
        verdicts.append(Verdict(job.name, records[job.key], now))
        if progress is not None:
            progress(f"[{k}/{len(todo)}] {verdicts[-1].line()}")

    if progress is not None:
        progress(f"{len(todo)} of the chosen lines to retrain here, {len(skipped)} made "
                 "elsewhere")
    if workers == 1:  # no checkpoints, no lines: nothing is written
        for k, job in enumerate(todo, 1):
            keep(k, job, run_job(repro, scale, job, heartbeat))
    else:
        run_parallel(repro, scale, todo, workers, keep, heartbeat)
    order = {job.name: k for k, job in enumerate(todo)}
    verdicts.sort(key=lambda v: order[v.name])
    now = {**records, **{job.key: v.now for job, v in zip(todo, verdicts, strict=True)}}
    before = render(repro, scale, list(records.values())).splitlines()
    after = render(repro, scale, list(now.values())).splitlines()
    diff = list(difflib.unified_diff(before, after, "committed", "retrained", n=0, lineterm=""))
    return Verification(verdicts, skipped, diff)
