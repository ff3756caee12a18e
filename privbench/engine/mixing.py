"""Push-sum and gossip combination steps shared by every trainer.

Both send through the message bus and combine what it delivers, so no trainer can mix a payload
that was not logged. Mixing matrices are cached on the device per graph period.
"""

from __future__ import annotations

import torch
from torch import Tensor

from privbench.engine.messages import MessageBus
from privbench.topology import Topology


class Mixer:
    """Caches a topology's adjacency and mixing matrices on the device.

    Args:
        topology: the graph.
        kind: "column" (push-sum, column-stochastic) or "doubly" (gossip, Metropolis-Hastings).
        device: where the matrices live.
    """

    def __init__(self, topology: Topology, kind: str, device: torch.device) -> None:
        self.topology = topology
        self.kind = kind
        periods = topology.graphs.shape[0]
        self._adj = [topology.adjacency(p).to(device) for p in range(periods)]
        self._mix = [topology.mixing(p, kind).to(device) for p in range(periods)]

    def adjacency(self, t: int) -> Tensor:
        """(n, n) bool adjacency of round t."""
        return self._adj[t % len(self._adj)]

    def matrix(self, t: int) -> Tensor:
        """(n, n) mixing matrix of round t."""
        return self._mix[t % len(self._mix)]


def push_sum(bus: MessageBus, mixer: Mixer, t: int, x_half: Tensor, w: Tensor,
             model_kind: str = "model", weight_kind: str = "weight") -> tuple[Tensor, Tensor]:
    """One push-sum combination: node i sends P_ji * x_i and P_ji * w_i to each out-neighbour j.

    Args:
        x_half: (n, d) numerators after the local step.
        w: (n,) push-sum weights.

    Returns:
        (n, d) new numerators P @ x_half and (n,) new weights P @ w.
    """
    p, adj = mixer.matrix(t), mixer.adjacency(t)
    x_recv = bus.broadcast(t, model_kind, x_half, adj, scale=p)
    w_recv = bus.broadcast(t, weight_kind, w[:, None], adj, scale=p)[:, 0]
    return p @ x_recv, p @ w_recv


def gossip(bus: MessageBus, mixer: Mixer, t: int, x: Tensor, kind: str = "model") -> Tensor:
    """One gossip average W @ x with node i's row x_i broadcast to its neighbours.

    Args:
        x: (n, d) values to average.

    Returns:
        (n, d).
    """
    return mixer.matrix(t) @ bus.broadcast(t, kind, x, mixer.adjacency(t))
