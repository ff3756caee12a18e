"""`privbench.accounting.fast_pld`: the subsampled-Gaussian PLDs it builds are dp-accounting's own
(the same connect-the-dots PMFs), and its compositions equal dp-accounting's PLDAccountant."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from privbench.accounting import fast_pld
from privbench.accounting.gaussian import pld_accountant_epsilon


@pytest.mark.parametrize("q", [1.0, 0.5, 16 / 180, 1e-3])
@pytest.mark.parametrize("z", [0.5, 1.3, 20.0])
@pytest.mark.parametrize("grid", [1e-2, 1e-3])
def test_each_pmf_is_dp_accountings(z, q, grid):
    ref = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=grid)
    mine = fast_pld.gaussian_pld(z, q, grid)
    for a, b in ((ref._pmf_remove, mine._pmf_remove), (ref._pmf_add, mine._pmf_add)):
        assert type(a) is type(b)
        da, db = a.to_dense_pmf(), b.to_dense_pmf()
        assert da._lower_loss == db._lower_loss and da._probs.shape == db._probs.shape
        np.testing.assert_allclose(db._probs, da._probs, rtol=0, atol=1e-12)
        assert abs(a._infinity_mass - b._infinity_mass) <= 1e-15


@pytest.mark.parametrize("terms", [
    [(16 / 180, z, c) for z, c in zip(np.geomspace(0.63, 1.25, 20), [1, 2] * 10, strict=True)],
    [(0.01, 1.1, 1000)],                         # one long self-composed term
    [(1.0, 3.0, 5), (0.1, 2.0, 3), (0.1, 0.9, 7)],  # exact and subsampled, few repeats
    [(0.05, 1.0, 17), (0.05, 1.5, 32), (0.2, 2.0, 33)],  # squaring up to 32, then self_compose
])
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_composition_equals_the_pld_accountant(terms, delta):
    # The same algorithm; only the float rounding of the inverse privacy loss differs (ulps),
    # which the connect-the-dots differences of nearly equal deltas amplify at small delta
    # (measured: 2e-10 relative at delta 1e-5, up to 1.1e-7 at 1e-8).
    grid = 1e-2 if len(terms) > 8 else 1e-3
    ref = pld_accountant_epsilon(terms, delta, grid)
    rel = 1e-8 if delta >= 1e-5 else 1e-6
    assert fast_pld.subsampled_gaussian_epsilon(terms, delta, grid) == pytest.approx(ref,
                                                                                    rel=rel)


def test_no_terms_spend_nothing():
    assert fast_pld.subsampled_gaussian_epsilon([], 1e-5, 1e-3) == 0.0


FAST_CASES = [
    [(16 / 180, z, c) for z, c in zip(np.geomspace(0.63, 1.25, 20), [1, 2] * 10, strict=True)],
    [(0.01, 1.1, 1000)],
    [(1.0, 3.0, 5), (0.1, 2.0, 3), (0.1, 0.9, 7)],
    [(0.05, 1.0, 17), (0.05, 1.5, 32), (0.2, 2.0, 33)],
]


@pytest.mark.parametrize("terms", FAST_CASES)
def test_the_fast_composition_equals_the_pld_accountant(terms):
    # balanced tree, vectorized truncation bounds and tails, real FFT: other float rounding only
    grid = 1e-2 if len(terms) > 8 else 1e-3
    ref = pld_accountant_epsilon(terms, 1e-5, grid)
    assert fast_pld.subsampled_gaussian_epsilon(terms, 1e-5, grid, fast=True) == pytest.approx(
        ref, rel=1e-8)


def test_a_composition_sized_within_the_bound_is_built():
    # sized by `composed_points` on a coarser grid, the eps ~ 1e5 composition refused on the
    # asked grid fits, and the coarser grid costs it under 1e-4 (relative) against a finer one
    terms = [(0.01, 0.0055, 60)]
    with pytest.raises(fast_pld.PLDTooLargeError):
        fast_pld.subsampled_gaussian_epsilon(terms, 1e-5, 1e-3)
    grid = 1e-3 * 2.0 ** np.ceil(np.log2(fast_pld.composed_points(terms, 1e-3)
                                         / fast_pld.BOUNDED_POINTS))
    assert fast_pld.composed_points(terms, grid) <= fast_pld.MAX_POINTS
    eps = fast_pld.subsampled_gaussian_epsilon(terms, 1e-5, grid, fast=True)
    finer = fast_pld.subsampled_gaussian_epsilon(terms, 1e-5, grid / 4, fast=True)
    assert finer <= eps <= finer * (1 + 1e-4)
