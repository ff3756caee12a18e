"""The one place that chooses how many threads torch computes with, and how many worker
processes an audit runs its cells in.

A second intra-op thread pays only when one operation is large enough to split: the quick
audit's models (an MLP or LeNet on digits, 8 nodes, batch 32) gain nothing from it on an idle
2-core machine, and on a machine shared with busy processes torch's default (one thread per
core) makes every parallel region wait for its slowest thread, whichever process holds that
core: the same audit then runs 2.6-2.7x slower than with one thread. So the choice reads what
this process may really use (its CPU affinity, the cgroup's CPU quota, the load average) and the
work's size, and a small work gets one thread. `--threads` overrides it.

`choose_threads` and `choose_jobs` are pure (the machine is passed in as a `Machine`), so they
are tested with a fake affinity, quota and load; `machine()` reads the real one.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

# Per-round elements of the per-sample gradient stack (parameters x batch x nodes) below which
# one thread is as fast as two: the quick preset's MLP on digits is 17,226 x 32 x 8 = 4.4e6.
SMALL_WORK = 2 ** 25
# What one audit worker process may hold (torch, the data, a cell's model and message log): the
# default audit's single process peaked at 1.7 GB.
WORKER_BYTES = 2 * 2 ** 30


@dataclass(frozen=True)
class Machine:
    """What this process may use: `affinity` cores it may run on, `quota` cores of CPU time
    per second its cgroup allows (None: no quota), `load` the 1-minute load average (runnable
    processes), `available` bytes of memory the kernel says it can still hand out."""

    affinity: int
    quota: float | None
    load: float
    available: int | None = None

    @property
    def usable(self) -> int:
        """Cores this process may use at all: its affinity, capped by the cgroup's quota."""
        cap = self.affinity if self.quota is None else min(self.affinity,
                                                           max(1, math.floor(self.quota)))
        return max(1, cap)

    @property
    def idle(self) -> int:
        """Of the usable cores, those the load average leaves idle (at least one)."""
        return max(1, math.floor(self.usable - min(self.load, float(self.usable)) + 1e-9))


class ThreadChoice(TypedDict):
    """A thread choice as recorded in timings.json and the bench JSON."""

    threads: int
    reason: str
    usable_cores: int
    affinity: int
    cpu_quota: float | None
    load_average: float
    work: int | None


def choose_threads(machine: Machine, work: int | None, requested: int | None = None
                   ) -> ThreadChoice:
    """Torch's intra-op threads for `work` (per-round per-sample gradient elements; None:
    unknown, treated as small) on `machine`; `requested` (`--threads`) wins.

    A small work gets one thread; a large one gets the usable cores the load leaves idle."""
    if requested is not None:
        threads, reason = requested, "--threads"
    elif work is None or work < SMALL_WORK:
        threads, reason = 1, (f"small work ({'unknown' if work is None else f'{work:.3g}'} "
                              f"< {SMALL_WORK:.3g} gradient elements per round)")
    else:
        threads = machine.idle
        reason = (f"large work ({work:.3g} gradient elements per round): the {machine.usable} "
                  f"usable core(s) less a load of {machine.load:.2f}")
    return {"threads": threads, "reason": reason, "usable_cores": machine.usable,
            "affinity": machine.affinity, "cpu_quota": machine.quota,
            "load_average": machine.load, "work": work}


def choose_jobs(machine: Machine, cells: int, threads: int, requested: int | None = None
                ) -> int:
    """Worker processes for `cells` independent cells of `threads` threads each: `requested`
    (`--jobs`) or the usable cores' worth of such workers, never more than the cells, and never
    more than the available memory holds at `WORKER_BYTES` each."""
    jobs = requested if requested is not None else max(1, machine.usable // max(1, threads))
    if requested is None and machine.available is not None:
        jobs = min(jobs, max(1, machine.available // WORKER_BYTES))
    return max(1, min(jobs, cells))


def _quota(root: Path) -> float | None:
    """cgroup v2's `cpu.max` ("max 100000" or "200000 100000": quota and period in µs) as
    cores, or None without a quota."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine(cgroup: Path = Path("/sys/fs/cgroup")) -> Machine:
    """The machine as this process sees it now."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        affinity = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return Machine(affinity, _quota(cgroup), load, _available())


def apply(threads: int) -> None:
    """Set torch's intra-op threads (and OMP_NUM_THREADS for processes started from here)."""
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def run_work(run: object) -> int | None:
    """Per-round per-sample gradient elements of a run (its model's parameters x batch x
    nodes), or None when the model cannot be built for its dataset here."""
    from privbench.data.datasets import load_dataset
    from privbench.errors import PrivbenchError
    from privbench.models import build_model

    try:
        ds = load_dataset(run.dataset, run.data_root, run.download)  # type: ignore[attr-defined]
        fm = build_model(run.model, ds.input_shape, ds.num_classes)  # type: ignore[attr-defined]
    except PrivbenchError:
        return None
    return int(fm.d) * run.batch_size * run.nodes  # type: ignore[attr-defined]


def settle(run: object, requested: int | None) -> ThreadChoice:
    """Choose this process's threads for `run` (or take `--threads`) and apply the choice."""
    choice = choose_threads(machine(), None if requested is not None else run_work(run),
                            requested)
    apply(choice["threads"])
    return choice
