"""Gaussian events composed by dp-accounting's PLD and RDP accountants (or the GDP CLT).

A schedule of Poisson-subsampled Gaussian steps with per-step noise multipliers z_t is composed as
SelfComposed(PoissonSampled(q, Gaussian(z)), count) events, one per distinct (q, z), in
`dp_accounting.pld.PLDAccountant` (tight; default) or `dp_accounting.rdp.RdpAccountant`
(Mironov-Talwar-Zhang RDP + the improved RDP -> DP conversion); add/remove-one adjacency.

Fixed-size batches drawn without replacement (sampling "fixed_without_replacement") are composed
as SelfComposed(SampledWithoutReplacement(N, m, Gaussian(z / 2)), count) in the RDP accountant
with replace-one adjacency (Wang, Balle, Kasiviswanathan 2019, Theorem 27): one record replaced by
another moves a clipped sum by up to 2C, so the Gaussian's multiplier per unit of sensitivity is
z / 2. dp-accounting's PLD accountant has no without-replacement event, so these schedules are
always composed with RDP (`effective_accountant` names what was used); a ledger mixing the two
sampling models (two adjacency relations) is refused.

Speed: each distinct (q, z) costs one PLD/RDP construction, so schedules with thousands of distinct
multipliers (Dyn-D2P: every step differs) are bucketed: within each q, the multipliers are split
into at most `max_distinct` bins of equal width in log z and every step of a bin is charged at the
bin's SMALLEST z (most privacy loss). That is conservative.
Results are memoized on the (hashable) bucketed schedule: in memory, and on disk (one small
JSON file per (schedule terms (q, z, count), delta, accountant, numerical options, dp-accounting
version) under `$PRIVBENCH_CACHE_DIR`, default `~/.cache/privbench/accounting`; "off" disables),
so a plan composed once is looked up, not recomposed, by every later process (a 60-round
ADP-VRSGP calibration is about ten PLD compositions of 13 terms each).

Bounds: a PLD's pessimism grows with the composed steps, so a run of more than `LONG_RUN_STEPS`
steps is composed on a finer grid (`pld_grid`); and no PLD larger than `fast_pld.MAX_POINTS` is
built: a composition that would be larger (from epsilon ~ 10^3 on, by the number of steps: a
step's privacy loss spans about 1 / (2 z^2)) is composed on a coarser grid, still an upper
bound, or, where no grid fits, by RDP (`_bounded_pld`). Either way the report says so
(`Composition.note`); a composition of at most `LONG_RUN_STEPS` steps whose PLDs fit is the
same, bit for bit, as without these bounds.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from privbench.accounting.events import GaussianEvent
from privbench.accounting.fast_pld import (
    BOUNDED_POINTS,
    MAX_POINTS,
    PLDTooLargeError,
    composed_points,
    subsampled_gaussian_epsilon,
)
from privbench.accounting.gdp import clt_mu_total, gdp_epsilon
from privbench.accounting.validation import (
    GAUSSIAN_ACCOUNTANTS,
    SAMPLINGS,
    check_choice,
    check_delta,
    check_positive,
)
from privbench.errors import ConfigError

Term = tuple[float, float, int, str]
"""(sampling rate q, noise multiplier z, count, sampling model)."""

WOR = SAMPLINGS[1]  # "fixed_without_replacement"



@dataclass(frozen=True)
class AccountantOptions:
    """Numerical settings of the Gaussian accountants.

    Attributes:
        pld_discretization: PLD value_discretization_interval. 1e-3 is within ~0.1% of 1e-4 for
            DP-SGD-like schedules (and pessimistic), at a fraction of the cost; a run of more
            than `LONG_RUN_STEPS` steps uses a finer one (`pld_grid`).
        rdp_orders: RDP orders; None = dp-accounting's default grid (fractional + integer).
        max_distinct: at most this many distinct noise multipliers per sampling rate are
            composed (conservative log-z bucketing); None = exact.
        many_terms: a composition of more than this many distinct (q, z) terms may use a
            coarser grid, up to `many_terms_discretization` (never a finer one than
            `pld_discretization`).
        many_terms_discretization: the coarsest PLD discretization of a many-term composition;
            the grid used is min(this, max(pld_discretization, 0.6 / steps)) for `steps`
            composed steps, because the pessimistic rounding accumulates with every step (at
            4,000 steps 1e-2 would overstate ε by 30 %). Each distinct term costs one PLD
            construction (~0.15 s at 1e-3, ~0.025 s at 1e-2 on the 2-core CPU), so a decaying
            schedule (ADP-VRSGP, Dyn-D2P) of a short run took tens of seconds cold; now
            seconds. Still an upper bound: at 60 steps (grid 1e-2, q = 16/180) ε moves by
            +0.02 % at ε = 8 and +0.3 to +0.7 % at ε = 1, i.e. 0.1-0.3 % more noise once
            calibrated; from 600 steps on the grid is 1e-3 as before.
    """

    pld_discretization: float = 1e-3
    rdp_orders: tuple[float, ...] | None = None
    max_distinct: int | None = 48
    many_terms: int = 8
    many_terms_discretization: float = 1e-2

    def for_terms(self, count: int, steps: int) -> AccountantOptions:
        """The options a composition of `count` distinct terms over `steps` steps uses."""
        grid = min(self.many_terms_discretization, max(self.pld_discretization, 0.6 / steps))
        if count <= self.many_terms or grid <= self.pld_discretization:
            return self
        return replace(self, pld_discretization=grid)

    def __post_init__(self) -> None:
        if not 0 < self.pld_discretization <= 0.1:
            raise ConfigError(
                f"pld_discretization must be in (0, 0.1], got {self.pld_discretization!r}"
            )
        if self.rdp_orders is not None:
            orders = tuple(float(o) for o in self.rdp_orders)
            if not orders or min(orders) <= 1:
                raise ConfigError(f"rdp_orders must be non-empty and > 1, got {self.rdp_orders!r}")
            object.__setattr__(self, "rdp_orders", orders)
        if self.max_distinct is not None and self.max_distinct < 1:
            raise ConfigError(f"max_distinct must be >= 1 or None, got {self.max_distinct!r}")
        if self.many_terms < 1 or not 0 < self.many_terms_discretization <= 0.1:
            raise ConfigError("many_terms must be >= 1 and many_terms_discretization in (0, 0.1], "
                              f"got {self.many_terms!r}, {self.many_terms_discretization!r}")


DEFAULT_OPTIONS = AccountantOptions()

PLD_MIN_DELTA = 1e-12
"""Smallest delta the PLD accountant is asked about: dp-accounting truncates each Gaussian PLD's
tail mass at 1e-15, so at delta near that it answers inf (or a grossly pessimistic epsilon)."""


def check_accountant_delta(delta: float, accountant: str) -> None:
    """Refuse a delta the accountant cannot resolve (PLD below `PLD_MIN_DELTA`)."""
    if accountant == "pld" and delta < PLD_MIN_DELTA:
        raise ConfigError(f"delta={delta:g} is below what the PLD accountant resolves "
                          f"(>= {PLD_MIN_DELTA:g}, its tail truncation is 1e-15); use a larger "
                          "delta or the rdp accountant")

INTEGER_RDP_ORDERS: tuple[float, ...] = (*(float(a) for a in range(2, 65)), 128.0, 256.0)
"""Integer orders 2..64, 128, 256: a moments-accountant grid (Abadi et al. use integer orders)."""

WOR_RDP_ORDERS: tuple[float, ...] = (1.5, 1.75, *(float(a) for a in range(2, 65)))
"""Default orders of without-replacement RDP: dp-accounting evaluates each order by a Python
loop whose cost grows fast with the order (0.3 s at order 256), so the grid stops at 64. Fewer
orders can only raise epsilon (safe); order 64 already reaches log(1/delta) / 63 = 0.18 at
delta = 1e-5, so only budgets below ~0.2 are affected."""

TF_PRIVACY_RDP_ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5,
    *(float(a) for a in range(5, 64)), 128.0, 256.0, 512.0,
)
"""TF Privacy's `compute_dp_sgd_privacy` grid (the moments accountant's
orders). dp-accounting's default grid has more fractional orders, which matter for
steep schedules (epsilon 1.87 vs 1.98 for ADP-VRSGP at T = 1000, sigma_hat = 0.512)."""


def _canonical(z: float) -> float:
    """z rounded to 12 significant digits, so equal schedules built two ways share cache entries."""
    return float(f"{float(z):.12e}")


def bucket_terms(events: Iterable[GaussianEvent], max_distinct: int | None) -> tuple[Term, ...]:
    """Aggregate events into (q, z, count) terms; bucket conservatively if there are too many.

    Args:
        events: Gaussian events (any order; composition is order-free).
        max_distinct: maximum number of distinct z per q, or None for exact aggregation.

    Returns:
        Sorted terms whose composition is at least as private-costly as the events'.
    """
    events = tuple(events)
    rates = [(e.sampling_rate, e.sampling) for e in events]
    z = np.fromiter((e.noise_multiplier for e in events), float, len(events))  # (events,)
    count = np.fromiter((e.count for e in events), np.int64, len(events))  # (events,)
    terms: list[Term] = []
    single = len(set(rates)) == 1
    for q, sampling in dict.fromkeys(rates):  # each (rate, model) once, in order of appearance
        mine = slice(None) if single else np.array([r == (q, sampling) for r in rates])
        zs, where = np.unique(z[mine], return_inverse=True)  # ascending distinct multipliers
        cs = np.zeros(zs.size, dtype=np.int64)
        np.add.at(cs, where, count[mine])  # (distinct,) the steps of each multiplier
        terms.extend(_bucketed(q, sampling, zs, cs, max_distinct))
    return tuple(sorted(terms))


def _bucketed(q: float, sampling: str, zs: np.ndarray, cs: np.ndarray,
              max_distinct: int | None) -> list[Term]:
    """The terms of distinct ascending multipliers `zs` (counts `cs`) at one rate, bucketed.

    Multipliers are canonicalized (`_canonical`) up to `LONG_RUN_STEPS` distinct ones: beyond,
    they are unbucketed terms of the GDP CLT, which caches nothing, and are kept as they are.
    """
    if max_distinct is None and len(zs) > LONG_RUN_STEPS:
        return list(zip([q] * len(zs), zs.tolist(), cs.tolist(), [sampling] * len(zs),
                        strict=True))
    if max_distinct is None or len(zs) <= max_distinct or math.isinf(zs[-1]):
        return [(q, _canonical(z), int(c), sampling) for z, c in zip(zs, cs, strict=True)]
    logs = np.log(zs)
    width = (logs[-1] - logs[0]) / max_distinct
    bins = np.minimum(((logs - logs[0]) / width).astype(int), max_distinct - 1)
    out = []
    for b in np.unique(bins):
        members = bins == b
        out.append((q, _canonical(zs[members].min()), int(cs[members].sum()), sampling))
    return out


def schedule_terms(multipliers: np.ndarray, sampling_rate: float, sampling: str,
                   max_distinct: int | None) -> tuple[Term, ...]:
    """`bucket_terms(gaussian_schedule(multipliers, sampling_rate, sampling), max_distinct)`
    without building an event per run (the same terms: the distinct multipliers and their
    counts, by `np.unique`): a calibration evaluates it for every candidate noise scale, and a
    10^6-step schedule has up to 10^6 runs.

    Raises:
        ConfigError: a multiplier that is not > 0 (or NaN), or no multiplier at all.
    """
    zs, cs = np.unique(np.asarray(multipliers, dtype=float), return_counts=True)  # ascending
    if zs.size == 0:
        raise ConfigError("a noise schedule needs at least 1 step, got 0")
    check_positive(float(zs[0]), "noise multiplier", allow_inf=True)
    if np.isnan(zs[-1]):
        check_positive(math.nan, "noise multiplier")
    return tuple(sorted(_bucketed(sampling_rate, sampling, zs, cs, max_distinct)))


def effective_accountant(sampling_models: Iterable[str], accountant: str) -> str:
    """The accountant that actually composes events of these sampling models.

    Without-replacement schedules are composed with RDP (replace-one) whatever was asked for
    (dp-accounting's PLD has no such event); the GDP CLT stays the CLT.

    Raises:
        ConfigError: for a mix of Poisson and without-replacement events (two adjacencies).
    """
    models = set(sampling_models)
    if len(models) > 1:
        raise ConfigError("a ledger cannot mix Poisson (add/remove) and fixed-size "
                          "without-replacement (replace-one) Gaussian events")
    return "rdp" if models == {WOR} and accountant == "pld" else accountant


def _dp_event(q: float, z: float, count: int, sampling: str) -> dp_accounting.DpEvent:
    if sampling == WOR:  # replace-one: sensitivity 2C, so z / 2 per unit of sensitivity
        event = dp_accounting.GaussianDpEvent(z / 2)
        if q < 1:
            frac = Fraction(q).limit_denominator(10**7)  # q = m / N, the ratio is what counts
            event = dp_accounting.SampledWithoutReplacementDpEvent(
                frac.denominator, frac.numerator, event)
        return dp_accounting.SelfComposedDpEvent(event, count)
    event = dp_accounting.GaussianDpEvent(z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    return dp_accounting.SelfComposedDpEvent(event, count)


_DP_ACCOUNTING_VERSION = importlib.metadata.version("dp-accounting")


def cache_dir() -> Path | None:
    """The on-disk accountant cache folder (None: disabled by PRIVBENCH_CACHE_DIR=off)."""
    env = os.environ.get("PRIVBENCH_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "privbench" / "accounting"


COMPOSER = "fast-pld-1"
"""Names the code path that composes a PLD (`privbench.accounting.fast_pld`) in the disk-cache
key, so values composed by an earlier path are never mixed with this one's."""


def _disk_key(terms: tuple[Term, ...], delta: float, accountant: str,
              options: AccountantOptions) -> str:
    return json.dumps([_DP_ACCOUNTING_VERSION, COMPOSER, accountant, repr(delta),
                       options.pld_discretization, options.rdp_orders,
                       [[repr(q), repr(z), c, s] for q, z, c, s in terms]])


@dataclass(frozen=True)
class Composition:
    """The epsilon of a composition and what gave it.

    Attributes:
        epsilon: the epsilon at the requested delta.
        accountant: the accountant that answered ("pld", "rdp", "gdp_clt").
        note: how the answer departs from the requested settings ("" when it does not): a
            PLD grid finer than asked for a long run, or coarser (or RDP instead) where the
            asked-for grid would not fit in `fast_pld.MAX_POINTS`.
    """

    epsilon: float
    accountant: str
    note: str = ""


def _disk_get(key: str) -> Composition | None:
    folder = cache_dir()
    if folder is None:
        return None
    path = folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    value = entry.get("epsilon") if entry.get("key") == key else None
    if not (isinstance(value, int | float) and math.isfinite(value)):
        return None
    who, note = entry.get("accountant"), entry.get("note", "")
    if who is None:  # an entry composed with the settings of its key
        who = json.loads(key)[2]
    return Composition(float(value), str(who), str(note))


def _disk_put(key: str, value: Composition) -> None:
    folder = cache_dir()
    if folder is None or not math.isfinite(value.epsilon):
        return
    entry: dict[str, object] = {"key": key, "epsilon": value.epsilon}
    if value.note:
        entry.update(accountant=value.accountant, note=value.note)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(entry, fh)
        os.replace(tmp, folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json")
    except OSError:
        return  # a cache that cannot be written is only slower


LONG_RUN_STEPS = 10_000
"""Beyond this many subsampled steps a PLD composition uses a finer grid (`pld_grid`)."""


def pld_grid(terms: tuple[Term, ...], grid: float) -> float:
    """The PLD grid a composition of `terms` asked for on `grid` uses before size bounds.

    The pessimism of the connect-the-dots grid accumulates over the composed steps, about as
    1.3 steps grid^2 in epsilon (measured on DP-SGD steps: +0.0013 at 1,000 steps and +0.013 at
    10,000 on grid 1e-3, 3.3 % at epsilon 0.58; +0.83 at 10^6 steps, epsilon 1.75 for a true
    0.915). Up to `LONG_RUN_STEPS` subsampled steps the grid asked for is used; beyond, the grid
    is halved until steps grid^2 is at most its value at 1,000 steps (grid / 32 at 10^6 steps:
    +0.001). Un-subsampled steps compose exactly (one Gaussian) and do not count.
    """
    steps = sum(c for q, _, c, _ in terms if q < 1)
    if steps <= LONG_RUN_STEPS:
        return grid
    return grid / 2.0 ** math.ceil(0.5 * math.log2(steps / 1000))


def _prepared(terms: tuple[Term, ...], accountant: str, options: AccountantOptions,
              ) -> tuple[tuple[Term, ...], str, AccountantOptions, AccountantOptions]:
    """(the terms that release something, the accountant composing them, the settings it uses,
    the settings its disk-cache key names) of a composition."""
    terms = tuple(t for t in terms if not math.isinf(t[1]))  # infinite noise releases nothing
    accountant = effective_accountant((t[3] for t in terms), accountant)
    # the settings this composition really uses (a coarser grid for many-term short runs)
    options = options.for_terms(len(terms), sum(t[2] for t in terms))
    keyed = options  # a long run's finer grid is part of its key
    if accountant == "pld":
        keyed = replace(options, pld_discretization=pld_grid(terms, options.pld_discretization))
    return terms, accountant, options, keyed


_ANSWERED: dict[str, Composition] = {}
"""Compositions answered otherwise than asked (a note), by disk key: `composition` reads them."""


@functools.lru_cache(maxsize=1024)
def _epsilon_cached(
    terms: tuple[Term, ...], delta: float, accountant: str, options: AccountantOptions
) -> float:
    terms, accountant, options, keyed = _prepared(terms, accountant, options)
    if not terms:
        return 0.0
    key = _disk_key(terms, delta, accountant, keyed)
    hit = _disk_get(key)
    if hit is None:
        hit = _compose(terms, delta, accountant, options)
        _disk_put(key, hit)
    if hit.note:
        _ANSWERED[key] = hit
    return hit.epsilon


def composition(terms: tuple[Term, ...], delta: float, accountant: str,
                options: AccountantOptions) -> Composition:
    """`_epsilon_cached`'s epsilon with the accountant that answered and how (memoized)."""
    eps = _epsilon_cached(terms, delta, accountant, options)
    terms, accountant, _, keyed = _prepared(terms, accountant, options)
    if not terms:
        return Composition(0.0, accountant)
    return _ANSWERED.get(_disk_key(terms, delta, accountant, keyed), Composition(eps, accountant))


def _compose(terms: tuple[Term, ...], delta: float, accountant: str,
             options: AccountantOptions) -> Composition:
    """Epsilon of (q, z, count, sampling) terms at delta by dp-accounting's PLD (its
    subsampled-Gaussian PLDs built and composed by `fast_pld`, equal to its `PLDAccountant`;
    size-bounded, see `_bounded_pld`) or RDP accountant (`accountant` already the effective one
    for the terms' sampling model)."""
    if accountant == "pld":  # Poisson terms only: effective_accountant sends WOR to RDP
        return _bounded_pld(terms, delta, options)
    return Composition(_rdp_epsilon(terms, delta, options), accountant)


def _rdp_epsilon(terms: tuple[Term, ...], delta: float, options: AccountantOptions) -> float:
    wor = terms[0][3] == WOR
    relation = (dp_accounting.NeighboringRelation.REPLACE_ONE if wor
                else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    orders = options.rdp_orders or (WOR_RDP_ORDERS if wor else None)
    acc = rdp_privacy_accountant.RdpAccountant(orders=orders, neighboring_relation=relation)
    for q, z, count, sampling in terms:
        acc.compose(_dp_event(q, z, count, sampling))
    return max(float(acc.get_epsilon(delta)), 0.0)


def _bounded_pld(terms: tuple[Term, ...], delta: float,
                 options: AccountantOptions) -> Composition:
    """The PLD epsilon on `pld_grid`'s grid or, where a PLD on it would exceed
    `fast_pld.MAX_POINTS`, on a grid 2^k times coarser whose whole composition has at most
    `fast_pld.BOUNDED_POINTS` points by `fast_pld.composed_points` (doubled again while a PLD
    is refused). A coarser connect-the-dots grid only adds pessimism: still an upper bound.
    Where no grid fits (a loss range beyond a float), RDP answers."""
    asked = options.pld_discretization
    grid = pld_grid(terms, asked)
    poisson = [(q, z, c) for q, z, c, _ in terms]
    refused: tuple[float, float] | None = None  # (grid, points) of the first refusal
    for _ in range(64):  # each refusal at least doubles the grid
        try:
            # a grid of its own (long run, or bounded) has no earlier result to repeat bit
            # for bit: composed the fast way (`fast_pld.subsampled_gaussian_epsilon`)
            eps = subsampled_gaussian_epsilon(poisson, delta, grid,
                                              **({} if grid == asked else {"fast": True}))
        except (PLDTooLargeError, OverflowError) as big:
            points = getattr(big, "points", math.inf)
            if refused is None and math.isfinite(points):
                try:
                    points = max(points, composed_points(poisson, grid))
                except OverflowError:  # a loss range beyond a float
                    points = math.inf
            refused = refused or (grid, points)
            if not math.isfinite(points):
                break
            grid *= 2.0 ** max(1, math.ceil(math.log2(points / BOUNDED_POINTS)))
            continue
        if refused is not None:
            return Composition(eps, "pld", f"PLD grid {grid:.3g}: a PLD on grid "
                               f"{refused[0]:.3g} would have {refused[1]:.3g} points (bound "
                               f"{MAX_POINTS:,})")
        steps = sum(c for q, _, c, _ in terms if q < 1)
        return Composition(eps, "pld", "" if grid == asked else (
            f"PLD grid {grid:.3g}, finer than the {asked:g} asked for: {steps:,} steps "
            "accumulate a grid's pessimism"))
    assert refused is not None  # the loop ends early only on a refusal
    why = ("a PLD's privacy-loss range overflows a float" if math.isinf(refused[1]) else
           f"a PLD on grid {refused[0]:.3g} would have {refused[1]:.3g} points (bound "
           f"{MAX_POINTS:,}) and no coarser grid fits")
    return Composition(_rdp_epsilon(terms, delta, options), "rdp", f"RDP answered: {why}")


def pld_accountant_epsilon(terms: Iterable[tuple[float, float, int]], delta: float,
                           grid: float) -> float:
    """dp-accounting's own `PLDAccountant` on (q, z, count) Poisson-subsampled Gaussian terms:
    the reference `fast_pld.subsampled_gaussian_epsilon` equals (tests) and is timed against
    (`privbench bench plans --method dp_accounting`)."""
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=grid)
    for q, z, count in terms:
        acc.compose(_dp_event(q, z, count, "poisson"))
    return max(float(acc.get_epsilon(delta)), 0.0)


def clt_epsilon(terms: tuple[Term, ...], delta: float) -> float:
    """Epsilon from the mu-GDP CLT (Dyn-D2P eq. 6 per sampling rate, eq. 4); approximate.

    Un-subsampled steps (q = 1) compose exactly (sum of mu_k^2); subsampled ones use eq. (6).
    Without-replacement steps enter with mu = 2 / z (replace-one sensitivity 2C).
    """
    effective_accountant({t[3] for t in terms}, "gdp_clt")
    terms = tuple((q, z / 2 if s == WOR else z, c, s) for q, z, c, s in terms)
    exact = math.fsum(c / z**2 for q, z, c, _ in terms if q == 1)
    sub = 0.0
    rates = np.array([t[0] for t in terms])  # (terms,)
    zs = np.array([t[1] for t in terms])  # (terms,)
    counts = np.array([t[2] for t in terms], dtype=np.int64)  # (terms,)
    for q in sorted({q for q, _, _, _ in terms if q < 1}):
        mine = rates == q
        mu_q = clt_mu_total(np.repeat(1 / zs[mine], counts[mine]), q)
        sub += mu_q**2
    mu = math.sqrt(exact + sub)
    return gdp_epsilon(mu, delta) if mu > 0 else 0.0


def gaussian_composition(
    events: Iterable[GaussianEvent],
    delta: float,
    accountant: str = "pld",
    options: AccountantOptions = DEFAULT_OPTIONS,
) -> Composition:
    """Epsilon at `delta` of the composition of Gaussian events, with the accountant that
    answered and how it departed from `options` (`Composition`).

    Args:
        events: the Gaussian events of one node's ledger.
        delta: target delta in (0, 1).
        accountant: "pld" (default), "rdp" or "gdp_clt" (approximate).
        options: numerical settings (discretization, orders, bucketing).
    """
    delta = check_delta(delta)
    accountant = check_choice(accountant, "accountant", GAUSSIAN_ACCOUNTANTS)
    events = tuple(events)
    check_accountant_delta(delta, effective_accountant((e.sampling for e in events), accountant))
    terms = bucket_terms(events, None if accountant == "gdp_clt" else options.max_distinct)
    if accountant == "gdp_clt":
        return Composition(clt_epsilon(terms, delta) if terms else 0.0, accountant)
    return composition(terms, delta, accountant, options)


def gaussian_epsilon(
    events: Iterable[GaussianEvent],
    delta: float,
    accountant: str = "pld",
    options: AccountantOptions = DEFAULT_OPTIONS,
) -> float:
    """Epsilon at `delta` of the composition of Gaussian events.

    Args:
        events: the Gaussian events of one node's ledger.
        delta: target delta in (0, 1).
        accountant: "pld" (default), "rdp" or "gdp_clt" (approximate; warns).
        options: numerical settings (discretization, orders, bucketing).

    Returns:
        epsilon >= 0 (0.0 for no events).
    """
    return gaussian_composition(events, delta, accountant, options).epsilon
