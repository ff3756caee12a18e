"""Checkpoints of a run in training, so that a run stopped midway (a scheduler's kill, a
session's end, a GPU lease running out) continues later to the very result it would have had
in one go.

A checkpoint holds the whole mutable state of a built run, pickled: the trainer (its stacked
(n, d) node state, buffers and schedules), its context's random generators (each restored
once however many objects share it, the noise stream's registered as noise again, so
`privbench.testing.disable_noise` still finds them), the message bus and the ground truth,
and the round loop's result so far. What training never changes (the nodes' data, the
model's flat layout, both configurations, the process group) is not stored: it is rebuilt
from the configuration and joined by reference on load, so a checkpoint is the size of the
node state, not of the dataset.

A checkpoint is resumed only by the run that wrote it: same `key` (the caller's fingerprint
of everything that determines the result, the code's digest and the kind of machine: the GPU,
or the CPU's model and vector kernels, which alone move the numbers), else `load`
raises `StaleCheckpointError` saying which differs (or that the file is damaged), and the
caller starts over. A checkpoint is a pickle: load only your own. `tests/engine/test_checkpoint.py`
trains every registered defense (and every model) in one go and stopped-and-resumed in a
fresh build, and requires bit-equal models and equal histories, privacy reports, message
logs and ground truth.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, BinaryIO, TypedDict

import torch

from privbench.device import machine_kind
from privbench.engine.loop import TrainResult
from privbench.engine.messages import RecordPolicy
from privbench.results.provenance import code_provenance
from privbench.results.store import duration
from privbench.seeding import is_noise_generator, mark_noise

if TYPE_CHECKING:
    from privbench.engine.runner import Built

FORMAT = "privbench-checkpoint/1"


class StaleCheckpointError(Exception):
    """A checkpoint that is not this run's (another run, code or device) or cannot be read."""


class Header(TypedDict):
    """What a checkpoint file holds before the state (pickled first, so `header` reads it
    without loading the state)."""

    format: str
    key: dict[str, str]  # what the run must match to resume it (`load`)
    rounds_done: int
    rounds: int
    seconds: float


@dataclass(frozen=True)
class Resumed:
    """Where a restored run stands: its first `rounds_done` rounds trained, `result` the
    round loop's result so far (history, seconds)."""

    rounds_done: int
    result: TrainResult


def _static(built: Built) -> dict[str, object]:
    """What training leaves unchanged, by name: rebuilt from the configuration, not stored."""
    ctx = built.ctx
    return {"data": ctx.data, "fm": ctx.fm, "comm": ctx.comm, "run": ctx.run,
            "cfg": built.trainer.cfg}


def _read_only(items: dict[str, object]) -> MappingProxyType:
    return MappingProxyType(items)


def _proxy(mapping: MappingProxyType) -> tuple[Callable[..., MappingProxyType],
                                               tuple[dict[str, object]]]:
    # a frozen plan's read-only view of its noise parameters (the type itself cannot be
    # pickled by name): the dict it wraps, wrapped again on load
    return _read_only, (dict(mapping),)


class _Pickler(pickle.Pickler):
    def __init__(self, fh: BinaryIO, static: dict[str, object]) -> None:
        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: _proxy}
        self.static = {id(obj): name for name, obj in static.items()}

    def persistent_id(self, obj: Any) -> tuple[Any, ...] | None:
        name = self.static.get(id(obj))
        if name is not None:
            return ("static", name)
        if isinstance(obj, torch.Generator):
            # by identity (one object however many hold it) with its state and its stream kind
            return ("generator", id(obj), str(obj.device), obj.get_state(),
                    is_noise_generator(obj))
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh: BinaryIO, static: dict[str, object]) -> None:
        super().__init__(fh)
        self.static = static
        self.generators: dict[int, torch.Generator] = {}

    def persistent_load(self, pid: tuple[Any, ...]) -> Any:
        if pid[0] == "static":
            return self.static[pid[1]]
        _, ident, device, state, noise = pid
        if ident not in self.generators:
            gen = torch.Generator(device=device)
            gen.set_state(state)
            self.generators[ident] = mark_noise(gen) if noise else gen
        return self.generators[ident]


def save(path: Path, built: Built, rounds_done: int, result: TrainResult,
         key: dict[str, str]) -> None:
    """Write `built`'s state after `rounds_done` rounds to `path` (atomically: a kill while
    writing leaves the previous checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    header: Header = {"format": FORMAT, "key": key, "rounds_done": rounds_done,
              "rounds": built.ctx.run.rounds, "seconds": result.seconds}
    with open(tmp, "wb") as fh:
        pickle.dump(header, fh, protocol=pickle.HIGHEST_PROTOCOL)
        _Pickler(fh, _static(built)).dump((built.trainer, built.ctx, result))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# what reading a damaged or foreign file raises
_UNREADABLE = (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
               ValueError, TypeError, IndexError, KeyError)


def snapshot(built: Built) -> bytes:
    """`built`'s trainer and context pickled in memory (no file): the state and generator
    states, without the message log and ground truth recorded so far and without what training
    never changes (joined again by `restore`)."""
    import io

    from privbench.engine.messages import MessageLog

    ctx = built.ctx
    kept = ctx.bus.log, ctx.truth.batches
    ctx.bus.log, ctx.truth.batches = MessageLog(), {}
    try:
        buf = io.BytesIO()
        _Pickler(buf, _static(built)).dump((built.trainer, ctx))
    finally:
        ctx.bus.log, ctx.truth.batches = kept
    return buf.getvalue()


def restore(blob: bytes, built: Built, record: RecordPolicy | None = None) -> tuple[Any, Any]:
    """An independent copy of the trainer and context `snapshot` saved, joined to `built`'s data
    and model by reference. Its message log and ground truth start empty and record by `record`
    (default: everything), so a round replayed on the copy leaves the run exactly as it was.

    Returns:
        (trainer, ctx) of the copy (the trainer's `ctx` is the copy's context).
    """
    import io

    trainer, copy = _Unpickler(io.BytesIO(blob), _static(built)).load()
    policy = record or RecordPolicy()
    copy.bus.policy, copy.truth.policy = policy, policy
    return trainer, copy


def header(path: Path) -> Header:
    """A checkpoint's header: its format, key, rounds done (of how many) and seconds spent."""
    try:
        with open(path, "rb") as fh:
            head = pickle.load(fh)
    except _UNREADABLE as exc:
        raise StaleCheckpointError(f"unreadable ({type(exc).__name__}: {exc})") from exc
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StaleCheckpointError(f"not a {FORMAT} file")
    return head


def load(path: Path, built: Built, key: dict[str, str]) -> Resumed:
    """Restore the run saved at `path` into `built` (a fresh build of the same configuration:
    its trainer and context are replaced by the saved ones, joined to its data and model).

    Raises:
        StaleCheckpointError: the file is unreadable, or its key differs from `key` (the
            message names the first field that differs).
    """
    head = header(path)
    for field, want in key.items():
        have = head["key"].get(field)
        if have != want:
            raise StaleCheckpointError(f"made with another {field} ({have} there, {want} now)")
    try:
        with open(path, "rb") as fh:
            pickle.load(fh)  # the header, read above
            trainer, ctx, result = _Unpickler(fh, _static(built)).load()
    except _UNREADABLE as exc:  # damaged after its header: `built` is left as it was
        raise StaleCheckpointError(f"unreadable ({type(exc).__name__}: {exc})") from exc
    built.trainer, built.ctx = trainer, ctx
    return Resumed(head["rounds_done"], result)


def resume(path: Path, built: Built, key: dict[str, str]
           ) -> tuple[int, TrainResult | None, str | None]:
    """(rounds done, the loop's result so far, what happened) for a run about to train:
    restored into `built` from `path` when it holds this run's state, else (0, None) with why
    (the note is None when there was no checkpoint at all)."""
    if not path.exists():
        return 0, None, None
    try:
        resumed = load(path, built, key)
    except StaleCheckpointError as exc:
        return 0, None, f"starts over: the checkpoint {path} is not this run's: {exc}"
    done, so_far = resumed.rounds_done, resumed.result
    return done, so_far, (f"continues from round {done}/{built.ctx.run.rounds} "
                          f"({duration(so_far.seconds)} trained before) from {path}")


class Saver:
    """`engine.train`'s `after_round`: a checkpoint of `built` at most every `every` seconds
    (none after the last round: the run's result follows at once)."""

    def __init__(self, path: Path, built: Built, key: dict[str, str], every: float) -> None:
        self.path, self.built, self.key, self.every = path, built, key, every
        self.last = time.monotonic()

    def __call__(self, rounds_done: int, result: TrainResult) -> None:
        now = time.monotonic()
        if now - self.last < self.every or rounds_done >= self.built.ctx.run.rounds:
            return
        save(self.path, self.built, rounds_done, result, self.key)
        self.last = time.monotonic()


def prepare(path: Path, built: Built, run: str, every: float,
            say: Callable[[str], None] | None = None
            ) -> tuple[int, TrainResult | None, Saver | None]:
    """(rounds done, the loop's result so far, the saver: `engine.train`'s `start`, `result`
    and `after_round`) of a run about to train with its checkpoint at `path`: continued from
    it when it holds this run's state, keyed by `run` (the caller's fingerprint of what
    determines the result), the code's digest and the kind of machine
    (`privbench.device.machine_kind`: continued on other kernels, a run would not end where it
    would have in one go); the saver None with `every` 0. `say` gets what happened to a
    checkpoint found there; one of another run, code or machine is replaced by this run's
    first."""
    key = {"run": run, "code": code_provenance()["sha256"],
           "device": machine_kind(built.ctx.device)}
    done, so_far, note = resume(path, built, key)
    if note is not None and say is not None:
        say(note)
    return done, so_far, (Saver(path, built, key, every) if every > 0 else None)
