"""Datasets and their partition across n nodes.

* `digits` (scikit-learn's 1,797 real 8x8 handwritten digits) is embedded: no file, no network.
* `mnist`, `fashion-mnist` are read from their original idx files (gzipped or not), found and
  checked by `privbench.data.files`: `--data-root`, then `$PRIVBENCH_DATA`, then the Debian
  package's folder; `cifar10` through torchvision's python batches. torchvision downloads only
  when the caller passes `download=True`.

All images are float32 in [0, 1], shape (C, H, W); models see them unnormalised, so attacks and
the image metrics share one range ([0, 1]). Each node's share is split into *members* (the samples
it trains on) and *held-out* samples of the same distribution (non-members for membership
inference). Node data is stacked and padded to `(n, M, C, H, W)` with per-node counts, so batches
for all nodes are sampled in one tensor operation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from privbench.data import files as datafiles
from privbench.errors import ConfigError, DataError
from privbench.registry import DATASETS

PARTITIONS = ("iid", "dirichlet")


@dataclass(frozen=True)
class Dataset:
    """A labelled image dataset with a fixed train/test split.

    Attributes:
        name: registry key.
        x_train: (N, C, H, W) float32 in [0, 1].
        y_train: (N,) int64 labels.
        x_test: (N_test, C, H, W).
        y_test: (N_test,).
        num_classes: number of labels.
        source: where the files were read from ("embedded" for digits).
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    held: Tensor | None = None
    source: str = "embedded"

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


@DATASETS.register("digits")
def load_digits(root: str | Path | None = None, download: bool = False) -> Dataset:
    """scikit-learn's digits: 1,797 8x8 grey images, a fixed stratified 80/20 train/test split."""
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]  # (1797, 1, 8, 8) in [0, 1]
    y = bunch.target.astype(np.int64)
    # The split is fixed (seed 0), independent of the run's seed, so test sets are comparable.
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return Dataset("digits", torch.from_numpy(xtr), torch.from_numpy(ytr),
                   torch.from_numpy(xte), torch.from_numpy(yte), 10)


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[Tensor, Tensor]:
    """uint8 (N, H, W) or (N, C, H, W) and labels -> ((N, C, H, W) float in [0, 1], (N,) int64)."""
    x = torch.tensor(images, dtype=torch.float32) / 255.0  # a copy: the cached arrays stay intact
    x = x[:, None] if x.ndim == 3 else x
    return x.contiguous(), torch.tensor(labels, dtype=torch.int64)


def _idx_loader(name: str) -> Callable[..., Dataset]:
    """An MNIST-format dataset found by `datafiles.locate_idx` (no torchvision needed)."""

    def load(root: str | Path | None = None, download: bool = False) -> Dataset:
        datafiles.check_data_env(root, download)
        folder = datafiles.locate_idx(name, root)
        if folder is None and download:
            folder = _download(name, root)
        if folder is None:
            places = datafiles.search_places(name, root)
            raise DataError(f"dataset {name!r} not found; searched "
                            f"{datafiles.describe_places(places)} for "
                            f"{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz] (flat, in "
                            f"{datafiles.IDX_DATASETS[name].torchvision}/raw/ or in {name}/); "
                            f"{datafiles.how_to_get(name)}")
        xtr, ytr, xte, yte = datafiles.load_idx(name, folder)
        return Dataset(name, *_tensors(xtr, ytr), *_tensors(xte, yte),
                       datafiles.IDX_DATASETS[name].classes, source=str(folder))

    load.__doc__ = f"{name} from the first place holding its idx files (see privbench.data.files)."
    return load


def _download(name: str, root: str | Path | None) -> Path | None:
    """Download through torchvision into --data-root, else $PRIVBENCH_DATA; the idx folder."""
    target = next((p for _, p in datafiles.search_places(name, root)[:2] if p is not None), None)
    if target is None:
        raise DataError(f"--download needs a folder: pass --data-root DIR or set "
                        f"${datafiles.ENV_VAR}")
    import torchvision

    cls = getattr(torchvision.datasets, datafiles.IDX_DATASETS[name].torchvision)
    try:
        for train in (True, False):
            cls(str(target), train=train, download=True)
    except (OSError, RuntimeError) as exc:  # no network, HTTP errors, md5 mismatch
        raise DataError(f"downloading {name} into {target} failed: "
                        f"{exc}".replace("\n", " ")) from None
    return datafiles.locate_idx(name, target)


_CIFAR_EXPECTED = "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}"


@DATASETS.register("cifar10")
def load_cifar10(root: str | Path | None = None, download: bool = False) -> Dataset:
    """CIFAR-10 through torchvision (python batches) from --data-root, then $PRIVBENCH_DATA."""
    datafiles.check_data_env(root, download)
    places = datafiles.search_places("cifar10", root)
    given = [p for _, p in places if p is not None]
    found = next((p for p in given if (p / "cifar-10-batches-py").is_dir()), None)
    if found is None and not (download and given):
        raise DataError(f"dataset 'cifar10' not found; searched {datafiles.describe_places(places)}"
                        f" for {_CIFAR_EXPECTED}; {datafiles.how_to_get('cifar10')}")
    import torchvision

    where = str(found or given[0])
    try:
        train = torchvision.datasets.CIFAR10(where, train=True, download=download)
        test = torchvision.datasets.CIFAR10(where, train=False, download=download)
    except RuntimeError as exc:  # torchvision: "Dataset not found or corrupted"
        raise DataError(f"dataset 'cifar10' under {where} is incomplete or corrupted: expected "
                        f"{_CIFAR_EXPECTED} [{exc}]".replace("\n", " ")) from None
    x_tr, x_te = (np.asarray(d.data).transpose(0, 3, 1, 2) for d in (train, test))  # NHWC -> NCHW
    return Dataset("cifar10", *_tensors(x_tr, np.asarray(train.targets)),
                   *_tensors(x_te, np.asarray(test.targets)), len(train.classes), source=where)


for _name in datafiles.IDX_DATASETS:
    DATASETS.add(_name, _idx_loader(_name))


def load_dataset(name: str, root: str | Path | None = None, download: bool = False) -> Dataset:
    """Load a registered dataset by name (one-line error for unknown names or missing files)."""
    return DATASETS.get(name)(root=root, download=download)


def partition(labels: np.ndarray, n: int, scheme: str, alpha: float,
              rng: np.random.Generator, min_size: int = 4) -> list[np.ndarray]:
    """Split sample indices across `n` nodes.

    Args:
        labels: (N,) labels.
        n: number of nodes.
        scheme: "iid" (a random equal split) or "dirichlet" (per-class proportions drawn from
            Dir(alpha) over nodes: label skew, smaller alpha = more skew).
        alpha: Dirichlet concentration (> 0); ignored for "iid".
        rng: the data stream's generator.
        min_size: each node gets at least this many samples (Dirichlet draws are repeated).

    Returns:
        n arrays of indices into `labels`.
    """
    if scheme not in PARTITIONS:
        raise ConfigError(f"unknown partition {scheme!r}; accepted: {', '.join(PARTITIONS)}")
    if len(labels) < n * min_size:
        raise ConfigError(f"{len(labels)} samples cannot give {n} nodes {min_size} samples each")
    if scheme == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), n)]
    if not alpha > 0:
        raise ConfigError(f"dirichlet alpha must be > 0, got {alpha}")
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(n)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(n, alpha))) * len(idx)).astype(int)[:-1]
            for node, chunk in enumerate(np.split(idx, cuts)):
                parts[node].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise ConfigError(f"dirichlet alpha={alpha} left a node with < {min_size} samples; "
                      "raise alpha or lower the number of nodes")


def _stack_padded(x: Tensor, y: Tensor,
                  parts: list[np.ndarray]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Stack per-node samples padded to the largest node: x (n, M, ...), y, idx (-1 pad), counts."""
    m = max(len(p) for p in parts)
    idx = torch.full((len(parts), m), -1, dtype=torch.int64)
    for i, p in enumerate(parts):
        idx[i, : len(p)] = torch.as_tensor(p)
    safe = idx.clamp(min=0)
    counts = torch.tensor([len(p) for p in parts])
    return x[safe], y[safe], idx, counts


@dataclass(frozen=True)
class NodeData:
    """All nodes' data, stacked and padded.

    Attributes:
        x, y: members (training samples), (n, M, C, H, W) and (n, M); rows past `counts` are
            padding.
        idx: (n, M) indices into the dataset's train split (-1 for padding): ground truth.
        counts: (n,) members per node.
        x_out, y_out, idx_out, counts_out: held-out non-members per node, same layout.
        x_test, y_test: the shared test set.
        num_classes: number of labels.
        held: (n,) bool, the nodes whose data this process holds (None: all). With the
            distributed backend a rank holds only its own nodes' members and held-out samples;
            the other rows are zero and their sampled batches are masked out, so no gradient is
            computed for them. Counts stay public (accounting uses them).
    """

    x: Tensor
    y: Tensor
    idx: Tensor
    counts: Tensor
    x_out: Tensor
    y_out: Tensor
    idx_out: Tensor
    counts_out: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    held: Tensor | None = None

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self.x.shape[0]

    @property
    def input_shape(self) -> tuple[int, ...]:
        """(C, H, W)."""
        return tuple(self.x.shape[2:])

    def to(self, device: torch.device) -> NodeData:
        """A copy with every tensor on `device`."""
        fields = {k: (v.to(device) if isinstance(v, Tensor) else v)
                  for k, v in self.__dict__.items()}
        return NodeData(**fields)

    def restrict(self, held: Tensor) -> NodeData:
        """A copy holding only the nodes where `held` (n,) is True: other rows' samples zeroed."""
        keep = held.to(self.x.device)

        def rows(v: Tensor) -> Tensor:
            return v * keep.reshape(-1, *([1] * (v.dim() - 1))).to(v.dtype)

        fields = dict(self.__dict__)
        fields.update(x=rows(self.x), y=rows(self.y), x_out=rows(self.x_out),
                      y_out=rows(self.y_out), held=keep)
        return NodeData(**fields)

    def held_rows(self) -> Tensor:
        """(n, 1) bool: True for nodes whose data this process holds."""
        if self.held is None:
            return torch.ones(self.n, 1, dtype=torch.bool, device=self.y.device)
        return self.held.to(self.y.device)[:, None]

    def sample(self, batch_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """Uniform mini-batches without replacement for every node at once.

        Returns:
            slots (n, B) positions into each node's members, and mask (n, B): False where a node
            has fewer than B members (those slots are padding and must get zero weight) and for
            nodes whose data this process does not hold.
        """
        note_sampling("fixed_without_replacement")
        n, m = self.y.shape
        keys = torch.rand(n, m, generator=gen, device=self.y.device)  # (n, M)
        keys = keys.masked_fill(self.arange_mask(), 2.0)  # padding sorts last
        slots = keys.argsort(dim=1)[:, :batch_size]
        mask = torch.arange(min(batch_size, m), device=self.y.device)[None] < self.counts[:, None]
        return slots, mask & self.held_rows()

    def poisson(self, rate: float | Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """Poisson sampling (each member independently with probability `rate`), as DP-SGD needs.

        The batch size varies per node and round exactly as the accountant assumes (nothing is
        truncated): the sampled members of each node come first, padded to the largest realised
        batch B' of the round, so per-sample work is done for B' slots, not all M.

        Args:
            rate: the sampling rate, a float or a per-node tensor (n,) or (n, 1).
            gen: the batch stream's generator.

        Returns:
            slots (n, B') positions into each node's members and mask (n, B') of real samples
            (all False for nodes whose data this process does not hold); B' >= 1. Slots and B'
            are those of the whole network, whatever this process holds.
        """
        note_sampling("poisson")
        n, m = self.y.shape
        if isinstance(rate, Tensor):
            rate = rate.reshape(-1, 1).to(self.y.device)
        take = (torch.rand(n, m, generator=gen, device=self.y.device) < rate)
        take &= ~self.arange_mask()  # (n, M)
        width = max(1, int(take.sum(dim=1).max()))
        order = torch.sort(take.to(torch.uint8), dim=1, descending=True,
                           stable=True).indices[:, :width]  # sampled slots first, (n, B')
        return order, take.gather(1, order) & self.held_rows()

    def arange_mask(self) -> Tensor:
        """(n, M) True at padding positions."""
        m = self.y.shape[1]
        return torch.arange(m, device=self.y.device)[None] >= self.counts[:, None]

    def gather(self, slots: Tensor) -> tuple[Tensor, Tensor]:
        """Members at `slots` (n, B) -> x (n, B, C, H, W), y (n, B)."""
        rows = torch.arange(slots.shape[0], device=slots.device)[:, None]
        return self.x[rows, slots], self.y[rows, slots]


def split_nodes(ds: Dataset, n: int, scheme: str = "iid", alpha: float = 0.5,
                holdout: float = 0.25, seed: int = 0, max_per_node: int | None = None) -> NodeData:
    """Partition a dataset across `n` nodes and split each node's share into members / held-out.

    Args:
        ds: the dataset.
        n: number of nodes (>= 2).
        scheme: "iid" or "dirichlet".
        alpha: Dirichlet concentration.
        holdout: fraction of each node's share kept out of training (non-members), in [0, 1).
        seed: seed of the data stream (partition and member split).
        max_per_node: cap on each node's share (to build tiny, overfit settings), or None.
    """
    if n < 2:
        raise ConfigError(f"nodes must be >= 2, got {n}")
    if not 0.0 <= holdout < 1.0:
        raise ConfigError(f"holdout must be in [0, 1), got {holdout}")
    rng = np.random.default_rng(seed)
    parts = partition(ds.y_train.numpy(), n, scheme, alpha, rng)
    if max_per_node is not None:
        parts = [rng.permutation(p)[:max_per_node] for p in parts]
    members, held = [], []
    for p in parts:
        p = rng.permutation(p)
        k = max(1, round(len(p) * holdout)) if holdout > 0 else 0
        held.append(np.sort(p[:k]))
        members.append(np.sort(p[k:]))
    x, y, idx, counts = _stack_padded(ds.x_train, ds.y_train, members)
    if holdout > 0:
        xo, yo, io, co = _stack_padded(ds.x_train, ds.y_train, held)
    else:
        xo, yo = ds.x_train[:0].expand(n, 0, *ds.input_shape), ds.y_train[:0].expand(n, 0)
        io, co = torch.zeros(n, 0, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)
    return NodeData(x, y, idx, counts, xo, yo, io, co, ds.x_test, ds.y_test, ds.num_classes)


# The sampling models actually drawn, recorded while a run trains (`recording_sampling`), so that
# the gate can compare them with the sampling model each privacy ledger accounts.
_DRAWN: ContextVar[set[str] | None] = ContextVar("privbench_sampling_drawn", default=None)


def note_sampling(model: str) -> None:
    """Record that a batch was drawn with `model` ("poisson", "fixed_without_replacement")."""
    drawn = _DRAWN.get()
    if drawn is not None:
        drawn.add(model)


@contextlib.contextmanager
def recording_sampling() -> Iterator[set[str]]:
    """Collect the sampling models drawn inside the block into the yielded set."""
    token = _DRAWN.set(set())
    try:
        yield _DRAWN.get()  # type: ignore[misc]
    finally:
        _DRAWN.reset(token)


def carve_validation(ds: Dataset, data: NodeData, fraction: float, seed: int) -> NodeData:
    """Move a fraction of every node's members into a validation split (for tuning).

    The validation samples replace the test set (x_test, y_test), so evaluation scores them and
    the test set takes no part; held-out non-members are unchanged. The carve depends only on
    `seed`, so every candidate of a tuning grid sees the same split.

    Args:
        ds: the dataset `data` was split from.
        data: the nodes' data from `split_nodes`.
        fraction: share of each node's members moved to validation, in (0, 1).
        seed: seed of the carve.
    """
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"validation fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    members, valid = [], []
    for i in range(data.n):
        own = rng.permutation(data.idx[i, : int(data.counts[i])].numpy())
        k = min(len(own) - 1, max(1, round(len(own) * fraction)))
        valid.append(own[:k])
        members.append(np.sort(own[k:]))
    x, y, idx, counts = _stack_padded(ds.x_train, ds.y_train, members)
    keep = torch.as_tensor(np.sort(np.concatenate(valid)))
    return dataclasses.replace(data, x=x, y=y, idx=idx, counts=counts,
                               x_test=ds.x_train[keep], y_test=ds.y_train[keep])
