"""Matplotlib figures of an audit, returned as PNG data URIs (no files, no external requests)."""

from __future__ import annotations

import base64
import io
import itertools
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from PIL import Image

from privbench.results.store import fmt_num

# Labels are names from results files (defenses, attacks): show them as written, never parse
# `$...$` in them as mathtext (a name like "a$b" would otherwise fail to render).
matplotlib.rcParams["text.parse_math"] = False

Color = tuple[float, ...]  # an RGB(A) colour, each channel in [0, 1]


def _plain_log_axis(axis: Any) -> None:
    """Label a log axis's decades as plain numbers ("0.01", "1e+05"): its default labels are
    mathtext, which `text.parse_math = False` would print raw ("$\\mathdefault{10^{-2}}$")."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _upright_if_crowded(fig: Any, ax: Any) -> None:
    """Turn the x tick labels upright when side by side they would overlap (composed ε of paper
    settings lie close together on a log axis: 2.52e+05, 1.03e+06)."""
    renderer = fig.canvas.get_renderer()
    ax.xaxis.get_tightbbox(renderer)  # places the ticks and their labels, drawing nothing
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    if any(a.overlaps(b) for a, b in itertools.pairwise(boxes)):
        ax.tick_params(axis="x", labelrotation=90)


BASELINE_STYLES = [(0, (5, 2)), (0, (1, 1)), (0, (6, 2, 1, 2)), (0, (2, 2))]


def png_uri(fig: Any, tight: bool = True) -> str:
    """The figure as a data URI; `tight` False keeps the figure's own size (panels shown side by
    side stay the same size, so their text is drawn at the same scale)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def metric_vs_eps(series: dict[str, list[tuple[float, float]]], baselines: dict[str, float],
                  ylabel: str, title: str,
                  extra: dict[str, tuple[float, float]] | None = None,
                  colors: Mapping[str, Color] | None = None) -> str | None:
    """One line per defense of (ε, value) points; non-private baselines as dashed lines;
    `extra`: single labelled points (a defense at its paper setting, x = its composed ε; its
    label starts with the defense's name). `colors`: defense -> colour (`palette`), the same in
    every panel. The x ticks are the ε values shown (the grid), in the report's number format."""
    colors = colors or palette([*series, *baselines, *(k.split(" (")[0] for k in extra or {})])
    extra = {k: v for k, v in (extra or {}).items() if v[1] is not None and np.isfinite(v[1])}
    if not any(series.values()) and not baselines and not extra:
        return None
    fig, ax = plt.subplots(figsize=(5.8, 3.4))
    ticks: set[float] = set()
    for name, pts in sorted(series.items()):
        pts = sorted(p for p in pts if p[1] is not None and np.isfinite(p[1]))
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=name, color=colors.get(name))
            ticks.update(p[0] for p in pts)
    for name, (x, y) in sorted(extra.items()):
        ax.plot([x], [y], marker="*", markersize=10, linestyle="none", label=name,
                color=colors.get(name.split(" (")[0]))
        ticks.add(x)
    # baselines in the legend (side-by-side annotations overlap when their values are close)
    shown = [(n, v) for n, v in sorted(baselines.items()) if v is not None and np.isfinite(v)]
    for k, (name, value) in enumerate(shown):
        ax.axhline(value, linestyle=BASELINE_STYLES[k % len(BASELINE_STYLES)],
                   color=colors.get(name, "dimgrey"), linewidth=1.2, label=f"{name} (no DP)")
    ax.set_xscale("log")
    if ticks:
        ax.set_xticks(sorted(ticks), [fmt_num(t).removesuffix(".00") for t in sorted(ticks)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("ε (per node)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _upright_if_crowded(fig, ax)
    return png_uri(fig)


# The shipped defenses in a fixed order, so that a defense has the same colour on every page
# (the report, the leakage map), whatever other defenses a page shows; the default audit's first.
STABLE_ORDER = ("sgp", "d_psgd", "adp_vrsgp", "defl_vp", "dyn_d2p", "partpsp", "dpdl", "dp_sgp",
                "dp_dpsgd", "dpps", "muffliato", "pedfl", "d_psgd_rr", "dp_cga", "dp_dfedsam",
                "const_d2p", "dyn_c_d2p", "dyn_mu_d2p", "dfl_compression", "dfl_vr")


def palette(names: list[str]) -> dict[str, Color]:
    """One colour per defense, the same in every panel and on every page: a shipped defense by
    its place in `STABLE_ORDER` (tab10, then tab20's light shades), others after them, sorted."""
    base = list(plt.cm.tab10.colors) + list(plt.cm.tab20.colors[1::2])
    others = sorted(set(names) - set(STABLE_ORDER))
    order = {name: k for k, name in enumerate((*STABLE_ORDER, *others))}
    return {name: base[order[name] % len(base)] for name in set(names)}


def shade_of(color: Any, k: int) -> tuple[float, float, float]:
    """The k-th shade of a colour: 0 is the colour, each next one lighter."""
    rgb = np.asarray(matplotlib.colors.to_rgb(color))
    return tuple(rgb + (1 - rgb) * min(0.6, 0.3 * k))  # type: ignore[return-value]


def tpr_band(tpr: list[float], members: int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise exact (Clopper-Pearson) interval of each TPR of a ROC over `members` members."""
    # Beta^-1(q; a, b) = betaincinv(a, b, q) (`privbench.metrics.binomial`: no scipy.stats import)
    from scipy.special import betaincinv

    k = np.round(np.asarray(tpr, dtype=float) * members)
    a = 1 - level
    with np.errstate(invalid="ignore"):
        lo = np.where(k == 0, 0.0, betaincinv(k, members - k + 1, a / 2))
        hi = np.where(k == members, 1.0, betaincinv(k + 1, members - k, 1 - a / 2))
    return lo, hi


ROC_FIGSIZE = (6.8, 7.2)  # inches: every ROC panel is this size (612 x 648 px at 90 dpi)


def roc_panel(title: str, curves: list[tuple[str, list[float], list[float], int, int]],
              bounds: list[tuple[str, np.ndarray, np.ndarray, int]], color: Any = None,
              bands: list[tuple[np.ndarray, np.ndarray] | None] | None = None,
              unresolved_below: float | None = None, notes: list[str] | None = None
              ) -> str | None:
    """One defense's ROC curves on log-log axes (the low-FPR regime), with the best curve any
    attack could reach under each claimed ε (dashed), the legend under the axes. Every curve
    is drawn in the defense's `color`, a cell's in its own shade (its bound too), attacks differ
    by line style; `bands`: each curve's pointwise 95 % TPR interval (shaded);
    `unresolved_below`: the FPR under which the attack's non-members cannot resolve a rate
    (shaded grey); `notes`: sentences printed under the panel (what the empirical-ε test
    concluded where a curve crosses its DP bound).

    Args:
        curves: (label with AUC, FPR, TPR, cell index, attack index) per (cell, attack).
        bounds: (label, FPR, TPR, cell index) per claimed privacy bound.
    """
    if not curves:
        return None
    # one fixed canvas for every panel: the axes on top, the legend and the notes below them
    fig = plt.figure(figsize=ROC_FIGSIZE)
    ax = fig.add_axes((0.11, 0.52, 0.85, 0.42))
    color = color if color is not None else plt.rcParams["axes.prop_cycle"].by_key()["color"][0]
    styles = ["-", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1))]
    lo = 1e-3
    if unresolved_below is not None and unresolved_below > lo:
        ax.axvspan(lo, unresolved_below, color="0.85", alpha=0.6, linewidth=0,
                   label=f"FPR < 1/non-members = {fmt_num(unresolved_below)}: unresolved")
    for label, fpr, tpr, cell in bounds:
        ax.plot(fpr, tpr, linestyle="--", linewidth=1.0, color=shade_of(color, cell), alpha=0.9,
                label=label)
    for i, (label, fpr, tpr, cell, k) in enumerate(curves):
        f, t = np.asarray(fpr, dtype=float), np.asarray(tpr, dtype=float)
        keep = (f > 0) & (t > 0)
        if not keep.any():
            continue
        shade = shade_of(color, cell)
        ax.plot(f[keep], t[keep], label=label, linewidth=1.4, color=shade,
                linestyle=styles[k % len(styles)])
        band = (bands or [None] * len(curves))[i]
        if band is not None:
            ax.fill_between(f[keep], np.maximum(band[0][keep], lo / 10), band[1][keep],
                            color=shade, alpha=0.15, linewidth=0)
    ax.plot([lo, 1], [lo, 1], linestyle=":", color="grey", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1)
    ax.set_ylim(lo, 1.05)
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()
    legend = fig.legend(handles, labels, fontsize=8, loc="upper left", frameon=False,
                        bbox_to_anchor=(0.02, 0.42),
                        ncol=2 if len(labels) > 4 and max(map(len, labels)) <= 48 else 1)
    # where the legend ends, for the notes under it: its layout alone, not a draw of the figure
    box = legend.get_window_extent(fig.canvas.get_renderer())
    bottom = fig.transFigure.inverted().transform(box.get_points())[0][1]
    for j, note in enumerate(notes or []):
        fig.text(0.02, bottom - 0.02 - 0.035 * j, note, fontsize=8, va="top", wrap=True)
    return png_uri(fig, tight=False)


def upscale(img: np.ndarray, size: int = 96) -> np.ndarray:
    """(H, W) or (H, W, 3) image repeated nearest-neighbour to about `size` pixels high."""
    k = max(1, size // img.shape[0])
    return np.repeat(np.repeat(img, k, axis=0), k, axis=1)


def _hwc(img: Any) -> np.ndarray:
    arr = np.clip(np.asarray(img, dtype=float), 0, 1)
    if arr.ndim == 3 and arr.shape[0] in (1, 3):
        arr = arr[0] if arr.shape[0] == 1 else np.transpose(arr, (1, 2, 0))
    return arr


def image_pair(true: Any, rec: Any, gap: int = 4) -> str:
    """A true image (top) over its reconstruction (bottom), values in [0, 1] ((H, W) or
    (C, H, W) nested lists), each upscaled nearest-neighbour, `gap` white pixels apart: one PNG
    written by Pillow (no figure: a gallery of 40 pairs renders in milliseconds)."""
    top, bottom = (upscale(_hwc(img)) for img in (true, rec))
    arr = np.concatenate([top, np.ones((gap, *top.shape[1:])), bottom])  # (2H' + gap, W'[, 3])
    buf = io.BytesIO()
    Image.fromarray(np.rint(arr * 255).astype(np.uint8)).save(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def sensitivity_traces(traces: list[tuple[str, Mapping[str, list[float | None]]]],
                       colors: Mapping[str, Color] | None = None) -> str | None:
    """Per round, the sensitivity estimate (solid) vs the real sensitivity (dashed) of each
    cell, log y; rounds where the estimate fell below the real value are marked with a cross."""
    traces = [(label, tr) for label, tr in traces if tr.get("S_est")]
    if not traces:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    colors = colors or palette([label.split(" ")[0] for label, _ in traces])
    seen: dict[str, int] = {}
    for label, tr in traces:
        est = np.array([np.nan if v is None else v for v in tr["S_est"]], dtype=float)
        real = np.array([np.nan if v is None else v for v in tr["S_real"]], dtype=float)
        t = np.arange(len(est))
        name = label.split(" ")[0]
        seen[name] = seen.get(name, -1) + 1
        (line,) = ax.plot(t, np.where(est > 0, est, np.nan), label=f"{label} estimate",
                          color=shade_of(colors.get(name, "C0"), seen[name]))
        ax.plot(t, np.where(real > 0, real, np.nan), linestyle="--", color=line.get_color(),
                label=f"{label} real")
        below = np.isfinite(est) & np.isfinite(real) & (est < real)
        if below.any():
            ax.plot(t[below], np.where(real[below] > 0, real[below], np.nan), "x",
                    color="crimson", label=f"{label}: estimate < real")
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("round")
    ax.set_ylabel("L1 sensitivity")
    ax.set_title("Sensitivity estimate vs real, per round", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2,
              frameon=False)  # under the axes: never over the traces
    return png_uri(fig)
