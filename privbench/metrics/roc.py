"""ROC curves, AUC and TPR at low FPR for membership inference (scikit-learn).

Convention: a higher score means "more likely a member"; labels are 1 for members, 0 for
non-members. Following LiRA (Carlini et al., "Membership Inference Attacks From First Principles",
IEEE S&P 2022, §III-B) attacks are compared by their TPR at a low FPR, read off the empirical ROC
as the largest TPR among thresholds whose FPR is at most the target.

A target FPR alpha is *resolved* only when there are enough non-members for one false positive to
fit under it: n_nonmembers * alpha >= 1 (so 1% FPR needs >= 100 non-members and 0.1% needs
>= 1,000; reference/membership-inference-and-accounting.md §2.4). An unresolved TPR is reported
as None with `resolved: False`; the TPR at FPR = 0 (always computable) is reported separately.

All functions are pure (numpy in, numpy / JSON-ready dicts out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as _sk_roc_curve

from privbench.errors import ConfigError

DEFAULT_FPRS = (0.001, 0.01)


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
    s, y = _check(scores, labels)
    fpr, tpr, thr = _sk_roc_curve(y, s, drop_intermediate=False)
    return RocCurve(fpr, tpr, thr, float(roc_auc_score(y, s)), int(y.sum()), int((~y).sum()))


def resolves(n_nonmembers: int, fpr: float) -> bool:
    """Whether `n_nonmembers` non-members can resolve FPR `fpr` (one false positive fits)."""
    return n_nonmembers * fpr >= 1.0 - 1e-9


def tpr_at_fpr(curve: RocCurve, fpr: float) -> dict[str, object]:
    """TPR at FPR <= `fpr`, with whether the number of non-members resolves that FPR.

    Returns:
        {"fpr": fpr, "tpr": float or None (unresolved), "resolved": bool,
         "min_nonmembers": the number needed to resolve it}.
    """
    if not 0 < fpr <= 1:
        raise ConfigError(f"target FPR must be in (0, 1], got {fpr}")
    ok = resolves(curve.n_nonmembers, fpr)
    value = float(curve.tpr[curve.fpr <= fpr + 1e-12].max()) if ok else None
    return {"fpr": fpr, "tpr": value, "resolved": ok, "min_nonmembers": math.ceil(1 / fpr - 1e-9)}


def tpr_at_zero_fpr(curve: RocCurve) -> float:
    """The largest TPR with no false positive."""
    return float(curve.tpr[curve.fpr <= 0].max())


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
    # best TPR among thresholds with FPR <= x: fpr is sorted, so take the running max up to x.
    run_max = np.maximum.accumulate(curve.tpr)
    idx = np.searchsorted(curve.fpr, xs + 1e-12, side="right") - 1
    ys = run_max[np.clip(idx, 0, None)]
    return {"fpr": [float(v) for v in xs], "tpr": [float(v) for v in ys]}


def roc_summary(scores: ArrayLike, labels: ArrayLike, fprs: tuple[float, ...] = DEFAULT_FPRS,
                points: int = 101) -> dict[str, object]:
    """JSON-ready ROC summary: AUC, TPR at each target FPR (resolved or not), TPR at FPR 0, and
    downsampled linear and log-log curves.

    Keys: auc, tpr_at_fpr (list of `tpr_at_fpr` dicts), "tpr_at_0.1%_fpr" / "tpr_at_1%_fpr" style
    shortcuts (value or None), tpr_at_0_fpr, n_members, n_nonmembers, roc {linear, log}.
    """
    curve = roc_curve(scores, labels)
    at = [tpr_at_fpr(curve, f) for f in fprs]
    out: dict[str, object] = {
        "auc": curve.auc,
        "tpr_at_fpr": at,
        "tpr_at_0_fpr": tpr_at_zero_fpr(curve),
        "n_members": curve.n_members,
        "n_nonmembers": curve.n_nonmembers,
        "roc": {"linear": roc_points(curve, "linear", points),
                "log": roc_points(curve, "log", points)},
    }
    for item in at:
        out[f"tpr_at_{_pct(float(item['fpr']))}_fpr"] = item["tpr"]
    return out


def _pct(f: float) -> str:
    """0.001 -> '0.1%', 0.01 -> '1%'."""
    return f"{f * 100:g}%"
