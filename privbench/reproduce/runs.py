"""Train a reproduction's grid and keep every run as one JSON line.

`runs.jsonl` in the output folder holds one line per (method, epsilon, seed) run: the scale, the
full run and defense configuration, the seed, the average-model accuracy, the victim-independent
headline epsilons (paper and calibrated, the largest over nodes), whether it diverged, its
seconds and a fingerprint of everything that determines it (configs, dataset identity, privbench
and torch versions, thread count). A line is appended as soon as its run ends (flushed and
fsynced), so an interrupted reproduction loses at most the run in progress and continues where
it stopped; a line already there is reused only when its fingerprint equals this run's, and a
mismatch is an error naming the first differing field (never a silent mix of settings).
A line also records the structure the code built from its configuration (`Trainer.structure`:
the model's parameter and layer counts, a split's shared coordinates), checked the same way on
resume and merge: a code change that makes another model or split of an unchanged configuration
(the fingerprint hashes the configuration, not the code) is refused, not mixed in. Lines written
before structures were recorded have none, and are checked by their fingerprint alone.
A line names the code that made it (`code`: the git commit, whether privbench's code differed
from it, and a digest of the code; `privbench.results.provenance`), outside the fingerprint: a
change of meaning that keeps both the configuration and the structure leaves old lines matching,
and the code names which lines it made. It names the kind of machine too (`machine`: the GPU, or the
CPU's model and the vector kernels torch uses on it; `privbench.device.machine_kind`), also
outside the fingerprint (a table joins lines of several machines), because the same code, torch
build and thread count give other numbers on other kernels: `verify` says so beside a
difference. A line that names no machine is counted as possibly another's.
A running job saves a checkpoint of its whole state every `CHECKPOINT_SECONDS` (10 minutes)
into `checkpoints/<fingerprint>.ckpt` beside runs.jsonl (`privbench.engine.checkpoint`); a job
stopped midway (a kill, a session's or a lease's end) continues from it when the same run is
trained again by the same code on the same kind of machine, to the line it would have written
in one go, and the checkpoint is deleted once its line is written. A resumed line says at
which rounds it continued (`resumed_at`; empty: trained in one go).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from privbench import __version__
from privbench.config import JSONObject, Overrides, RunConfig, replace_checked, to_dict
from privbench.device import machine_kind
from privbench.engine.checkpoint import prepare
from privbench.engine.hostmem import keep_freed_memory
from privbench.engine.messages import RecordPolicy
from privbench.errors import PrivbenchError, sigterm_raises
from privbench.reproduce.line import RunLine
from privbench.reproduce.spec import Method, Reproduction, Scale
from privbench.results.fingerprint import (
    dataset_identity,
    fingerprint,
    first_difference,
    folder_lock,
)
from privbench.results.provenance import code_provenance
from privbench.results.records import Fingerprint
from privbench.results.store import claimed_eps, counted, duration, strict, unstrict

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


RUNS_FILE = "runs.jsonl"
FORMAT = "privbench-reproduce-run/1"
# what reading, indexing and merging a line rely on
_KEYS = ("reproduction", "scale", "method", "eps", "seed", "accuracy", "fingerprint", "fields")
# a running job's progress line at most this often: a paper-scale run takes hours on a CPU
HEARTBEAT_SECONDS = 300.0
# a running job's checkpoint at most this often (0: none): a kill loses at most this much
CHECKPOINT_SECONDS = 600.0
CHECKPOINTS = "checkpoints"  # the folder beside runs.jsonl that holds the running jobs' states


@dataclass(frozen=True)
class Job:
    """One run of the grid (eps None: a non-private method; `eps` is the grid value, set as
    `grid_field`: the run's epsilon or a defense field such as DPPS's b)."""

    method: Method
    eps: float | None
    seed: int
    grid_field: str = "epsilon"

    @property
    def overrides(self) -> Overrides:
        """The defense config values of this run (the method's, plus the grid value when the
        grid sets a defense field)."""
        over = dict(self.method.overrides)
        if self.eps is not None and self.grid_field != "epsilon":
            over[self.grid_field] = self.eps
        return over

    @property
    def key(self) -> tuple[str, float | None, int]:
        return (self.method.label, self.eps, self.seed)

    @property
    def name(self) -> str:
        """"PartPSP-1 b=3 seed 0": the job in progress lines and errors."""
        return _named(self.key, self.grid_field)


class _Heartbeat:
    """`engine.train`'s progress for one job: a line on stderr at most every `every` seconds
    (the round, the time spent, an estimate of what is left), so an hour-long run does not
    stay silent until it ends; written by the process that trains it."""

    def __init__(self, name: str, total: int, every: float, done: int = 0) -> None:
        self.name, self.total, self.every = name, total, every
        self.done = self.first = done  # rounds done before this process (a resumed job)
        self.start = self.last = time.monotonic()

    def __call__(self, rounds: int) -> None:
        self.done += rounds
        now = time.monotonic()
        if now - self.last < self.every or self.done >= self.total:
            return
        self.last = now
        spent = now - self.start
        print(f"  {self.name}: round {self.done}/{self.total}, {duration(spent)} so far, about "
              f"{duration(spent / (self.done - self.first) * (self.total - self.done))} left",
              file=sys.stderr, flush=True)


def jobs(repro: Reproduction, seeds: tuple[int, ...]) -> list[Job]:
    """The grid in the order it is run: seed-major, so that every seed's table is complete
    before the next seed starts (an interrupted reproduction still gives paired rows)."""
    out = []
    for seed in seeds:
        for m in repro.methods:
            out += [Job(m, None, seed)] if not m.private else \
                [Job(m, e, seed, repro.grid_field) for e in repro.eps
                 if repro.runs_at(m.label, e)]
    return out


def chosen(grid: list[Job], rows: tuple[str, ...], columns: tuple[float, ...]) -> list[Job]:
    """The jobs of `grid` in these rows and at these grid values (empty: every one; a
    non-private row has no grid value, so `columns` leaves it out)."""
    return [j for j in grid if (not rows or j.method.label in rows)
            and (not columns or j.eps in columns)]


def run_config(scale: Scale, job: Job) -> RunConfig:
    """The RunConfig of one job (a non-private method keeps the RunConfig's default epsilon,
    which its trainer ignores)."""
    over: Overrides = {**dict(scale.run), **dict(job.method.run),
                            **scale.run_at(job.method.label, job.eps), "seed": job.seed,
                            "device": "auto"}
    if job.eps is not None and job.grid_field == "epsilon":
        over["epsilon"] = job.eps
    return replace_checked(RunConfig(), over, where="run")


def job_fingerprint(repro: Reproduction, scale: Scale, job: Job, run: RunConfig
                    ) -> Fingerprint:
    """Hash of everything that determines a run's line."""
    return fingerprint({"reproduction": repro.name, "scale": scale.name,
                        "method": job.method.label, "defense": job.method.defense,
                        "overrides": job.overrides,
                        "run": {k: v for k, v in to_dict(run).items() if k != "device"},
                        "data": dataset_identity(run.dataset, run.data_root, run.download),
                        "versions": {"privbench": __version__, "torch": torch.__version__},
                        "threads": torch.get_num_threads()})


def checkpoint_path(folder: Path, fingerprint: str) -> Path:
    """Where a job of this fingerprint keeps its checkpoint under `folder` (`CHECKPOINTS`)."""
    return folder / f"{fingerprint}.ckpt"


def run_job(repro: Reproduction, scale: Scale, job: Job, heartbeat: float | None = None,
            checkpoints: Path | None = None, checkpoint_every: float = CHECKPOINT_SECONDS
            ) -> RunLine:
    """Train one job and return its JSON line (as a dict); with `heartbeat`, a progress line on
    stderr at most that many seconds apart; with `checkpoints` (a folder), continue from this
    job's checkpoint there if it has one (and say so, with `heartbeat`), and save one at most
    every `checkpoint_every` seconds (0: none)."""
    from privbench.engine.loop import train
    from privbench.engine.runner import build

    run = run_config(scale, job)
    fp = job_fingerprint(repro, scale, job, run)
    code = code_provenance()  # before training: the code this process imported (cached)
    # A table needs accuracy and epsilon only: recording every message of a 1,000-round run
    # (DPDL's cross-gradients: ~12 MB per round) would hold tens of GB.
    built = build(run, job.method.defense, job.overrides, policy=RecordPolicy.none())
    structure = built.trainer.structure(built.ctx.fm, built.trainer.cfg)
    start, so_far, saver = 0, None, None
    if checkpoints is not None:
        start, so_far, saver = prepare(
            checkpoint_path(checkpoints, fp["sha256"]), built, fp["sha256"], checkpoint_every,
            None if heartbeat is None else
            (lambda note: print(f"  {job.name}: {note}", file=sys.stderr, flush=True)))
    res = train(built.trainer, progress=None if heartbeat is None else
                _Heartbeat(job.name, run.rounds, heartbeat, start),
                start=start, result=so_far, after_round=saver)
    claims = {"privacy": built.privacy()} if job.method.private else {}
    return {"format": FORMAT, "reproduction": repro.name, "scale": scale.name,
            "method": job.method.label, "defense": job.method.defense, "eps": job.eps,
            "seed": job.seed, "accuracy": res.average_accuracy,
            "node_accuracy_mean": (sum(res.node_accuracy) / len(res.node_accuracy)
                                   if res.node_accuracy else None),
            "epsilon_paper": claimed_eps(claims, "paper"),
            "epsilon_calibrated": claimed_eps(claims, "calibrated"),
            "diverged_round": res.diverged_round, "seconds": round(res.seconds, 1),
            "resumed_at": res.resumed_at,
            "device": str(built.ctx.device), "machine": machine_kind(built.ctx.device),
            "code": code,
            "fingerprint": fp["sha256"],
            "structure": structure,
            "config": {"run": to_dict(run), "defense": job.overrides},
            "fields": fp["fields"]}


def job_structure(scale: Scale, job: Job) -> JSONObject:
    """The structure this code builds for `job` (`privbench.engine.runner.structure`)."""
    from privbench.engine.runner import structure

    return structure(run_config(scale, job), job.method.defense, job.overrides)


def _check_structure(rec: RunLine, scale: Scale, job: Job, where: str) -> None:
    """One-line error when `rec` records a structure other than the one built now."""
    if "structure" not in rec:  # written before structures were recorded
        return
    diff = first_difference(rec["structure"], job_structure(scale, job))
    if diff is not None:
        raise PrivbenchError(f"{where}: {job.name} was trained on another model "
                             f"or split than this code builds from its setting ({diff}); "
                             "delete the line to recompute it")


def read_runs(path: Path) -> list[RunLine]:
    """Every line of a runs.jsonl (one-line error naming the bad line)."""
    if not path.is_file():
        return []
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise PrivbenchError(f"cannot read {path} ({why}); a reproduction's runs file is "
                             "expected") from None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PrivbenchError(f"{path} line {i} is not JSON ({exc.msg}); the file is "
                                 "not a reproduction's runs") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise PrivbenchError(f"{path} line {i} is not a privbench reproduction run "
                                 f"(format {FORMAT!r} expected)")
        missing = [k for k in _KEYS if k not in raw]
        if missing:
            raise PrivbenchError(f"{path} line {i} lacks {', '.join(missing)}; a reproduction "
                                 "run has " + ", ".join(_KEYS))
        # the fingerprint's fields stay as they were hashed (strict: inf as "inf"), so they
        # compare equal to a fingerprint computed now
        out.append({**unstrict(raw), "fields": raw["fields"]})
    return out


def line_key(rec: RunLine) -> tuple[str, float | None, int]:
    """A line's (method, epsilon or grid value, seed): its `Job.key`."""
    return (rec["method"], rec["eps"], rec["seed"])


def _append(path: Path, rec: RunLine) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(strict(rec), sort_keys=True, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def index(records: list[RunLine], repro: Reproduction, scale: Scale
          ) -> dict[tuple[str, float | None, int], RunLine]:
    """The lines by (method, eps, seed); one-line error when a line is of another reproduction
    or scale (a runs file holds one of each)."""
    out = {}
    for rec in records:
        if rec["reproduction"] != repro.name or rec["scale"] != scale.name:
            raise PrivbenchError(f"the runs file holds a run of {rec['reproduction']!r} at scale "
                                 f"{rec['scale']!r}, not {repro.name!r} at {scale.name!r}: use "
                                 "another --out")
        out[line_key(rec)] = rec
    return out


def reproduce(repro: Reproduction, scale: Scale, seeds: tuple[int, ...], out: Path,
              progress: Callable[[str], None] | None = None, workers: int = 1,
              rows: tuple[str, ...] = (), columns: tuple[float, ...] = (),
              checkpoint_every: float = CHECKPOINT_SECONDS) -> list[RunLine]:
    """Run every job of the grid not yet in `out/runs.jsonl`; return the grid's lines there.

    Args:
        workers: processes training jobs side by side (1: in this process, in grid order).
            This process stays the one writer of the file: each line is appended as its job
            ends, so an interrupted run keeps every finished job whatever the order.
        rows: train these rows of the scale only (empty: every row). The other rows' lines
            are returned as they are, neither checked nor reused for training: a row added to
            a table whose other lines were made on another machine (a GPU's torch build)
            joins it without retraining them.
        columns: train the private rows at these grid values only (empty: every one); the
            non-private rows, which have no grid value, are then not trained. With `rows`
            and the seeds, this names exactly the runs a lent GPU is to fill in.
        checkpoint_every: each running job saves its state in `out/checkpoints/` at most
            this many seconds apart (0: never) and continues from it when trained again; a
            job's checkpoint is deleted once its line is written.

    Raises:
        PrivbenchError: a line of a row to train was made with another configuration, scale
            or reproduction (the message names the first field that differs), a row is not
            one of the scale's, a column is not one of its grid values, or a job failed (the
            other jobs still finish and are kept).
    """
    if workers < 1:
        raise PrivbenchError(f"--jobs {workers}: accepted: a positive number of processes")
    table = repro.at(scale)
    _check_selection(table, scale, rows, columns)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUNS_FILE
    with folder_lock(out):
        done = index(read_runs(path), repro, scale)
        grid = jobs(table, seeds)
        todo, have = [], []
        for job in chosen(grid, rows, columns):
            old = done.get(job.key)
            if old is None:
                todo.append(job)
            else:
                _check_same(old, repro, scale, job, path)  # so its fingerprint is the job's
                have.append(old["fingerprint"])
        reused = len(have)

        saved = out / CHECKPOINTS
        stale = _drop_stale_checkpoints(have, saved)
        if stale and progress is not None:
            progress(f"removed {counted(stale, 'checkpoint')} of runs already in {path}")

        def keep(k: int, job: Job, rec: RunLine) -> None:
            _append(path, rec)
            done[job.key] = rec
            _drop_checkpoint(saved, rec["fingerprint"])
            if progress is not None:
                progress(f"[{k}/{len(todo)}] {job.name}: accuracy {rec['accuracy']:.4f} "
                         f"({rec['seconds']:.0f} s)")

        beat = None if progress is None else HEARTBEAT_SECONDS
        if progress is not None:
            side = f", {min(workers, len(todo))} side by side" if workers > 1 and todo else ""
            saves = sum(checkpoint_path(saved, job_fingerprint(
                repro, scale, job, run_config(scale, job))["sha256"]).exists() for job in todo)
            resumes = f" ({saves} of them from a checkpoint in {saved})" if saves else ""
            progress(f"{counted(len(todo), 'run')} to train{resumes}, {reused} already in "
                     f"{path}{side}")
        if workers == 1:
            for k, job in enumerate(todo, 1):
                keep(k, job, run_job(repro, scale, job, beat, saved, checkpoint_every))
        else:
            run_parallel(repro, scale, todo, workers, keep, beat, saved, checkpoint_every)
    return [done[j.key] for j in grid if j.key in done]


def _check_selection(table: Reproduction, scale: Scale, rows: tuple[str, ...],
                     columns: tuple[float, ...]) -> None:
    """Refuse `--rows` that are not the scale's rows and `--eps` that are not its grid values."""
    labels = [m.label for m in table.methods]
    unknown = [r for r in rows if r not in labels]
    if unknown:
        raise PrivbenchError(f"--rows {', '.join(map(repr, unknown))}: not a row of "
                             f"{table.name} at scale {scale.name!r}; accepted: "
                             f"{', '.join(map(repr, labels))}")
    odd = [c for c in columns if c not in table.eps]
    if odd:
        raise PrivbenchError(f"--eps {', '.join(f'{c:g}' for c in odd)}: not a grid value of "
                             f"{table.name} at scale {scale.name!r}; accepted: "
                             f"{', '.join(f'{e:g}' for e in table.eps)}")


def _drop_stale_checkpoints(fingerprints: list[str], folder: Path) -> int:
    """Delete the checkpoints of jobs whose line is already there, by the lines'
    fingerprints (a line merged meanwhile, or written by a run stopped before it could
    delete its checkpoint): no run continues from them. Returns how many were deleted."""
    stale = [fp for fp in fingerprints if checkpoint_path(folder, fp).exists()]
    for fp in stale:
        _drop_checkpoint(folder, fp)
    return len(stale)


def _drop_checkpoint(folder: Path, fingerprint: str) -> None:
    """Delete a job's checkpoint once its line is written (and the folder, once empty)."""
    checkpoint_path(folder, fingerprint).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # absent, or other jobs' checkpoints still there
        folder.rmdir()


# Fingerprint fields that say which machine ran a line, not what it ran: a line merged from
# another machine (a GPU's torch build, its thread count) may differ in these only.
MACHINE_FIELDS = frozenset({"versions.torch", "threads"})


def merge(repro: Reproduction, scale: Scale, sources: list[Path], out: Path
          ) -> tuple[int, int]:
    """Append the lines of other runs files (trained with another --out, or on another
    machine) to `out/runs.jsonl`; return (lines added, lines already there).

    Every line is checked before any is written, so a refused merge writes nothing: it must
    be of this reproduction and scale, a run of its grid (its row at that grid value), and made
    with the setting this grid gives its (method, value, seed) here (the fingerprint's fields
    equal, except the machine's torch build and thread count, which the table reports). A key
    already in the folder, or twice among the sources, is kept once when both lines are the
    same run (same fingerprint and accuracy) and is an error otherwise: which of two different
    results counts is the user's choice, never made silently.

    Raises:
        PrivbenchError: a missing or foreign file or line, a line of another setting, or two
            different results for one key (the message names the file, the key and why).
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUNS_FILE
    with folder_lock(out):
        have = index(read_runs(path), repro, scale)
        new: dict[tuple[str, float | None, int], RunLine] = {}
        grids: dict[int, dict[tuple[str, float | None, int], Job]] = {}
        already = 0
        for src in sources:
            if not src.is_file():
                what = "a folder; give its runs.jsonl" if src.is_dir() else "no such runs file"
                raise PrivbenchError(f"--merge {src}: {what}")
            records = read_runs(src)
            index(records, repro, scale)  # one-line error on a line of another table
            for rec in records:  # not the index: a key twice in one file is checked too
                key = line_key(rec)
                seed_jobs = grids.setdefault(key[2], {j.key: j for j in
                                                      jobs(repro.at(scale), (key[2],))})
                _check_mergeable(rec, seed_jobs.get(key), repro, scale, src)
                twin = have.get(key) or new.get(key)
                if twin is None:
                    new[key] = rec
                elif _same_run(twin, rec):
                    already += 1
                else:
                    raise PrivbenchError(
                        f"--merge {src}: {_named(key, repro.grid_field)} is already there "
                        f"with another result (accuracy {twin['accuracy']:.4f} against "
                        f"{rec['accuracy']:.4f}); delete the one not to keep")
        for rec in new.values():
            _append(path, rec)
    return len(new), already


def _named(key: tuple[str, float | None, int], grid_field: str) -> str:
    """"Const-D2P epsilon=3 seed 0", "PartPSP-1 b=3 seed 0", "SGPDP NoDP seed 1" (a row without
    a grid value): a line's or job's name in every message (`grid_field`: what a column sets)."""
    label, eps, seed = key
    return f"{label} seed {seed}" if eps is None else f"{label} {grid_field}={eps:g} seed {seed}"


def _same_run(a: RunLine, b: RunLine) -> bool:
    return a["fingerprint"] == b["fingerprint"] and a["accuracy"] == b["accuracy"]


def _setting(fields: JSONObject) -> JSONObject:
    """A line's fingerprint fields less the machine's."""
    return {k: v for k, v in fields.items() if k not in MACHINE_FIELDS}


def _check_mergeable(rec: RunLine, job: Job | None, repro: Reproduction, scale: Scale,
                     src: Path) -> None:
    """One-line error unless `rec` is the run `job` of this grid, made with its setting."""
    key = line_key(rec)
    if job is None:
        raise PrivbenchError(f"--merge {src}: {_named(key, repro.grid_field)} is not a run of "
                             f"{repro.name}'s {scale.name!r} grid")
    want = job_fingerprint(repro, scale, job, run_config(scale, job))["fields"]
    diff = first_difference(_setting(rec["fields"]), _setting(want))
    if diff is not None:
        raise PrivbenchError(f"--merge {src}: {job.name} was made with another setting "
                             f"({diff}); it cannot join this table")
    _check_structure(rec, scale, job, f"--merge {src}")


def _init_worker(threads: int) -> None:
    keep_freed_memory()  # a spawned worker does not pass through the CLI's main
    torch.set_num_threads(threads)


def run_parallel(repro: Reproduction, scale: Scale, todo: list[Job], workers: int,
                 keep: Callable[[int, Job, RunLine], None],
                 heartbeat: float | None = None, checkpoints: Path | None = None,
                 checkpoint_every: float = CHECKPOINT_SECONDS) -> None:
    """Train `todo` in `workers` spawned processes, keeping each line as it arrives; a failed
    job is reported after the others end. Stopped (Ctrl-C, SIGTERM, any error here), the runs
    still pending are cancelled and the workers terminated: their runs in progress continue
    from their last checkpoint next time (`checkpoints`), the lines already kept are kept."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    failed: list[str] = []
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
    # each worker at this process's thread count: its lines (and fingerprints) are the ones a
    # sequential run here would write
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(torch.get_num_threads(),))
    try:
        with sigterm_raises():
            with _held_back(signal.SIGINT):  # the pool spawns its workers as jobs are submitted
                futures = {pool.submit(run_job, repro, scale, job, heartbeat, checkpoints,
                                       checkpoint_every): job for job in todo}
            for k, fut in enumerate(as_completed(futures), 1):
                job = futures[fut]
                try:
                    rec = fut.result()
                except Exception as exc:  # keep the others' lines; name every failure at the end
                    failed.append(f"{job.name}: {type(exc).__name__}: {exc}")
                    continue
                keep(k, job, rec)
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown()
    if failed:
        raise PrivbenchError(f"{len(failed)} of {len(todo)} runs failed (the others are kept): "
                             + "; ".join(failed))


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel `pool`'s pending jobs and terminate its worker processes (a pool's own shutdown
    would wait for the jobs in progress, hours at a paper's scale)."""
    procs = list((pool._processes or {}).values())  # ProcessPoolExecutor.terminate_workers: 3.14+
    manager = pool._executor_manager_thread
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)
    if manager is not None:
        # seeing its workers gone, the pool's manager thread closes its wake-up pipe and ends;
        # interpreter exit writes to that pipe without the pool's lock (CPython 3.11's
        # `_python_exit`), so a close racing that write printed an OSError traceback at exit
        manager.join(timeout=10)


@contextmanager
def _held_back(signum: int) -> Iterator[None]:
    """Within the block `signum` is blocked in this thread: one that arrives meanwhile stays
    pending and is delivered when the block ends, and the processes spawned meanwhile inherit
    the mask for their whole life (a blocked signal stays blocked across exec, and Python
    leaves the mask as it is). So workers never see SIGINT: a Ctrl-C, which reaches the whole
    process group, is left to the parent's `_stop_workers` instead of printing a
    KeyboardInterrupt traceback per worker, even mid start-up; and the parent still gets a
    Ctrl-C pressed while it spawns them (ignoring the signal instead lost it, and the runs
    went on for hours)."""
    if threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _check_same(old: RunLine, repro: Reproduction, scale: Scale, job: Job,
                path: Path) -> None:
    run = run_config(scale, job)
    new = job_fingerprint(repro, scale, job, run)
    if old["fingerprint"] != new["sha256"]:
        diff = first_difference(old.get("fields", {}), new["fields"]) or "the fingerprint"
        raise PrivbenchError(f"{path} holds {job.name} made with another setting ({diff}); "
                             "use another --out, or delete the line to recompute it")
    _check_structure(old, scale, job, str(path))
