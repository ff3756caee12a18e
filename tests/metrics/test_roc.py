"""privbench.metrics.roc against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from privbench.errors import ConfigError
from privbench.metrics.roc import resolves, roc_curve, roc_points, roc_summary, tpr_at_fpr


def test_auc_hand_example() -> None:
    # scikit-learn's doc example: pairs (pos, neg) ordered correctly 3 of 4 -> AUC 0.75.
    curve = roc_curve([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    assert curve.auc == pytest.approx(0.75)
    assert (curve.n_members, curve.n_nonmembers) == (2, 2)


def test_tpr_at_fpr_and_resolution() -> None:
    # 100 non-members with scores 0..99, 10 members: 5 above every non-member, 5 at the bottom.
    neg = np.arange(100.0)
    pos = np.array([200, 201, 202, 203, 204, -1, -2, -3, -4, -5], dtype=float)
    s = np.concatenate([pos, neg])
    y = np.r_[np.ones(10), np.zeros(100)]
    curve = roc_curve(s, y)
    at1 = tpr_at_fpr(curve, 0.01)
    assert at1["resolved"] and at1["tpr"] == pytest.approx(0.5)  # FPR 0 already gives 5/10
    at01 = tpr_at_fpr(curve, 0.001)
    assert not at01["resolved"] and at01["tpr"] is None and at01["min_nonmembers"] == 1000
    at10 = tpr_at_fpr(curve, 0.1)  # threshold 90: 10 FP -> FPR 0.1, TPR still 0.5
    assert at10["tpr"] == pytest.approx(0.5)
    assert resolves(100, 0.01) and not resolves(99, 0.01)
    summ = roc_summary(s, y)
    assert summ["tpr_at_1%_fpr"] == pytest.approx(0.5)
    assert summ["tpr_at_0.1%_fpr"] is None
    assert summ["tpr_at_0_fpr"] == pytest.approx(0.5)
    # AUC: 5 members beat all 100; 5 lose to all -> 0.5
    assert summ["auc"] == pytest.approx(0.5)


def test_roc_points_step_function() -> None:
    curve = roc_curve([3, 2, 1, 0], [1, 0, 1, 0])  # TPR .5 at FPR 0; 1 at FPR .5
    pts = roc_points(curve, "linear", 5)  # FPR 0, .25, .5, .75, 1 and the standard FPRs
    assert pts["fpr"] == pytest.approx([0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 1])
    assert pts["tpr"] == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0])
    log = roc_points(curve, "log", 3)
    assert log["fpr"][0] == pytest.approx(0.5) and log["fpr"][-1] == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        roc_points(curve, "cubic")


def test_roc_rejects_one_class() -> None:
    with pytest.raises(ConfigError):
        roc_curve([1, 2], [1, 1])
