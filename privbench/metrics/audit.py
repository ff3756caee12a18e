"""Empirical epsilon lower bounds (privacy auditing): pure functions.

Two estimators:

1. **From an attack's ROC with Clopper-Pearson intervals** (Jagielski, Ullman, Oprea, "Auditing
   Differentially Private Machine Learning: How Private is Private SGD?", NeurIPS 2020, §3-4; the
   hypothesis-testing view of (epsilon, delta)-DP of Kairouz, Oh, Viswanath 2015): an
   (epsilon, delta)-DP mechanism forces every test to satisfy TPR <= e^eps FPR + delta and
   TNR <= e^eps FNR + delta. At each threshold the member count above it gives a Clopper-Pearson
   *lower* bound on TPR, the non-member count an *upper* bound on FPR (one-sided alpha/2 each, so
   both hold jointly with probability >= 1 - alpha), and

       eps_LB = max over thresholds and both sides of ln((TPR_lo - delta) / FPR_hi)

   for one copy of the audited record. With k copies (group privacy: an (eps, delta)-DP
   mechanism is (k eps, k e^{(k-1) eps} delta)-DP for groups of k; Dwork and Roth 2014, and
   Vadhan 2017 Lemma 2.2) the bound is the eps solving TPR_lo = e^{k eps} FPR_hi +
   k e^{(k-1) eps} delta (`group_epsilon`), which is ln((TPR_lo - delta) / FPR_hi) / k only when
   delta = 0 or k = 1. Choices and deviations:
   * Jagielski et al. (and TF Privacy's `EpsilonLowerBound`) maximise over thresholds without
     correction, which is optimistic (the max of many lower bounds is not a 1 - alpha lower
     bound). `correction="bonferroni"` (default) splits alpha over the (threshold, side) pairs
     examined, so the statement stays a valid-in-spirit 1 - alpha bound for CI regression tests;
     `correction="none"` reproduces the paper's procedure.
   * Jagielski et al. train many models (one trial = one training run). privbench's single-model
     ROC treats each member / non-member as one trial; with a random member / held-out split this
     is the standard heuristic, not a formal audit. The one-run audit below is the formal one.

2. **One-run canary audit** (Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training
   Run", NeurIPS 2023, Theorem 3.1 / Prop. 5.2 as implemented in ML Privacy Meter
   `p_value_DP_audit`): m canaries, each included independently with probability 1/2; the auditor
   guesses "in" for its top k+ scores and "out" for its bottom k-, r = k+ + k- guesses of which v
   are correct. Under (eps, delta)-DP, with q = e^eps / (1 + e^eps),

       p(eps) = P[Bin(r, q) >= v] + 2 m delta * max_{i=1..v} (1/i) sum_{j=1..i} P[Bin(r, q) = v - j]

   and eps_LB is the largest eps whose p-value is still below p* (0.05): "eps-DP" is rejected at
   level p*. k+ and k- should be fixed before looking at the scores (defaults here); sweeping them
   (`one_run_audit_sweep`) is selection-optimistic and flagged as such.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta as _beta
from scipy.stats import binom

from privbench.errors import ConfigError
from privbench.metrics.binomial import exact_interval


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided exact (Clopper-Pearson) 1 - alpha interval for a binomial proportion k / n.

    Lower = Beta^-1(alpha/2; k, n - k + 1) (0 when k = 0); upper = Beta^-1(1 - alpha/2; k + 1,
    n - k) (1 when k = n). Each side alone holds with probability >= 1 - alpha/2.
    """
    if n <= 0 or not 0 <= k <= n:
        raise ConfigError(f"Clopper-Pearson needs 0 <= k <= n, n > 0; got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    return exact_interval(k, n, alpha)


def eps_from_rates(tpr: float, fpr: float, delta: float = 0.0) -> float:
    """Point estimate of the epsilon a (TPR, FPR) pair needs: the larger of
    ln((TPR - delta) / FPR) and ln((1 - FPR - delta) / (1 - TPR)), floored at 0 (inf when a
    denominator is 0 and its numerator positive)."""
    def ratio(num: float, den: float) -> float:
        if num <= 0:
            return 0.0
        return math.inf if den <= 0 else max(0.0, math.log(num / den))

    return max(ratio(tpr - delta, fpr), ratio(1 - fpr - delta, 1 - tpr))


def group_epsilon(tpr: np.ndarray, fpr: np.ndarray, delta: float, k: int) -> np.ndarray:
    """Per pair, the smallest eps >= 0 with tpr <= e^{k eps} fpr + k e^{(k-1) eps} delta.

    The individual epsilon an (eps, delta)-DP mechanism needs so that its k-group guarantee
    (k eps, k e^{(k-1) eps} delta) allows the test (tpr, fpr) (group privacy; see the module
    docstring). k = 1 gives ln((tpr - delta) / fpr); -inf where no eps >= 0 is needed
    (tpr <= fpr + k delta) and inf where none suffices (fpr = 0).

    Args:
        tpr, fpr: (T,) rates (a lower bound on the one, an upper bound on the other).
        delta: the audited delta.
        k: group size >= 1.
    """
    t, f = np.asarray(tpr, dtype=np.float64), np.asarray(fpr, dtype=np.float64)
    if k == 1 or delta == 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.log(np.clip(t - delta, 0, None) / f) / k
        return np.nan_to_num(out, nan=-np.inf)

    def excess(e: np.ndarray) -> np.ndarray:  # > 0 while eps is too small for the test
        with np.errstate(over="ignore", invalid="ignore"):
            return t - np.exp(k * e) * f - k * np.exp((k - 1) * e) * delta

    lo, hi = np.zeros_like(t), np.full_like(t, 1.0)
    for _ in range(200):  # bracket: double hi until the test is allowed (finite unless f = 0)
        grow = excess(hi) > 0
        if not grow.any() or hi.max() > 1e4:
            break
        hi = np.where(grow, 2 * hi, hi)
    for _ in range(80):  # bisection on [lo, hi]
        mid = 0.5 * (lo + hi)
        up = excess(mid) > 0
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    out = np.where(excess(np.zeros_like(t)) > 0, hi, -np.inf)
    return np.where(excess(hi) > 0, np.inf, out)


def eps_lower_bound_roc(scores: ArrayLike, labels: ArrayLike, delta: float = 0.0,
                        alpha: float = 0.05, k: int = 1,
                        correction: str = "bonferroni") -> dict[str, object]:
    """Clopper-Pearson epsilon lower bound from membership scores (Jagielski et al. 2020).

    Args:
        scores: (N,) higher = member.
        labels: (N,) 1 for members.
        delta: the delta of the claim being audited.
        alpha: 1 - confidence of the bound.
        k: group size (copies of the audited record); the bound is the individual epsilon whose
            k-group guarantee (k eps, k e^{(k-1) eps} delta) the test needs (`group_epsilon`).
        correction: "bonferroni" (alpha split over all (threshold, side) pairs examined) or
            "none" (the paper's per-threshold level; optimistic).

    Returns:
        {"epsilon_lb", "threshold", "side" ("tpr/fpr" or "tnr/fnr"), "tpr_lo", "fpr_hi",
         "alpha", "correction", "tests", "point_estimate" (the best threshold's epsilon from
         Jeffreys-smoothed rates, without confidence intervals)}.
    """
    if correction not in ("bonferroni", "none"):
        raise ConfigError(f"unknown correction {correction!r}; accepted: bonferroni, none")
    if k < 1:
        raise ConfigError(f"group size k must be >= 1, got {k}")
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel().astype(bool)
    if not np.isfinite(s).all():
        raise ConfigError("membership scores must be finite")
    if s.shape != y.shape or y.all() or not y.any():
        raise ConfigError("scores and labels must align and contain members and non-members")
    n1, n0 = int(y.sum()), int((~y).sum())
    thresholds = np.unique(s)
    # counts at "predict member iff score >= t", for every distinct t (vectorised).
    tp = (s[y][None, :] >= thresholds[:, None]).sum(axis=1)  # (T,)
    fp = (s[~y][None, :] >= thresholds[:, None]).sum(axis=1)  # (T,)
    tests = 2 * len(thresholds)
    a = alpha / tests if correction == "bonferroni" else alpha
    # one-sided alpha/2 per rate (the two-sided CP interval at level a)
    tpr_lo = np.where(tp == 0, 0.0, _beta.ppf(a / 2, tp, n1 - tp + 1))
    fpr_hi = np.where(fp == n0, 1.0, _beta.ppf(1 - a / 2, fp + 1, n0 - fp))
    tnr_lo = np.where(fp == n0, 0.0, _beta.ppf(a / 2, n0 - fp, fp + 1))
    # FNR = (n1 - tp) / n1: its upper bound is 1 when every member is missed (tp = 0)
    fnr_hi = np.where(tp == 0, 1.0, _beta.ppf(1 - a / 2, n1 - tp + 1, np.maximum(tp, 1)))
    e1 = group_epsilon(tpr_lo, fpr_hi, delta, k)
    e2 = group_epsilon(tnr_lo, fnr_hi, delta, k)
    side = 0 if e1.max() >= e2.max() else 1
    best = int(np.argmax(e1 if side == 0 else e2))
    eps = max(0.0, float((e1 if side == 0 else e2)[best]))
    # point estimate from Jeffreys-smoothed rates (c + 1/2) / (n + 1): the raw rates put 0 in a
    # denominator at the extreme thresholds of every ROC (the top member above all non-members),
    # which made the estimate inf in every result
    point = max(0.0, float(max(
        group_epsilon((tp + 0.5) / (n1 + 1), (fp + 0.5) / (n0 + 1), delta, k).max(),
        group_epsilon((n0 - fp + 0.5) / (n0 + 1), (n1 - tp + 0.5) / (n1 + 1), delta, k).max())))
    return {
        "epsilon_lb": eps,
        "threshold": float(thresholds[best]),
        "side": "tpr/fpr" if side == 0 else "tnr/fnr",
        "tpr_lo": float(tpr_lo[best] if side == 0 else tnr_lo[best]),
        "fpr_hi": float(fpr_hi[best] if side == 0 else fnr_hi[best]),
        "alpha": alpha,
        "correction": correction,
        "tests": tests,
        "point_estimate": point,
        "method": "clopper-pearson (Jagielski et al. 2020)",
    }


def steinke_p_value(r: int, v: int, eps: float, delta: float = 0.0, m: int = 0) -> float:
    """p-value of observing >= v correct out of r guesses under (eps, delta)-DP, m canaries
    (Steinke, Nasr, Jagielski 2023)."""
    if not 0 <= v <= r:
        raise ConfigError(f"need 0 <= v <= r, got v={v}, r={r}")
    q = 1.0 / (1.0 + math.exp(-eps))  # e^eps / (1 + e^eps), overflow-safe
    p = float(binom.sf(v - 1, r, q))  # P[Bin(r, q) >= v]
    if delta > 0 and v > 0:
        pmf = binom.pmf(v - np.arange(1, v + 1), r, q)  # P[Bin = v - j], j = 1..v
        avg = np.cumsum(pmf) / np.arange(1, v + 1)  # (1/i) sum_{j<=i}
        p += 2 * m * delta * float(avg.max())
    return min(1.0, p)


def steinke_eps_lower_bound(r: int, v: int, m: int, delta: float = 0.0,
                            p_star: float = 0.05, tol: float = 1e-6) -> float:
    """The largest eps whose p-value is below p_star (0 when even eps = 0 is not rejected)."""
    if r == 0 or steinke_p_value(r, v, 0.0, delta, m) >= p_star:
        return 0.0
    hi = 1.0
    while steinke_p_value(r, v, hi, delta, m) < p_star:
        hi *= 2
        if hi > 1e3:
            return math.inf
    lo = 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if steinke_p_value(r, v, mid, delta, m) < p_star:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_audit(scores: ArrayLike, included: ArrayLike, k_plus: int, k_minus: int,
                  delta: float = 0.0, p_star: float = 0.05) -> dict[str, object]:
    """Steinke et al.'s one-run audit from canary scores.

    Args:
        scores: (m,) canary scores, higher = guessed "in".
        included: (m,) bool, whether each canary was actually included (Bernoulli(1/2)).
        k_plus: guesses "in" for the k_plus highest scores.
        k_minus: guesses "out" for the k_minus lowest scores.
        delta: delta of the claim audited.
        p_star: significance level.

    Returns:
        {"epsilon_lb", "guesses" r, "correct" v, "k_plus", "k_minus", "canaries" m, "p_star",
         "method"}.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included).ravel().astype(bool)
    m = s.size
    if not np.isfinite(s).all():
        raise ConfigError("canary scores must be finite")
    if inc.size != m or k_plus < 0 or k_minus < 0 or k_plus + k_minus > m:
        raise ConfigError(f"need k_plus + k_minus <= m = {m} and aligned scores/included")
    order = np.argsort(-s, kind="stable")
    v = int(inc[order[:k_plus]].sum()) + int((~inc[order[m - k_minus:]]).sum() if k_minus else 0)
    r = k_plus + k_minus
    return {"epsilon_lb": steinke_eps_lower_bound(r, v, m, delta, p_star), "guesses": r,
            "correct": v, "k_plus": k_plus, "k_minus": k_minus, "canaries": m, "p_star": p_star,
            "method": "one-run (Steinke, Nasr, Jagielski 2023)"}


def one_run_audit_sweep(scores: ArrayLike, included: ArrayLike, delta: float = 0.0,
                        p_star: float = 0.05, steps: int | None = None) -> dict[str, object]:
    """Best one-run bound over a grid of (k+, k-) (as ML Privacy Meter does; selection-optimistic,
    so the result carries `"optimistic": True`)."""
    m = int(np.asarray(scores).size)
    step = max(1, steps or int(math.sqrt(m)))
    best: dict[str, object] = {"epsilon_lb": -1.0}
    for kp in range(0, m + 1, step):
        for km in range(0, m - kp + 1, step):
            if kp + km == 0:
                continue
            res = one_run_audit(scores, included, kp, km, delta, p_star)
            if float(res["epsilon_lb"]) > float(best["epsilon_lb"]):  # type: ignore[arg-type]
                best = res
    return {**best, "optimistic": True}


def roc_cap(n_members: int, n_nonmembers: int, delta: float = 0.0, alpha: float = 0.05) -> float:
    """The `eps_lower_bound_roc` of a perfect attack with these sample counts: distinct scores
    (as the attacks produce), every member above every non-member. An audit whose cap is below
    the ε it checks cannot fail (0.70 for 20 / 20 samples at delta = 1e-5, 2.54 for 180 / 60)."""
    scores = np.arange(n_members + n_nonmembers, dtype=np.float64)
    labels = scores >= n_nonmembers
    return float(eps_lower_bound_roc(scores, labels, delta, alpha)["epsilon_lb"])


def one_run_cap(canaries: int, guesses: int, delta: float = 0.0, p_star: float = 0.05) -> float:
    """The one-run bound of a perfect guesser (all `guesses` correct) with m = `canaries`."""
    return steinke_eps_lower_bound(guesses, guesses, canaries, delta, p_star)


def canaries_for_cap(target: float, guess_fraction: float = 1.0, delta: float = 0.0,
                     p_star: float = 0.05, limit: int = 10**6) -> int | None:
    """The fewest canaries m whose `one_run_cap` with round(m guess_fraction / 2) "in" and as
    many "out" guesses exceeds `target` (None when no m up to `limit` does: the 2 m delta term
    of the p-value grows with m, so the cap peaks)."""
    def cap(m: int) -> float:
        k = round(m * guess_fraction / 2)
        return one_run_cap(m, 2 * k, delta, p_star) if k else 0.0

    hi = 2
    while cap(hi) <= target:
        if hi >= limit:
            return None
        hi = min(limit, hi * 2)
    lo = hi // 2  # cap(lo) <= target < cap(hi) (lo = 1: no guess)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if cap(mid) > target else (mid, hi)
    return hi
