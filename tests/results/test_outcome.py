"""The typed status: each written form reads back as its outcome and writes back the same text."""

from __future__ import annotations

import pytest

from privbench.results import outcome
from privbench.results.outcome import Outcome, Status


@pytest.mark.parametrize(("text", "expected", "round_", "non_finite"), [
    ("ok", Outcome.MEASURED, None, False),
    ("ok (labels: idlg) (120 local steps unrolled)", Outcome.MEASURED, None, False),
    ("not applicable: one batch's gradient", Outcome.NOT_APPLICABLE, None, False),
    ("not applicable: non-finite scores (the run diverged)", Outcome.NOT_APPLICABLE, None, True),
    ("skipped: training diverged (NaN/Inf) in round 2 of 3", Outcome.NOT_APPLICABLE, None, False),
    ("failed: RuntimeError: boom (x.py:3)", Outcome.FAILED, None, False),
    ("diverged (NaN/Inf) in round 3 of 60", Outcome.FAILED, 3, False),
    ("diverged: non-finite model in round 12", Outcome.FAILED, 12, False),
    ("inconclusive: the flip rate to ±0.1", Outcome.INCONCLUSIVE, None, False),
    ("", Outcome.FAILED, None, False),
    ("okay", Outcome.FAILED, None, False),
])
def test_a_written_status_reads_as_its_outcome_and_writes_back_alike(
        text: str, expected: Outcome, round_: int | None, non_finite: bool) -> None:
    status = Status.parse(text)
    assert (status.outcome, status.round, status.non_finite) == (expected, round_, non_finite)
    assert status.text == text


def test_the_constructors_write_the_results_words() -> None:
    assert outcome.diverged_in(2, 60) == Status.parse("diverged (NaN/Inf) in round 3 of 60")
    assert outcome.ok("(labels: idlg)").noted("(3 local steps unrolled)").text == \
        "ok (labels: idlg) (3 local steps unrolled)"
    assert outcome.OK.noted("not graded: the true batch is empty", "; ").text == \
        "ok; not graded: the true batch is empty"
    assert outcome.skipped("training diverged").not_applicable
    assert not outcome.failed("boom").measured and outcome.OK.measured
