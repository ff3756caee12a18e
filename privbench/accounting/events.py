"""Mechanisms as events, and one privacy ledger per node.

A node's privacy is about its own local data, so every node has its own `PrivacyLedger`: an
immutable, run-length-encoded list of the mechanisms that touched its data. Events:

- `GaussianEvent`: a subsampled Gaussian mechanism, described by its noise multiplier
  z = noise std / clip bound C, its sampling rate q and its sampling model (`SAMPLINGS`:
  Poisson, add/remove-one, sensitivity C; or fixed-size batches without replacement, replace-one,
  sensitivity 2C) (DP-SGD step; ADP-VRSGP, Dyn-D2P, DPDL).
- `LaplaceEvent`: a pure epsilon-DP Laplace release, eps = L1 sensitivity / scale (DPPS, Lemma 1).
- `RandomizedResponseEvent`: binary randomized response on `coordinates` coordinates, epsilon =
  log(p / (1 - p)) per coordinate for keep probability p (DeFL-VP, Alg. 3 / Eq. 14).

Ledgers are values: `record` returns a new ledger. Composition lives in
`privbench.accounting.compose`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from privbench.accounting.validation import (
    SAMPLINGS,
    UNITS,
    check_choice,
    check_count,
    check_positive,
    check_sampling_rate,
)
from privbench.errors import ConfigError


@dataclass(frozen=True)
class GaussianEvent:
    """`count` releases of a Gaussian mechanism, each on a subsample of rate q.

    Attributes:
        noise_multiplier: noise standard deviation divided by the clip bound C (z > 0): the
            L2 sensitivity is C under "poisson" sampling and 2C under
            "fixed_without_replacement" (one record replaced by another), which the accountant
            applies (`privbench.accounting.gaussian`).
        sampling_rate: sampling rate q in (0, 1] (batch size / dataset size for fixed-size
            batches); 1.0 means no subsampling.
        count: number of releases (steps).
        sampling: "poisson" (default) or "fixed_without_replacement" (`SAMPLINGS`).
    """

    noise_multiplier: float
    sampling_rate: float = 1.0
    count: int = 1
    sampling: str = "poisson"

    def __post_init__(self) -> None:
        z = check_positive(self.noise_multiplier, "noise multiplier", allow_inf=True)
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "sampling_rate", check_sampling_rate(self.sampling_rate))
        object.__setattr__(self, "count", check_count(self.count, "event count"))
        check_choice(self.sampling, "sampling", SAMPLINGS)


def _checked_event(z: float, q: float, count: int, sampling: str) -> GaussianEvent:
    """A `GaussianEvent` of already checked fields (z > 0, q in (0, 1], count >= 1, a known
    sampling model), without checking them again."""
    event = object.__new__(GaussianEvent)
    event.__dict__.update(noise_multiplier=z, sampling_rate=q, count=count, sampling=sampling)
    return event


@dataclass(frozen=True)
class LaplaceEvent:
    """`count` releases of a Laplace mechanism, each pure `epsilon`-DP.

    Attributes:
        epsilon: L1 sensitivity / Laplace scale of one release.
        count: number of releases.
    """

    epsilon: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "Laplace epsilon"))
        object.__setattr__(self, "count", check_count(self.count, "event count"))

    @classmethod
    def from_scale(cls, scale: float, sensitivity: float, count: int = 1) -> LaplaceEvent:
        """The event of adding Lap(0, scale) noise to a query of L1 sensitivity `sensitivity`."""
        scale = check_positive(scale, "Laplace scale")
        sensitivity = check_positive(sensitivity, "L1 sensitivity")
        return cls(sensitivity / scale, count)

    @property
    def atoms(self) -> tuple[float, int]:
        """(epsilon of one elementary release, number of elementary releases)."""
        return self.epsilon, self.count


@dataclass(frozen=True)
class RandomizedResponseEvent:
    """`count` releases of a `coordinates`-long vector of independent binary randomized responses.

    Parametrized by the per-coordinate epsilon (not the keep probability, which rounds to 1/2 in
    floating point at the tiny epsilons a rigorous per-vector budget produces).

    Attributes:
        epsilon: per-coordinate epsilon = log(p / (1 - p)) for keep probability p (Lemma 1).
        coordinates: number of coordinates randomized in one release (d).
        count: number of releases (rounds).
    """

    epsilon: float
    coordinates: int = 1
    count: int = 1

    def __post_init__(self) -> None:
        eps = check_positive(self.epsilon, "randomized-response epsilon")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "coordinates", check_count(self.coordinates, "coordinates"))
        object.__setattr__(self, "count", check_count(self.count, "event count"))

    @classmethod
    def from_keep_prob(
        cls, keep_prob: float, coordinates: int = 1, count: int = 1
    ) -> RandomizedResponseEvent:
        """The event of keeping each coordinate with probability `keep_prob` in (1/2, 1)."""
        p = keep_prob
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.5 < p < 1:
            raise ConfigError(f"keep probability must be in (0.5, 1), got {p!r}")
        return cls(math.log(p) - math.log1p(-p), coordinates, count)

    @property
    def keep_prob(self) -> float:
        """p = e^eps / (e^eps + 1) (DeFL-VP Eq. 14)."""
        return 1.0 / (1.0 + math.exp(-self.epsilon))

    @property
    def atoms(self) -> tuple[float, int]:
        """(epsilon of one coordinate, number of coordinate releases = coordinates * count)."""
        return self.epsilon, self.coordinates * self.count


Event = GaussianEvent | LaplaceEvent | RandomizedResponseEvent
PureEvent = LaplaceEvent | RandomizedResponseEvent


@functools.cache
def _kind_fields(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind) if f.name != "count")


def _same_kind(a: Event, b: Event) -> bool:
    """Whether two events are the same mechanism (all fields but `count` equal)."""
    if type(a) is not type(b):
        return False
    if type(a) is GaussianEvent:  # the common case, spelled out (a ledger may hold 10^6)
        return (a.noise_multiplier == b.noise_multiplier  # type: ignore[union-attr]
                and a.sampling_rate == b.sampling_rate  # type: ignore[union-attr]
                and a.sampling == b.sampling)  # type: ignore[union-attr]
    return all(getattr(a, name) == getattr(b, name) for name in _kind_fields(type(a)))


@dataclass(frozen=True)
class PrivacyLedger:
    """The mechanisms that touched one node's local data, in order, run-length encoded.

    Attributes:
        node: the node whose data this ledger protects.
        unit: "sample-level" or "node-level" (what one neighbouring change is).
        events: the recorded events; consecutive identical events are merged.
        uncovered: message kinds the node sends that no recorded mechanism covers.
    """

    node: int | str = 0
    unit: str = "sample-level"
    events: tuple[Event, ...] = ()
    uncovered: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_choice(self.unit, "unit", UNITS)
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "uncovered", tuple(self.uncovered))
        for e in self.events:
            if not isinstance(e, GaussianEvent | LaplaceEvent | RandomizedResponseEvent):
                raise ConfigError(f"ledger events must be accounting events, got {e!r}")

    def record(self, event: Event) -> PrivacyLedger:
        """A new ledger with `event` appended (merged into the last event when identical)."""
        return self.extend((event,))

    def extend(self, events: Iterable[Event]) -> PrivacyLedger:
        """A new ledger with `events` appended in order."""
        out = list(self.events)
        last = out[-1] if out else None
        for e in events:
            if last is not None and _same_kind(last, e):
                out[-1] = last = replace(last, count=last.count + e.count)
            else:
                out.append(e)
                last = e
        return replace(self, events=tuple(out))

    @property
    def gaussian_events(self) -> tuple[GaussianEvent, ...]:
        """The Gaussian events only."""
        return tuple(e for e in self.events if isinstance(e, GaussianEvent))

    @property
    def pure_events(self) -> tuple[PureEvent, ...]:
        """The pure-epsilon (Laplace, randomized-response) events only."""
        return tuple(e for e in self.events if not isinstance(e, GaussianEvent))


def gaussian_schedule(
    noise_multipliers: Sequence[float], sampling_rate: float = 1.0, sampling: str = "poisson"
) -> tuple[GaussianEvent, ...]:
    """One Gaussian event per step of a per-step noise-multiplier schedule, run-length encoded.

    Args:
        noise_multipliers: z_t for t = 0..T-1 (noise std / clip bound at step t).
        sampling_rate: sampling rate of every step.
        sampling: the sampling model of every step (`SAMPLINGS`).

    Returns:
        Events whose composition is the schedule (consecutive equal z_t merged: one event per
        run, so a 10^6-step schedule costs one event per distinct run, not per step).
    """
    z = np.asarray(noise_multipliers, dtype=float)  # (T,)
    if z.ndim != 1:
        raise ConfigError(f"a noise schedule is one multiplier per step, got shape {z.shape}")
    if z.size == 0:
        raise ConfigError("a noise schedule needs at least 1 step, got 0")
    starts = np.flatnonzero(np.r_[True, z[1:] != z[:-1]])  # (runs,) first step of each run
    counts = np.diff(np.r_[starts, z.size])  # (runs,)
    first = GaussianEvent(float(z[0]), sampling_rate, int(counts[0]), sampling)  # checks q, model
    if not bool(np.all(z > 0)):  # NaN or <= 0: the event's own error
        GaussianEvent(float(z[~(z > 0)][0]), sampling_rate, 1, sampling)
    # the rest are checked as a whole above: built without checking each run again
    q = first.sampling_rate
    return (first, *(_checked_event(v, q, c, sampling)
                     for v, c in zip(z[starts[1:]].tolist(), counts[1:].tolist(), strict=True)))


def node_ledgers(
    nodes: Iterable[int | str], unit: str = "sample-level", uncovered: Iterable[str] = ()
) -> dict[int | str, PrivacyLedger]:
    """One empty ledger per node (privacy is per node's data; budgets are never summed)."""
    uncovered = tuple(uncovered)
    return {n: PrivacyLedger(node=n, unit=unit, uncovered=uncovered) for n in nodes}
