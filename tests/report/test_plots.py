"""The report's figures read as plain text: log-axis ticks as numbers (never raw mathtext),
ε ticks that do not overlap, non-private baselines named in the legend."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privbench.report import plots


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures the plot functions build, instead of their PNGs."""
    made: list = []
    monkeypatch.setattr(plots, "png_uri", lambda fig, tight=True: made.append(fig) or "data:")
    return made


def _tick_texts(fig, which: str) -> list[str]:
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = ax.get_xticklabels() if which == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels if t.get_text()]


def test_log_axes_are_labelled_with_plain_numbers(figures):
    fpr = np.linspace(0, 1, 50)
    plots.roc_panel("d", [("ε=1 mia: AUC 0.6", list(fpr), list(fpr ** 0.5), 0, 0)], [])
    plots.sensitivity_traces([("partpsp ε=1", {"S_est": [1.0, 1e3, 1e6], "S_real": [1.0, 2e3, 1e6],
                                                "sync": [False] * 3})])
    roc, trace = figures
    for texts in (_tick_texts(roc, "x"), _tick_texts(roc, "y"), _tick_texts(trace, "y")):
        assert texts and not any("$" in t or "mathdefault" in t for t in texts)
    assert {"0.001", "0.01", "0.1", "1"} <= set(_tick_texts(roc, "x"))


def _boxes_overlap(fig) -> bool:
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    return any(a.overlaps(b) for a, b in itertools.pairwise(boxes))


def test_close_composed_eps_ticks_are_turned_upright_and_baselines_are_in_the_legend(figures):
    series = {"dpdl": [(1.0, 0.21), (8.0, 0.68)]}
    extra = {"partpsp (paper b = 5)": (2.52e5, 0.71),
             "defl_vp (paper, ε=1)": (1.03e6, 0.95), "defl_vp (paper, ε=8)": (8.27e6, 0.97)}
    plots.metric_vs_eps(series, {"sgp": 0.725, "d_psgd": 0.736}, "acc", "t", extra)
    plots.metric_vs_eps(series, {"sgp": 0.725}, "acc", "t")
    crowded, plain = figures
    assert not _boxes_overlap(crowded)
    assert crowded.axes[0].get_xticklabels()[0].get_rotation() == 90
    assert plain.axes[0].get_xticklabels()[0].get_rotation() == 0  # 1 and 8 fit side by side
    legend = [t.get_text() for t in crowded.axes[0].get_legend().get_texts()]
    assert {"sgp (no DP)", "d_psgd (no DP)"} <= set(legend)


def test_a_defense_has_one_colour_in_every_panel(figures):
    colors = plots.palette(["sgp", "dpdl", "partpsp"])
    plots.metric_vs_eps({"dpdl": [(1.0, 0.2), (8.0, 0.6)]}, {"sgp": 0.9}, "acc", "t",
                        {"partpsp (paper b = 5)": (2.5e5, 0.7)}, colors)
    plots.metric_vs_eps({"partpsp": [(1.0, 0.3)], "dpdl": [(8.0, 0.5)]}, {}, "auc", "t",
                        None, colors)
    first, second = figures
    import matplotlib.colors as mc

    def colour_of(fig, label):
        line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith(label))
        return mc.to_hex(line.get_color())

    for name in ("dpdl", "partpsp"):
        assert colour_of(first, name) == colour_of(second, name) == mc.to_hex(colors[name])
    assert colour_of(first, "sgp") == mc.to_hex(colors["sgp"])


def test_roc_panels_show_bands_the_unresolved_region_and_the_test_at_a_crossing(figures):
    from privbench.report.render import _plots
    from privbench.results.records import AuditRun

    fpr = [0.0, 0.001, 0.01, 0.1, 1.0]
    tpr = [0.0, 0.02, 0.1, 0.4, 1.0]  # above the ε = 0.1 bound at low FPR
    mia = {"status": "ok", "uses": ["model"], "n_members": 500, "n_nonmembers": 400,
           "metrics": {"auc": 0.7, "empirical_epsilon": 0.05}, "roc": {"fpr": fpr, "tpr": tpr}}
    cell = {"defense": "d", "epsilon": 0.1, "accuracy": 0.8, "status": "ok", "messages": [],
            "privacy": [{"node": 0, "mode": "calibrated", "epsilon": 0.1, "delta": 0.0}],
            "attacks": {"mia": mia}}
    panel = _plots(AuditRun.from_json({"cells": [cell]}))["roc"][0]
    assert len(panel["notes"]) == 1
    assert "the empirical-ε test certifies ε ≥ 0.0500, within the calibrated ε 0.100" in \
        panel["notes"][0]
    fig = figures[-1]
    ax, (legend,) = fig.axes[0], fig.legends  # the legend sits under the axes, on the figure
    assert any("unresolved" in t.get_text() for t in legend.get_texts())
    assert "1/non-members = 0.00250" in " ".join(t.get_text() for t in legend.get_texts())
    assert len(ax.collections) >= 1  # the pointwise band
    assert any("crosses the DP bound" in t.get_text() for t in fig.texts)
    lo, hi = plots.tpr_band([0.1], 500)
    assert lo[0] < 0.1 < hi[0] and hi[0] - lo[0] < 0.06


def test_a_defense_has_the_same_colour_on_every_page():
    report = plots.palette(["sgp", "dpdl", "defl_vp", "partpsp"])
    leakage_map = plots.palette(["dp_sgp", "dpdl", "defl_vp", "muffliato"])
    assert report["dpdl"] == leakage_map["dpdl"] and report["defl_vp"] == leakage_map["defl_vp"]
    every = plots.palette(list(plots.STABLE_ORDER))
    assert len(set(every.values())) == len(plots.STABLE_ORDER)  # no two shipped ones alike
