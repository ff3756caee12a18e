"""Datasets (embedded digits; torchvision loaders on real on-disk formats) and partitions."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from privbench.data.datasets import load_dataset, partition, split_nodes
from privbench.errors import ConfigError, DataError, UnknownNameError


def test_digits_shape_and_range(digits):
    assert digits.x_train.shape == (1437, 1, 8, 8) and digits.x_test.shape == (360, 1, 8, 8)
    assert digits.x_train.min() >= 0 and digits.x_train.max() <= 1
    assert digits.num_classes == 10 and set(digits.y_test.tolist()) == set(range(10))


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_partition_is_a_disjoint_cover(scheme):
    labels = np.repeat(np.arange(10), 50)
    parts = partition(labels, 7, scheme, 0.3, np.random.default_rng(0))
    allidx = np.concatenate(parts)
    assert len(allidx) == len(labels) and len(np.unique(allidx)) == len(labels)
    assert min(len(p) for p in parts) >= 4


def test_dirichlet_small_alpha_skews_labels():
    labels = np.repeat(np.arange(10), 100)
    iid = partition(labels, 5, "iid", 0.1, np.random.default_rng(1))
    skew = partition(labels, 5, "dirichlet", 0.1, np.random.default_rng(1))

    def classes_per_node(parts):
        return np.mean([np.sum(np.bincount(labels[p], minlength=10) > 5) for p in parts])

    assert classes_per_node(skew) < classes_per_node(iid)


def test_members_and_holdout_are_disjoint(digits):
    data = split_nodes(digits, 5, holdout=0.3, seed=0)
    for i in range(5):
        mem = set(data.idx[i, : data.counts[i]].tolist())
        out = set(data.idx_out[i, : data.counts_out[i]].tolist())
        assert mem and out and not mem & out
        # the stored samples are the dataset's
        j = data.idx[i, 0]
        assert torch.equal(data.x[i, 0], digits.x_train[j])
    assert int(data.counts.sum() + data.counts_out.sum()) == len(digits.y_train)


def test_uniform_batches_respect_counts(digits):
    data = split_nodes(digits, 4, "dirichlet", alpha=0.2, seed=0, max_per_node=20)
    slots, mask = data.sample(16, torch.Generator().manual_seed(0))
    assert slots.shape == (4, min(16, data.y.shape[1]))
    for i in range(4):
        real = slots[i][mask[i]]
        assert len(set(real.tolist())) == len(real)  # without replacement
        assert torch.all(real < data.counts[i])


def test_poisson_sampling_rate(digits):
    data = split_nodes(digits, 4, seed=0)
    slots, mask = data.poisson(0.1, torch.Generator().manual_seed(0))
    rate = mask.sum().item() / data.counts.sum().item()
    # binomial with >1000 trials: 5 sigma band, failure probability < 1e-6
    sd = (0.1 * 0.9 / data.counts.sum().item()) ** 0.5
    assert abs(rate - 0.1) < 5 * sd
    assert mask.shape[1] == mask.sum(dim=1).max()  # packed to the largest realised batch
    for i in range(data.n):  # sampled slots are distinct real members, listed first
        real = slots[i][mask[i]]
        assert torch.all(real < data.counts[i]) and len(set(real.tolist())) == len(real)
        assert torch.all(mask[i][: len(real)])
    _, m2 = data.poisson(torch.tensor([0.0, 1.0, 0.0, 1.0]), torch.Generator())
    assert m2[0].sum() == 0 and m2[1].sum() == data.counts[1]


def _write_idx(path, arr, magic):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(struct.pack(">I", magic))
        for dim in arr.shape:
            fh.write(struct.pack(">I", dim))
        fh.write(arr.astype(np.uint8).tobytes())


@pytest.mark.parametrize("name,folder,ext", [("mnist", "MNIST", ".gz"),
                                             ("fashion-mnist", "FashionMNIST", "")])
def test_mnist_loaders_read_real_idx_files(tmp_path, name, folder, ext):
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("t10k", 6)):
        images = rng.integers(0, 256, (n, 28, 28))
        _write_idx(raw / f"{split}-images-idx3-ubyte{ext}", images, 2051)
        _write_idx(raw / f"{split}-labels-idx1-ubyte{ext}", rng.integers(0, 10, (n,)), 2049)
    ds = load_dataset(name, tmp_path)
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_test.shape == (6, 1, 28, 28)
    assert ds.x_train.min() >= 0 and ds.x_train.max() <= 1 and ds.num_classes == 10
    # pixel values survive the round trip (uint8 / 255); `images` is the last split written (t10k)
    assert torch.allclose(ds.x_test[:, 0] * 255, torch.as_tensor(images, dtype=torch.float32))


def test_cifar10_loader_reads_real_pickled_batches(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (4, 3072)).astype(np.uint8),
                 "labels": rng.integers(0, 10, 4).tolist()}
        (base / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": [f"c{i}" for i in range(10)]}
    (base / "batches.meta").write_bytes(pickle.dumps(meta))
    from unittest import mock

    # torchvision checks md5 sums of the real archive files; these are small stand-ins.
    with mock.patch("torchvision.datasets.CIFAR10._check_integrity", return_value=True), \
            mock.patch("torchvision.datasets.cifar.check_integrity", return_value=True):
        ds = load_dataset("cifar10", tmp_path)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)


def test_missing_files_name_what_is_expected(tmp_path, no_data_places):
    with pytest.raises(DataError, match=r"not found; searched --data-root \(.*\), "
                       r"\$PRIVBENCH_DATA \(not set\).*MNIST/raw/"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion-mnist", tmp_path)
    with pytest.raises(DataError, match=r"cifar10.*not found.*--download"):
        load_dataset("cifar10", None)
    with pytest.raises(UnknownNameError, match="known: cifar10, digits"):
        load_dataset("imagenet")


def test_bad_partition_arguments(digits):
    with pytest.raises(ConfigError, match="nodes must be >= 2"):
        split_nodes(digits, 1)
    with pytest.raises(ConfigError, match="unknown partition"):
        split_nodes(digits, 3, "zipf")
    with pytest.raises(ConfigError, match="alpha must be > 0"):
        split_nodes(digits, 3, "dirichlet", alpha=0)
