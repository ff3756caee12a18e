"""privbench.accounting.report: an `EpsilonReport` refuses a statement that cannot be read
honestly, and its JSON form keeps every field (an infinite epsilon as the string "inf")."""

from __future__ import annotations

import json
import math

import pytest

from privbench.accounting.report import EpsilonReport
from privbench.errors import ConfigError


def test_the_json_form_keeps_every_field() -> None:
    report = EpsilonReport(2.5, 1e-5, "pld", "calibrated", "sample-level", ["weights"],
                           note="read as stated", sampling="poisson")
    assert report.uncovered == ("weights",)
    out = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert out == {"epsilon": 2.5, "delta": 1e-5, "accountant": "pld", "mode": "calibrated",
                   "unit": "sample-level", "uncovered": ["weights"], "approximate": False,
                   "note": "read as stated", "sampling": "poisson"}


def test_an_infinite_epsilon_is_the_string_inf() -> None:
    report = EpsilonReport(math.inf, 0.0, "basic", "paper", "node-level")
    assert report.to_dict()["epsilon"] == "inf"


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"epsilon": -0.1}, "epsilon must be >= 0"), ({"epsilon": math.nan}, "epsilon must be >= 0"),
    ({"delta": 1.0}, r"delta must be in \[0, 1\)"), ({"delta": -1e-9}, "delta must be in"),
    ({"mode": "exact"}, "unknown mode 'exact'"), ({"unit": "user"}, "unknown unit 'user'"),
    ({"sampling": "shuffle"}, "unknown sampling 'shuffle'"),
])
def test_a_statement_that_cannot_be_read_is_refused(kwargs, needle) -> None:
    fields = {"epsilon": 1.0, "delta": 1e-5, "accountant": "pld", "mode": "calibrated",
              "unit": "sample-level", **kwargs}
    with pytest.raises(ConfigError, match=needle):
        EpsilonReport(**fields)
