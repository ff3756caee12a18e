"""Input checks shared by the accounting modules.

Every check raises `privbench.errors.ConfigError` with a one-line message that names the bad value
and what is accepted (the CLI prints it and exits with code 2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from privbench.errors import ConfigError

GAUSSIAN_ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp", "gdp_clt")
"""Gaussian-event accountants: dp-accounting PLD and RDP, and the mu-GDP CLT (approximate)."""

PURE_COMPOSITIONS: tuple[str, ...] = ("basic", "advanced", "laplace_pld")
"""Composition rules for pure-epsilon events (Laplace, randomized response)."""

MODES: tuple[str, ...] = ("paper", "calibrated")
"""`paper`: the paper's own formula; `calibrated`: a rigorous accountant."""

UNITS: tuple[str, ...] = ("sample-level", "node-level")

SAMPLINGS: tuple[str, ...] = ("poisson", "fixed_without_replacement")
"""How a Gaussian step's batch is drawn, and so which adjacency and sensitivity it is accounted
with: "poisson" (each record independently with rate q; add/remove-one, L2 sensitivity C) or
"fixed_without_replacement" (a uniform batch of fixed size q |D|; replace-one, sensitivity 2C,
dp-accounting's `SampledWithoutReplacementDpEvent`)."""


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ConfigError(f"{name} must be a number, got nan")
    return value


def check_positive(value: object, name: str, *, allow_inf: bool = False) -> float:
    """`value` as a float if it is > 0 (and finite unless `allow_inf`), else ConfigError."""
    x = _number(value, name)
    if not x > 0 or (math.isinf(x) and not allow_inf):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """A privacy budget epsilon: a finite number > 0."""
    x = _number(value, name)
    if not (x > 0 and math.isfinite(x)):
        raise ConfigError(f"{name} must be > 0 and finite, got {value!r}")
    return x


def check_delta(value: object, name: str = "delta") -> float:
    """A privacy parameter delta in the open interval (0, 1)."""
    x = _number(value, name)
    if not 0 < x < 1:
        raise ConfigError(f"{name} must be in (0, 1), got {value!r}")
    return x


def check_sampling_rate(value: object, name: str = "sampling rate") -> float:
    """A Poisson sampling rate in (0, 1]."""
    x = _number(value, name)
    if not 0 < x <= 1:
        raise ConfigError(f"{name} must be in (0, 1], got {value!r}")
    return x


def check_count(value: object, name: str = "steps") -> int:
    """A positive integer count (steps, rounds, coordinates)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_choice(value: object, name: str, choices: Iterable[str]) -> str:
    """`value` if it is one of `choices`, else a ConfigError listing them."""
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"unknown {name} {value!r}; accepted: {', '.join(choices)}")
    return str(value)


def check_greater_equal_one(value: object, name: str) -> float:
    """A finite number >= 1 (e.g. a schedule growth factor rho)."""
    x = _number(value, name)
    if not (x >= 1 and math.isfinite(x)):
        raise ConfigError(f"{name} must be a finite number >= 1, got {value!r}")
    return x
