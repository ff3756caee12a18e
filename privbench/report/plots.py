"""Matplotlib figures of an audit, returned as PNG data URIs (no files, no external requests)."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

# Labels are names from results files (defenses, attacks): show them as written, never parse
# `$...$` in them as mathtext (a name like "a$b" would otherwise fail to render).
matplotlib.rcParams["text.parse_math"] = False


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def metric_vs_eps(series: dict[str, list[tuple[float, float]]], baselines: dict[str, float],
                  ylabel: str, title: str) -> str | None:
    """One line per defense of (ε, value) points; non-private baselines as dashed lines."""
    if not any(series.values()) and not baselines:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for name, pts in sorted(series.items()):
        pts = sorted(p for p in pts if p[1] is not None and np.isfinite(p[1]))
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=name)
    for name, value in sorted(baselines.items()):
        if value is not None and np.isfinite(value):
            ax.axhline(value, linestyle="--", color="grey", linewidth=1)
            ax.annotate(f"{name} (no DP)", (0.01, value), xycoords=("axes fraction", "data"),
                        fontsize=7, color="grey", va="bottom")
    ax.set_xscale("log")
    ax.set_xlabel("target ε (per node)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _png(fig)


def roc_loglog(curves: Iterable[tuple[str, list[float], list[float]]]) -> str | None:
    """ROC curves on log-log axes (the low-FPR regime that matters for MIA)."""
    curves = list(curves)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for label, fpr, tpr in curves:
        f, t = np.asarray(fpr, dtype=float), np.asarray(tpr, dtype=float)
        keep = (f > 0) & (t > 0)
        if keep.any():
            ax.plot(f[keep], t[keep], label=label, linewidth=1.2)
    lo = 1e-3
    ax.plot([lo, 1], [lo, 1], linestyle=":", color="grey", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1)
    ax.set_ylim(lo, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    return _png(fig)


def image_grid(rows: list[list[Any]]) -> str:
    """A grid of grey/RGB images in [0, 1] ((H, W) or (C, H, W) nested lists) as one PNG."""
    arrays = [[np.asarray(img, dtype=float) for img in row] for row in rows]
    nrow, ncol = len(arrays), max(len(r) for r in arrays)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.3 * ncol, 1.3 * nrow), squeeze=False)
    for r in range(nrow):
        for c in range(ncol):
            ax = axes[r][c]
            ax.axis("off")
            if c < len(arrays[r]):
                img = arrays[r][c]
                if img.ndim == 3 and img.shape[0] in (1, 3):
                    img = img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0))
                ax.imshow(np.clip(img, 0, 1), cmap="gray" if img.ndim == 2 else None,
                          vmin=0, vmax=1, interpolation="nearest")
    return _png(fig)


def sensitivity_traces(traces: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Per round, the sensitivity estimate (solid) vs the real sensitivity (dashed) of each
    cell, log y; rounds where the estimate fell below the real value are marked with a cross."""
    traces = [(label, tr) for label, tr in traces if tr.get("S_est")]
    if not traces:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, tr in traces:
        est = np.array([np.nan if v is None else v for v in tr["S_est"]], dtype=float)
        real = np.array([np.nan if v is None else v for v in tr["S_real"]], dtype=float)
        t = np.arange(len(est))
        (line,) = ax.plot(t, np.where(est > 0, est, np.nan), label=f"{label} estimate")
        ax.plot(t, np.where(real > 0, real, np.nan), linestyle="--", color=line.get_color(),
                label=f"{label} real")
        below = np.isfinite(est) & np.isfinite(real) & (est < real)
        if below.any():
            ax.plot(t[below], np.where(real[below] > 0, real[below], np.nan), "x",
                    color="crimson", label=f"{label}: estimate < real")
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("L1 sensitivity")
    ax.set_title("Sensitivity estimate vs real, per round", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    return _png(fig)
