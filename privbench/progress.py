"""Progress of a long phase: a bar on a terminal, a heartbeat line in a log.

A phase (training a cell, an inversion, a canary audit) may run for minutes. On a terminal
(stderr a TTY) it shows a tqdm bar: its count when it has one, else the time spent, refreshed
every second even while the work reports nothing. Elsewhere (a log file, CI) a line every
`HEARTBEAT_SECONDS` seconds names the phase, its progress and the time spent, so a log never
stays silent for minutes:

    privbench: cell 3 of 15 (dp_sgp ε=1): train: round 41 of 60, 30 s so far, about 14 s left

A phase whose count is known only once its work starts (an attack: the views it scores, the
reference rounds it trains) gets it from the library code doing the work, which never holds the
phase: `stage(total, unit)` starts a counted stage in the innermost running phase and
`advance(n)` counts it, so the line then says the fraction done and the time left of that stage:

    privbench: cell 1 of 2 (sgp no DP): attack mia_message (4 of 6): view 120 of 360, 20 s so
    far, about 40 s left

Both do nothing when no phase runs (a library call, a test).
"""

from __future__ import annotations

import sys
import threading
import time
from contextvars import ContextVar, Token
from types import TracebackType
from typing import IO, Any

HEARTBEAT_SECONDS = 30.0  # a heartbeat line in a log at most this often
REFRESH_SECONDS = 1.0  # a terminal bar redrawn at least this often
_RUNNING: ContextVar[Phase | None] = ContextVar("privbench_phase", default=None)


def seconds_text(s: float) -> str:
    """"45 s", "3 min 20 s": time spent, for people."""
    whole = int(s)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


class Phase:
    """One phase's progress: use as a context manager and call `update` as work is done.

    Args:
        label: what is running, e.g. "cell 3 of 15 (dp_sgp ε=1): train".
        total: how many units the phase has (None: unknown; only the time is shown).
        unit: the unit's name ("round").
        enabled: False shows nothing (--quiet).
        initial: units done before (a run continued from a checkpoint).
        stream: where to write (default: sys.stderr when the phase starts).
        every: seconds between heartbeat lines when `stream` is not a terminal (default
            `HEARTBEAT_SECONDS`, read when the phase starts).
    """

    def __init__(self, label: str, total: int | None = None, unit: str = "it",
                 enabled: bool = True, initial: int = 0, stream: IO[str] | None = None,
                 every: float | None = None) -> None:
        self.label, self.total, self.unit, self.enabled = label, total, unit, enabled
        self.done = self.first = initial
        self.stream, self.every = stream, every
        self.bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._token: Token[Phase | None] | None = None
        self.start = self.counted_from = time.monotonic()

    def __enter__(self) -> Phase:
        if not self.enabled:
            return self
        self._token = _RUNNING.set(self)
        self.stream = self.stream or sys.stderr
        self.start = self.counted_from = time.monotonic()
        if _is_tty(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=self.first, desc=self.label,
                            unit=self.unit, leave=False, file=self.stream,
                            bar_format=None if self.total is not None else "{desc}: {elapsed}")
            tick = REFRESH_SECONDS
        else:
            tick = HEARTBEAT_SECONDS if self.every is None else self.every
        self._thread = threading.Thread(target=self._beat, args=(tick,), daemon=True,
                                        name="privbench-progress")
        self._thread.start()
        return self

    def update(self, n: int = 1) -> None:
        """`n` more units done."""
        with self._lock:
            self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def stage(self, total: int, unit: str) -> None:
        """Count `total` units of `unit` from now on (the work's count became known): the
        fraction done and the time left are those of this stage."""
        with self._lock:
            self.total, self.unit, self.done, self.first = total, unit, 0, 0
            self.counted_from = time.monotonic()
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.unit, self.bar.bar_format = unit, None
            self.bar.refresh()

    def line(self) -> str:
        """The heartbeat line: the phase, its progress, the time spent and, with a count, an
        estimate of what is left."""
        now = time.monotonic()
        with self._lock:
            done, total, unit, first = self.done, self.total, self.unit, self.first
            counting = now - self.counted_from
        parts = [f"{seconds_text(now - self.start)} so far"]
        if total is not None:
            parts.insert(0, f"{unit} {done} of {total}")
            if first < done < total:
                left = counting / (done - first) * (total - done)
                parts.append(f"about {seconds_text(left)} left")
        return f"privbench: {self.label}: {', '.join(parts)}"

    def _beat(self, tick: float) -> None:
        while not self._stop.wait(tick):
            if self.bar is not None:
                self.bar.refresh()
            else:
                print(self.line(), file=self.stream, flush=True)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._token is not None:
            _RUNNING.reset(self._token)
            self._token = None
        if self._thread is not None:
            self._thread.join()
        if self.bar is not None:
            self.bar.close()


def stage(total: int, unit: str) -> None:
    """Start a counted stage of `total` units in the innermost running phase (`Phase.stage`);
    nothing when no phase runs."""
    phase = _RUNNING.get()
    if phase is not None:
        phase.stage(total, unit)


def advance(n: int = 1) -> None:
    """`n` more units of the innermost running phase done; nothing when no phase runs."""
    phase = _RUNNING.get()
    if phase is not None:
        phase.update(n)


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or bare stream
        return False
