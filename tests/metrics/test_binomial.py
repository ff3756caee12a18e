"""privbench.metrics.binomial: the exact Clopper-Pearson interval, against scipy.stats' beta
quantiles and its own defining tail probabilities."""

from __future__ import annotations

import pytest
from scipy.stats import beta, binom

from privbench.metrics.binomial import clopper_pearson, exact_interval


@pytest.mark.parametrize(("k", "n"), [(1, 10), (5, 10), (37, 200), (199, 200)])
def test_the_bounds_are_the_beta_quantiles(k: int, n: int) -> None:
    lo, hi = exact_interval(k, n, 0.05)
    assert lo == pytest.approx(beta.ppf(0.025, k, n - k + 1), rel=1e-10)
    assert hi == pytest.approx(beta.ppf(0.975, k + 1, n - k), rel=1e-10)
    # the definition: at the lower bound P(X >= k) = alpha / 2, at the upper P(X <= k) = alpha / 2
    assert binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-7)
    assert binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-7)


def test_no_success_and_all_successes_close_the_interval_at_0_and_1() -> None:
    assert exact_interval(0, 20, 0.05)[0] == 0.0
    assert exact_interval(20, 20, 0.05)[1] == 1.0
    assert exact_interval(0, 20, 0.05)[1] == pytest.approx(1 - 0.025 ** (1 / 20))


def test_the_interval_is_symmetric_in_successes_and_failures() -> None:
    lo, hi = exact_interval(3, 17, 0.1)
    lo2, hi2 = exact_interval(14, 17, 0.1)
    assert (lo, hi) == pytest.approx((1 - hi2, 1 - lo2), rel=1e-12)


def test_a_higher_level_gives_a_wider_interval_holding_the_rate() -> None:
    narrow, wide = clopper_pearson(30, 100, 0.9), clopper_pearson(30, 100, 0.999)
    assert wide[0] < narrow[0] < 0.3 < narrow[1] < wide[1]
    assert clopper_pearson(30, 100) == pytest.approx(exact_interval(30, 100, 0.05), rel=1e-12)
