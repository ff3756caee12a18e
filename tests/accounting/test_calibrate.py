"""privbench.accounting.calibrate: the calibrated noise scale spends at most the target and
within the tolerance of it, and the root finder keeps its bracket on the safe side."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbench.accounting.calibrate import (
    calibrate_noise_scale,
    schedule_epsilon_fn,
    solve_monotone,
)
from privbench.accounting.compose import account_schedule
from privbench.errors import ConfigError


@pytest.mark.parametrize("increasing", [True, False])
def test_the_solver_lands_on_the_safe_side_within_its_tolerance(increasing: bool) -> None:
    calls = []

    def f(x: float) -> float:
        calls.append(x)
        return 3.0 * x**1.7 if increasing else 5.0 / x**0.8

    x = solve_monotone(f, 2.0, guess=100.0, increasing=increasing, rtol=1e-4)
    assert 2.0 * (1 - 1e-4) <= f(x) <= 2.0
    assert len(calls) < 40


def test_the_solver_refuses_a_function_that_never_reaches_the_target() -> None:
    with pytest.raises(ConfigError):
        solve_monotone(lambda x: 1.0, 2.0, guess=1.0, increasing=True, max_evals=30)


@pytest.mark.parametrize(("shape", "q", "accountant"), [
    ([1.0] * 50, 0.1, "pld"), ([2.0] * 15 + [1.5] * 15 + [1.0] * 10, 0.2, "rdp"),
    ([1.0] * 30, 1.0, "pld"),
])
def test_the_calibrated_scale_spends_the_target_and_no_more(shape, q, accountant) -> None:
    eps, delta = 2.0, 1e-5
    scale = calibrate_noise_scale(eps, delta, shape, q, accountant, rtol=1e-3)
    spent = account_schedule(scale * np.asarray(shape), q, delta, accountant).epsilon
    assert eps * (1 - 1e-3) - 1e-9 <= spent <= eps + 1e-9
    # a little less noise would over-spend: the scale is the smallest that meets the target
    assert account_schedule(0.99 * scale * np.asarray(shape), q, delta, accountant).epsilon > eps


def test_replace_one_batches_need_more_noise_than_poisson_ones() -> None:
    poisson = calibrate_noise_scale(1.0, 1e-5, [1.0] * 50, 0.1, "rdp")
    fixed = calibrate_noise_scale(1.0, 1e-5, [1.0] * 50, 0.1, "rdp",
                                  sampling="fixed_without_replacement")
    assert fixed > 1.5 * poisson


def test_the_schedule_epsilon_falls_as_the_noise_grows() -> None:
    f = schedule_epsilon_fn([1.0] * 20, 0.1, 1e-5)
    values = [f(s) for s in (0.6, 1.0, 2.0, 4.0)]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert all(math.isfinite(v) and v > 0 for v in values)


@pytest.mark.parametrize(("args", "needle"), [
    ((0.0, 1e-5, [1.0], 0.1), "epsilon must be > 0"),
    ((1.0, 1e-5, [], 0.1), "at least 1 step"),
    ((1.0, 1e-5, [1.0, -1.0], 0.1), "multiplier"),
    ((1.0, 1e-5, [1.0], 0.0), "sampling rate"),
])
def test_bad_input_is_one_line(args, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        calibrate_noise_scale(*args)
