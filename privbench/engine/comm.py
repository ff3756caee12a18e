"""Where the simulated nodes run: one process (`Comm`) or several ranks (`DistComm`).

The single-process engine keeps every node's state stacked `(n, d)`. The distributed backend
(`torchrun ... privbench train --backend distributed`) keeps that layout and places the nodes on
ranks in contiguous blocks (several nodes per rank allowed):

* a rank holds only its own nodes' training data (other rows are zero and never sampled), so the
  per-sample gradients, clipping and local steps, the cost that grows with n * B * model, are
  computed only for its nodes (the engine skips rows without a sampled example);
* every message payload goes through the `MessageBus`, which asks the comm to bring each sender's
  row from the rank that owns the sender (`gather_rows`, a torch.distributed collective), so what
  a node combines is exactly what its neighbours sent;
* random draws are made for the whole network from the run's named streams on every rank and each
  rank uses its nodes' rows: node i's noise and batches are row i of the same draw wherever node i
  runs, so a seed gives the same models for any number of processes. (A rank could therefore know
  other nodes' noise: the backend is for scale, not for mutually distrusting machines.)

Rows of non-message state (momentum, control variates, ...) that a rank does not own are stale on
that rank and never read by its nodes; models for evaluation are gathered from their owners.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import torch
from torch import Tensor

from privbench.errors import ConfigError, PrivbenchError


class RankError(PrivbenchError):
    """Another rank stopped or a collective timed out; this rank stops without writing."""


def partition(n: int, world: int) -> Tensor:
    """(n,) int64 owner rank of each node: contiguous blocks, sizes differing by at most one.

    Raises:
        ConfigError: when there are more ranks than nodes (a rank needs at least one node).
    """
    if world < 1:
        raise ConfigError(f"world size must be >= 1, got {world}")
    if world > n:
        raise ConfigError(f"{world} processes but only {n} nodes: every rank needs at least one "
                          f"node (use --nodes >= {world} or --nproc-per-node <= {n})")
    base, extra = divmod(n, world)
    sizes = [base + (r < extra) for r in range(world)]
    return torch.repeat_interleave(torch.arange(world), torch.tensor(sizes))


class Comm:
    """One process runs every node: every operation is the identity."""

    rank: int = 0
    world: int = 1

    def __init__(self) -> None:
        self.owner: Tensor | None = None  # (n,) owner rank per node, None: all local

    @property
    def distributed(self) -> bool:
        """Whether nodes are spread over several ranks."""
        return self.world > 1

    def mine(self, n: int, device: torch.device | str = "cpu") -> Tensor:
        """(n,) bool: the nodes this rank runs."""
        return torch.ones(n, dtype=torch.bool, device=device)

    def gather_rows(self, x: Tensor, senders: Tensor | None = None) -> Tensor:
        """Each row of x as computed by the rank owning its node.

        Args:
            x: (n, ...) one row per node, or (E, ...) one row per edge.
            senders: (E,) the node of each row (None: row i belongs to node i).
        """
        return x

    def gather_objects(self, obj: Any, dst: int | None = None) -> list[Any]:
        """Every rank's `obj`, in rank order (the merge step of logs and reports).

        With `dst`, only that rank receives the list (the others get []).
        """
        return [obj]

    def all_ok(self, ok: bool) -> bool:
        """True when `ok` holds on every rank (used before writing results)."""
        return ok


class DistComm(Comm):
    """Nodes spread over the ranks of an initialised torch.distributed process group.

    Args:
        n: number of nodes.
        device: the rank's device (NCCL needs tensors on the rank's GPU; gloo works on CPU).
    """

    def __init__(self, n: int, device: torch.device) -> None:
        import torch.distributed as dist

        super().__init__()
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.owner = partition(n, self.world)
        # gloo reduces on CPU tensors only; NCCL on the GPU.
        self.wire = torch.device("cpu") if dist.get_backend() == "gloo" else device

    def mine(self, n: int, device: torch.device | str = "cpu") -> Tensor:
        """(n,) bool: the nodes this rank runs."""
        return (self.owner == self.rank).to(device)

    def gather_rows(self, x: Tensor, senders: Tensor | None = None) -> Tensor:
        """Rows from their owners by one all-reduce of disjoint contributions.

        Each rank contributes its own rows and zeros elsewhere (`where`, so that stale NaN or Inf
        in rows it does not own cannot leak), and the sum is the assembled tensor: exact, since
        every element is one value plus zeros. NCCL and gloo both reduce any float or int dtype.
        """
        owner = self.owner if senders is None else self.owner[senders.cpu()]  # (rows,)
        keep = (owner == self.rank).to(x.device).reshape(-1, *([1] * (x.dim() - 1)))
        dtype = x.dtype
        part = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
        if dtype == torch.bool:
            part = part.to(torch.uint8)
        wire = part.to(self.wire).contiguous()
        self._call(self.dist.all_reduce, wire)
        return wire.to(x.device, dtype)

    def gather_objects(self, obj: Any, dst: int | None = None) -> list[Any]:
        """Every rank's `obj` (pickled over the process group: ranks trust each other)."""
        out: list[Any] = [None] * self.world
        if dst is None:
            self._call(self.dist.all_gather_object, out, obj)
            return out
        self._call(self.dist.gather_object, obj, out if self.rank == dst else None, dst)
        return out if self.rank == dst else []

    def all_ok(self, ok: bool) -> bool:
        """True when every rank reports ok."""
        flag = torch.tensor([0 if ok else 1], dtype=torch.int64, device=self.wire)
        self._call(self.dist.all_reduce, flag)
        return int(flag.item()) == 0

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except (RuntimeError, ValueError) as exc:  # gloo/NCCL: peer closed, timeout
            raise RankError(f"rank {self.rank}: another rank stopped or timed out during "
                            f"{fn.__name__} ({_first_line(exc)}); nothing was written") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


@contextlib.contextmanager
def process_group(device: str, timeout_s: float) -> Iterator[torch.device]:
    """Join the torchrun process group for the duration of the block; yields this rank's device.

    gloo for CPU runs, NCCL for CUDA (one GPU per local rank: `auto` and `cuda` pick
    cuda:LOCAL_RANK). A group that already exists (a caller joined it) is used and left open.

    Raises:
        ConfigError: when not launched by torchrun (no RANK / WORLD_SIZE in the environment).
    """
    import torch.distributed as dist

    from privbench.device import resolve_device

    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if k not in os.environ]
    if missing and not dist.is_initialized():
        raise ConfigError(f"--backend distributed must be launched by torchrun "
                          f"({', '.join(missing)} not set); e.g. torchrun --nproc-per-node 2 "
                          "-m privbench train --backend distributed ...")
    dev = resolve_device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                           % torch.cuda.device_count())
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    created = not dist.is_initialized()
    global _LEFT_GROUP
    if created:
        try:
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                                    timeout=datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as exc:  # rendezvous timeout, refused connection
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            raise RankError(f"rank {os.environ.get('RANK')}: cannot join the process group at "
                            f"{where} ({_first_line(exc)})") from None
    try:
        yield dev
    finally:
        if created:
            dist.destroy_process_group()
            _LEFT_GROUP = True


_LEFT_GROUP = False  # this process created and destroyed a process group (see `exit_process`)


def exit_process(code: int) -> NoReturn:
    """End the process with `code`; after a distributed run, without C++ static destructors.

    After `destroy_process_group`, interpreter finalization in torch 2.15 with gloo sometimes
    aborts ("terminate called without an active exception", SIGABRT, no Python frame; seen
    under CPU load, after all output was written). torchrun then reports the rank as failed and
    stops the others. Everything this process owes is done and flushed here, so it exits
    directly. A process that never joined a group exits normally.
    """
    if not _LEFT_GROUP:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
