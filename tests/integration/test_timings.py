"""`timings.json` of `privbench attack` accounts for the whole wall time (imports aside).

`timings.json` cannot time its own write, nor those of index.html and results.json after it:
each is fsync'ed, which on a busy disk takes a large share of a one-second run. The test times
those three writes itself and leaves only the CLI glue (argument parsing, the printed table)
unexplained."""

from __future__ import annotations

import json
import time
from pathlib import Path

import privbench.pipeline.sweep
import privbench.report  # imports aside: loaded before the clock starts
from privbench.cli import main
from privbench.plugins import load_plugins

TINY = """
nodes = 3
rounds = 3
eval_every = 3
batch_size = 2
device = "cpu"
"""


def _timing_final_writes(monkeypatch, out) -> dict[str, float]:
    """Seconds spent writing each file of the folder's top level `out` (name -> seconds)."""
    spent: dict[str, float] = {}
    for name in ("write_json", "atomic_write_text"):
        write = getattr(privbench.pipeline.sweep, name)

        def timed(path, obj, write=write):
            start = time.perf_counter()
            write(path, obj)
            file = Path(path)
            if file.parent == out:
                spent[file.name] = spent.get(file.name, 0.0) + time.perf_counter() - start

        monkeypatch.setattr(privbench.pipeline.sweep, name, timed)
    return spent


def test_timing_parts_sum_to_the_measured_wall_time(tmp_path, monkeypatch):
    load_plugins()
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    final = _timing_final_writes(monkeypatch, out)
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
    assert set(final) == {"timings.json", "index.html", "results.json"}
    unexplained = wall - t["sum_s"] - sum(final.values())
    assert abs(unexplained) <= 0.05 * wall  # nothing outside the parts but the CLI glue
