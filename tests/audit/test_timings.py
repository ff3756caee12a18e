"""`timings.json` of `privbench attack` accounts for the whole wall time (imports aside)."""

from __future__ import annotations

import json
import time

import privbench.report  # imports aside: loaded before the clock starts
import privbench.sweep  # noqa: F401
from privbench.cli import main
from privbench.registry import load_plugins

TINY = """
nodes = 3
rounds = 3
eval_every = 3
batch_size = 2
device = "cpu"
"""


def test_timing_parts_sum_to_the_measured_wall_time(tmp_path):
    load_plugins()
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    start = time.perf_counter()
    assert main(["attack", "--config", str(cfg), "--defense", "sgp,dpps", "--eps", "8",
                 "--attack", "mia_threshold", "--out", str(out), "--quiet"]) == 0
    wall = time.perf_counter() - start
    t = json.loads((out / "timings.json").read_text())
    assert set(t["cells"]) == {"sgp@none", "dpps@8"}
    for parts in t["cells"].values():
        assert set(parts) == {"build_s", "train_s", "summary_s", "mia_threshold_s"}
        assert all(v >= 0 for v in parts.values())
    assert t["reused"] == []
    parts_sum = t["setup_s"] + t["report_s"] + sum(sum(p.values()) for p in t["cells"].values())
    assert abs(parts_sum - t["sum_s"]) < 1e-9
    assert t["sum_s"] <= t["wall_s"] <= wall
    assert abs(wall - t["sum_s"]) <= 0.05 * wall  # nothing outside the parts but the CLI glue
