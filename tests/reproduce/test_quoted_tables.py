"""The write-ups quote the committed tables verbatim: each paper's README.md its tables, the
reproductions' index and the repository's README the summary and the list of missing runs."""

from __future__ import annotations

from privbench.cli import main
from privbench.reproduce.runs import RUNS_FILE
from tests.reproduce.grids import (
    REPORTS,
)


def test_each_paper_write_up_quotes_its_committed_tables():
    """Each committed table.md appears whole (title, setting line, every table) in its paper's
    write-up, reports/reproduce/<paper>/README.md, so a write-up whose rows were updated but whose
    setting line (seeds, runs) was not fails."""
    folders = sorted(p.parent for p in REPORTS.rglob(RUNS_FILE))
    assert folders
    for folder in folders:
        paper = REPORTS / folder.relative_to(REPORTS).parts[0]
        write_up = (paper / "README.md").read_text(encoding="utf-8")
        table = (folder / "table.md").read_text(encoding="utf-8").rstrip("\n")
        stale = [ln for ln in table.splitlines() if ln and ln not in write_up]
        assert not stale, f"{paper}/README.md lacks {folder}'s table.md lines: {stale[:2]}"
        assert table in write_up, f"{paper}/README.md's copy of {folder}/table.md is not verbatim"


def test_the_summary_re_renders_from_the_committed_runs_and_the_write_ups_quote_it(
        tmp_path, monkeypatch, capsys):
    """`privbench reproduce --summary` over a copy of the committed runs files (their folders
    kept, from a copy of the repository's root) gives the committed summary.md and
    missing.md byte for byte, one entry per table; the reproductions' index
    (reports/reproduce/README.md) quotes both and the README the summary."""
    paths = sorted(REPORTS.rglob(RUNS_FILE))
    root = tmp_path / "reports" / "reproduce"
    for path in paths:
        copy = root / path.relative_to(REPORTS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--summary"]) == 0
    capsys.readouterr()
    assert main(["reproduce", "--missing"]) == 0  # the same list, printed
    assert capsys.readouterr().out == (root / "missing.md").read_text(encoding="utf-8")
    text = (root / "summary.md").read_text(encoding="utf-8")
    assert text == (REPORTS / "summary.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2 + len(paths)
    index = (REPORTS / "README.md").read_text(encoding="utf-8")
    assert text in index
    assert text in (REPORTS.parents[1] / "README.md").read_text(encoding="utf-8")
    # and what is not yet run: the index's list is the one the committed lines give
    lacking = (root / "missing.md").read_text(encoding="utf-8")
    assert lacking == (REPORTS / "missing.md").read_text(encoding="utf-8")
    assert lacking.count("**, scale '") == len(paths)
    assert lacking in index
    capsys.readouterr()
