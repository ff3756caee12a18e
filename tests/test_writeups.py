"""The write-ups under reports/ quote their data: what each one shows is what its committed
files give, rendered again by the code at hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from privbench.report.summary import summary_table

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def test_the_default_audit_write_up_quotes_its_table_rendered_from_its_results():
    folder = REPORTS / "default-audit"
    with gzip.open(folder / "results.json.gz", "rt", encoding="utf-8") as f:
        table = summary_table(json.load(f))
    write_up = (folder / "README.md").read_text(encoding="utf-8")
    assert len(table.splitlines()) >= 15
    assert f"```text\n{table}\n```" in write_up


def test_the_performance_write_up_quotes_its_benchmark_json():
    """Each model's row of the engine table holds the medians and quartiles of engine.json."""
    folder = REPORTS / "performance"
    bench = json.loads((folder / "engine.json").read_text(encoding="utf-8"))
    lines = (folder / "README.md").read_text(encoding="utf-8").splitlines()
    names = {"lenet": "| LeNet |", "cnn": "| FedAvg CNN |"}
    assert {r["model"] for r in bench["rows"]} == set(names)
    def line_of(entry: dict) -> str:  # the table's row of a model and node count
        return next(ln for ln in lines
                    if ln.startswith(f"{names[entry['model']]} {entry['nodes']} |"))

    for row in bench["rows"]:
        ms = [1000 * row[k] for k in ("median_s", "q1_s", "q3_s")]
        assert f"{ms[0]:.1f} ms [{ms[1]:.1f}-{ms[2]:.1f}]" in line_of(row), row["method"]
    for ratio in bench["ratios"]:
        assert line_of(ratio).endswith(
            f"| {ratio['fastest_opacus_over_privbench']:.2f}x "
            f"({ratio['fastest_opacus_over_privbench_cpu']:.2f}x) | "
            f"{ratio['privbench_over_floor']:.2f}x ({ratio['privbench_over_floor_cpu']:.2f}x) |")
