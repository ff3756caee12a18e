"""ROC curves, AUC and TPR at low FPR for membership inference (scikit-learn).

Convention: a higher score means "more likely a member"; labels are 1 for members, 0 for
non-members. Following LiRA (Carlini et al., "Membership Inference Attacks From First Principles",
IEEE S&P 2022, §III-B) attacks are compared by their TPR at a low FPR, read off the empirical ROC
as the largest TPR among thresholds whose FPR is at most the target.

A target FPR alpha is *resolved* only when there are enough non-members for one false positive to
fit under it: n_nonmembers * alpha >= 1 (so 1% FPR needs >= 100 non-members and 0.1% needs
>= 1,000; the practice of LiRA and RMIA). An unresolved TPR is reported
as None with `resolved: False`; the TPR at FPR = 0 (always computable) is reported separately.

Uncertainty (95 % intervals, in every summary): the AUC's is a stratified percentile bootstrap
(members and non-members resampled separately, `BOOTSTRAPS` resamples from an explicit numpy
generator seeded by `CI_SEED`, so the same scores give the same interval); the TPR at a target FPR
gets the exact Clopper-Pearson binomial interval of its n_members trials (the threshold is taken
as fixed, as in LiRA's and ML Privacy Meter's tables). `paired_auc_difference` bootstraps the
AUC difference of two attacks on the same candidates with shared resamples (a paired interval).
The bootstrap is vectorized: scores are sorted once and every resample's AUC is a weighted
Mann-Whitney sum over tie groups, O(B N) in all.

All functions are pure (numpy in, numpy / JSON-ready dicts out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from privbench.errors import ConfigError
from privbench.metrics.binomial import CI_LEVEL, clopper_pearson

DEFAULT_FPRS = (0.001, 0.01, 0.1)  # the standard target FPRs, kept exactly (not on a grid)
BOOTSTRAPS = 1000
CI_SEED = 0


@dataclass(frozen=True)
class RocCurve:
    """An empirical ROC curve.

    Attributes:
        fpr: (T,) false-positive rates, non-decreasing, from 0 to 1.
        tpr: (T,) true-positive rates.
        thresholds: (T,) score thresholds (predict member when score >= threshold).
        auc: area under the curve.
        n_members: number of positives.
        n_nonmembers: number of negatives.
    """

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    auc: float
    n_members: int
    n_nonmembers: int


def _check(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel().astype(bool)
    if s.shape != y.shape:
        raise ConfigError(f"scores ({s.size}) and labels ({y.size}) differ in length")
    if y.all() or not y.any():
        raise ConfigError("an ROC needs at least one member and one non-member")
    if not np.isfinite(s).all():
        raise ConfigError("membership scores must be finite")
    return s, y


def roc_curve(scores: ArrayLike, labels: ArrayLike) -> RocCurve:
    """The full empirical ROC curve (every threshold kept) and its AUC.

    Args:
        scores: (N,) membership scores, higher = member.
        labels: (N,) 1 / True for members.
    """
    # scikit-learn on first use: the report and the gate read this module's interval helpers
    # without computing a curve, and importing sklearn costs them a second
    from sklearn.metrics import roc_auc_score
    from sklearn.metrics import roc_curve as _sk_roc_curve

    s, y = _check(scores, labels)
    fpr, tpr, thr = _sk_roc_curve(y, s, drop_intermediate=False)
    return RocCurve(fpr, tpr, thr, float(roc_auc_score(y, s)), int(y.sum()), int((~y).sum()))


def resolves(n_nonmembers: int, fpr: float) -> bool:
    """Whether `n_nonmembers` non-members can resolve FPR `fpr` (one false positive fits)."""
    return n_nonmembers * fpr >= 1.0 - 1e-9


def tpr_at_fpr(curve: RocCurve, fpr: float, level: float = CI_LEVEL) -> dict[str, object]:
    """TPR at FPR <= `fpr`, with whether the number of non-members resolves that FPR, and its
    Clopper-Pearson interval at `level`.

    Returns:
        {"fpr": fpr, "tpr": float or None (unresolved), "resolved": bool,
         "min_nonmembers": the number needed to resolve it}.
    """
    if not 0 < fpr <= 1:
        raise ConfigError(f"target FPR must be in (0, 1], got {fpr}")
    ok = resolves(curve.n_nonmembers, fpr)
    value = float(curve.tpr[curve.fpr <= fpr + 1e-12].max()) if ok else None
    ci = (clopper_pearson(round(value * curve.n_members), curve.n_members, level)
          if value is not None else None)
    return {"fpr": fpr, "tpr": value, "ci": ci, "resolved": ok,
            "min_nonmembers": math.ceil(1 / fpr - 1e-9)}


def bootstrap_aucs(scores: ArrayLike, labels: ArrayLike, resamples: int = BOOTSTRAPS,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """AUCs of stratified bootstrap resamples, shared across several score vectors.

    Args:
        scores: (N,) or (A, N) scores of A attacks on the same candidates.
        labels: (N,) membership labels.
        resamples: B.
        rng: the numpy generator (default: seeded with CI_SEED).

    Returns:
        (A, B) AUCs; column b of every row uses the same resampled candidates (paired).
    """
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    y = np.asarray(labels).ravel().astype(bool)
    for row in s:
        _check(row, y)
    rng = rng if rng is not None else np.random.default_rng(CI_SEED)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    w = np.zeros((resamples, len(y)))  # (B, N) multiplicity of each candidate per resample
    w[:, pos] = rng.multinomial(len(pos), np.full(len(pos), 1 / len(pos)), size=resamples)
    w[:, neg] = rng.multinomial(len(neg), np.full(len(neg), 1 / len(neg)), size=resamples)
    return np.stack([_weighted_auc(row, y, w) for row in s])


def _weighted_auc(s: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B,) Mann-Whitney AUC of scores s (N,) under B candidate weightings w (B, N), ties = 1/2."""
    order = np.argsort(s, kind="stable")
    ss, ys, ws = s[order], y[order], w[:, order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # tie groups of the sorted scores
    pos_g = np.add.reduceat(ws * ys, starts, axis=1)  # (B, G) member weight per group
    neg_g = np.add.reduceat(ws * ~ys, starts, axis=1)  # (B, G) non-member weight per group
    below = np.cumsum(neg_g, axis=1) - neg_g  # non-member weight strictly below each group
    hits = (pos_g * (below + 0.5 * neg_g)).sum(axis=1)
    return hits / (pos_g.sum(axis=1) * neg_g.sum(axis=1))


def _percentile(values: np.ndarray, level: float = CI_LEVEL) -> list[float]:
    a = 100 * (1 - level) / 2
    lo, hi = np.percentile(values, [a, 100 - a])
    return [float(lo), float(hi)]


def auc_ci(scores: ArrayLike, labels: ArrayLike, resamples: int = BOOTSTRAPS,
           rng: np.random.Generator | None = None, level: float = CI_LEVEL) -> list[float]:
    """Stratified-bootstrap interval [lo, hi] of the AUC (95 % by default)."""
    return _percentile(bootstrap_aucs(scores, labels, resamples, rng)[0], level)


def paired_auc_difference(scores_a: ArrayLike, scores_b: ArrayLike, labels: ArrayLike,
                          resamples: int = BOOTSTRAPS,
                          rng: np.random.Generator | None = None) -> dict[str, object]:
    """AUC(a) - AUC(b) on the same candidates with its paired 95 % bootstrap interval."""
    aucs = bootstrap_aucs(np.stack([np.asarray(scores_a, float), np.asarray(scores_b, float)]),
                          labels, resamples, rng)
    point = roc_curve(scores_a, labels).auc - roc_curve(scores_b, labels).auc
    return {"difference": float(point), "ci": _percentile(aucs[0] - aucs[1])}


def clear_of_chance(ci: list[float] | None, chance: float) -> bool:
    """Whether an interval lies entirely above the chance level (AUC 0.5, TPR = FPR)."""
    return ci is not None and ci[0] > chance


def tpr_at_zero_fpr(curve: RocCurve) -> float:
    """The largest TPR with no false positive."""
    return float(curve.tpr[curve.fpr <= 0].max())


def roc_steps(curve: RocCurve) -> dict[str, list[float]]:
    """The exact ROC as its corners: every FPR at which the best TPR (at FPR <= x) rises.

    At most min(n_members, n_nonmembers) + 1 points; the TPR at any FPR x is the largest tpr
    among corners with fpr <= x, exactly as `tpr_at_fpr` reads the full curve.
    """
    run_max = np.maximum.accumulate(curve.tpr)
    last = np.r_[curve.fpr[1:] != curve.fpr[:-1], True]  # the best point of each FPR value
    f, t = curve.fpr[last], run_max[last]
    rise = np.r_[True, t[1:] > t[:-1]]
    return {"fpr": [float(v) for v in f[rise]], "tpr": [float(v) for v in t[rise]]}


def roc_points(curve: RocCurve, grid: str = "linear", points: int = 101) -> dict[str, list[float]]:
    """The ROC downsampled for plotting: TPR (step function, best TPR at FPR <= x) on an FPR grid.

    Args:
        grid: "linear" (uniform FPR in [0, 1]) or "log" (log-spaced from 1 / n_nonmembers to 1,
            for log-log plots; FPRs below the resolution are meaningless and omitted).
        points: grid size.
    """
    if grid == "linear":
        xs = np.linspace(0.0, 1.0, points)
    elif grid == "log":
        xs = np.logspace(math.log10(1.0 / curve.n_nonmembers), 0.0, points)
    else:
        raise ConfigError(f"unknown ROC grid {grid!r}; accepted: linear, log")
    # the standard target FPRs (within the grid's range) are exact points of every stored curve
    keep = [f for f in DEFAULT_FPRS if xs[0] <= f <= xs[-1]]
    xs = np.unique(np.r_[xs, keep])
    # best TPR among thresholds with FPR <= x: fpr is sorted, so take the running max up to x.
    run_max = np.maximum.accumulate(curve.tpr)
    idx = np.searchsorted(curve.fpr, xs + 1e-12, side="right") - 1
    ys = run_max[np.clip(idx, 0, None)]
    return {"fpr": [float(v) for v in xs], "tpr": [float(v) for v in ys]}


def roc_summary(scores: ArrayLike, labels: ArrayLike, fprs: tuple[float, ...] = DEFAULT_FPRS,
                points: int = 101, level: float = CI_LEVEL) -> dict[str, object]:
    """JSON-ready ROC summary: AUC and its 95 % interval, TPR at each target FPR (exact, resolved
    or not, with its Clopper-Pearson interval), TPR at FPR 0, and downsampled linear and log-log
    curves (which keep the target FPRs as exact points).

    Keys: auc, auc_ci, tpr_at_fpr (list of `tpr_at_fpr` dicts), "tpr_at_0.1%_fpr" /
    "tpr_at_1%_fpr" / "tpr_at_10%_fpr" shortcuts (value or None) and their "..._ci", tpr_at_0_fpr,
    tpr_at_0_fpr_ci, n_members, n_nonmembers, roc {linear, log}. Every interval is at `level`
    (a caller that reports the best of m score vectors passes 1 - 0.05 / m, so that the m
    intervals hold together at 95 % and the best one's is a 95 % interval).
    """
    curve = roc_curve(scores, labels)
    at = [tpr_at_fpr(curve, f, level) for f in fprs]
    t0 = tpr_at_zero_fpr(curve)
    out: dict[str, object] = {
        "auc": curve.auc,
        "auc_ci": auc_ci(scores, labels, level=level),
        "tpr_at_fpr": at,
        "tpr_at_0_fpr": t0,
        "tpr_at_0_fpr_ci": clopper_pearson(round(t0 * curve.n_members), curve.n_members, level),
        "n_members": curve.n_members,
        "n_nonmembers": curve.n_nonmembers,
        "roc": {"linear": roc_points(curve, "linear", points),
                "log": roc_points(curve, "log", points)},
    }
    for item in at:
        out[f"tpr_at_{_pct(float(item['fpr']))}_fpr"] = item["tpr"]
        out[f"tpr_at_{_pct(float(item['fpr']))}_fpr_ci"] = item["ci"]
    return out


def _pct(f: float) -> str:
    """0.001 -> '0.1%', 0.01 -> '1%'."""
    return f"{f * 100:g}%"
