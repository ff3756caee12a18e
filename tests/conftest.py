"""Shared fixtures: the embedded digits dataset, loaded once."""

from __future__ import annotations

import os
import tempfile

import pytest

from privbench.data import Dataset, load_digits

# The accountant's on-disk cache (privbench/accounting/gaussian.py): a fresh folder per session,
# so tests never read entries another run left behind.
os.environ.setdefault("PRIVBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="privbench-cache-"))


@pytest.fixture(scope="session")
def digits() -> Dataset:
    """scikit-learn's digits with privbench's fixed split."""
    return load_digits()


@pytest.fixture
def no_data_places(monkeypatch, tmp_path_factory):
    """No $PRIVBENCH_DATA and no Debian dataset folder: only --data-root is searched."""
    from privbench import datafiles

    monkeypatch.delenv(datafiles.ENV_VAR, raising=False)
    missing = tmp_path_factory.mktemp("no-debian") / "absent"
    monkeypatch.setattr(datafiles, "DEBIAN", {k: (pkg, missing)
                                              for k, (pkg, _) in datafiles.DEBIAN.items()})
