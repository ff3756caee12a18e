"""privbench.metrics.audit against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from privbench.metrics.audit import (
    clopper_pearson,
    eps_from_rates,
    eps_lower_bound_roc,
    group_epsilon,
    one_run_audit,
    one_run_audit_sweep,
    steinke_eps_lower_bound,
    steinke_p_value,
)
from privbench.metrics.roc import roc_curve, roc_summary, tpr_at_fpr


def test_clopper_pearson_hand_values() -> None:
    # 0 of 10: upper = 1 - (alpha/2)^(1/n) = 1 - 0.025^(0.1) = 0.30850 (closed form).
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1, rel=1e-9)
    # 10 of 10 mirrors it.
    lo, hi = clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1, rel=1e-9)
    # 5 of 10, textbook value (0.1871, 0.8129).
    lo, hi = clopper_pearson(5, 10)
    assert lo == pytest.approx(0.18709, abs=1e-4) and hi == pytest.approx(0.81291, abs=1e-4)


def test_eps_from_rates() -> None:
    assert eps_from_rates(0.5, 0.05) == pytest.approx(math.log(10))
    assert eps_from_rates(0.9, 0.5) == pytest.approx(math.log(0.5 / 0.1))  # TNR/FNR side
    assert eps_from_rates(0.3, 0.3) == 0.0
    assert eps_from_rates(0.5, 0.0) == math.inf
    assert eps_from_rates(0.5, 0.05, delta=0.1) == pytest.approx(math.log(0.4 / 0.05))


def test_eps_lower_bound_roc_perfect_separation() -> None:
    # 20 members all above 20 non-members. Best threshold: TP = 20, FP = 0.
    # No correction: TPR_lo = 0.025^(1/20), FPR_hi = 1 - 0.025^(1/20).
    s = np.r_[np.arange(20) + 100.0, np.arange(20.0)]
    y = np.r_[np.ones(20), np.zeros(20)]
    res = eps_lower_bound_roc(s, y, correction="none")
    b = 0.025 ** (1 / 20)
    assert res["epsilon_lb"] == pytest.approx(math.log(b / (1 - b)), rel=1e-6)
    # Jeffreys-smoothed rates at TP = 20, FP = 0: (20.5 / 21) / (0.5 / 21) = 41 (finite)
    assert res["point_estimate"] == pytest.approx(math.log(41))
    bonf = eps_lower_bound_roc(s, y)  # 40 distinct thresholds x 2 sides = 80 tests
    a = 0.05 / 80
    b2 = (a / 2) ** (1 / 20)
    assert bonf["tests"] == 80
    assert bonf["epsilon_lb"] == pytest.approx(math.log(b2 / (1 - b2)), rel=1e-6)
    assert bonf["epsilon_lb"] < res["epsilon_lb"]
    # group privacy divides by k
    assert eps_lower_bound_roc(s, y, correction="none", k=2)["epsilon_lb"] == pytest.approx(
        res["epsilon_lb"] / 2)


def test_eps_lower_bound_roc_no_signal_is_zero() -> None:
    # Identical member / non-member score multisets: no threshold gives a positive bound.
    s = np.r_[np.arange(50.0), np.arange(50.0)]
    y = np.r_[np.ones(50), np.zeros(50)]
    assert eps_lower_bound_roc(s, y, correction="none")["epsilon_lb"] == 0.0


def test_steinke_pure_dp_closed_form() -> None:
    # delta = 0 and all r guesses right: p(eps) = q^r, so eps_LB = logit(0.05^(1/r)).
    q = 0.05 ** (1 / 10)
    expected = math.log(q / (1 - q))  # 1.0517
    assert steinke_eps_lower_bound(10, 10, m=10) == pytest.approx(expected, abs=1e-5)
    assert steinke_p_value(10, 10, expected) == pytest.approx(0.05, rel=1e-4)
    # half right is what eps = 0 gives on average: no bound.
    assert steinke_eps_lower_bound(10, 5, m=10) == 0.0


def test_steinke_delta_term_hand_value() -> None:
    # r = 2, v = 2, eps = 0 (q = 1/2): beta = 1/4; alpha = max(P[Bin=1], (P[Bin=1] + P[Bin=0])/2)
    # = max(1/2, 3/8) = 1/2; p = 1/4 + 2 * m * delta * 1/2 with m = 4, delta = 0.01 -> 0.29.
    assert steinke_p_value(2, 2, 0.0, delta=0.01, m=4) == pytest.approx(0.29)
    # delta only loosens: the bound with delta > 0 is below the pure one.
    assert steinke_eps_lower_bound(100, 90, 200, 1e-5) <= steinke_eps_lower_bound(100, 90, 200)


def test_one_run_audit_counts() -> None:
    scores = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], dtype=float)
    included = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 0], dtype=bool)
    res = one_run_audit(scores, included, k_plus=3, k_minus=3)
    # top 3: in, in, out -> 2 right; bottom 3 (scores 2, 1, 0): out, in, out -> 2 right.
    assert (res["guesses"], res["correct"]) == (6, 4)
    assert res["epsilon_lb"] == 0.0  # 4 / 6 is not significant
    perfect = one_run_audit(scores, scores >= 5, k_plus=5, k_minus=5)
    assert perfect["correct"] == 10
    assert perfect["epsilon_lb"] == pytest.approx(steinke_eps_lower_bound(10, 10, 10), abs=1e-6)
    sweep = one_run_audit_sweep(scores, scores >= 5, steps=1)  # grid contains (5, 5)
    assert sweep["optimistic"] and sweep["epsilon_lb"] >= perfect["epsilon_lb"] - 1e-9


def test_intervals_and_exact_corners() -> None:
    from privbench.metrics.roc import (
        _weighted_auc,
        auc_ci,
        bootstrap_aucs,
        clopper_pearson,
        paired_auc_difference,
        roc_steps,
    )

    rng = np.random.default_rng(3)
    y = np.r_[np.ones(300), np.zeros(500)].astype(bool)
    s = np.round(rng.normal(size=800) + 0.6 * y, 1)  # many ties
    curve = roc_curve(s, y)
    # unit weights reproduce scikit-learn's AUC (ties counted 1/2)
    assert _weighted_auc(s, y, np.ones((1, 800)))[0] == pytest.approx(curve.auc)
    lo, hi = auc_ci(s, y)
    assert lo < curve.auc < hi and hi - lo < 0.12
    assert auc_ci(s, y) == [lo, hi]  # explicit seeded generator: reproducible
    # a paired interval of an attack against itself plus tiny jitter is narrow around 0
    diff = paired_auc_difference(s, s + 1e-9 * rng.normal(size=800), y)
    assert diff["ci"][0] <= 0 <= diff["ci"][1] and diff["ci"][1] - diff["ci"][0] < 0.01
    assert bootstrap_aucs(np.stack([s, -s]), y, 50).shape == (2, 50)
    # Clopper-Pearson: 0/100 -> [0, 0.0362]; 5/100 -> [0.0164, 0.1128] (standard tables)
    assert clopper_pearson(0, 100) == pytest.approx([0.0, 0.03622], abs=1e-4)
    assert clopper_pearson(5, 100) == pytest.approx([0.01643, 0.11283], abs=1e-4)
    # the exact corners give the same TPR as the full curve at any FPR
    steps = roc_steps(curve)
    for f in (0.002, 0.01, 0.0137, 0.1, 0.33):
        corner = max(t for x, t in zip(steps["fpr"], steps["tpr"], strict=True) if x <= f + 1e-12)
        assert corner == tpr_at_fpr(curve, f)["tpr"]
    summ = roc_summary(s, y)
    assert summ["auc_ci"] == [lo, hi]
    assert summ["tpr_at_1%_fpr_ci"][0] <= summ["tpr_at_1%_fpr"] <= summ["tpr_at_1%_fpr_ci"][1]
    assert summ["tpr_at_0.1%_fpr_ci"] is None  # 500 non-members do not resolve 0.1 %
    log = summ["roc"]["log"]
    for f in (0.01, 0.1):  # the standard FPRs are exact points of the stored curve
        assert log["tpr"][log["fpr"].index(f)] == tpr_at_fpr(curve, f)["tpr"]


def test_fnr_side_at_full_recall_is_not_voided() -> None:
    # 10 non-members below 20 members below 10 non-members. At the threshold of the lowest
    # member TP = 20 (FNR = 0/20) and TNR = 10/20: the tnr/fnr side is the informative one,
    # FNR_hi = 1 - (alpha/2)^(1/20) (Clopper-Pearson for 0 of 20), not 1.
    s = np.r_[np.arange(20) + 100.0, np.arange(10.0), np.arange(10) + 200.0]
    y = np.r_[np.ones(20), np.zeros(20)]
    res = eps_lower_bound_roc(s, y, correction="none")
    tnr_lo = beta.ppf(0.025, 10, 11)
    fnr_hi = 1 - 0.025 ** (1 / 20)
    assert res["side"] == "tnr/fnr"
    assert res["epsilon_lb"] == pytest.approx(math.log(tnr_lo / fnr_hi), rel=1e-6)


def test_group_privacy_converts_delta() -> None:
    # k = 2: (eps, delta)-DP gives (2 eps, 2 e^eps delta) for pairs, so the bound solves
    # t = f x^2 + 2 delta x with x = e^eps: x = (-delta + sqrt(delta^2 + f t)) / f.
    t, f, delta = 0.9, 0.01, 0.02
    x = (-delta + math.sqrt(delta**2 + f * t)) / f
    got = float(group_epsilon(np.array([t]), np.array([f]), delta, 2)[0])
    assert got == pytest.approx(math.log(x), rel=1e-9)
    assert got < math.log((t - delta) / f) / 2  # dividing by k with delta unchanged over-claims
    assert float(group_epsilon(np.array([t]), np.array([f]), delta, 1)[0]) == pytest.approx(
        math.log((t - delta) / f))
    assert float(group_epsilon(np.array([0.02]), np.array([0.01]), delta, 2)[0]) == -math.inf
