"""Results are never silently stale, mixed or lost: fingerprints checked on --resume,
one writer per folder, lossless cell names, a damaged cell never replaces a good aggregate,
strict JSON, results independent of the output folder's name."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.errors import DataError
from privbench.pipeline import sweep
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.results.fingerprint import LOCK_NAME

TINY = """
nodes = 4
rounds = 4
eval_every = 4
batch_size = 2
device = "cpu"
"""
ARGS = ["--defense", "dpdl", "--attack", "mia_threshold", "--quiet"]


def _audit(cfg_dir: Path, out: Path, *extra: str) -> int:
    cfg = cfg_dir / "tiny.toml"
    cfg.write_text(TINY)
    return main(["attack", "--config", str(cfg), "--out", str(out), *ARGS, *extra])


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("integrity")
    out = tmp / "run"
    assert _audit(tmp, out, "--eps", "1") == 0
    return tmp, out


def _no_training(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(sweep, "train", refuse)
    monkeypatch.setattr("privbench.engine.loop.train", refuse)


def _one_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("privbench: error:")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
    return lines[0]


def test_equal_eps_values_are_one_cell_with_a_note(audit_dir, tmp_path, capsys):
    _, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    assert _audit(tmp_path, copy, "--eps", "1,1.0", "--resume") == 0  # reuses the one cell
    assert "duplicate --eps value(s) 1.0 removed" in capsys.readouterr().err
    assert [p.name for p in (copy / "cells").iterdir()] == ["dpdl@1"]
    res = json.loads((copy / "results.json").read_text())
    assert len(res["cells"]) == 1 and res["config"]["audit"]["eps"] == [1.0]


def test_close_eps_values_get_distinct_lossless_cell_names():
    load_plugins()
    audit = sweep.AuditConfig(defenses=("dpdl",), eps=(1.0000001, 1.0000004, 1.0, 8.0))
    runner = sweep.Sweep(sweep.RunConfig(), {}, audit, Path("x"))
    names = [runner.cell_dir(*cell).name for cell in runner.grid()]
    assert names == ["dpdl@1.0000001", "dpdl@1.0000004", "dpdl@1", "dpdl@8"]
    assert len(set(names)) == len(names)


def test_resume_after_changing_rounds_is_an_error_naming_the_field(audit_dir, tmp_path, capsys,
                                                                   monkeypatch):
    _, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = (copy / "results.json").read_bytes()
    _no_training(monkeypatch)
    assert _audit(tmp_path, copy, "--eps", "1", "--resume", "--rounds", "5") == 2
    line = _one_line(capsys, "is stale (run.rounds = 4 there, 5 now)")
    assert "--resume=rerun-stale" in line
    load_plugins()
    field = dataclasses.fields(DEFENSES.get("dpdl").Config)[0]
    value = "0.5" if field.type in (float, "float") else "1"
    assert _audit(tmp_path, copy, "--eps", "1", "--resume", "--set",
                  f"defense.{field.name}={value}") == 2
    _one_line(capsys, f"defense.{field.name} = ")
    assert (copy / "results.json").read_bytes() == before


def test_resume_after_the_code_builds_another_model_is_an_error(audit_dir, tmp_path, capsys,
                                                                monkeypatch):
    """The configuration unchanged, code that makes another model of it (here: counts the
    MLP's first two Linears as one layer, as a split would then share them) leaves the cell
    stale: the fingerprint holds the structure the code builds, not only the settings."""
    from privbench.models import FlatModel

    _, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    layers = FlatModel.layers.fget
    monkeypatch.setattr(FlatModel, "layers", property(
        lambda fm: [layers(fm)[0] + layers(fm)[1], *layers(fm)[2:]]))
    _no_training(monkeypatch)
    assert _audit(tmp_path, copy, "--eps", "1", "--resume") == 2
    _one_line(capsys, "is stale (structure.layers = [")


def test_resume_on_another_kind_of_machine_is_an_error(audit_dir, tmp_path, capsys,
                                                       monkeypatch):
    """Cells made on other vector kernels (or another GPU) are not mixed into this machine's:
    the kind of machine is in the fingerprint, as the thread count is."""
    from privbench.device import machine_kind

    _, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    here = machine_kind(sweep.cell_device("cpu"))
    monkeypatch.setattr(sweep, "machine_kind", lambda dev: "cpu (Other CPU, AVX2)")
    _no_training(monkeypatch)
    assert _audit(tmp_path, copy, "--eps", "1", "--resume") == 2
    _one_line(capsys, f"is stale (machine = '{here}' there, 'cpu (Other CPU, AVX2)' now)")


def test_rerun_stale_recomputes_only_stale_cells(audit_dir, tmp_path, capsys):
    tmp, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    old = json.loads((copy / "results.json").read_text())
    assert _audit(tmp, copy, "--eps", "1", "--resume=rerun-stale", "--rounds", "5") == 0
    assert "reused 0 cell file(s), recomputed 2 (0 missing, 2 stale, 0 damaged)" in \
        capsys.readouterr().out
    new = json.loads((copy / "results.json").read_text())
    assert new["config"]["run"]["rounds"] == 5
    assert new["cells"][0]["fingerprint"] != old["cells"][0]["fingerprint"]
    assert new["config"]["fingerprint"] != old["config"]["fingerprint"]
    fresh = tmp_path / "fresh"  # the recomputed cells equal a fresh run with the new rounds
    assert _audit(tmp, fresh, "--eps", "1", "--rounds", "5") == 0
    assert (fresh / "results.json").read_bytes() == (copy / "results.json").read_bytes()


def test_a_damaged_cell_never_replaces_the_good_aggregate(audit_dir, tmp_path, capsys,
                                                          monkeypatch):
    tmp, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    good = (copy / "results.json").read_bytes()
    good_timings = json.loads((copy / "timings.json").read_text())
    (copy / "cells" / "dpdl@1" / "mia_threshold.json").write_text('{"status": "ok", "uses": [')

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_attack", interrupted)  # the rerun stops mid-cell
    assert _audit(tmp, copy, "--eps", "1", "--resume") == 130
    err = capsys.readouterr().err
    assert "mia_threshold.json is damaged (is not valid JSON" in err
    assert (copy / "results.json").read_bytes() == good  # intact until a complete one replaces it
    assert not [p for p in copy.rglob("*.tmp")]
    monkeypatch.undo()
    assert _audit(tmp, copy, "--eps", "1", "--resume") == 0
    assert "recomputed 1 (0 missing, 0 stale, 1 damaged)" in capsys.readouterr().out
    assert (copy / "results.json").read_bytes() == good
    timings = json.loads((copy / "timings.json").read_text())  # the reused cell keeps its timings
    assert set(timings["cells"]["dpdl@1"]) == set(good_timings["cells"]["dpdl@1"])
    assert timings["reused"] == []  # its damaged file was recomputed this time


def test_a_damaged_cell_file_at_assembly_is_one_line(audit_dir, tmp_path, capsys):
    _, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    good = (copy / "results.json").read_bytes()
    path = copy / "cells" / "dpdl@1" / "train.json"
    cell = json.loads(path.read_text())
    cell["privacy"] = "lots"
    path.write_text(json.dumps(cell))
    runner = sweep.Sweep(sweep.RunConfig(), {}, sweep.AuditConfig(
        defenses=("dpdl",), eps=(1.0,), attacks=("mia_threshold",)), copy)
    with pytest.raises(DataError, match=r"train.json is damaged \(.privacy: expected an "
                                              "array, got string\\)"):
        runner.assemble()
    assert (copy / "results.json").read_bytes() == good


def test_results_do_not_depend_on_the_folder_name(audit_dir, tmp_path):
    tmp, out = audit_dir
    other = tmp_path / "another-name"
    assert _audit(tmp, other, "--eps", "1") == 0
    assert (other / "results.json").read_bytes() == (out / "results.json").read_bytes()
    assert "another-name" in (other / "index.html").read_text()  # the run name lives here
    assert "another-name" not in (other / "results.json").read_text()


def test_results_are_strict_json(audit_dir):
    _, out = audit_dir

    def reject(name):
        raise ValueError(f"bare {name}")

    json.loads((out / "results.json").read_text(), parse_constant=reject)
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["threads"] >= 1 and len(res["config"]["fingerprint"]) == 64


def test_a_second_writer_into_a_locked_folder_exits_2_at_once(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "slow.toml"
    cfg.write_text(TINY.replace("rounds = 4", "rounds = 100000"))
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.Popen([sys.executable, "-m", "privbench", "attack", "--config", str(cfg),
                              "--out", str(out), *ARGS, "--eps", "1"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and first.poll() is None:  # until the first holds the lock
            if (out / LOCK_NAME).exists():
                with open(out / LOCK_NAME) as fh:
                    try:
                        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        fcntl.flock(fh, fcntl.LOCK_UN)
                    except BlockingIOError:
                        break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read().decode()[-2000:]
        _no_training(monkeypatch)
        assert main(["attack", "--config", str(cfg), "--out", str(out), *ARGS, "--eps", "1"]) == 2
        _one_line(capsys, "is in use by another privbench run")
    finally:
        first.kill()
        first.wait()
    assert not (out / "results.json").exists()


def test_edited_split_in_a_saved_run_is_refused(tmp_path, capsys):
    run = tmp_path / "train"
    assert main(["train", "--defense", "sgp", "--nodes", "4", "--rounds", "2", "--batch-size",
                 "2", "--device", "cpu", "--out", str(run), "--quiet"]) == 0
    res = json.loads((run / "results.json").read_text())
    res["run"]["holdout"] = 0.5  # moves samples between members and non-members
    (run / "results.json").write_text(json.dumps(res))
    capsys.readouterr()
    assert main(["attack", "--messages", str(run), "--attack", "mia_threshold", "--out",
                 str(tmp_path / "a"), "--quiet"]) == 2
    _one_line(capsys, "split rebuilt from results.json does not match the digest")
