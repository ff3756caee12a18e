"""The declarations of a reproduction: its methods, scales and the paper's table (see
`privbench.reproduce`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from privbench.config import FieldValue
from privbench.errors import ConfigError
from privbench.registry import Registry


@dataclass(frozen=True)
class Method:
    """One row of a paper's table.

    Attributes:
        label: the row's name in the paper ("Dyn-D2P", "Non-private").
        defense: the registered defense that implements it.
        overrides: defense config values (the paper's settings for this row).
        private: False for a non-private baseline (trained once per seed, shown at every epsilon).
        run: RunConfig values of this row over the scale's (its own tuned step size).
        grid: the grid values this private row is run at (None: all of the table's; a paper
            that reports a row at one budget only, e.g. an ablation, gets that one).
    """

    label: str
    defense: str
    overrides: tuple[tuple[str, FieldValue], ...] = ()
    private: bool = True
    run: tuple[tuple[str, FieldValue], ...] = ()
    grid: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Scale:
    """A setting the table can be run at.

    Attributes:
        name: "reduced", "paper" or "headline" (the paper's setting, headline rows only).
        run: RunConfig values (dataset, model, nodes, topology, rounds, batch, lr, delta, ...).
        seeds: the seeds run by default (the paper's repetitions at "paper" scale).
        note: what differs from the paper, in one sentence (printed with the table).
        rows: the method labels run at this scale (empty: every row of the table).
        grid: the grid values run at this scale (empty: the table's whole grid).
        method_run: per row label, RunConfig values that replace the row's own at this scale
            (a step size tuned for this scale's model).
        grid_run: per (row label, grid value), RunConfig values that replace the row's own
            (and `method_run`'s) at that value only: a step tuned at that epsilon, where one
            step for every epsilon leaves a row untrained at the smallest (DPDL's LeNet-5
            DP-DPSGD at the epsilon-4 step: chance at epsilon = 1).
    """

    name: str
    run: tuple[tuple[str, FieldValue], ...]
    seeds: tuple[int, ...]
    note: str
    rows: tuple[str, ...] = ()
    grid: tuple[float, ...] = ()
    method_run: tuple[tuple[str, tuple[tuple[str, FieldValue], ...]], ...] = ()
    grid_run: tuple[tuple[str, float, tuple[tuple[str, FieldValue], ...]], ...] = ()

    def run_at(self, label: str, value: float | None) -> dict[str, FieldValue]:
        """The `grid_run` values of row `label` at grid value `value` (empty: none)."""
        return {k: v for row, at, over in self.grid_run if row == label and at == value
                for k, v in over}


# A run line's accuracy keys and how a table names them.
METRICS: dict[str, str] = {
    "accuracy": "Average-model test accuracy",
    "node_accuracy_mean": "Mean over nodes of each node's own model's test accuracy",
}


@dataclass(frozen=True)
class Reproduction:
    """One paper table: what to run and what the paper reports.

    Attributes:
        name: registry name (the paper's defense family, e.g. "dyn_d2p").
        title: the paper table reproduced ("Dyn-D2P Table 2: shallow CNN on FashionMNIST").
        methods: the table's rows.
        eps: the epsilon grid (the table's columns).
        paper: per method label, the paper's accuracy (%) at each epsilon of the grid (None
            where the paper reports none).
        orderings: (better, worse) method-label pairs the paper claims at every epsilon.
        scales: the settings it can be run at, the first the default.
        grid_field: what a column sets: "epsilon" (the run's target epsilon, default) or the
            name of a defense field (DPPS's privacy knob "b", which is not an epsilon).
        grid_symbol: the column heading's symbol ("ε", "b").
        metric: the run line's accuracy the table shows, a key of METRICS: "accuracy" (the
            average model's) or "node_accuracy_mean" (the mean of the nodes' own models', for
            personalised methods such as PartPSP, whose nodes keep private layers).
    """

    name: str
    title: str
    methods: tuple[Method, ...]
    eps: tuple[float, ...]
    paper: tuple[tuple[str, tuple[float | None, ...]], ...]
    orderings: tuple[tuple[str, str], ...]
    scales: tuple[Scale, ...] = field(default=())
    grid_field: str = "epsilon"
    grid_symbol: str = "ε"
    metric: str = "accuracy"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"reproduction {self.name!r}: metric {self.metric!r}; accepted: "
                              f"{', '.join(METRICS)}")
        labels = {m.label for m in self.methods}
        for m in self.methods:
            if m.grid is not None and not set(m.grid) <= set(self.eps):
                raise ConfigError(f"reproduction {self.name!r}: method {m.label!r} runs at "
                                  f"{m.grid}, not all in the table's grid {self.eps}")
        for a, b in self.orderings:
            if a not in labels or b not in labels:
                raise ConfigError(f"reproduction {self.name!r}: ordering ({a}, {b}) names a "
                                  f"method not in its table ({sorted(labels)})")
            if not any(self.runs_at(a, e) and self.runs_at(b, e) for e in self.eps):
                raise ConfigError(f"reproduction {self.name!r}: ordering ({a}, {b}) has no "
                                  "grid value where both rows are run")
        for label, row in self.paper:
            if len(row) != len(self.eps):
                raise ConfigError(f"reproduction {self.name!r}: paper row {label!r} has "
                                  f"{len(row)} values for {len(self.eps)} epsilons")
        for sc in self.scales:
            named = (*sc.rows, *dict(sc.method_run), *(r for r, _, _ in sc.grid_run))
            unknown = [r for r in named if r not in labels] + \
                [str(e) for e in (*sc.grid, *(e for _, e, _ in sc.grid_run)) if e not in self.eps]
            if unknown:
                raise ConfigError(f"reproduction {self.name!r}: scale {sc.name!r} names rows or "
                                  f"grid values not in the table: {', '.join(unknown)}")

    def at(self, scale: Scale) -> Reproduction:
        """The table as run at `scale`: its rows, its grid columns (the paper's numbers at
        those), and the orderings between rows that share a column (the full table when the
        scale narrows nothing)."""
        if not scale.rows and not scale.grid and not scale.method_run:
            return self
        cols = [k for k, e in enumerate(self.eps) if not scale.grid or e in scale.grid]
        eps = tuple(self.eps[k] for k in cols)
        steps, methods = dict(scale.method_run), []
        for m in self.methods:
            if scale.rows and m.label not in scale.rows:
                continue
            if m.label in steps:
                m = replace(m, run=(*m.run, *steps[m.label]))
            if m.private and m.grid is not None:
                m = replace(m, grid=tuple(e for e in m.grid if e in eps))
                if not m.grid:
                    continue
            methods.append(m)
        kept = {m.label for m in methods}
        paper = tuple((label, tuple(row[k] for k in cols)) for label, row in self.paper
                      if label in kept)
        narrowed = replace(self, methods=tuple(methods), eps=eps, paper=paper, orderings=(),
                           scales=())
        orderings = tuple((a, b) for a, b in self.orderings if a in kept and b in kept and any(
            narrowed.runs_at(a, e) and narrowed.runs_at(b, e) for e in eps))
        return replace(narrowed, orderings=orderings, scales=(scale,))

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

    def runs_at(self, label: str, eps: float) -> bool:
        """Whether the row is run at this grid value (a non-private row: at every one)."""
        m = self.method(label)
        return not m.private or m.grid is None or eps in m.grid


REPRODUCTIONS: Registry[Reproduction] = Registry("reproduction")
