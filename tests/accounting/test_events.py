"""privbench.accounting.events: events convert between their parametrisations, ledgers are
run-length encoded values, and a schedule's events compose to the schedule."""

from __future__ import annotations

import math

import pytest

from privbench.accounting.events import (
    GaussianEvent,
    LaplaceEvent,
    PrivacyLedger,
    RandomizedResponseEvent,
    gaussian_schedule,
    node_ledgers,
)
from privbench.errors import ConfigError


def test_laplace_epsilon_is_sensitivity_over_scale() -> None:
    event = LaplaceEvent.from_scale(scale=0.5, sensitivity=2.0, count=3)
    assert event == LaplaceEvent(4.0, 3)
    assert event.atoms == (4.0, 3)


@pytest.mark.parametrize("keep", [0.51, 0.75, 0.999])
def test_randomized_response_keep_probability_round_trips(keep: float) -> None:
    event = RandomizedResponseEvent.from_keep_prob(keep, coordinates=10, count=2)
    assert event.epsilon == pytest.approx(math.log(keep / (1 - keep)))
    assert event.keep_prob == pytest.approx(keep)
    assert event.atoms == (event.epsilon, 20)  # every coordinate of every release


@pytest.mark.parametrize("keep", [0.5, 1.0, 0.2, True])
def test_a_keep_probability_outside_one_half_to_one_is_refused(keep) -> None:
    with pytest.raises(ConfigError, match=r"keep probability must be in \(0.5, 1\)"):
        RandomizedResponseEvent.from_keep_prob(keep)


def test_the_ledger_merges_equal_consecutive_events_and_is_a_value() -> None:
    empty = PrivacyLedger(node=3)
    a, b = GaussianEvent(1.0, 0.1, 2), GaussianEvent(1.0, 0.1, 3)
    one = empty.record(a)
    two = one.extend([b, LaplaceEvent(0.5), LaplaceEvent(0.5, 2), b])
    assert empty.events == () and one.events == (a,)  # record returns a new ledger
    assert two.events == (GaussianEvent(1.0, 0.1, 5), LaplaceEvent(0.5, 3), b)
    assert two.gaussian_events == (GaussianEvent(1.0, 0.1, 5), b)
    assert two.pure_events == (LaplaceEvent(0.5, 3),)
    # another sampling model is another mechanism: never merged
    other = one.record(GaussianEvent(1.0, 0.1, 1, "fixed_without_replacement"))
    assert len(other.events) == 2


def test_a_ledger_refuses_what_is_not_an_event_or_an_unknown_unit() -> None:
    with pytest.raises(ConfigError, match="accounting events"):
        PrivacyLedger(events=(1.0,))
    with pytest.raises(ConfigError, match="unknown unit"):
        PrivacyLedger(unit="user-level")


def test_a_schedule_is_one_event_per_run_of_equal_multipliers() -> None:
    events = gaussian_schedule([2.0, 2.0, 1.5, 1.5, 1.5, 2.0], 0.25)
    assert events == (GaussianEvent(2.0, 0.25, 2), GaussianEvent(1.5, 0.25, 3),
                      GaussianEvent(2.0, 0.25, 1))
    assert PrivacyLedger().extend(events).events == events


@pytest.mark.parametrize(("zs", "needle"), [
    ([], "at least 1 step"), ([[1.0]], "one multiplier per step"),
    ([1.0, 0.0], "noise multiplier"), ([1.0, math.nan], "noise multiplier"),
])
def test_a_bad_schedule_is_refused(zs, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        gaussian_schedule(zs, 0.5)


def test_node_ledgers_are_separate_and_carry_the_uncovered_kinds() -> None:
    ledgers = node_ledgers(range(3), unit="node-level", uncovered=["weights"])
    assert sorted(ledgers) == [0, 1, 2]
    assert {(lg.node, lg.unit, lg.uncovered) for lg in ledgers.values()} == {
        (n, "node-level", ("weights",)) for n in range(3)}
