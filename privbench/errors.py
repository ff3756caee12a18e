"""Errors that privbench reports to the user as one line (exit code 2), never as a traceback."""

from __future__ import annotations


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
    """SIGTERM, raised in the main thread where a command installs `sigterm_raises` (as Ctrl-C
    raises KeyboardInterrupt), so that the command stops what it started, e.g. worker processes,
    instead of ending alone. The CLI prints one line and exits with 128 + 15."""


class NotApplicable(Exception):  # noqa: N818 - an outcome, not an error
    """The threat model cannot derive what the attack needs; the message says why."""
