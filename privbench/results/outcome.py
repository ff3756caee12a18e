"""What became of an attack, an inversion target or a training run: a typed status.

An outcome is one of four: measured (graded; a note may qualify it, e.g. how labels were
recovered), not applicable (the reason: the view cannot exist under this threat model, the run
it needs did not train), failed (the reason: an exception, a divergence) or inconclusive (what
it resolved). Code decides on `Status.outcome`; the words are produced from it when a record is
written (`Status.text`) and read back once, where a results file is read (`Status.parse`).

The written words (`Word`) are part of the results format, as stable as any field:
"ok" (measured), "not applicable: why", "skipped: why" (not applicable: a run it needs did not
train), "failed: why", "diverged ..." (failed: a non-finite model or loss), "inconclusive: what
it resolved".
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass


class Outcome(enum.Enum):
    """What became of an attack or a run."""

    MEASURED = "measured"
    NOT_APPLICABLE = "not applicable"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


class Word(enum.Enum):
    """How a status is written: the word and the outcome it stands for."""

    OK = "ok"
    NOT_APPLICABLE = "not applicable"
    SKIPPED = "skipped"
    FAILED = "failed"
    DIVERGED = "diverged"
    INCONCLUSIVE = "inconclusive"
    VERBATIM = ""  # a status this version does not know, kept as written

    @property
    def outcome(self) -> Outcome:
        return WORD_OUTCOME[self]

    @property
    def joined(self) -> bool:
        """Whether the word is followed by a space and its note ("ok (labels: idlg)",
        "diverged (non-finite loss)") rather than by ": " and a reason."""
        return self in (Word.OK, Word.DIVERGED)


NON_FINITE = "non-finite"  # what a written not-applicable reason says of a diverged run
PUNCTUATION = (":", ";", ",")  # a note of "ok" or "diverged" that starts with one follows at once
ROUND = re.compile(r"round (\d+)")  # the round a written divergence names
WORD_OUTCOME = {Word.OK: Outcome.MEASURED, Word.NOT_APPLICABLE: Outcome.NOT_APPLICABLE,
                Word.SKIPPED: Outcome.NOT_APPLICABLE, Word.FAILED: Outcome.FAILED,
                Word.DIVERGED: Outcome.FAILED, Word.INCONCLUSIVE: Outcome.INCONCLUSIVE,
                Word.VERBATIM: Outcome.FAILED}


@dataclass(frozen=True)
class Status:
    """A typed status: how it is written (`word`, whose `outcome` code decides on) and its
    reason (not applicable, failed), what it resolved (inconclusive) or a note (measured)."""

    word: Word
    reason: str = ""
    round: int | None = None  # a diverged training run: the 1-based round that went non-finite
    non_finite: bool = False  # not applicable because the run's messages are non-finite

    @property
    def outcome(self) -> Outcome:
        return self.word.outcome

    @property
    def measured(self) -> bool:
        """Whether it ran and was graded."""
        return self.outcome is Outcome.MEASURED

    @property
    def not_applicable(self) -> bool:
        return self.outcome is Outcome.NOT_APPLICABLE

    @property
    def text(self) -> str:
        """The status as a results file writes it."""
        if self.word is Word.VERBATIM:
            return self.reason
        if self.word.joined:
            sep = "" if not self.reason or self.reason[0] in PUNCTUATION else " "
            return f"{self.word.value}{sep}{self.reason}"
        return f"{self.word.value}: {self.reason}"

    def __str__(self) -> str:
        return self.text

    def noted(self, note: str, sep: str = " ") -> Status:
        """The status with `note` after its reason ("ok (labels: idlg)" noted "(120 local steps
        unrolled)"), `sep` between them."""
        joined = self.reason or sep.strip()  # "ok" noted "; not graded" is "ok; not graded"
        return dataclasses.replace(self, reason=f"{self.reason}{sep}{note}" if joined else note)

    @classmethod
    def parse(cls, text: str) -> Status:
        """The status a results file wrote (`text`); one this version does not know is read as
        failed and written back as it was."""
        for word in Word:
            if word is Word.VERBATIM:
                continue
            rest = text[len(word.value):]
            if word.joined and text.startswith(word.value) and rest[:1] in ("", " ", *PUNCTUATION):
                found = ROUND.search(text) if word is Word.DIVERGED else None
                return cls(word, rest.removeprefix(" "), int(found.group(1)) if found else None)
            if not word.joined and text.startswith(word.value + ": "):
                reason = text[len(word.value) + 2:]
                return cls(word, reason, non_finite=word is Word.NOT_APPLICABLE
                           and NON_FINITE in reason)
        return cls(Word.VERBATIM, text)


def ok(note: str = "") -> Status:
    """Measured (a note qualifies how, e.g. "(labels: idlg)")."""
    return Status(Word.OK, note)


def not_applicable(reason: object, non_finite: bool = False) -> Status:
    """Not applicable, and why (`non_finite`: the run's messages or scores are non-finite; the
    reason then says "non-finite")."""
    return Status(Word.NOT_APPLICABLE, str(reason), non_finite=non_finite)


def skipped(reason: str) -> Status:
    """Not applicable because a run it needs did not train."""
    return Status(Word.SKIPPED, reason)


def failed(reason: str) -> Status:
    """Failed, and why."""
    return Status(Word.FAILED, reason)


def diverged(how: str = "") -> Status:
    """Failed on a non-finite model or loss ("diverged (NaN/Inf) in round 3 of 10")."""
    return Status(Word.DIVERGED, how)


def diverged_in(round0: int, rounds: int) -> Status:
    """A training run that went non-finite in 0-based round `round0` of `rounds` (as
    `diverged_round` stores it): how it is described everywhere."""
    return Status(Word.DIVERGED, f"(NaN/Inf) in round {round0 + 1} of {rounds}", round0 + 1)


def inconclusive(resolved: str) -> Status:
    """Ran, but could not decide; what it resolved."""
    return Status(Word.INCONCLUSIVE, resolved)


OK = ok()
