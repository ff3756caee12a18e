"""Run fingerprints: a hash of everything that determines an audit cell, and one writer per folder.

A cell of `privbench attack` is reused by `--resume` only when the fingerprint stored in its files
equals the one this run computes. The fingerprint covers the run config (ε, rounds, model, seed,
...), the defense config with its overrides, the audit settings the cell's attacks read, the
dataset's identity (name, sizes and a SHA-256 of its tensors, not the folder it was read from),
the privbench and torch versions and torch's intra-op thread count (a reduction split over another
number of threads may round differently, so results are only compared at equal thread counts).
The fields are stored flat (`run.rounds`, `defense.clip`, ...) next to the hash so that a mismatch
names the first field that differs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from privbench.errors import PrivbenchError

LOCK_NAME = ".privbench.lock"


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one dict with dotted keys (lists and scalars are leaves)."""
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def fingerprint(fields: dict[str, Any]) -> dict[str, Any]:
    """{"sha256": hash of the flattened fields, "fields": the flattened fields}."""
    from privbench.results.store import strict

    flat = strict(flatten(fields))
    text = json.dumps(flat, sort_keys=True, separators=(",", ":"))
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "fields": flat}


def first_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first field (in `new`'s order, then `old`'s) whose value differs, as one phrase."""
    for key in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a != b:
            return f"{key} = {a!r} there, {b!r} now"
    return None


@functools.lru_cache(maxsize=8)
def dataset_identity(name: str, root: str | None, download: bool) -> dict[str, Any]:
    """Name, sizes and SHA-256 of a dataset's tensors (independent of the folder it is in)."""
    from privbench.data.datasets import load_dataset

    ds = load_dataset(name, root, download)
    return {"name": name, "train": len(ds.y_train), "test": len(ds.y_test),
            "sha256": tensors_sha256((ds.x_train, ds.y_train, ds.x_test, ds.y_test, ds.held))}


def tensors_sha256(tensors: Iterable[Any], dtype: Any = None) -> str:
    """SHA-256 over each tensor's shape and bytes, in order (on the CPU, cast to `dtype` when
    given; None entries skipped): equal digests mean equal tensors, bit for bit."""
    h = hashlib.sha256()
    for t in tensors:
        if t is None:
            continue
        t = t.detach().cpu() if dtype is None else t.detach().cpu().to(dtype)
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes ("missing" when absent)."""
    if not path.is_file():
        return "missing"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Folders and lock files this process created (`make_folder`, `folder_lock`), oldest first: a
# command refused for bad input removes those that hold nothing else (`discard_created`).
_CREATED: list[Path] = []


def make_folder(folder: Path) -> None:
    """`folder.mkdir(parents=True, exist_ok=True)`, remembering every folder it created."""
    missing = []
    here = folder
    while not (here.exists() or here.is_symlink()) and here != here.parent:
        missing.append(here)
        here = here.parent
    folder.mkdir(parents=True, exist_ok=True)
    _CREATED.extend(reversed(missing))


def forget_created() -> None:
    """Start a new command: what earlier ones created is theirs."""
    _CREATED.clear()


def discard_created() -> None:
    """Remove, newest first, each lock file this process created in a folder that holds nothing
    else, then each folder it created that is empty: a command refused for bad input leaves
    no empty output folder or lone lock file behind (anything it wrote stays)."""
    for path in reversed(_CREATED):
        try:
            if path.name == LOCK_NAME:
                if [p.name for p in path.parent.iterdir()] == [LOCK_NAME]:
                    path.unlink()
            elif path.is_dir() and not path.is_symlink():
                path.rmdir()  # only an empty folder (OSError otherwise: kept)
        except OSError:
            pass
    _CREATED.clear()


def _open_lock(path: Path) -> tuple[int, bool]:
    """The lock file's descriptor, and whether this call created the file."""
    for _ in range(3):  # the file may come or go between the two opens
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
        try:
            return os.open(path, os.O_RDWR), False
        except FileNotFoundError:
            continue
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644), False


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (a lock file removed by
    `discard_created` after another process opened it locks nothing)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (`fcntl.flock`) on `folder` for one writer; a second
    writer fails at once with a one-line error. The lock dies with the process (kill -9 too)."""
    import fcntl

    lock = folder / LOCK_NAME
    while True:
        try:
            make_folder(folder)
            fd, created = _open_lock(lock)
        except OSError as exc:
            raise PrivbenchError(f"cannot lock output folder {folder}: {exc.strerror}") from None
        if created:
            _CREATED.append(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PrivbenchError(f"output folder {folder} is in use by another privbench run "
                                 f"(it holds {LOCK_NAME}); wait for it to finish or choose "
                                 "another --out") from None
        if _same_file(fd, lock):
            break
        os.close(fd)  # locked a file another run has since removed: lock the one there now
    try:
        yield
    finally:
        os.close(fd)
