"""Interrupted sweeps lose nothing; diverging runs are reported per cell and the sweep goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.results.fingerprint import LOCK_NAME

TINY = """
nodes = 4
rounds = 4
eval_every = 4
batch_size = 2
device = "cpu"
[audit.attack_config.idlg]
adam_steps = 30
"""
ARGS = ["--defense", "sgp,d_psgd", "--attack", "idlg,mia_threshold", "--quiet"]


def _cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "privbench", "attack", "--config", str(cfg), "--out", str(out),
            *ARGS, *extra]


@pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_sigkill_mid_sweep_then_resume_equals_an_uninterrupted_run(tmp_path, jobs):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ref = tmp_path / "a" / "run"
    assert subprocess.run(_cmd(cfg, ref), env=env, capture_output=True).returncode == 0

    out = tmp_path / "b" / "run"
    proc = subprocess.Popen(_cmd(cfg, out, "--jobs", jobs), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    first = out / "cells" / "sgp@none" / "idlg.json"
    deadline = time.time() + 300
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-sweep: some cells written, others not
    proc.wait()
    assert first.exists()
    assert not (out / "results.json").exists()
    leftovers = [p for p in out.rglob("*") if p.name.startswith(".")]
    for p in leftovers:  # only temp files of the write in progress can be left, never a cell
        assert p.suffix == ".tmp" or p.name == LOCK_NAME

    done = subprocess.run(_cmd(cfg, out, "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list(out.rglob("*.tmp"))  # the resumed run cleared what kill -9 left
    assert (out / "results.json").read_bytes() == (ref / "results.json").read_bytes()
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert [(c["defense"], sorted(c["attacks"])) for c in cells] == [
        ("sgp", ["idlg", "mia_threshold"]), ("d_psgd", ["idlg", "mia_threshold"])]


def test_a_diverging_cell_is_reported_and_the_sweep_goes_on(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    # lr = 1e30 overflows to Inf/NaN in the first rounds for every defense
    assert main(["attack", "--config", str(cfg), "--out", str(out), "--set", "lr=1e30",
                 *ARGS]) == 0
    def reject(name):
        raise ValueError(f"bare {name} in results.json")

    text = (out / "results.json").read_text()
    cells = json.loads(text, parse_constant=reject)["cells"]  # strict JSON despite NaN/Inf
    assert len(cells) == 2
    assert "nan" in text or "inf" in text  # the non-finite values are kept, as strings
    for cell in cells:
        assert cell["status"].startswith("diverged (NaN/Inf) in round ")
        for att in cell["attacks"].values():
            assert att["status"].startswith("skipped: training diverged")
    assert "diverged" in capsys.readouterr().out


def test_an_attack_that_blows_up_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path,
                                                                           monkeypatch):
    import privbench.audit.inversion

    def exploding(*args, **kwargs):
        raise FloatingPointError("gradient matching diverged to NaN")

    monkeypatch.setattr(privbench.audit.inversion, "invert_many", exploding)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    assert main(["attack", "--config", str(cfg), "--out", str(out), *ARGS]) == 0
    cells = json.loads((out / "results.json").read_text())["cells"]
    for cell in cells:
        status = cell["attacks"]["idlg"]["status"]
        assert status.startswith("failed: FloatingPointError: gradient matching diverged")
        assert cell["attacks"]["mia_threshold"]["status"] == "ok"  # the other attack still ran


def test_a_diverged_cell_still_gets_the_audits_that_train_their_own_run(tmp_path):
    """The mechanism audit replays its own run (it reads nothing of the cell's), so a diverged
    cell is still measured: the gate reads its result there as on any other cell."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    assert main(["attack", "--config", str(cfg), "--out", str(out), "--set", "lr=1e30",
                 "--defense", "dp_sgp", "--eps", "1", "--attack", "idlg,mechanism",
                 "--quiet"]) == 0
    [cell] = json.loads((out / "results.json").read_text())["cells"]
    assert cell["status"].startswith("diverged (NaN/Inf) in round ")
    assert cell["attacks"]["idlg"]["status"].startswith("skipped: training diverged")
    mech = cell["attacks"]["mechanism"]
    assert mech["status"] == "ok" and mech["mechanism"]["diverged_round"] is not None
