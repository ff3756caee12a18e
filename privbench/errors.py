"""Errors that privbench reports to the user as one line (exit code 2), never as a traceback;
the stop by SIGTERM (`Terminated`), reported as one line too."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class PrivbenchError(Exception):
    """Base class of every error caused by bad input (names, values, files).

    The message must be a single line that says what was wrong and what is accepted.
    The CLI prints it as ``privbench: error: <message>`` and exits with code 2.
    """


class ConfigError(PrivbenchError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class UnknownNameError(PrivbenchError, KeyError):
    """A registry lookup for a name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DataError(PrivbenchError):
    """A dataset or file is missing, corrupt, or of the wrong format."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread within `sigterm_raises` (as Ctrl-C raises
    KeyboardInterrupt), so that a command stopped by a scheduler or a CI timeout ends as a
    Ctrl-C does: what it started (worker processes, a folder's lock) is stopped or released,
    what it finished stays written, and the CLI prints one line saying what was kept and how to
    continue, exit code 128 + 15 = 143."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"stopped by signal {signum}")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread (a no-op in another
    thread, where no signal handler can be set); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:  # None: the previous handler was not set from Python; the default action then
        signal.signal(signal.SIGTERM, signal.SIG_DFL if old is None else old)


class NotApplicable(Exception):  # noqa: N818 - an outcome, not an error
    """The attack or audit does not apply to this run (the threat model cannot derive what it
    needs, the defense is not private, the run's messages are non-finite); the message says
    why. The one way anything says "not applicable": the dispatch records it as the result's
    status (`privbench.results.outcome`); within the mechanism audit and the leakage map, the
    function that writes the measured ε or the network-DP record writes it as
    `"applicable": false` with the reason.

    Attributes:
        non_finite: whether the reason is that the run's messages or scores are non-finite
            (the run diverged).
    """

    def __init__(self, reason: object = "", non_finite: bool = False) -> None:
        super().__init__(reason)
        self.non_finite = non_finite
