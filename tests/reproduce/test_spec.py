"""`privbench.reproduce.spec`: a reproduction's declaration refuses what cannot be judged."""

from __future__ import annotations

import dataclasses

import pytest

from privbench.reproduce import REPRODUCTIONS, load


def test_an_unknown_metric_is_refused():
    load()
    with pytest.raises(Exception, match="metric 'f1'; accepted: accuracy, node_accuracy_mean"):
        dataclasses.replace(REPRODUCTIONS.get("dpps"), metric="f1")


def test_an_ordering_with_no_shared_grid_value_is_refused():
    load()
    r = REPRODUCTIONS.get("defl_vp")
    with pytest.raises(Exception, match="no grid value where both rows are run"):
        dataclasses.replace(r, methods=tuple(dataclasses.replace(m, grid=(8.0,))
                                             if m.label == "DeFL-VP" else m
                                             for m in r.methods))
