"""Cross-check (opt-in): privbench's RMIA and LiRA against ML Privacy Meter's scoring of the same
signals (tests/cross_check/mlpm.py), and LiRA per variance mode at 16 and 64 references
(tests/cross_check/lira_variance.py's scoring). It needs a checkout of
privacytrustlab/ml_privacy_meter named by $PRIVBENCH_MLPM and skips, saying so, without one:

    git clone https://github.com/privacytrustlab/ml_privacy_meter /tmp/mlpm
    PRIVBENCH_MLPM=/tmp/mlpm python -m pytest tests/cross_check -rs
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

MLPM = os.environ.get("PRIVBENCH_MLPM")

pytestmark = pytest.mark.skipif(
    not MLPM, reason="no ML Privacy Meter checkout given: set PRIVBENCH_MLPM to one "
    "(git clone https://github.com/privacytrustlab/ml_privacy_meter)")

# (privbench score, ML Privacy Meter score) pairs scored on the same signals
PAIRS = (("rmia", "rmia"), ("lira", "lira"), ("lira_fixed", "lira_fixed"))


def test_privbench_scores_as_ml_privacy_meter_does() -> None:
    import torch

    from privbench.metrics.roc import paired_auc_difference
    from tests.cross_check.mlpm import (
        _load_aggregate_signals,
        _load_run_rmia,
        export,
        mlpm_scores,
        privbench_scores,
    )

    repo = Path(MLPM or "")
    torch.set_num_threads(1)
    run_rmia, aggregate = _load_run_rmia(repo), _load_aggregate_signals(repo)
    data = export(rounds=60, refs=4, seed=0)
    ours = [privbench_scores(it) for it in data["victims"]]
    theirs = [mlpm_scores(it, run_rmia, aggregate) for it in data["victims"]]
    labels = np.concatenate([it["labels"] for it in data["victims"]])
    for mine, other in PAIRS:
        d = paired_auc_difference(np.concatenate([o[mine] for o in ours]),
                                  np.concatenate([t[other] for t in theirs]), labels)
        # the same attack on the same signals: the paired interval of the AUC difference
        # holds 0 (a failure rate of 5 % per pair if they were identical in distribution)
        assert d["ci"][0] <= 0 <= d["ci"][1], (mine, d)


@pytest.mark.parametrize("k", [16, 64])
def test_lira_variance_modes_match_ml_privacy_meter_on_identical_signals(k: int) -> None:
    """privbench's LiRA per variance mode against ML Privacy Meter's `fix_variance` of the same
    estimate, on one set of synthetic signals (k balanced references, spreads differing 10x
    across candidates): per example the same scores; global within the paired interval (its
    sigma is pooled per side where ML Privacy Meter takes the std of every IN value); and
    "auto" scores as the mode its rule names for k references."""
    from privbench.metrics.roc import paired_auc_difference
    from privbench.plugins import load_plugins
    from privbench.registry import ATTACKS
    from tests.attacks.test_lira import _signals
    from tests.cross_check.mlpm import _load_aggregate_signals, mlpm_lira

    load_plugins()
    aggregate = _load_aggregate_signals(Path(MLPM or ""))
    inp, member = _signals(k, n=1000, seed=2)
    cls = ATTACKS.get("lira")

    def theirs(fixed: bool) -> np.ndarray:
        return mlpm_lira(aggregate, member, inp.target.logit[0], inp.reference.logit,
                         inp.in_mask, fixed)

    per, glob = (cls(cls.Config(variance=v)).score(inp) for v in ("per_example", "global"))
    np.testing.assert_allclose(per, theirs(False), rtol=1e-6, atol=1e-6)
    d = paired_auc_difference(glob, theirs(True), member)
    assert d["ci"][0] <= 0 <= d["ci"][1], d
    auto = cls()
    fixed = auto.variance_choice(k)["variance"] == "global"
    assert fixed == (k < 64)
    np.testing.assert_allclose(auto.score(inp), glob if fixed else per)
