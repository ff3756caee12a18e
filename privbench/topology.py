"""Communication graphs and their mixing matrices.

Convention: `A[j, i] = True` when node i sends to node j in that round (self-loops excluded).
Mixing is a left multiplication of stacked node state: `x_new = P @ x` with `x` of shape (n, d),
so `P[j, i]` is the weight node j gives to what node i sent.

* Push-sum needs **column-stochastic** P (every sender splits its mass: columns sum to 1):
  `column_stochastic(A)` gives each sender uniform weights over itself and its out-neighbours.
* Gossip needs **doubly-stochastic** W on an undirected graph: `metropolis_hastings(A)`,
  W_ij = 1 / (1 + max(deg_i, deg_j)).

Topologies (all registered by name):
* `exponential`: time-varying directed one-peer exponential graph (Assran et al. 2019):
  at round t node i sends to i + 2^(t mod log2 n).
* `random_out`: random directed graph where every node has out-degree k (in-degrees vary, so the
  push-sum weights really move); resampled until strongly connected; static or time-varying.
* `ring`, `complete`, `two_hub` (two hubs each linked to every other node and to each other; with
  CGA's "Bipar" weights it stands in for the DPDL paper's unspecified "bipartite" topology).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from privbench.errors import ConfigError
from privbench.registry import TOPOLOGIES


def column_stochastic(adj: Tensor) -> Tensor:
    """(n, n) column-stochastic push-sum matrix: sender i keeps and sends equal shares."""
    n = adj.shape[0]
    a = adj.float() + torch.eye(n, device=adj.device)
    return a / a.sum(dim=0, keepdim=True)


def metropolis_hastings(adj: Tensor) -> Tensor:
    """(n, n) doubly-stochastic Metropolis-Hastings weights of an undirected graph."""
    if not torch.equal(adj, adj.T):
        raise ConfigError("doubly-stochastic (gossip) mixing needs an undirected topology; "
                          "use ring, complete, two_hub, or random_out with symmetric=true")
    a = adj.float()
    deg = a.sum(dim=1)
    w = a / (1.0 + torch.maximum(deg[:, None], deg[None, :]))
    return w + torch.diag(1.0 - w.sum(dim=1))


def strongly_connected(adj: Tensor) -> bool:
    """True when every node reaches every other along directed edges."""
    n = adj.shape[0]
    reach = adj.float() + torch.eye(n)
    for _ in range(max(1, math.ceil(math.log2(n)))):
        reach = ((reach @ reach) > 0).float()
    return bool((reach > 0).all())


@dataclass(frozen=True)
class Topology:
    """A (possibly time-varying) directed graph on n nodes.

    Attributes:
        name: registry key.
        n: number of nodes.
        graphs: (P, n, n) bool adjacency matrices, used cyclically: round t uses graphs[t % P].
        undirected: whether every graph is symmetric (gossip-capable).
    """

    name: str
    n: int
    graphs: Tensor
    undirected: bool

    def adjacency(self, t: int) -> Tensor:
        """(n, n) bool: [j, i] True when i sends to j in round t."""
        return self.graphs[t % self.graphs.shape[0]]

    def mixing(self, t: int, kind: str = "column") -> Tensor:
        """Mixing matrix of round t: "column" (push-sum) or "doubly" (gossip)."""
        if kind == "column":
            return column_stochastic(self.adjacency(t))
        if kind == "doubly":
            return metropolis_hastings(self.adjacency(t))
        raise ConfigError(f"unknown mixing kind {kind!r}; accepted: column, doubly")

    def in_neighbours(self, t: int, j: int) -> list[int]:
        """Nodes that send to j in round t."""
        return torch.nonzero(self.adjacency(t)[j]).flatten().tolist()

    def out_neighbours(self, t: int, i: int) -> list[int]:
        """Nodes that i sends to in round t."""
        return torch.nonzero(self.adjacency(t)[:, i]).flatten().tolist()


def _check_n(n: int, minimum: int = 2) -> None:
    if n < minimum:
        raise ConfigError(f"nodes must be >= {minimum}, got {n}")


def _from_out(out: list[list[int]], n: int) -> Tensor:
    adj = torch.zeros(n, n, dtype=torch.bool)
    for i, targets in enumerate(out):
        adj[targets, i] = True
    return adj


@TOPOLOGIES.register("exponential")
def exponential(n: int, gen: torch.Generator, k: int = 1, time_varying: bool = True,
                symmetric: bool = False) -> Topology:
    """One-peer exponential graph: at round t node i sends to (i + 2^(t mod log2 n)) mod n."""
    _check_n(n)
    hops = [2**p for p in range(max(1, math.ceil(math.log2(n))))]
    graphs = torch.stack([_from_out([[(i + h) % n] for i in range(n)], n) for h in hops])
    if not time_varying:  # static: every power-of-two peer at once
        graphs = graphs.any(dim=0, keepdim=True)
    return Topology("exponential", n, graphs, False)


@TOPOLOGIES.register("random_out")
def random_out(n: int, gen: torch.Generator, k: int = 2, time_varying: bool = False,
               symmetric: bool = False, periods: int = 16) -> Topology:
    """Random directed graph, out-degree k per node, strongly connected (non-regular in-degree)."""
    _check_n(n)
    if not 1 <= k < n:
        raise ConfigError(f"out-degree k must be in [1, n-1] = [1, {n - 1}], got {k}")
    graphs = []
    for _ in range(periods if time_varying else 1):
        for _attempt in range(1000):
            keys = torch.rand(n, n, generator=gen)
            keys.fill_diagonal_(2.0)  # never pick self
            out = keys.argsort(dim=1)[:, :k].tolist()
            adj = _from_out(out, n)
            if symmetric:
                adj = adj | adj.T
            if strongly_connected(adj):
                break
        else:
            raise ConfigError(f"could not draw a strongly connected graph with n={n}, k={k}")
        graphs.append(adj)
    return Topology("random_out", n, torch.stack(graphs), symmetric)


@TOPOLOGIES.register("ring")
def ring(n: int, gen: torch.Generator, k: int = 1, time_varying: bool = False,
         symmetric: bool = True) -> Topology:
    """Ring: each node linked to its two neighbours (symmetric) or its successor (directed)."""
    _check_n(n)
    out = [[(i + 1) % n, (i - 1) % n] if symmetric else [(i + 1) % n] for i in range(n)]
    return Topology("ring", n, _from_out(out, n)[None], symmetric)


@TOPOLOGIES.register("complete")
def complete(n: int, gen: torch.Generator, k: int = 1, time_varying: bool = False,
             symmetric: bool = True) -> Topology:
    """Fully connected graph."""
    _check_n(n)
    adj = ~torch.eye(n, dtype=torch.bool)
    return Topology("complete", n, adj[None], True)


@TOPOLOGIES.register("two_hub")
def two_hub(n: int, gen: torch.Generator, k: int = 1, time_varying: bool = False,
            symmetric: bool = True) -> Topology:
    """Two hubs (nodes 0 and 1) linked to each other and to every other node."""
    _check_n(n, 3)
    adj = torch.zeros(n, n, dtype=torch.bool)
    adj[:2, :] = True
    adj[:, :2] = True
    adj.fill_diagonal_(False)
    return Topology("two_hub", n, adj[None], True)


def build_topology(name: str, n: int, gen: torch.Generator, k: int = 2,
                   time_varying: bool | None = None, symmetric: bool | None = None) -> Topology:
    """Build a registered topology (one-line errors for unknown names and bad sizes).

    `time_varying` / `symmetric` left as None keep the topology's own default.
    """
    builder = TOPOLOGIES.get(name)
    kwargs: dict[str, object] = {"k": k}
    if time_varying is not None:
        kwargs["time_varying"] = time_varying
    if symmetric is not None:
        kwargs["symmetric"] = symmetric
    return builder(n, gen, **kwargs)


@TOPOLOGIES.register("circulant")
def circulant(n: int, gen: torch.Generator, k: int = 1, time_varying: bool = False,
              symmetric: bool = False) -> Topology:
    """The d-Out graph of the DPPS paper (Zhou, Xue, Chen 2025, Sec. 2.1): node i sends to
    i+1..i+k (mod n); d-Out = k + 1.

    Static, directed, regular: its push-sum matrix (weights 1/(k+1)) is doubly stochastic.
    """
    if n < 2 or not 1 <= k < n:
        raise ConfigError(f"circulant needs n >= 2 and 1 <= k < n, got n={n}, k={k}")
    adj = torch.zeros(n, n, dtype=torch.bool)
    for h in range(1, k + 1):
        adj[(torch.arange(n) + h) % n, torch.arange(n)] = True
    if symmetric:
        adj = adj | adj.T
    return Topology("circulant", n, adj[None], bool(symmetric))
