"""The declarations of a reproduction: its methods, scales and the paper's table (see
`privbench.reproduce`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privbench.errors import ConfigError
from privbench.registry import Registry


@dataclass(frozen=True)
class Method:
    """One row of a paper's table.

    Attributes:
        label: the row's name in the paper ("Dyn-D2P", "Non-private").
        defense: the registered defense that implements it.
        overrides: defense config values (the card's settings for this row).
        private: False for a non-private baseline (trained once per seed, shown at every epsilon).
        run: RunConfig values of this row over the scale's (its own tuned step size).
    """

    label: str
    defense: str
    overrides: tuple[tuple[str, Any], ...] = ()
    private: bool = True
    run: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Scale:
    """A setting the table can be run at.

    Attributes:
        name: "paper" or "reduced".
        run: RunConfig values (dataset, model, nodes, topology, rounds, batch, lr, delta, ...).
        seeds: the seeds run by default (the paper's repetitions at "paper" scale).
        note: what differs from the paper, in one sentence (printed with the table).
    """

    name: str
    run: tuple[tuple[str, Any], ...]
    seeds: tuple[int, ...]
    note: str


@dataclass(frozen=True)
class Reproduction:
    """One paper table: what to run and what the paper reports.

    Attributes:
        name: registry name (the card's defense family, e.g. "dyn_d2p").
        title: the paper table reproduced ("Dyn-D2P Table 2: shallow CNN on FashionMNIST").
        methods: the table's rows.
        eps: the epsilon grid (the table's columns).
        paper: per method label, the paper's accuracy (%) at each epsilon of the grid.
        orderings: (better, worse) method-label pairs the paper claims at every epsilon.
        scales: the settings it can be run at, the first the default.
    """

    name: str
    title: str
    methods: tuple[Method, ...]
    eps: tuple[float, ...]
    paper: tuple[tuple[str, tuple[float, ...]], ...]
    orderings: tuple[tuple[str, str], ...]
    scales: tuple[Scale, ...] = field(default=())

    def __post_init__(self) -> None:
        labels = {m.label for m in self.methods}
        for a, b in self.orderings:
            if a not in labels or b not in labels:
                raise ConfigError(f"reproduction {self.name!r}: ordering ({a}, {b}) names a "
                                  f"method not in its table ({sorted(labels)})")
        for label, row in self.paper:
            if len(row) != len(self.eps):
                raise ConfigError(f"reproduction {self.name!r}: paper row {label!r} has "
                                  f"{len(row)} values for {len(self.eps)} epsilons")

    def scale(self, name: str | None) -> Scale:
        """The named scale (None: the default, the first); one-line error when unknown."""
        if name is None:
            return self.scales[0]
        for s in self.scales:
            if s.name == name:
                return s
        raise ConfigError(f"reproduction {self.name!r} has no scale {name!r}; accepted: "
                          f"{', '.join(s.name for s in self.scales)}")

    def method(self, label: str) -> Method:
        """The method with this row label."""
        return next(m for m in self.methods if m.label == label)


REPRODUCTIONS: Registry[Reproduction] = Registry("reproduction")
