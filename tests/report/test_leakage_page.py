"""The leakage map's page reads at first sight: its setting as a table, each reason once and
never doubled, the worst private value flagged, legends beside the data, one number format."""

from __future__ import annotations

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
    # a long reason: its kind in the table, its text once in the notes
    assert "is not a linear gossip" not in table and notes.count("<li") == 7
    assert leakage.status_text("not applicable: not applicable: x") == "not applicable: x"
    assert "not applicable: not applicable" not in leakage.markdown(results)


def test_the_worst_private_value_is_flagged(results):
    page = leakage.render_leakage(results)
    worst = leakage._worst(results["cells"])
    assert page.count("▲</td>") >= 3 and 'class="worst"' in page
    assert f"{leakage._fmt(worst['auc'])} ▲</td>" in page
    private_psnr = [r["inversion"]["psnr"] for c in results["cells"] if c["epsilon"] is not None
                    for r in c["rows"] if r["inversion"]["status"] == "ok"]
    assert worst["psnr"] == max(private_psnr)


def test_legends_sit_outside_the_data_and_a_defense_keeps_its_colour(monkeypatch, results):
    made: list = []
    monkeypatch.setattr(leakage, "_png", lambda fig: made.append(fig) or "data:")
    leakage.render_leakage(results)
    import matplotlib.colors as mc

    colours: dict[str, set[str]] = {}
    for fig in made[1:]:  # the line plots (the first figure is the graph)
        ax = fig.axes[0]
        legend = ax.get_legend()
        fig.canvas.draw()
        assert legend.get_window_extent().x0 >= ax.get_window_extent().x1
        for line in ax.get_lines():
            if line.get_label().startswith("dpdl ε=1"):
                colours.setdefault("dpdl", set()).add(mc.to_hex(line.get_color()))
    assert len(colours["dpdl"]) == 1
