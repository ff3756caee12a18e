"""Shared fixtures: the embedded digits dataset, loaded once."""

from __future__ import annotations

import pytest

from privbench.data import Dataset, load_digits


@pytest.fixture(scope="session")
def digits() -> Dataset:
    """scikit-learn's digits with privbench's fixed split."""
    return load_digits()
