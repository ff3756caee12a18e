"""`privbench report OLD NEW --compare`: what moved toward less privacy, by how much, and whether
the move is clear of the 95 % intervals."""

from __future__ import annotations

import copy

from privbench.cli import main
from privbench.report.compare import CLEAR, NO_INTERVAL, WITHIN, compare_runs, render_comparison
from privbench.results.store import write_json
from tests.report.test_gate import _results


def _pair():
    """The same audit before and after: dp's AUC up clear of its interval, its PSNR down (more
    private), leaky's PSNR up without an interval; one cell dropped, one added."""
    before, after = _results(), _results()
    lira_b = before["cells"][0]["attacks"]["lira"]
    lira_b["intervals"] = {"auc": [0.50, 0.54]}
    lira_a = after["cells"][0]["attacks"]["lira"]
    lira_a["metrics"]["auc"], lira_a["intervals"] = 0.61, {"auc": [0.58, 0.64]}
    after["cells"][0]["attacks"]["geiping"]["metrics"]["psnr"] = 9.0
    after["cells"][1]["attacks"]["geiping"]["metrics"]["psnr"] = 36.5
    after["cells"][2] = dict(copy.deepcopy(after["cells"][2]), defense="d_psgd")
    return before, after


def test_moves_toward_less_privacy_are_found_sized_and_resolved():
    cmp = compare_runs(*_pair())
    worse = {(m.cell, m.metric): m for m in cmp.worse()}
    assert set(worse) == {("dp@1", "auc"), ("leaky@1", "psnr")}
    auc = worse[("dp@1", "auc")]
    assert (auc.before, auc.after, auc.resolved) == (0.52, 0.61, CLEAR)
    assert worse[("leaky@1", "psnr")].resolved == NO_INTERVAL
    assert cmp.worse()[0] is auc  # the clear move first
    psnr = next(m for m in cmp.moves if (m.cell, m.metric) == ("dp@1", "psnr"))
    assert not psnr.toward_less_privacy  # 12 -> 9 dB: a worse reconstruction
    assert cmp.only_before == ("sgp@no-DP",) and cmp.only_after == ("d_psgd@no-DP",)


def test_overlapping_intervals_are_within_them():
    before, after = _pair()
    after["cells"][0]["attacks"]["lira"]["intervals"] = {"auc": [0.53, 0.69]}
    auc = next(m for m in compare_runs(before, after).worse() if m.metric == "auc")
    assert auc.resolved == WITHIN


def test_the_command_prints_and_renders_the_comparison(tmp_path, capsys):
    before, after = _pair()
    old, new = tmp_path / "old" / "results.json", tmp_path / "new" / "results.json"
    write_json(old, before)
    write_json(new, after)
    page = tmp_path / "cmp.html"
    assert main(["report", str(old), str(new), "--compare", "-o", str(page)]) == 0
    out = capsys.readouterr().out
    assert "2 of" in out and "moved toward less privacy (1 clear of their 95 % intervals)" in out
    assert "dp@1 auc: 0.520 [0.500, 0.540] -> 0.610 [0.580, 0.640] (clear)" in out
    html = page.read_text()
    assert html == render_comparison(compare_runs(before, after), str(old), str(new))
    assert html.index("dp@1</td><td>auc") < html.index("dp@1</td><td>accuracy")
    assert main(["report", str(old), "--compare", "-o", str(tmp_path / "x.html")]) == 2
    assert "--compare takes two results files" in capsys.readouterr().err
