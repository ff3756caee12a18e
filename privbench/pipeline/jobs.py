"""An audit's cells side by side (`privbench attack --jobs N`).

Cells are independent: each trains its own run from the seed and writes its own files, so
worker processes (the `spawn` context: a fresh interpreter, no forked torch state) compute them
with the same thread count as the parent, whose fingerprints name it, and write the same bytes
as one process would. The parent holds the folder's lock, shows one progress line for all the
cells, and assembles results.json from the files as it does for `--jobs 1`. A stop (Ctrl-C,
SIGTERM) of the parent terminates the workers: every file already written stays (each is
written atomically), a file half-written is a temporary one that the next run removes, and
`--resume` continues as after a stop of one process. Workers ignore SIGINT, which a terminal
sends to the whole process group, so that the parent alone decides what the stop keeps.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import sys
import time
from typing import TYPE_CHECKING, Protocol

from privbench.pipeline.cells import Laps, setting_label
from privbench.progress import seconds_text

if TYPE_CHECKING:
    from pathlib import Path

    from privbench.progress import Phase
    from privbench.results.records import Fingerprint

Cell = tuple[str, float | None, str | None]
Todo = tuple[int, Cell, list[str], dict[str, "Fingerprint"]]
POLL_SECONDS = 0.2


class WorkerSweep(Protocol):
    """What the workers need of the audit's sweep (`privbench.pipeline.sweep.Sweep`, a frozen
    dataclass whose module imports this one)."""

    progress: bool
    eval_seconds: dict[str, float]
    finished: int

    def cell_dir(self, defense: str, eps: float | None, setting: str | None = None) -> Path: ...

    def phase(self, what: str, total: int | None = None, unit: str = "it") -> Phase: ...

    def run_cell(self, defense: str, eps: float | None, setting: str | None, todo: list[str],
                 prints: dict[str, Fingerprint], laps: Laps) -> dict[str, float]: ...


JOBS_ENV = "PRIVBENCH_JOBS"  # the default of --jobs where the option is not given


def env_jobs() -> int | None:
    """`PRIVBENCH_JOBS` as a count (unset or empty: None)."""
    from privbench.errors import ConfigError

    text = os.environ.get(JOBS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{JOBS_ENV} must be an integer >= 1, got {text!r}")
    return int(text)


def _init_worker(threads: int) -> None:
    """A worker as `privbench.cli.main` sets up the parent: dp-accounting's notes on the RDP
    orders it drops silenced (the ε it returns accounts for them), freed memory returned, the
    plugins loaded, its thread count set."""
    import logging

    from privbench.engine.hostmem import keep_freed_memory
    from privbench.engine.threads import apply
    from privbench.plugins import load_plugins

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    logging.getLogger("absl").setLevel(logging.ERROR)
    keep_freed_memory()
    load_plugins()
    apply(threads)


def _compute(sweep: WorkerSweep, cell: Cell, todo: list[str], prints: dict[str, Fingerprint]
             ) -> tuple[float, float]:
    """One cell in a worker: its files written; returns (seconds, seconds of evaluation)."""
    laps = Laps()
    sweep.run_cell(*cell, todo, prints, laps)
    return laps.total(), sweep.eval_seconds.get(sweep.cell_dir(*cell).name, 0.0)


def run_parallel(sweep: WorkerSweep, cells: list[Todo], jobs: int, threads: int,
                 total: int) -> None:
    """Compute `cells` (index in the grid of `total`, cell, files to write, fingerprints) in
    `jobs` worker processes of `threads` threads each; counts each finished cell in
    `sweep.finished` as it ends."""
    import dataclasses

    quiet = dataclasses.replace(sweep, progress=False)  # type: ignore[type-var]  # the parent's line speaks for all
    pool = multiprocessing.get_context("spawn").Pool(jobs, _init_worker, (threads,))
    try:
        pending = {pool.apply_async(_compute, (quiet, cell, todo, prints)): (k, cell)
                   for k, cell, todo, prints in cells}
        with sweep.phase(f"cells on {jobs} workers", len(cells), "cell") as bar:
            while pending:
                done = [r for r in pending if r.ready()]
                for r in done:
                    k, (defense, eps, setting) = pending.pop(r)
                    seconds, evaluating = r.get()  # a worker's error is raised here
                    sweep.eval_seconds[sweep.cell_dir(defense, eps, setting).name] = evaluating
                    sweep.finished += 1
                    bar.update()
                    if sweep.progress:
                        print(f"cell {k} of {total}: {defense} {setting_label(eps, setting)} "
                              f"done in {seconds_text(seconds)}", file=sys.stderr, flush=True)
                if pending:
                    time.sleep(POLL_SECONDS)
        pool.close()
    finally:
        pool.terminate()  # a stop or an error: no worker outlives the parent's command
        pool.join()


def peak_memory_mib() -> dict[str, float]:
    """Peak resident memory (MiB) of this process and of its largest finished child."""
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2 ** 20  # KiB on Linux, bytes on macOS
    return {"main": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            "largest_worker": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale}


def earlier_seconds(folder: Path, todo: list[str], prints: dict[str, Fingerprint]
                    ) -> float | None:
    """Seconds the same cell took when computed before on this machine: the cell folder of the
    same name in a sibling audit whose files `todo` carry exactly these fingerprints (same
    settings, data, code and threads), from its timings.json; None where there is none."""
    import json

    for other in sorted(folder.parent.parent.parent.glob(f"*/cells/{folder.name}")):
        try:
            if not all(json.loads((other / f"{name}.json").read_text())["fingerprint"]["sha256"]
                       == prints[name]["sha256"] for name in todo):
                continue
            spent = json.loads((other / "timings.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return sum(v for v in spent.values() if isinstance(v, (int, float)))
    return None


def announce(sweep: WorkerSweep, cells: list[Todo], jobs: int, threads: int) -> None:
    """Before the first cell trains: how many cells, on how many processes, and about how long,
    from the same cells computed earlier on this machine where there are any."""
    if not sweep.progress or not cells:
        return
    known = [earlier_seconds(sweep.cell_dir(*cell), todo, prints)
             for _, cell, todo, prints in cells]
    found = [s for s in known if s is not None]
    where = f"{len(cells)} cell(s) to compute on {jobs} process(es) of {threads} thread(s)"
    if not found:
        said = ("no earlier run of these cells on this machine to estimate their time from; "
                "the estimate follows as cells finish")
    else:
        total = sum(found) / len(found) * len(cells) / jobs
        said = (f"about {seconds_text(total)} on this machine, from {len(found)} of them computed "
                "earlier with the same settings in a folder beside --out")
    print(f"{where}: {said}", file=sys.stderr, flush=True)
