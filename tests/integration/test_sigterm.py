"""SIGTERM (`kill PID`, a scheduler, a CI job's timeout) stops every command as Ctrl-C does: one
line saying what was kept and how to continue, exit code 143, nothing finished lost."""

from __future__ import annotations

import importlib
import shlex
import signal
import subprocess
import sys
import time

import pytest

from privbench.cli import main

STOPPED = 128 + signal.SIGTERM  # 143
HEAD = "privbench: stopped (SIGTERM); "


class _UnhandledError(Exception):
    """The test's own SIGTERM handler ran: the command had installed none."""


@pytest.fixture(autouse=True)
def _sigterm_guard():
    """A SIGTERM that no handler of the command catches fails the test (its default action
    would end pytest itself)."""
    def unhandled(signum, frame):
        raise _UnhandledError("SIGTERM reached no handler of the command")

    old = signal.signal(signal.SIGTERM, unhandled)
    yield
    signal.signal(signal.SIGTERM, old)


def _terminate_at(monkeypatch, target: str, calls: int = 1) -> None:
    """`target` (module.function) sends this process SIGTERM on its call number `calls`."""
    module, name = target.rsplit(".", 1)
    real, seen = getattr(importlib.import_module(module), name), []

    def stop(*args, **kwargs):
        seen.append(1)
        if len(seen) == calls:
            signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, stop)


def _stopped_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(HEAD), err
    return err.strip()


@pytest.mark.parametrize("args,target,written", [
    (["tune", "--defense", "sgp", "--grid", "lr=0.1,0.2", "--nodes", "3", "--rounds", "2",
      "--device", "cpu", "--quiet"], "privbench.pipeline.tuning.tune", "tune.json"),
    (["leakage", "--defense", "sgp", "--rounds", "2", "--quiet"],
     "privbench.audit.leakage.run_leakage", "leakage.json"),
], ids=["tune", "leakage"])
def test_sigterm_in_tune_and_leakage_says_nothing_is_kept(tmp_path, capsys, monkeypatch, args,
                                                         target, written):
    _terminate_at(monkeypatch, target)
    out = tmp_path / "o"
    argv = [*args, "--out", str(out)]
    assert main(argv) == STOPPED
    line = _stopped_line(capsys)
    assert line == (f"{HEAD}nothing of the run is kept ({out / written} is written when it "
                    f"ends); `privbench {shlex.join(argv)}` starts again")
    assert not out.exists()  # a stop that kept nothing leaves no empty folder, no lock file


def test_sigterm_in_attack_keeps_the_finished_cells_and_names_the_command_that_continues(
        tmp_path, capsys, monkeypatch):
    from privbench.pipeline import sweep

    cfg = tmp_path / "tiny.toml"
    cfg.write_text('nodes = 3\nrounds = 2\neval_every = 2\nbatch_size = 2\ndevice = "cpu"\n')
    args = ["attack", "--config", str(cfg), "--defense", "sgp,d_psgd", "--attack",
            "mia_threshold", "--quiet"]
    real = sweep.run_attack

    def stop_in_the_second_cell(built, attack, *a, **k):
        if built.defense == "d_psgd":
            signal.raise_signal(signal.SIGTERM)
        return real(built, attack, *a, **k)

    monkeypatch.setattr(sweep, "run_attack", stop_in_the_second_cell)
    out = tmp_path / "run"
    assert main([*args, "--out", str(out)]) == STOPPED
    line = _stopped_line(capsys)
    head = f"{HEAD}kept: 1 of 2 cells finished in {out}; `"
    assert line.startswith(head) and line.endswith("` continues"), line
    command = shlex.split(line[len(head):-len("` continues")])
    assert command[0] == "privbench" and command[-1] == "--resume"
    monkeypatch.undo()
    assert main(command[1:]) == 0  # the command it names continues
    # reused: the finished cell's training and attack, and the stopped cell's finished training
    assert "resume: reused 3 cell file(s), recomputed 1 (1 missing" in capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    assert (out / "results.json").read_bytes() == (tmp_path / "whole" / "results.json").read_bytes()


def test_kill_of_a_training_run_keeps_its_checkpoint_and_names_the_command(tmp_path):
    """A real `kill PID` from outside, mid-training: exit 143, one line, the checkpoint kept."""
    out = tmp_path / "t"
    args = ["train", "--nodes", "3", "--rounds", "1000000", "--device", "cpu", "--quiet",
            "--checkpoint-every", "0.005", "--out", str(out)]
    err_file = tmp_path / "stderr"
    with err_file.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "privbench", *args], stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.ckpt").is_file() and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.2)
        assert (out / "checkpoint.ckpt").is_file(), err_file.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == STOPPED, err_file.read_text()
    finally:  # a failing run must not leave a training process behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err_file.read_text().strip().splitlines()
    assert lines == [f"{HEAD}kept: the checkpoint {out / 'checkpoint.ckpt'}; "
                     f"`privbench {shlex.join(args)}` continues from it"], lines
    assert (out / "checkpoint.ckpt").is_file() and not (out / "results.json").exists()
