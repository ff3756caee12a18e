"""Pure epsilon-DP mechanisms (Laplace, randomized response) and their composition.

- Laplace: Lap(0, S/epsilon) per coordinate on a query of L1 sensitivity S is epsilon-DP
  (DPPS Lemma 1, Eq. 4; card-dpps-partpsp.md §3).
- Binary randomized response with keep probability p = e^eps / (e^eps + 1) is eps-DP per
  coordinate (DeFL-VP Alg. 3 / Eq. 14, Lemma 1; card-defl-vp.md §2); d independent coordinates
  are (d eps)-DP (Theorem 1).
- Basic composition: epsilons add, delta = 0 (DeFL-VP Corollary 2).
- Advanced composition (Dwork, Rothblum, Vadhan 2010, heterogeneous form): for any delta' > 0,
  k mechanisms eps_i-DP are (sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), delta')-DP.
  `advanced` reports the smaller of that and basic composition (both are valid statements).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from privbench.accounting.validation import check_count, check_delta, check_positive
from privbench.errors import ConfigError


def rr_keep_prob(epsilon: float) -> float:
    """Keep probability e^eps / (e^eps + 1) of binary randomized response (DeFL-VP Eq. 14)."""
    epsilon = check_positive(epsilon, "randomized-response epsilon")
    return 1.0 / (1.0 + math.exp(-epsilon))


def rr_epsilon(keep_prob: float) -> float:
    """The per-coordinate epsilon log(p / (1 - p)) of binary randomized response (Lemma 1)."""
    if not 0.5 < keep_prob < 1:
        raise ConfigError(f"keep probability must be in (0.5, 1), got {keep_prob!r}")
    return math.log(keep_prob) - math.log1p(-keep_prob)


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """Scale S / epsilon of the Laplace noise that makes an L1-sensitivity-S query epsilon-DP."""
    return check_positive(sensitivity, "L1 sensitivity") / check_positive(epsilon, "epsilon")


def basic_composition(atoms: Sequence[tuple[float, int]]) -> float:
    """Sum of epsilons of `count` releases per (epsilon, count) atom; delta = 0."""
    return math.fsum(eps * count for eps, count in atoms)


def advanced_composition(atoms: Sequence[tuple[float, int]], delta: float) -> float:
    """Heterogeneous advanced composition at delta' = `delta`, never worse than basic.

    Args:
        atoms: (epsilon of one release, number of releases) pairs.
        delta: delta' in (0, 1).

    Returns:
        min(basic, sqrt(2 ln(1/delta) sum eps^2) + sum eps (e^eps - 1)).
    """
    delta = check_delta(delta)
    square_sum = math.fsum(eps * eps * count for eps, count in atoms)
    drift = math.fsum(eps * math.expm1(eps) * count for eps, count in atoms)
    advanced = math.sqrt(2 * math.log(1 / delta) * square_sum) + drift
    return min(basic_composition(atoms), advanced)


def compose_pure(atoms: Sequence[tuple[float, int]], rule: str, delta: float) -> float:
    """Compose pure-epsilon atoms with `rule` ("basic" or "advanced" at `delta`)."""
    if rule == "basic":
        return basic_composition(atoms)
    if rule == "advanced":
        return advanced_composition(atoms, delta)
    raise ConfigError(f"unknown pure composition {rule!r}; accepted: basic, advanced")


def per_release_epsilon(total_epsilon: float, releases: int, rule: str, delta: float) -> float:
    """The per-release epsilon whose `releases`-fold composition under `rule` is `total_epsilon`.

    Args:
        total_epsilon: the target for the whole run.
        releases: number of identical elementary releases (rounds, or rounds x coordinates).
        rule: "basic" (total / releases) or "advanced" (bisection; never below basic's answer).
        delta: delta' for "advanced".

    Returns:
        The largest per-release epsilon meeting the target (up to 1e-12 relative).
    """
    total_epsilon = check_positive(total_epsilon, "epsilon")
    releases = check_count(releases, "releases")
    basic = total_epsilon / releases
    if rule == "basic":
        return basic
    if rule != "advanced":
        raise ConfigError(f"unknown pure composition {rule!r}; accepted: basic, advanced")
    lo, hi = basic, basic
    while advanced_composition([(hi, releases)], delta) <= total_epsilon:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if advanced_composition([(mid, releases)], delta) <= total_epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo
