"""`privbench report` (`privbench.commands.report`): the comparison of two audits and the CSV of
the summary table, and the option combinations it refuses in one line."""

from __future__ import annotations

import csv

from privbench.cli import main
from privbench.results.store import write_json
from tests.report.test_render import _results


def _write(tmp_path, *names: str) -> list[str]:
    paths = []
    for name in names:
        path = tmp_path / name / "results.json"
        path.parent.mkdir()
        write_json(path, _results(name))
        paths.append(str(path))
    return paths


def test_compare_prints_and_renders_the_two_audits(tmp_path, capsys) -> None:
    old, new = _write(tmp_path, "old", "new")
    out = tmp_path / "cmp.html"
    assert main(["report", old, new, "--compare", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and out.read_text().lstrip().lower().startswith("<!doctype")


def test_csv_has_one_row_per_cell(tmp_path, capsys) -> None:
    (path,) = _write(tmp_path, "audit")
    out, table = tmp_path / "r.html", tmp_path / "summary.csv"
    assert main(["report", path, "-o", str(out), "--csv", str(table)]) == 0
    rows = list(csv.reader(table.open()))
    assert len(rows) - 1 == len(_results()["cells"]) and len(rows[0]) > 3
    assert f"wrote {table}" in capsys.readouterr().out


def test_compare_takes_two_files_and_no_csv(tmp_path, capsys) -> None:
    one, two, three = _write(tmp_path, "a", "b", "c")
    for args, needle in (([one], "got 1 file(s)"), ([one, two, three], "got 3 file(s)"),
                         ([one, two, "--csv", str(tmp_path / "t.csv")], "and --csv")):
        assert main(["report", *args, "--compare", "-o", str(tmp_path / "x.html")]) == 2
        err = capsys.readouterr().err
        assert "--compare takes two results files" in err and needle in err
        assert err.count("\n") == 1
    assert not (tmp_path / "x.html").exists()
