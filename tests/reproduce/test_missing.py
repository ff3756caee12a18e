"""`privbench.reproduce.missing`: the commands that complete a table."""

from __future__ import annotations

import dataclasses
import shlex

from privbench.cli import main
from privbench.reproduce import REPRODUCTIONS
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE, read_runs, reproduce
from tests.reproduce.grids import (
    tiny,
)


def test_the_missing_commands_train_exactly_the_missing_runs(tmp_path, monkeypatch, capsys):
    """`--missing` on a table with a seed complete and another with one run: its commands,
    run as printed (into another folder), train each missing run once and nothing else, and
    its merge line completes the table."""
    repro, scale = tiny()
    repro = dataclasses.replace(repro, name="missing_test")
    monkeypatch.setitem(REPRODUCTIONS._items, "missing_test", repro)
    table, more = tmp_path / "table", tmp_path / "more"
    reproduce(repro, scale, (0,), table)
    reproduce(repro, scale, (1,), table, rows=("Dyn-D2P",), columns=(1.0,))
    grid = {j.key for j in runs_mod.jobs(repro.at(scale), scale.seeds)}
    have = {(r["method"], r["eps"], r["seed"]) for r in read_runs(table / RUNS_FILE)}
    assert main(["reproduce", "missing_test", "--missing", "--out", str(table)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(grid - have)} of {len(grid)} runs missing" in printed
    lines = [ln for ln in printed.splitlines() if ln.startswith(("OMP_", "privbench"))]
    assert len(lines) >= 3 and "--eps 3" in printed  # a partly run row gets its values only
    notes = [ln for ln in printed.splitlines() if ln.startswith("# ")]
    assert len(notes) == len(lines) - 1 and all(" min on cpu (" in n for n in notes)
    for line in lines[:-1]:  # as printed, less the env, the program and the side-by-side jobs
        argv = shlex.split(line)[2:]
        k = argv.index("--out")
        argv[k + 1] = str(more)
        if "--jobs" in argv:
            del argv[argv.index("--jobs"):argv.index("--jobs") + 2]
        assert main(argv) == 0, line
    trained = [(r["method"], r["eps"], r["seed"]) for r in read_runs(more / RUNS_FILE)]
    assert sorted(trained, key=str) == sorted(grid - have, key=str)  # each once, no other
    merge_argv = shlex.split(lines[-1])[1:]
    assert merge_argv[-2:] == ["--out", str(table)]  # into the table's folder, named
    merge_argv[merge_argv.index("--merge") + 1] = str(more / RUNS_FILE)
    assert main(merge_argv) == 0
    assert {(r["method"], r["eps"], r["seed"]) for r in read_runs(table / RUNS_FILE)} == grid
    capsys.readouterr()
    assert main(["reproduce", "missing_test", "--missing", "--out", str(table)]) == 0
    assert capsys.readouterr().out.strip() == \
        f"**missing_test**, scale 'reduced': complete ({len(grid)} runs)."
    assert main(["reproduce", "missing_test", "--missing", "--seeds", "1"]) == 2
    assert "--missing takes no --seeds: it reads the folder's runs.jsonl" in \
        capsys.readouterr().err
