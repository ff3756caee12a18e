"""Progress of long phases: a bar on a terminal, heartbeat lines in a log, nothing when quiet."""

from __future__ import annotations

import io
import re
import time

from privbench.progress import Phase


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_heartbeat_line_naming_the_phase_and_its_progress():
    log = io.StringIO()
    with Phase("cell 2 of 3 (sgp no DP): train sgp", 10, "round", stream=log,
               every=0.02) as phase:
        for _ in range(4):
            time.sleep(0.03)
            phase.update()
    lines = log.getvalue().splitlines()
    assert lines and all(x.startswith("privbench: cell 2 of 3 (sgp no DP): train sgp: round ")
                         for x in lines), lines
    assert any(" of 10, 0 s so far, about " in x and x.endswith(" left") for x in lines), lines
    assert "\r" not in log.getvalue()  # lines, not a bar


def test_a_phase_without_a_count_says_the_time_spent():
    log = io.StringIO()
    with Phase("attack canary (1 of 1)", stream=log, every=0.02):
        time.sleep(0.1)
    assert "privbench: attack canary (1 of 1): 0 s so far" in log.getvalue().splitlines()


def test_a_terminal_gets_a_bar_redrawn_while_the_work_says_nothing():
    term = _Terminal()
    with Phase("attack geiping (1 of 2)", stream=term):
        time.sleep(1.3)  # no update at all: the bar still shows the time going by
    text = term.getvalue()
    assert "attack geiping (1 of 2): 00:01" in text and "privbench:" not in text, text


def test_quiet_shows_nothing():
    log = io.StringIO()
    with Phase("train sgp", 5, "round", enabled=False, stream=log, every=0.01) as phase:
        time.sleep(0.05)
        phase.update(5)
    assert log.getvalue() == "" and phase.done == 5


def _slow_rounds(monkeypatch, module: str) -> None:
    """`module`'s `train` takes 30 ms a round and heartbeats come every 10 ms."""
    import importlib

    from privbench import engine, progress

    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.01)
    real = engine.train

    def slow_train(trainer, progress=None, **kwargs):
        def step(n):
            time.sleep(0.03)
            if progress is not None:
                progress(n)

        return real(trainer, progress=step, **kwargs)

    monkeypatch.setattr(importlib.import_module(module), "train", slow_train)


def test_tune_shows_each_candidates_training_in_a_log(tmp_path, capsys, monkeypatch):
    from privbench.cli import main

    _slow_rounds(monkeypatch, "privbench.engine")  # tune imports it when it trains
    assert main(["tune", "--defense", "dp_sgp", "--eps", "8", "--grid", "lr=0.1,0.2",
                 "--nodes", "3", "--rounds", "4", "--device", "cpu",
                 "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err.splitlines()
    for what in ("candidate 1 of 2 (lr=0.1)", "candidate 2 of 2 (lr=0.2)",
                 "test accuracy of the untuned defaults",
                 "test accuracy of the chosen lr="):
        head = f"privbench: tune dp_sgp ε=8: {what}"
        lines = [x for x in err if x.startswith(head)]
        assert lines and all(" of 4, " in x and " so far" in x for x in lines), (what, err)


def test_leakage_shows_each_cells_phases_in_a_log(tmp_path, capsys, monkeypatch):
    from privbench.audit import leakage
    from privbench.cli import main

    _slow_rounds(monkeypatch, "privbench.audit.leakage")
    real = leakage._membership

    def slow_membership(*args, **kwargs):
        time.sleep(0.03)
        return real(*args, **kwargs)

    def no_inversion(built, cfg):  # the real one: 20 s of iDLG here, its phase the same
        time.sleep(0.05)
        return {spec: {"status": "not applicable: not run in this test", "victims": 0,
                       "attack": "idlg"} for _, spec, _, _ in leakage.placements(cfg)}

    monkeypatch.setattr(leakage, "_membership", slow_membership)
    monkeypatch.setattr(leakage, "_inversions", no_inversion)
    assert main(["leakage", "--defense", "d_psgd", "--distances", "1", "--sizes", "2",
                 "--victims", "2", "--inversion-victims", "1", "--rounds", "3", "--members", "2",
                 "--out", str(tmp_path / "l")]) == 0
    err = capsys.readouterr().err.splitlines()
    cell = "privbench: cell 1 of 1 (d_psgd no DP): "
    for what in ("train (batch-1 run): round ", "train (membership run, 2 members per node): "
                 "round ", "inversion of every placement's views: ",
                 "membership attack and network DP: placement "):
        assert any(x.startswith(cell + what) and " so far" in x for x in err), (what, err)


def test_work_that_counts_itself_gives_the_running_phase_its_fraction_and_time_left():
    from privbench import progress

    progress.stage(10, "view")  # no phase running: nothing happens, nothing fails
    progress.advance(3)
    log = io.StringIO()
    with Phase("attack mia_message (4 of 6)", stream=log, every=0.02) as phase:
        time.sleep(0.05)  # before the count is known: the time spent only
        progress.stage(8, "view")
        for _ in range(3):
            time.sleep(0.03)
            progress.advance()
        time.sleep(0.05)
        assert (phase.done, phase.total, phase.unit) == (3, 8, "view")
    lines = log.getvalue().splitlines()
    assert "privbench: attack mia_message (4 of 6): 0 s so far" in lines, lines
    counted = [x for x in lines if ": view 3 of 8, " in x]
    assert counted and re.search(r"about \d+ s left$", counted[-1]), lines
    progress.advance(5)  # the phase is over: nothing counts it
    assert phase.done == 3


def test_a_stage_restarts_the_count_and_the_estimate():
    from privbench import progress

    log = io.StringIO()
    with Phase("attack lira (1 of 1)", stream=log, every=0.01) as phase:
        progress.stage(4, "reference round")
        progress.advance(4)
        progress.stage(100, "view")
        time.sleep(0.05)
        assert (phase.done, phase.total) == (0, 100)
        progress.advance(50)
        time.sleep(0.05)
    lines = log.getvalue().splitlines()
    assert any(": view 0 of 100, " in x and "left" not in x for x in lines), lines
    assert any(": view 50 of 100, " in x and "left" in x for x in lines), lines


def test_a_terminal_bar_gets_the_count_once_the_work_knows_it():
    from privbench import progress

    term = _Terminal()
    with Phase("attack mia_message (4 of 6)", stream=term):
        progress.stage(4, "view")
        progress.advance(2)
        time.sleep(1.2)
    text = term.getvalue()
    assert "2/4" in text and "view" in text, text
