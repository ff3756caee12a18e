"""The accountant's on-disk cache (privbench/accounting/gaussian.py): a later process looks a
composed schedule up instead of recomposing it; a different key or a damaged entry recomposes."""

from __future__ import annotations

import pytest

from privbench.accounting import gaussian

TERMS = ((0.1, 1.1, 60, "poisson"),)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVBENCH_CACHE_DIR", str(tmp_path))
    gaussian._epsilon_cached.cache_clear()
    yield tmp_path
    gaussian._epsilon_cached.cache_clear()


def _forbid(monkeypatch):
    def boom(*args):
        raise AssertionError("recomposed although cached")

    monkeypatch.setattr(gaussian, "_compose", boom)


def test_a_new_process_reads_the_composed_epsilon_from_disk(fresh, monkeypatch):
    opts = gaussian.DEFAULT_OPTIONS
    eps = gaussian._epsilon_cached(TERMS, 1e-5, "rdp", opts)
    assert eps > 0 and len(list(fresh.glob("*.json"))) == 1
    gaussian._epsilon_cached.cache_clear()  # as in a new process
    real = gaussian._compose
    _forbid(monkeypatch)
    assert gaussian._epsilon_cached(TERMS, 1e-5, "rdp", opts) == eps
    gaussian._epsilon_cached.cache_clear()
    with pytest.raises(AssertionError, match="recomposed"):  # another delta is another key
        gaussian._epsilon_cached(TERMS, 1e-6, "rdp", opts)
    monkeypatch.setattr(gaussian, "_compose", real)
    assert gaussian._epsilon_cached(TERMS, 1e-6, "rdp", opts) > eps


def test_damaged_or_foreign_entries_are_recomposed(fresh):
    opts = gaussian.DEFAULT_OPTIONS
    eps = gaussian._epsilon_cached(TERMS, 1e-5, "rdp", opts)
    (entry,) = fresh.glob("*.json")
    entry.write_text('{"key": "something else", "epsilon": 0.0}')
    gaussian._epsilon_cached.cache_clear()
    assert gaussian._epsilon_cached(TERMS, 1e-5, "rdp", opts) == eps
    entry.write_text("{not json")
    gaussian._epsilon_cached.cache_clear()
    assert gaussian._epsilon_cached(TERMS, 1e-5, "rdp", opts) == eps


def test_cache_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVBENCH_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    gaussian._epsilon_cached.cache_clear()
    assert gaussian.cache_dir() is None
    assert gaussian._epsilon_cached(TERMS, 1e-5, "rdp", gaussian.DEFAULT_OPTIONS) > 0
    assert not list(tmp_path.rglob("*.json"))
    gaussian._epsilon_cached.cache_clear()
