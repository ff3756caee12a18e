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
    monkeypatch.setattr(plots, "_png", lambda fig: made.append(fig) or "data:")
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
