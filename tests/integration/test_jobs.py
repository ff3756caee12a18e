"""`privbench attack --jobs N`: cells in worker processes write the files one process writes,
byte for byte, and a stop keeps every finished cell as it does for one process.

Normalised: nothing in results.json, index.html and the cells' result files (train.json and one
file per attack); the timings files (timings.json and each cell's timings.json) are left out of
the comparison, as they hold only wall times, the worker count and the load."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privbench.cli import main

TINY = 'nodes = 3\nrounds = 3\neval_every = 3\nbatch_size = 2\ndevice = "cpu"\n'
ARGS = ["--defense", "sgp,d_psgd,dp_sgp", "--eps", "1,8", "--attack", "mia_threshold,idlg",
        "--quiet"]


def _files(out: Path) -> dict[str, bytes]:
    """Every file of an audit folder but its timings, by path relative to the folder."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "timings.json" and not p.name.startswith(".")}


@pytest.mark.slow
def test_jobs_2_writes_the_same_bytes_as_jobs_1(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    outs = {}
    for jobs in ("1", "2"):
        outs[jobs] = tmp_path / f"jobs{jobs}" / "run"  # the same folder name: index.html's title
        assert main(["attack", "--config", str(cfg), *ARGS, "--jobs", jobs,
                     "--out", str(outs[jobs])]) == 0
    one, two = _files(outs["1"]), _files(outs["2"])
    assert len([k for k in one if k.startswith("cells/")]) == 4 * 3  # 4 cells, train + 2 attacks
    assert one.keys() == two.keys()
    assert [k for k in one if one[k] != two[k]] == []
    import json

    timings = json.loads((outs["2"] / "timings.json").read_text())
    assert timings["jobs"] == 2 and timings["threads"]["threads"] == 1
    assert timings["peak_rss_mib"]["largest_worker"] > 0


@pytest.mark.slow
def test_sigterm_with_jobs_2_keeps_the_finished_cells_and_resume_completes_them(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY.replace("rounds = 3", "rounds = 200").replace("eval_every = 3",
                                                                       "eval_every = 200"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    argv = ["attack", "--config", str(cfg), *ARGS, "--jobs", "2", "--out",
            str(tmp_path / "run")]
    err_file = tmp_path / "stderr"
    with err_file.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "privbench", *argv], stderr=err, env=env)
    try:
        first = tmp_path / "run" / "cells" / "sgp@none" / "train.json"
        deadline = time.monotonic() + 300
        while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert first.exists(), err_file.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM, err_file.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    line = err_file.read_text().strip()
    head = "privbench: stopped (SIGTERM); kept: "
    assert line.count("\n") == 0 and line.startswith(head), line
    assert line.endswith(f"`privbench {shlex.join([*argv, '--resume'])}` continues"), line
    assert first.exists() and not (tmp_path / "run" / "results.json").exists()
    # no worker outlives the stop: nothing writes into the folder any more
    before = _files(tmp_path / "run")
    time.sleep(2)
    assert _files(tmp_path / "run") == before
    assert main([*argv, "--resume"]) == 0
    assert main(["attack", "--config", str(cfg), *ARGS, "--jobs", "1", "--out",
                 str(tmp_path / "whole" / "run")]) == 0
    assert (tmp_path / "run" / "results.json").read_bytes() == \
        (tmp_path / "whole" / "run" / "results.json").read_bytes()
