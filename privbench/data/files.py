"""Finding and checking the files of the real image datasets (MNIST, Fashion-MNIST, CIFAR-10).

Where a dataset is looked for, in order (the first place holding any of its files is used):

1. `--data-root DIR` (the run's `data_root`),
2. the folder named by the environment variable `PRIVBENCH_DATA` (set, it must name a folder,
   as a given `--data-root` must: one that does not exist is an error, never skipped),
3. the Debian package's folder (`apt-get install dataset-fashion-mnist` installs Fashion-MNIST's
   four original files in /usr/share/datasets/fashion-mnist; Debian ships no MNIST or CIFAR-10
   package, checked with `apt-cache search mnist` / `cifar`).

In each place the MNIST-format files (`{train,t10k}-{images-idx3,labels-idx1}-ubyte`, gzipped or
not) are accepted flat in the folder, in torchvision's layout (`FashionMNIST/raw/`, `MNIST/raw/`)
or in a sub-folder named after the dataset (`fashion-mnist/`). Every idx file is checked before
use: magic number, header dimensions against the file size, image and label counts agreeing,
labels in range. A truncated, corrupt or missing file is a one-line `DataError` (exit 2).

Compressed files are decompressed in memory, never next to the data: a truncated `.gz` leaves
nothing behind, a read-only folder (the Debian one) works, and the next run with a good file just
works (nothing is extracted, so nothing half-written can be read later).
"""

from __future__ import annotations

import functools
import gzip
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privbench.errors import DataError

ENV_VAR = "PRIVBENCH_DATA"

# Debian packages that ship a dataset, and where their files go (`dpkg -L <package>`).
DEBIAN: dict[str, tuple[str, Path]] = {
    "fashion-mnist": ("dataset-fashion-mnist", Path("/usr/share/datasets/fashion-mnist")),
}

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049  # idx3 unsigned byte, idx1 unsigned byte
SPLITS = {"train": "train", "test": "t10k"}


@dataclass(frozen=True)
class IdxSpec:
    """An MNIST-format dataset: its torchvision folder name, image side and number of labels."""

    torchvision: str
    side: int = 28
    classes: int = 10


IDX_DATASETS: dict[str, IdxSpec] = {"mnist": IdxSpec("MNIST"),
                                    "fashion-mnist": IdxSpec("FashionMNIST")}


def search_places(name: str, root: str | Path | None) -> list[tuple[str, Path | None]]:
    """(label, folder or None when unset) in search order, for messages and lookup."""
    env = os.environ.get(ENV_VAR) or None
    places: list[tuple[str, Path | None]] = [("--data-root", Path(root) if root else None),
                                             (f"${ENV_VAR}", Path(env) if env else None)]
    if name in DEBIAN:
        package, folder = DEBIAN[name]
        places.append((f"Debian package {package}", folder))
    return places


ACCEPTED_ROOT = ("an existing folder holding mnist / fashion-mnist idx files (flat, in "
                 "torchvision's layout or in a folder named after the dataset) or "
                 "cifar-10-batches-py")


def check_data_root(root: str | Path | None, download: bool = False) -> None:
    """A `--data-root` that is given, and a `$PRIVBENCH_DATA` that is set, must each be an
    existing folder (with `--download` a new one where the download goes, which creates it):
    never skipped in favour of a dataset found elsewhere.

    Raises:
        DataError: `root` or the variable names no folder.
    """
    if root is not None and str(root) != "":
        _check_folder(f"--data-root {root}", Path(root), download,
                      "or a new folder with --download")
    check_data_env(root, download)


def check_data_env(root: str | Path | None = None, download: bool = False) -> None:
    """A `$PRIVBENCH_DATA` that is set names an existing folder, or a new one that `download`
    creates where no `root` is given (the download then goes there).

    Raises:
        DataError: the variable names no folder.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        _check_folder(f"${ENV_VAR}={env}", Path(env), download and not root,
                      f"or a new folder with --download and no --data-root; or unset {ENV_VAR}")


def _check_folder(named: str, path: Path, new_ok: bool, alternative: str) -> None:
    """`path` (`named` so in the message) is a folder, or absent where `new_ok`."""
    if path.is_dir() or (new_ok and not path.exists()):
        return
    what = "is not a folder" if path.exists() else "does not exist"
    raise DataError(f"{named} {what}; accepted: {ACCEPTED_ROOT}, {alternative}")


def describe_places(places: list[tuple[str, Path | None]]) -> str:
    """'--data-root (not given), $PRIVBENCH_DATA=/x, ...' for one-line messages."""
    return ", ".join(f"{label} ({'not set' if p is None else p})" for label, p in places)


def how_to_get(name: str) -> str:
    """One sentence: how to obtain the dataset."""
    if name in DEBIAN:
        return (f"install it with `apt-get install {DEBIAN[name][0]}`, or pass --data-root DIR "
                "--download where the network allows")
    return "pass --data-root DIR --download where the network allows (torchvision downloads it)"


def _idx_name(split: str, what: str) -> str:
    kind = "images-idx3" if what == "images" else "labels-idx1"
    return f"{SPLITS[split]}-{kind}-ubyte"


def _find_file(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def idx_folders(name: str, place: Path) -> list[Path]:
    """Folders under one place where the idx files may lie, in preference order."""
    return [place, place / IDX_DATASETS[name].torchvision / "raw", place / name]


def locate_idx(name: str, root: str | Path | None) -> Path | None:
    """The first folder holding any of the dataset's idx files, or None."""
    stems = [_idx_name(s, w) for s in SPLITS for w in ("images", "labels")]
    for _, place in search_places(name, root):
        if place is None:
            continue
        for folder in idx_folders(name, place):
            if any(_find_file(folder, stem) for stem in stems):
                return folder
    return None


def _read_bytes(path: Path) -> bytes:
    """The file's content, decompressed in memory for `.gz` (a bad archive is a DataError)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"{path} is a truncated or corrupt gzip file ({exc}); replace it with "
                        "a complete copy") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_idx(raw: bytes, path: Path, magic: int, dims: int) -> np.ndarray:
    """Check an idx file's magic number and header against its size; the uint8 array.

    Args:
        raw: the file's (decompressed) bytes.
        path: for messages.
        magic: IMAGES_MAGIC (3 dims) or LABELS_MAGIC (1 dim).
        dims: number of dimensions the header declares.
    """
    head = 4 + 4 * dims
    if len(raw) < head:
        raise DataError(f"{path} is truncated: {len(raw)} bytes, shorter than the idx header")
    found, *shape = struct.unpack(f">{1 + dims}I", raw[:head])
    if found != magic:
        raise DataError(f"{path} has magic number {found:#010x}, expected {magic:#010x} "
                        f"(idx{dims} unsigned byte): not an MNIST-format "
                        f"{'images' if dims == 3 else 'labels'} file")
    want = head + int(np.prod(shape))
    if len(raw) != want:
        raise DataError(f"{path} is {'truncated' if len(raw) < want else 'too long'}: "
                        f"{len(raw)} bytes, its header {tuple(shape)} needs {want}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(shape)


def read_idx_split(name: str, folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Checked (N, side, side) uint8 images and (N,) uint8 labels of one split."""
    spec = IDX_DATASETS[name]
    files = {}
    for what in ("images", "labels"):
        stem = _idx_name(split, what)
        found = _find_file(folder, stem)
        if found is None:
            raise DataError(f"{name}: {folder / stem}[.gz] is missing (the {split} {what}); "
                            f"expected the four files {_idx_name('train', 'images')}, ... "
                            "of the original distribution")
        files[what] = found
    images = parse_idx(_read_bytes(files["images"]), files["images"], IMAGES_MAGIC, 3)
    labels = parse_idx(_read_bytes(files["labels"]), files["labels"], LABELS_MAGIC, 1)
    if images.shape[1:] != (spec.side, spec.side):
        raise DataError(f"{files['images']} holds {images.shape[1]}x{images.shape[2]} images, "
                        f"{name} has {spec.side}x{spec.side}")
    if len(images) != len(labels):
        raise DataError(f"{name} {split}: {len(images)} images ({files['images'].name}) but "
                        f"{len(labels)} labels ({files['labels'].name})")
    if len(labels) == 0:
        raise DataError(f"{files['labels']} holds no samples")
    if int(labels.max()) >= spec.classes:
        raise DataError(f"{files['labels']} has label {int(labels.max())}, outside "
                        f"0..{spec.classes - 1}")
    return images, labels


@functools.lru_cache(maxsize=2)
def _cached_idx(name: str, folder: str, stamp: tuple[tuple[str, int, int], ...],
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both splits, read once per process while the files are unchanged (`stamp`)."""
    xtr, ytr = read_idx_split(name, Path(folder), "train")
    xte, yte = read_idx_split(name, Path(folder), "test")
    return xtr, ytr, xte, yte


def load_idx(name: str, folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked train images, train labels, test images, test labels from `folder`."""
    stamp = tuple((p.name, st.st_size, st.st_mtime_ns) for p in sorted(folder.glob("*-ubyte*"))
                  if p.is_file() for st in [p.stat()])
    return _cached_idx(name, str(folder), stamp)
