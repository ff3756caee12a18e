"""Shared fixtures (the embedded digits dataset, loaded once), the `-n auto` worker count, and
the global state every test leaves as it found it (registries, environment, torch defaults)."""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from privbench.data.datasets import Dataset, load_digits

# The accountant's on-disk cache (privbench/accounting/gaussian.py): a fresh folder per session,
# so tests never read entries another run left behind.
os.environ.setdefault("PRIVBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="privbench-cache-"))
# One process per audit unless a test asks for workers (`--jobs`): the test run's own workers
# already share the cores, and a cell registered by a test exists only in the test's process.
os.environ.setdefault("PRIVBENCH_JOBS", "1")


GIB = 2**30
WORKER_MEMORY = 4 * GIB
"""Memory set aside per test worker. Measured in the default run with two workers (resident size
sampled every second): 0.55 GB per worker at most, 7.0 GB for everything together at its peak,
with the processes the tests start (torchrun ranks, reproduce workers; shared pages counted in
each process)."""


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
MEMINFO = Path("/proc/meminfo")


def usable_cpus(cpu_max: Path = CPU_MAX) -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (a
    container limited with `--cpus` still sees every CPU of its host in the mask)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = max(1, cpus or 1)
    try:
        quota, period = cpu_max.read_text().split()
        return cpus if quota == "max" else max(1, min(cpus, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 file, or one this parser does not know
        return cpus


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def auto_workers(cpus: int, memory: int | None) -> int:
    """One worker per CPU, as many as `memory` bytes hold at WORKER_MEMORY each (at least 1)."""
    return cpus if memory is None else max(1, min(cpus, memory // WORKER_MEMORY))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle-seed", type=int, default=None, metavar="N",
        help="run the test files in an order permuted by random.Random(N), and each file's "
             "tests in a permuted order too (a file's tests stay together, so its "
             "module-scoped fixtures are built once), to show that no test depends on what an "
             "earlier one left behind; with -n every worker permutes alike")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--shuffle-seed N`: the test files in a seeded random order, and each file's tests."""
    seed = config.getoption("--shuffle-seed")
    if seed is None:
        return
    rng = random.Random(seed)
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(str(item.path), []).append(item)
    groups = list(files.values())
    rng.shuffle(groups)
    for group in groups:
        rng.shuffle(group)
    items[:] = [item for group in groups for item in group]


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("--shuffle-seed")
    return None if seed is None else f"test order shuffled with --shuffle-seed {seed}"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`pytest -n auto`: one worker per usable CPU, as many as the free memory holds.

    pytest-xdist's own count takes psutil's physical cores where psutil is installed (fewer than
    the CPUs the OS schedules on with hyper-threads) or the affinity mask (every host CPU under a
    CPU quota); the suite runs its torch ops on one thread (test modules call
    `torch.set_num_threads(1)` when collected), so a worker per CPU is what fills the machine.
    PYTEST_XDIST_AUTO_NUM_WORKERS still overrides, as in xdist.
    """
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return auto_workers(usable_cpus(), available_memory())


@pytest.fixture(scope="session")
def digits() -> Dataset:
    """scikit-learn's digits with privbench's fixed split."""
    return load_digits()


@pytest.fixture
def no_data_places(monkeypatch, tmp_path_factory):
    """No $PRIVBENCH_DATA and no Debian dataset folder: only --data-root is searched."""
    from privbench.data import files as datafiles

    monkeypatch.delenv(datafiles.ENV_VAR, raising=False)
    missing = tmp_path_factory.mktemp("no-debian") / "absent"
    monkeypatch.setattr(datafiles, "DEBIAN", {k: (pkg, missing)
                                              for k, (pkg, _) in datafiles.DEBIAN.items()})


PACKAGES = ("privbench", "defenses", "attacks")


def _registries() -> list:
    """Every `Registry` held by a loaded module of privbench, the defenses or the attacks (the
    shared ones of `privbench.registry` and the others, such as the reproductions')."""
    from privbench.registry import Registry

    found: dict[int, Registry] = {}
    for name, module in list(sys.modules.items()):
        if name.split(".", 1)[0] in PACKAGES and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, Registry):
                    found[id(value)] = value
    return list(found.values())


@pytest.fixture(scope="session", autouse=True)
def _plugins_loaded() -> None:
    """The entries that imports register (the built-in defenses and attacks, the papers'
    reproductions) in place before any test's registries are saved."""
    from privbench import reproduce
    from privbench.plugins import load_plugins

    load_plugins()
    reproduce.load()


def _restore(reg: Any, items: dict[str, Any], imported: set[str]) -> None:
    """Put a registry back to `items`, keeping what a module imported during the test
    registered: an import happens once per process, so its entries would never come back."""
    if reg._items == items:
        return
    by_import = {name: obj for name, obj in reg._items.items() if name not in items
                 and getattr(obj, "__module__", None) in imported}
    reg._items.clear()
    reg._items.update({**items, **by_import})


def _caches() -> list[Any]:
    """Every `functools` cache of a loaded module of privbench, the defenses or the attacks
    (its keys may be registry names: a dataset's shape, a defense's privacy plan)."""
    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if name.split(".", 1)[0] in PACKAGES and module is not None:
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and hasattr(value,
                                                                            "cache_info"):
                    found[id(value)] = value
    return list(found.values())


def _random_states() -> tuple[Any, ...]:
    """The global generators' states: Python's `random`, numpy's legacy one, torch's CPU one
    (the code draws from explicit generators; a test may still seed a global one)."""
    import numpy as np

    torch = sys.modules.get("torch")
    return random.getstate(), np.random.get_state(), (torch.random.get_rng_state()
                                                      if torch else None)


def _set_random_states(states: tuple[Any, ...]) -> None:
    import numpy as np

    random.setstate(states[0])
    np.random.set_state(states[1])
    torch = sys.modules.get("torch")
    if torch is not None and states[2] is not None:
        torch.random.set_rng_state(states[2])


@contextlib.contextmanager
def restored_global_state() -> Iterator[None]:
    """On leaving: every registry holds exactly its entries from before (a name registered
    inside is removed, one replaced is put back; the entries of a module first imported inside
    are kept, since an import happens once per process), the caches are emptied where a
    registry changed (they may hold what the changed entry computed under a shared name), and
    the environment, the working folder, `sys.path`, the SIGINT and SIGTERM handlers, the global
    random generators and torch's thread count and default dtype are as they were."""
    saved = [(reg, dict(reg._items)) for reg in _registries()]
    modules = set(sys.modules)
    env, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    states = _random_states()
    torch = sys.modules.get("torch")
    threads, dtype = (torch.get_num_threads(), torch.get_default_dtype()) if torch else (0, None)
    try:
        yield
    finally:
        imported = set(sys.modules) - modules
        changed = [reg for reg, items in saved if reg._items != items]
        for reg, items in saved:
            _restore(reg, items, imported)
        if changed:
            for cache in _caches():
                cache.cache_clear()
        for key in set(os.environ) - set(env) - {"PYTEST_CURRENT_TEST"}:  # pytest's own marker
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value and key != "PYTEST_CURRENT_TEST":
                os.environ[key] = value
        if os.getcwd() != cwd:
            os.chdir(cwd)
        if sys.path != path:
            sys.path[:] = path
        for sig, handler in handlers.items():
            if signal.getsignal(sig) != handler and handler is not None:
                signal.signal(sig, handler)
        _set_random_states(states)
        if torch is not None:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            if torch.get_default_dtype() != dtype:
                torch.set_default_dtype(dtype)


@pytest.fixture(autouse=True)
def _restores_global_state(_plugins_loaded: None) -> Iterator[None]:
    """Each test leaves the global state as it found it (`restored_global_state`), so that the
    suite passes in any order, serially and distributed."""
    with restored_global_state():
        yield
