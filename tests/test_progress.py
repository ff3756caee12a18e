"""Progress of long phases: a bar on a terminal, heartbeat lines in a log, nothing when quiet."""

from __future__ import annotations

import io
import time

from privbench.commands.progress import Phase


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
