"""The leakage map's page reads at first sight: its setting as a table, each reason once and
never doubled, the worst private value flagged where it leaks, legends off the data, a reason on
every dash, one number format; the terminal summary fits 100 columns."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from privbench.report import leakage

MAP = Path(__file__).parents[2] / "reports" / "leakage-digits" / "leakage.json"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(MAP.read_text())


def test_the_setting_is_a_table_and_no_reason_is_doubled_or_repeated(results):
    page = leakage.render_leakage(results)
    assert "<th>topology</th><td>ring</td>" in page and "<th>eps</th><td>1, 8</td>" in page
    assert "{'" not in page and "data_root=" not in page
    assert "not applicable: not applicable" not in page
    table = page[page.index("<h2>Table</h2>"):page.index("<ol>")]
    notes = page[page.index("<ol>"):page.index("</ol>")]
    # a long reason: its kind in the table, its text once in the notes; no bare "–"
    items = notes.split("<li")[1:]
    assert "is not a linear gossip" not in table and len(items) == len(set(items)) >= 7
    assert "<td>–</td>" not in table
    for reason in (leakage.NO_SYSTEM, leakage.NO_CLAIM):
        assert reason.split(":")[0] in notes
    assert leakage.status_text("not applicable: not applicable: x") == "not applicable: x"
    assert "not applicable: not applicable" not in leakage.markdown(results)


def test_the_worst_private_value_is_flagged(results):
    page = leakage.render_leakage(results)
    worst = leakage._worst(results["cells"])
    leaking = {k for k, v in worst.items() if v > leakage.NO_LEAK[k]}
    assert leaking == {"auc", "empirical_epsilon"}  # no private cell reconstructs (< 20 dB)
    assert page.count("▲</td>") >= len(leaking) and 'class="worst"' in page
    assert f"{leakage._fmt(worst['auc'])} ▲</td>" in page
    assert f"{leakage._fmt(worst['psnr'])} ▲</td>" not in page
    private_psnr = [r["inversion"]["psnr"] for c in results["cells"] if c["epsilon"] is not None
                    for r in c["rows"] if r["inversion"]["status"] == "ok"]
    assert worst["psnr"] == max(private_psnr)


def test_a_worst_value_that_leaks_nothing_is_not_flagged(results):
    """Every private empirical ε at 0 and every private AUC at chance: nothing to flag."""
    flat = copy.deepcopy(results)
    for cell in flat["cells"]:
        for row in cell["rows"] if cell["epsilon"] is not None else []:
            if row["membership"].get("status") == "ok":
                row["membership"].update(empirical_epsilon=0.0, auc=0.5)
            if row["inversion"]["status"] == "ok":
                row["inversion"]["psnr"] = 6.0
    assert "▲</td>" not in leakage.render_leakage(flat)


def test_the_terminal_summary_fits_100_columns(results):
    text = leakage.terminal_summary(results)
    assert max(map(len, text.splitlines())) <= 100
    assert text.startswith("inversion PSNR (dB)") and "membership AUC" in text
    assert len(text.splitlines()) == 2 * (len(results["cells"]) + 2) + 1


def test_legends_sit_outside_the_data_and_a_defense_keeps_its_colour(monkeypatch, results):
    made: list = []
    monkeypatch.setattr(leakage, "png_uri", lambda fig: made.append(fig) or "data:")
    leakage.render_leakage(results)
    import matplotlib.colors as mc

    colours: dict[str, set[str]] = {}
    for fig in made[1:]:  # the line plots (the first figure is the graph)
        ax = fig.axes[0]
        legend = ax.get_legend()
        fig.canvas.draw()
        assert legend.get_window_extent().y1 <= ax.get_window_extent().y0  # under the axes
        for line in ax.get_lines():
            if line.get_label().startswith("dpdl ε=1"):
                colours.setdefault("dpdl", set()).add(mc.to_hex(line.get_color()))
    assert len(colours["dpdl"]) == 1
