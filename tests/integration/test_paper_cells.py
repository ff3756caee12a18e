"""Paper cells of an audit: a defense at the paper's fixed setting (PartPSP's b) and at the
paper's reading of each ε of the grid (DeFL-VP's ε per coordinate per round), next to the
calibrated cells, each with the ε it composes to."""

from __future__ import annotations

import dataclasses

import pytest

from privbench.config import RunConfig, replace_checked
from privbench.pipeline import sweep
from privbench.report.summary import summary_table
from privbench.report.verdicts import verdicts
from privbench.results.store import claimed_eps
from privbench.testing import TINY_RUN


def _sweep(tmp_path, defenses, overrides=None):
    base = replace_checked(RunConfig(), {**TINY_RUN, "rounds": 4, "eval_every": 4}, where="run")
    audit = sweep.audit_config("quick", list(defenses), [1.0, 8.0], ["mia_threshold"], None, {})
    audit = dataclasses.replace(audit, inversion_batch_sizes=(), pool_victims=False)
    return sweep.Sweep(base, dict(overrides or {}), audit, tmp_path / "audit", progress=False)


def test_the_grid_adds_the_paper_setting_once_and_the_paper_reading_at_every_eps(tmp_path):
    runner = _sweep(tmp_path, ["defl_vp", "partpsp", "sgp"])
    assert runner.grid() == [
        ("defl_vp", 1.0, None), ("defl_vp", 8.0, None),
        ("defl_vp", 1.0, "paper"), ("defl_vp", 8.0, "paper"),
        ("partpsp", 1.0, None), ("partpsp", 8.0, None), ("partpsp", None, "paper"),
        ("sgp", None, None)]
    names = [runner.cell_dir(*c).name for c in runner.grid()]
    assert names[2:4] == ["defl_vp@paper-eps1", "defl_vp@paper-eps8"]
    assert names[6] == "partpsp@paper" and len(set(names)) == len(names)
    # each paper cell trains at its own ε with the paper's overrides on top
    run, over, _ = runner.cell_run("defl_vp", 8.0, "paper")
    assert run.epsilon == 8.0 and over["eps_mode"] == "per_coordinate"
    assert runner.cell_run("defl_vp", 8.0, None)[1].get("eps_mode") != "per_coordinate"
    assert runner.cell_run("partpsp", None, "paper")[1]["b"] == 5.0


def test_a_reading_the_sweep_already_applies_adds_no_cell(tmp_path):
    """`--set defense.eps_mode=per_coordinate` makes the calibrated cells the paper's reading:
    extra cells would repeat them."""
    runner = _sweep(tmp_path, ["defl_vp"], {"eps_mode": "per_coordinate"})
    assert runner.grid() == [("defl_vp", 1.0, None), ("defl_vp", 8.0, None)]
    assert _sweep(tmp_path, ["partpsp"], {"b": 5.0}).grid() == [
        ("partpsp", 1.0, None), ("partpsp", 8.0, None)]


@pytest.fixture(scope="module")
def defl_vp_results(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("paper"), ["defl_vp"]).run().to_json()


def test_paper_reading_cells_carry_their_eps_and_the_eps_they_compose_to(defl_vp_results):
    cells = defl_vp_results["cells"]
    assert [c.get("setting", {}).get("name") for c in cells] == [
        None, None, "paper-eps1", "paper-eps8"]
    for cell, eps in zip(cells[2:], (1.0, 8.0), strict=True):
        setting = cell["setting"]
        assert cell["epsilon"] is None and setting["epsilon"] == eps
        assert setting["overrides"] == {"eps_mode": "per_coordinate"}
        assert setting["label"] == f"paper eps_mode = per_coordinate, ε={eps:g}"
        # ε per coordinate per round: the whole run composes to far more
        assert claimed_eps(cell, "paper") == pytest.approx(eps)
        assert setting["composed_epsilon"] == pytest.approx(claimed_eps(cell, "calibrated"))
        assert setting["composed_epsilon"] > 1000 * eps
    # the calibrated cells spend the grid's ε on the whole run
    for cell, eps in zip(cells[:2], (1.0, 8.0), strict=True):
        assert "setting" not in cell and claimed_eps(cell, "calibrated") == pytest.approx(eps)


def test_paper_reading_cells_are_named_apart_in_verdicts_and_the_summary(defl_vp_results):
    per = verdicts(defl_vp_results)["defl_vp"]["cells"]
    assert [v["where"] for v in per] == [
        "ε=1", "ε=8", "paper eps_mode = per_coordinate, ε=1",
        "paper eps_mode = per_coordinate, ε=8"]
    assert [v["level"] for v in per[2:]] == ["under_reports", "under_reports"]
    rows = [line.split()[1] for line in summary_table(defl_vp_results).splitlines()[1:5]]
    assert rows == ["1", "8", "paper@1", "paper@8"]


def test_the_reports_configuration_lists_each_cells_eps_apart(defl_vp_results):
    """The base run's ε (the last of the grid) is no cell's ε; the page lists every cell's,
    separated so that a label's own comma cannot merge two cells."""
    from privbench.report.render import _config_shown

    shown = _config_shown(defl_vp_results)["run"]["epsilon"]
    assert shown == ("per cell: ε=1; ε=8; paper eps_mode = per_coordinate, ε=1; "
                     "paper eps_mode = per_coordinate, ε=8")
