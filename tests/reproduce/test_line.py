"""The type of a runs.jsonl line names every key a line holds: those every line has as
required, those of newer lines as not required, and none that no line holds."""

from __future__ import annotations

from pathlib import Path

from privbench.reproduce import REPRODUCTIONS, Scale, load
from privbench.reproduce.line import RunLine
from privbench.reproduce.runs import RUNS_FILE, Job, read_runs, run_job

REPORTS = Path(__file__).resolve().parents[2] / "reports"
DECLARED = RunLine.__required_keys__ | RunLine.__optional_keys__


def test_every_committed_line_has_the_required_keys_and_no_undeclared_one():
    files = sorted(REPORTS.rglob(RUNS_FILE))
    assert files
    for path in files:
        for rec in read_runs(path):
            assert RunLine.__required_keys__ <= set(rec), (path, rec["method"])
            assert set(rec) <= DECLARED, (path, set(rec) - DECLARED)


def test_a_new_line_has_every_declared_key():
    load()
    repro = REPRODUCTIONS.get("dyn_d2p")
    scale = Scale("tiny", (("dataset", "digits"), ("model", "mlp"), ("nodes", 4),
                           ("rounds", 1), ("batch_size", 16), ("eval_every", 1)),
                  (0,), "one round on 4 digits nodes")
    method = next(m for m in repro.methods if m.private)
    rec = run_job(repro, scale, Job(method, 1.0, 0, repro.grid_field))
    assert set(rec) == DECLARED
