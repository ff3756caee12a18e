"""The global state every test leaves as it found it (tests/conftest.py,
`restored_global_state`): what a test registers, sets or seeds is put back; what a module
registers when first imported stays, since it is imported once per process."""

from __future__ import annotations

import itertools
import os
import random
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from privbench.engine import runner
from privbench.registry import TOPOLOGIES
from tests.conftest import pytest_collection_modifyitems, restored_global_state


def _handler(signum, frame) -> None:  # pragma: no cover - never delivered
    raise AssertionError("not installed outside the test")


def test_registries_environment_folder_path_signals_and_generators_come_back(tmp_path):
    entries = dict(TOPOLOGIES._items)
    replaced = next(iter(entries))
    env, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
    term = signal.getsignal(signal.SIGTERM)
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    with restored_global_state():
        TOPOLOGIES.add("pb_state_check", lambda *a: None)
        TOPOLOGIES._items[replaced] = object()
        os.environ["PB_STATE_CHECK"] = "1"
        os.environ.pop(next(iter(env)))
        os.chdir(tmp_path)
        sys.path.insert(0, str(tmp_path))
        signal.signal(signal.SIGTERM, _handler)
        random.seed(1)
        np.random.seed(1)
        torch.manual_seed(1)
        torch.set_num_threads(threads + 1)
        torch.set_default_dtype(torch.float64 if dtype != torch.float64 else torch.float32)
    assert TOPOLOGIES._items == entries
    assert dict(os.environ) == env and os.getcwd() == cwd and sys.path == path
    assert signal.getsignal(signal.SIGTERM) == term
    assert (torch.get_num_threads(), torch.get_default_dtype()) == (threads, dtype)
    assert random.getstate() == states[0]
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), states[1],
                                                     strict=True))
    assert torch.equal(torch.random.get_rng_state(), states[2])


def test_a_changed_registry_empties_the_caches_and_an_unchanged_one_keeps_them() -> None:
    runner._inputs("digits", None, False)
    with restored_global_state():
        pass
    assert runner._inputs.cache_info().currsize >= 1
    with restored_global_state():
        TOPOLOGIES.add("pb_state_check", lambda *a: None)
    assert runner._inputs.cache_info().currsize == 0
    assert "pb_state_check" not in TOPOLOGIES


def test_what_a_first_import_registers_stays(tmp_path, monkeypatch) -> None:
    (tmp_path / "pb_registers_on_import.py").write_text(
        "from privbench.registry import TOPOLOGIES\n\n\n"
        "@TOPOLOGIES.register('pb_imported')\ndef pb_imported(*args):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with restored_global_state():
            import pb_registers_on_import  # noqa: F401
        assert "pb_imported" in TOPOLOGIES
    finally:  # the outer fixture would keep it too: this test's import is removed by hand
        TOPOLOGIES._items.pop("pb_imported", None)
        sys.modules.pop("pb_registers_on_import", None)


def _shuffled(seed: int | None) -> list[tuple[str, int]]:
    items = [SimpleNamespace(path=Path(f"tests/test_{f}.py"), n=n)
             for f in "abcdef" for n in range(5)]
    config = SimpleNamespace(getoption=lambda name: seed)
    pytest_collection_modifyitems(config, items)
    return [(item.path.stem, item.n) for item in items]


def test_a_shuffle_seed_permutes_files_and_their_tests_keeping_each_file_together() -> None:
    collected = _shuffled(None)
    once, again, other = _shuffled(3), _shuffled(3), _shuffled(4)
    assert once == again and sorted(once) == collected and once != collected != other != once
    files = [stem for stem, _ in once]
    assert all(files.count(stem) == 5 for stem in set(files))
    assert sum(a != b for a, b in itertools.pairwise(files)) == 5  # contiguous
