"""Pure epsilon-DP mechanisms (Laplace, randomized response) and their composition.

- Laplace: Lap(0, S/epsilon) per coordinate on a query of L1 sensitivity S is epsilon-DP
  (DPPS Lemma 1, Eq. 4).
- Binary randomized response with keep probability p = e^eps / (e^eps + 1) is eps-DP per
  coordinate (DeFL-VP Alg. 3 / Eq. 14, Lemma 1); d independent coordinates
  are (d eps)-DP (Theorem 1).
- Basic composition: epsilons add, delta = 0 (DeFL-VP Corollary 2).
- Advanced composition (Dwork, Rothblum, Vadhan 2010, heterogeneous form): for any delta' > 0,
  k mechanisms eps_i-DP are (sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), delta')-DP.
  `advanced` reports the smaller of that and basic composition (both are valid statements).
- Laplace PLD composition (`laplace_pld`, Laplace events only): the privacy-loss distribution of
  the Laplace mechanism (dp-accounting `from_laplace_mechanism`, pessimistic discretisation),
  composed exactly (Meiser & Mohammadi 2018; Koskela et al. 2020): the tight (epsilon, delta) of
  the composition, never worse than basic (the smaller is reported). Heterogeneous per-release
  epsilons are first rounded UP to a geometric grid (ratio 1.01), which keeps the result an upper
  bound. It needs delta > 0 (as advanced composition does).
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


def laplace_pld_composition(atoms: Sequence[tuple[float, int]], delta: float) -> float:
    """Tight composition of Laplace releases with dp-accounting's PLD, never worse than basic.

    Args:
        atoms: (epsilon of one Laplace release = sensitivity / scale, number of releases).
        delta: target delta in (0, 1).
    """
    from dp_accounting.pld import privacy_loss_distribution as pld

    delta = check_delta(delta)
    grid: dict[float, int] = {}
    for eps, count in atoms:
        if eps <= 0 or count == 0:
            continue
        if not math.isfinite(eps):
            return math.inf
        up = 1.01 ** math.ceil(math.log(eps, 1.01))  # rounded up: an upper bound stays one
        grid[up] = grid.get(up, 0) + count
    if not grid:
        return 0.0
    total = None
    for eps, count in sorted(grid.items()):
        one = pld.from_laplace_mechanism(parameter=1.0 / eps, sensitivity=1.0,
                                         value_discretization_interval=min(1e-4, eps / 100))
        part = one.self_compose(count) if count > 1 else one
        total = part if total is None else total.compose(part)
    return min(basic_composition(atoms), float(total.get_epsilon_for_delta(delta)))


def compose_pure(atoms: Sequence[tuple[float, int]], rule: str, delta: float) -> float:
    """Compose pure-epsilon atoms with `rule` ("basic", or "advanced" / "laplace_pld" at
    `delta`; "laplace_pld" only for Laplace atoms, which the caller guarantees)."""
    if rule == "basic":
        return basic_composition(atoms)
    if rule == "advanced":
        return advanced_composition(atoms, delta)
    if rule == "laplace_pld":
        return laplace_pld_composition(atoms, delta)
    raise ConfigError(f"unknown pure composition {rule!r}; accepted: basic, advanced, "
                      "laplace_pld")


def per_release_epsilon(total_epsilon: float, releases: int, rule: str, delta: float) -> float:
    """The per-release epsilon whose `releases`-fold composition under `rule` is `total_epsilon`.

    Args:
        total_epsilon: the target for the whole run.
        releases: number of identical elementary releases (rounds, or rounds x coordinates).
        rule: "basic" (total / releases), "advanced" or "laplace_pld" (bisection; never below
            basic's answer).
        delta: delta' for "advanced" / "laplace_pld".

    Returns:
        The largest per-release epsilon meeting the target (up to 1e-12 relative).
    """
    total_epsilon = check_positive(total_epsilon, "epsilon")
    releases = check_count(releases, "releases")
    basic = total_epsilon / releases
    if rule == "basic":
        return basic
    if rule not in ("advanced", "laplace_pld"):
        raise ConfigError(f"unknown pure composition {rule!r}; accepted: basic, advanced, "
                          "laplace_pld")
    lo, hi = basic, basic
    while compose_pure([(hi, releases)], rule, delta) <= total_epsilon:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if compose_pure([(mid, releases)], rule, delta) <= total_epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= (1e-12 if rule == "advanced" else 1e-6) * hi:
            break
    return lo
