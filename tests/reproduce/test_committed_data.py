"""The committed reproductions are whole and current: each table under reports/reproduce
re-renders byte for byte from its runs, each run is of its grid as the code declares it now,
and lines trained again apart (reports/remake) are the committed runs'."""

from __future__ import annotations

import pytest

from privbench.cli import main
from privbench.data import files as datafiles
from privbench.reproduce import REPRODUCTIONS, load
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE, read_runs
from tests.reproduce.grids import (
    REMAKES,
    REPORTS,
    committed_runs_files,
)


def test_committed_tables_re_render_byte_for_byte(tmp_path, capsys):
    load()
    folders = [p.parent for p in committed_runs_files()]
    assert folders, f"no committed reproduction under {REPORTS}"
    for k, folder in enumerate(folders):
        out = tmp_path / str(k)
        out.mkdir()
        (out / RUNS_FILE).write_bytes((folder / RUNS_FILE).read_bytes())
        name = read_runs(folder / RUNS_FILE)[0]["reproduction"]
        assert main(["reproduce", name, "--render", "--out", str(out)]) == 0
        assert (out / "table.md").read_bytes() == (folder / "table.md").read_bytes(), folder
    capsys.readouterr()


@pytest.mark.skipif(datafiles.locate_idx("fashion-mnist", None) is None,
                    reason="Fashion-MNIST not found (apt-get install dataset-fashion-mnist)")
def test_every_committed_run_is_of_its_grid_as_the_code_declares_it_now(tmp_path):
    """A committed table is not stale: each of its lines passes `--merge`'s check, so it was
    made with the setting its reproduction's scale gives that run today (a step size or a
    defense value changed in the code without re-running fails here, naming the field)."""
    load()
    for k, path in enumerate(committed_runs_files()):
        lines = read_runs(path)
        repro = REPRODUCTIONS.get(lines[0]["reproduction"])
        scale = repro.scale(lines[0]["scale"])
        assert runs_mod.merge(repro, scale, [path], tmp_path / str(k)) == (len(lines), 0), path


def test_a_remake_holds_lines_of_a_committed_table_made_by_a_named_code_and_machine():
    """Lines trained again apart (reports/remake/PAPER[/SCALE]) are the same runs as their
    committed table's, key for key (the same fingerprint: configuration, data, seed), each line
    naming the code and the kind of machine that made it, all lines one code version and one kind
    of machine (what training them apart is for: two kinds of AVX-512 CPU give a sign run other
    bits), so that they can be compared and later replace the committed lines."""
    load()
    paths = sorted(REMAKES.rglob(RUNS_FILE))
    if not paths:
        pytest.skip(f"no lines trained again apart under {REMAKES}")
    for path in paths:
        lines = read_runs(path)
        repro = REPRODUCTIONS.get(lines[0]["reproduction"])
        scale = repro.scale(lines[0]["scale"])
        own = "" if scale == repro.scales[0] else scale.name
        assert path.parent == REMAKES / repro.name / own, path  # own "": the paper's folder
        committed = {(r["method"], r["eps"], r["seed"]): r["fingerprint"]
                     for r in read_runs(REPORTS / repro.name / own / RUNS_FILE)}
        for line in lines:
            key = (line["method"], line["eps"], line["seed"])
            assert committed.get(key) == line["fingerprint"], (path, key)
            assert line.get("code") and line.get("machine"), (path, key)
        made_by = {(r["code"]["revision"], r["machine"]) for r in lines}
        assert len(made_by) == 1, f"{path}: lines of several codes or machines: {made_by}"
