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
