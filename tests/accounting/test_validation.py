"""privbench.accounting.validation: each check returns the value it accepts, converted, and
refuses the rest with a one-line ConfigError naming the value and what is accepted."""

from __future__ import annotations

import math

import pytest

from privbench.accounting.validation import (
    check_choice,
    check_count,
    check_delta,
    check_epsilon,
    check_greater_equal_one,
    check_positive,
    check_sampling_rate,
)
from privbench.errors import ConfigError


@pytest.mark.parametrize(("check", "value", "expected"), [
    (check_positive, 3, 3.0), (check_epsilon, 0.5, 0.5), (check_delta, 1e-5, 1e-5),
    (check_sampling_rate, 1, 1.0), (check_count, 7, 7), (check_count, 4.0, 4),
    (check_greater_equal_one, 1, 1.0),
])
def test_an_accepted_value_comes_back_converted(check, value, expected) -> None:
    out = check(value, "x")
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(("check", "value", "needle"), [
    (check_positive, 0, "finite number > 0"), (check_positive, math.inf, "finite number > 0"),
    (check_positive, True, "must be a number"), (check_positive, "1", "must be a number"),
    (check_positive, math.nan, "got nan"),
    (check_epsilon, math.inf, "> 0 and finite"), (check_epsilon, -1.0, "> 0 and finite"),
    (check_delta, 0.0, "in (0, 1)"), (check_delta, 1.0, "in (0, 1)"),
    (check_sampling_rate, 0.0, "in (0, 1]"), (check_sampling_rate, 1.5, "in (0, 1]"),
    (check_count, 0, "integer >= 1"), (check_count, 2.5, "integer >= 1"),
    (check_count, True, "integer >= 1"),
    (check_greater_equal_one, 0.99, ">= 1"), (check_greater_equal_one, math.inf, ">= 1"),
])
def test_a_refused_value_is_named_with_what_is_accepted(check, value, needle) -> None:
    with pytest.raises(ConfigError) as info:
        check(value, "the field")
    message = str(info.value)
    assert "\n" not in message and needle in message and "the field" in message
    if not isinstance(value, str):
        assert repr(value) in message or "nan" in message


def test_positive_accepts_infinity_only_when_asked() -> None:
    assert check_positive(math.inf, "z", allow_inf=True) == math.inf
    with pytest.raises(ConfigError):
        check_positive(-math.inf, "z", allow_inf=True)


def test_a_choice_outside_the_list_names_every_accepted_one() -> None:
    assert check_choice("rdp", "accountant", ("pld", "rdp")) == "rdp"
    with pytest.raises(ConfigError, match=r"unknown accountant 'prv'; accepted: pld, rdp$"):
        check_choice("prv", "accountant", iter(("pld", "rdp")))
