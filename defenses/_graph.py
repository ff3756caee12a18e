"""Mixing matrices over a run's graph periods, shared by the defenses that weight their neighbours
as DPDL's paper does."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from privbench.errors import ConfigError
from privbench.topology import Topology, metropolis_hastings


def cga_two_hub_weights(n: int) -> Tensor:
    """(n, n) CGA "Bipar" weights with hubs 0 and 1 (privbench's two_hub numbering).

    a = floor(100/(n-1))/100; spoke row: self 1 - 2a, each hub a; hub row: every spoke a, self
    1 - (n-2)a, other hub 0. Symmetric and doubly stochastic.
    """
    if n < 4:
        raise ConfigError(f"the CGA two-hub weights need nodes >= 4 (spoke self-weight "
                          f"1 - 2a > 0), got {n}; use weights=metropolis")
    a = math.floor(100 / (n - 1)) / 100
    w = torch.zeros(n, n)
    w[2:, :2] = a
    w[:2, 2:] = a
    w[2:, 2:] = torch.eye(n - 2) * (1 - 2 * a)
    w[0, 0] = w[1, 1] = 1 - (n - 2) * a
    return w


WEIGHTS = ("cga", "metropolis")
"""A `weights` setting: "cga", the CGA code base's weights (its "Bipar" weights on two_hub,
Metropolis-Hastings on every other graph), or "metropolis" (Metropolis-Hastings everywhere)."""

DEPRECATED_WEIGHTS = {"card": "cga"}
"""Former names of a `weights` setting, still read (with a FutureWarning) until the next
release."""


def canonical_weights(value: str) -> str:
    """The `weights` setting under its current name (a deprecated one warns)."""
    new = DEPRECATED_WEIGHTS.get(value) if isinstance(value, str) else None
    if new is None:
        return value
    warnings.warn(f"weights={value!r} is deprecated and will be refused in the next release; "
                  f"use weights={new!r} (the same weights)", FutureWarning, stacklevel=4)
    return new


def mixing_matrix(topology: Topology, t: int, weights: str = "cga") -> Tensor:
    """(n, n) symmetric doubly-stochastic W of round t: `weights` (`WEIGHTS`)."""
    adj = topology.adjacency(t)
    if canonical_weights(weights) == "cga" and topology.name == "two_hub":
        return cga_two_hub_weights(topology.n)
    return metropolis_hastings(adj)


def require_undirected(name: str, topology: Topology) -> None:
    """Refuse a directed topology: the defense `name` mixes with a symmetric W.

    Raises:
        ConfigError: naming the defense and the topologies it accepts.
    """
    if not topology.undirected:
        raise ConfigError(f"{name} needs an undirected topology (ring, complete, two_hub, "
                          "random_out with symmetric=true)")


def graph_periods(topology: Topology, weights: str,
                  device: torch.device) -> list[tuple[Tensor, ...]]:
    """Per graph period: W (n, n), message adjacency (n, n) bool ([j, i]: i sends to j), and the
    directed edge list src (E,), dst (E,) of W's off-diagonal support."""
    out = []
    eye = torch.eye(topology.n, dtype=torch.bool)
    for p in range(topology.graphs.shape[0]):
        w = mixing_matrix(topology, p, weights)
        adj = (w > 0) & ~eye
        dst, src = torch.nonzero(adj, as_tuple=True)
        out.append((w.to(device), adj.to(device), src.to(device), dst.to(device)))
    return out
