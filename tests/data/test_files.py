"""Finding and checking real dataset files (privbench.data.files), on small files written in the
real idx format: search order, accepted layouts, and one-line errors (exit 2) for truncated,
corrupt or missing files; a truncated .gz leaves nothing behind."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from privbench.cli import main
from privbench.data import files as datafiles
from privbench.data.datasets import load_dataset
from privbench.errors import DataError

SIZES = {"train": 40, "t10k": 12}


def idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    """An idx file: big-endian magic, dimensions, then uint8 data."""
    head = struct.pack(f">{1 + arr.ndim}I", magic, *arr.shape)
    return head + arr.astype(np.uint8).tobytes()


def write_mnist(folder: Path, gz: bool = True, seed: int = 0) -> dict[str, Path]:
    """The four files of a small MNIST-format dataset in `folder`; {stem: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = {}
    for split, n in SIZES.items():
        items = {"images-idx3": (rng.integers(0, 256, (n, 28, 28)), 2051),
                 "labels-idx1": (np.arange(n) % 10, 2049)}
        for kind, (arr, magic) in items.items():
            stem = f"{split}-{kind}-ubyte"
            path = folder / (stem + (".gz" if gz else ""))
            data = idx_bytes(arr, magic)
            path.write_bytes(gzip.compress(data) if gz else data)
            paths[stem] = path
    return paths


@pytest.mark.parametrize("layout", ["flat", "torchvision", "named"])
@pytest.mark.parametrize("gz", [True, False])
def test_layouts_flat_torchvision_and_named_gzipped_or_not(tmp_path, no_data_places, layout, gz):
    sub = {"flat": "", "torchvision": "FashionMNIST/raw", "named": "fashion-mnist"}[layout]
    write_mnist(tmp_path / sub, gz=gz)
    ds = load_dataset("fashion-mnist", tmp_path)
    assert ds.x_train.shape == (40, 1, 28, 28) and ds.x_test.shape == (12, 1, 28, 28)
    assert ds.y_test.tolist() == [i % 10 for i in range(12)]
    assert ds.source == str(tmp_path / sub)


def test_search_order_data_root_then_env_then_debian(tmp_path, monkeypatch, no_data_places):
    root, env, deb = (write_mnist(tmp_path / k) and tmp_path / k for k in ("root", "env", "deb"))
    monkeypatch.setattr(datafiles, "DEBIAN", {"fashion-mnist": ("dataset-fashion-mnist", deb)})
    assert load_dataset("fashion-mnist").source == str(deb)
    monkeypatch.setenv(datafiles.ENV_VAR, str(env))
    assert load_dataset("fashion-mnist").source == str(env)
    assert load_dataset("fashion-mnist", root).source == str(root)
    assert load_dataset("mnist").source == str(env)  # no Debian package for MNIST


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _wrong_magic(path: Path) -> None:
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(struct.pack(">I", 2049) + raw[4:]))


def _short_payload(path: Path) -> None:
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:-28]))


def _labels_out_of_range(path: Path) -> None:
    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[-1] = 12
    path.write_bytes(gzip.compress(bytes(raw)))


DAMAGE = {
    "truncated gz": ("train-images-idx3-ubyte", _truncate, "truncated or corrupt gzip"),
    "wrong magic": ("t10k-images-idx3-ubyte", _wrong_magic, "magic number 0x00000801"),
    "short payload": ("train-images-idx3-ubyte", _short_payload, "is truncated"),
    "missing labels": ("t10k-labels-idx1-ubyte", Path.unlink, "is missing"),
    "labels out of range": ("train-labels-idx1-ubyte", _labels_out_of_range, "label 12"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_files_are_one_line_errors_exit_2(tmp_path, capsys, no_data_places, case):
    stem, damage, message = DAMAGE[case]
    paths = write_mnist(tmp_path / "data")
    damage(paths[stem])
    code = main(["train", "--dataset", "fashion-mnist", "--data-root", str(tmp_path / "data"),
                 "--rounds", "1", "--quiet", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("privbench: error: ") and message in err, err


def test_empty_directory_names_the_places_searched_and_the_package(tmp_path, capsys,
                                                                     no_data_places):
    (tmp_path / "empty").mkdir()
    code = main(["train", "--dataset", "fashion-mnist", "--data-root", str(tmp_path / "empty"),
                 "--rounds", "1", "--quiet", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    for part in (str(tmp_path / "empty"), "$PRIVBENCH_DATA (not set)",
                 "Debian package dataset-fashion-mnist", "apt-get install dataset-fashion-mnist",
                 "--download"):
        assert part in err, err


def test_truncated_gz_leaves_nothing_behind_and_the_good_file_then_works(tmp_path,
                                                                         no_data_places):
    folder = tmp_path / "data"
    paths = write_mnist(folder)
    good = paths["train-images-idx3-ubyte"].read_bytes()
    before = sorted(p.name for p in folder.iterdir())
    _truncate(paths["train-images-idx3-ubyte"])
    with pytest.raises(DataError, match="truncated or corrupt gzip"):
        load_dataset("mnist", folder)
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing extracted or left over
    paths["train-images-idx3-ubyte"].write_bytes(good)
    assert load_dataset("mnist", folder).x_train.shape == (40, 1, 28, 28)


@pytest.fixture
def debian_copy_untrained(tmp_path, monkeypatch):
    """A Debian-package copy of the data is found next (it must not be trained on instead), and
    any training fails the test."""
    deb = tmp_path / "deb"
    write_mnist(deb)
    monkeypatch.setattr(datafiles, "DEBIAN", {"fashion-mnist": ("dataset-fashion-mnist", deb)})

    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    for where in ("privbench.engine.loop.train", "privbench.pipeline.sweep.train",
                  "privbench.audit.leakage.train"):
        monkeypatch.setattr(where, refuse)


@pytest.mark.parametrize("command", [
    ["train", "--rounds", "1", "--quiet"],
    ["attack", "--defense", "sgp", "--attack", "mia_threshold", "--rounds", "2", "--quiet"],
    ["tune", "--defense", "sgp", "--grid", "lr=0.1", "--rounds", "1", "--quiet"],
    ["leakage", "--defense", "sgp", "--rounds", "1", "--quiet"],
], ids=["train", "attack", "tune", "leakage"])
def test_a_data_root_that_is_not_there_is_refused_not_skipped(tmp_path, capsys, no_data_places,
                                                              debian_copy_untrained, command):
    missing = tmp_path / "typo"
    code = main([*command, "--dataset", "fashion-mnist", "--data-root", str(missing),
                 "--device", "cpu", "--out", str(tmp_path / "out")]
                if command[0] != "leakage" else
                [*command, "--dataset", "fashion-mnist", "--data-root", str(missing),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"privbench: error: --data-root {missing} does not exist; accepted: "
                          "an existing folder holding mnist / fashion-mnist idx files"), err
    assert "--download" in err and not (tmp_path / "out").exists()
    (tmp_path / "afile").write_text("x")
    assert main(["train", "--data-root", str(tmp_path / "afile"), "--quiet",
                 "--out", str(tmp_path / "out")]) == 2
    assert f"--data-root {tmp_path / 'afile'} is not a folder" in capsys.readouterr().err


def test_a_new_data_root_is_accepted_with_download(tmp_path):
    datafiles.check_data_root(tmp_path / "new", download=True)  # the download creates it
    with pytest.raises(DataError, match="does not exist"):
        datafiles.check_data_root(tmp_path / "new")
    datafiles.check_data_root(None)
    datafiles.check_data_root(tmp_path)


@pytest.mark.parametrize("command", [
    ["train", "--rounds", "1", "--quiet", "--device", "cpu"],
    ["attack", "--defense", "sgp", "--attack", "mia_threshold", "--rounds", "2", "--quiet",
     "--device", "cpu"],
    ["tune", "--defense", "sgp", "--grid", "lr=0.1", "--rounds", "1", "--quiet",
     "--device", "cpu"],
    ["leakage", "--defense", "sgp", "--rounds", "2", "--quiet"],
], ids=["train", "attack", "tune", "leakage"])
def test_a_privbench_data_that_is_not_there_is_refused_not_skipped(tmp_path, capsys, monkeypatch,
                                                                   no_data_places,
                                                                   debian_copy_untrained, command):
    missing = tmp_path / "typo"
    monkeypatch.setenv(datafiles.ENV_VAR, str(missing))
    code = main([*command, "--dataset", "fashion-mnist", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"privbench: error: $PRIVBENCH_DATA={missing} does not exist; "
                          "accepted: an existing folder holding mnist / fashion-mnist idx "
                          "files"), err
    assert err.rstrip().endswith("or unset PRIVBENCH_DATA"), err
    assert not (tmp_path / "out").exists()


def test_a_privbench_data_that_is_not_a_folder_is_refused_where_data_loads(tmp_path,
                                                                            monkeypatch):
    folder = tmp_path / "data"
    write_mnist(folder)
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv(datafiles.ENV_VAR, str(tmp_path / "afile"))
    with pytest.raises(DataError, match=r"^\$PRIVBENCH_DATA=.*afile is not a folder; accepted"):
        load_dataset("mnist", folder)  # any command that loads data: reproduce, bench
    monkeypatch.setenv(datafiles.ENV_VAR, str(tmp_path / "new"))
    datafiles.check_data_env(None, download=True)  # the download creates it and goes there
    with pytest.raises(DataError, match="does not exist"):
        datafiles.check_data_env(folder, download=True)  # the download goes to --data-root
    monkeypatch.setenv(datafiles.ENV_VAR, "")  # set but empty: as unset
    assert load_dataset("mnist", folder).x_train.shape == (40, 1, 28, 28)
