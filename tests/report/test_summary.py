"""The terminal summary fits 100 columns with notes under the table; `--wide` and the CSV carry
every column."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.report.summary import COLUMNS, summary_csv, summary_rows, summary_table
from privbench.results.store import write_json

AUDIT = Path(__file__).resolve().parents[2] / "reports" / "default-audit" / "results.json.gz"


@pytest.fixture(scope="module")
def audit():
    with gzip.open(AUDIT, "rt", encoding="utf-8") as f:
        return json.load(f)


def test_the_default_table_fits_a_terminal_and_says_what_training_did(audit):
    table = summary_table(audit)
    assert max(map(len, table.splitlines())) <= COLUMNS
    untrained = [r for r in summary_rows(audit) if r.training != "trained"]
    assert untrained  # the committed audit has cells that did not learn
    notes = table.split("\ntraining:\n", 1)[1]
    for r in untrained:
        assert f"{r.defense} ε {r.eps}: " in notes
    assert max(map(len, summary_table(audit, wide=True).splitlines())) > COLUMNS


def test_the_csv_holds_every_row_at_full_precision(audit, tmp_path, capsys):
    rows = list(csv.DictReader(io.StringIO(summary_csv(audit))))
    expected = summary_rows(audit)
    assert len(rows) == len(expected)
    for got, want in zip(rows, expected, strict=True):
        assert got["defense"] == want.defense and got["verdict"] == want.verdict
        assert float(got["accuracy"]) == want.accuracy  # not the table's 3 digits
        assert (got["psnr"] == "") == (want.psnr is None)
    path = tmp_path / "results.json"
    write_json(path, audit)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html"),
                 "--csv", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text() == summary_csv(audit)
    assert main(["report", str(path), "-o", str(tmp_path / "s.html"),
                 "--csv", str(tmp_path / "t.csv")]) == 2  # an existing CSV is kept
    assert "choose another --csv or pass --overwrite" in capsys.readouterr().err
    assert not (tmp_path / "s.html").exists()
