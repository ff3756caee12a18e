"""The typed records of a results file (privbench/results/records.py): every cell and attack
result of the committed default audit rebuilds from its JSON and writes the same JSON back, and
the schema requires exactly the records' typed fields."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from privbench.results import outcome, schema
from privbench.results.records import AttackResult, TrainedCell, required_fields

DEFAULT_AUDIT = Path(__file__).parents[2] / "reports" / "default-audit" / "results.json.gz"


def _cells() -> list[dict]:
    return json.loads(gzip.decompress(DEFAULT_AUDIT.read_bytes()))["cells"]


def test_every_committed_result_round_trips() -> None:
    cells = _cells()
    assert len(cells) > 5
    kinds = set()
    for cell in cells:
        attacks = cell["attacks"]
        trained = {k: v for k, v in cell.items() if k != "attacks"}
        rec = TrainedCell.from_json(trained)
        assert rec.to_json() == trained and TrainedCell.from_json(rec.to_json()) == rec
        assert rec.ok == (cell["status"] == "ok")
        for name, data in attacks.items():
            res = AttackResult.from_json(data)
            assert res.to_json() == data, name
            assert AttackResult.from_json(res.to_json()) == res
            kinds.add(res.kind)
    assert {"inversion", "membership"} <= kinds


def test_without_drops_a_timing_from_the_result_and_its_views() -> None:
    res = AttackResult(status=outcome.OK, uses=("model",), metrics={"psnr": 20.0},
                       kind="inversion",
                       detail={"seconds": 3.0, "views": [{"batch_size": 1, "seconds": 1.0}]})
    out = res.without("seconds").to_json()
    assert out == {"status": "ok", "uses": ["model"], "metrics": {"psnr": 20.0},
                   "kind": "inversion", "views": [{"batch_size": 1}]}
    assert res.detail["seconds"] == 3.0  # records are values: the original is unchanged


def test_the_schema_requires_the_records_typed_fields() -> None:
    assert tuple(schema._ATTACK_FIELDS) == required_fields(AttackResult) == (
        "status", "uses", "metrics")
    assert tuple(schema._CELL_FIELDS) == required_fields(TrainedCell)
    assert schema.ATTACK_FILE({"status": "ok", "uses": [], "metrics": {},
                               "fingerprint": {"sha256": "x", "fields": {}}}) is None
    assert schema.ATTACK_FILE({"status": "ok", "metrics": {},
                               "fingerprint": {"sha256": "x", "fields": {}}}) == \
        "missing field 'uses'"


def test_a_written_results_file_round_trips_through_its_audit_record() -> None:
    """The committed default audit's results.json: `AuditRun.from_json(d).to_json() == d`, the
    same bytes written back, and every cell's attacks read as typed records."""
    from privbench.results.records import AuditCell, AuditRun
    from privbench.results.store import dumps

    text = gzip.decompress(DEFAULT_AUDIT.read_bytes()).decode("utf-8")
    data = json.loads(text)
    run = AuditRun.from_json(data)
    assert run.to_json() == data
    assert dumps(run.to_json()) == dumps(data)
    assert AuditRun.from_json(run.to_json()) == run
    assert run.dataset == "digits" and run.config is not None and run.config.threat
    assert all(isinstance(c, AuditCell) and c.trained.detail["fingerprint"] for c in run.cells)
    assert {c.defense for c in run.cells} >= {"sgp", "dpdl", "partpsp"}


def test_the_audit_record_keeps_the_layout_of_a_sparse_file() -> None:
    """Only what a key holds is written back: no config, environment or command is invented,
    and keys the record does not type stay where they were."""
    from privbench.results.records import AuditRun

    data = {"schema_version": 1, "kind": "audit", "run_name": "x",
            "config": {"run": {"dataset": "digits"}, "threat": "eavesdropper", "extra": [1]},
            "cells": [{"defense": "sgp", "epsilon": None, "status": "ok", "accuracy": 0.5,
                       "privacy": [], "messages": [], "setting": {"name": "paper"},
                       "attacks": {"idlg": {"status": "ok", "uses": ["model"],
                                            "metrics": {"psnr": 30.0}, "gallery": None}}}]}
    run = AuditRun.from_json(data)
    assert run.to_json() == data
    assert run.cells[0].setting == {"name": "paper"}
    assert run.cells[0].attacks["idlg"].metrics["psnr"] == 30.0
    assert run.detail == {"run_name": "x"} and run.config.detail == {"extra": [1]}
