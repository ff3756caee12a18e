"""What an attacker sees: threat models, observations and gradient views.

* `neighbour`: one curious node; it sees only the messages it receives.
* `eavesdropper`: sees every message on every edge.
* `colluding`: a set of curious nodes pooling what they receive.

A curious set can sit anywhere in the graph (`placement`): "node:K" (node K alone), "nodes:A,B,C",
"hops:H" (the node at hop distance H from the victim along the message flow; "hops:HxM": M such
nodes), "degree:M" (the M best-connected nodes) or "random:M" (M random non-neighbours of the
victim, seeded by the victim). Attacks beyond the victim's neighbourhood go through
`privbench.threat.gossip_inversion`.

An attack never touches ground truth or trainer internals. It gets an `Observation` (the part of
the message log the threat model sees, plus public context: architecture, run and defense
hyper-parameters, topology, the shared public initialisation) and asks the defense for
`GradientView`s: the best estimate of a victim's (privatized) gradient at a known model that can be
derived from those messages. Where the threat model cannot support that derivation, the defense
raises `NotApplicable` with the reason, and the attack reports "not applicable" rather than
inventing data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from privbench.config import RunConfig
from privbench.engine.messages import MessageLog
from privbench.errors import ConfigError
from privbench.models import FlatModel
from privbench.topology import Topology

THREATS = ("neighbour", "eavesdropper", "colluding")


@dataclass(frozen=True)
class ThreatModel:
    """Who observes.

    Attributes:
        kind: "neighbour", "eavesdropper" or "colluding".
        observers: the curious node (neighbour) or nodes (colluding); empty for an eavesdropper.
        placement: how a colluding set anywhere in the graph was chosen (e.g. "hops:2"), or "".
    """

    kind: str = "eavesdropper"
    observers: tuple[int, ...] = ()
    placement: str = ""

    def __post_init__(self) -> None:
        if self.kind not in THREATS:
            raise ConfigError(f"unknown threat model {self.kind!r}; accepted: {', '.join(THREATS)}")
        if self.kind == "neighbour" and len(self.observers) != 1:
            raise ConfigError("a curious-neighbour threat model needs exactly one observer node")
        if self.kind == "colluding" and len(self.observers) < 1:
            raise ConfigError("a colluding threat model needs at least one observer node")

    def receivers(self) -> set[int] | None:
        """Nodes whose incoming messages are seen (None: all edges)."""
        return None if self.kind == "eavesdropper" else set(self.observers)

    def sees_all_inputs_of(self, node: int, topology: Topology, t: int) -> bool:
        """Whether every message node `node` receives in round t is observed."""
        rs = self.receivers()
        if rs is None:
            return True
        return node in rs or all(src in rs for src in topology.in_neighbours(t, node))


@dataclass
class Observation:
    """Everything an attacker has: observed messages and public context.

    Attributes:
        log: the messages the threat model sees.
        threat: the threat model.
        run: the run's public configuration.
        defense: the defense's registry key.
        defense_cfg: the defense's public hyper-parameters.
        fm: the (public) architecture.
        topology: the (public) graph.
        x0: (d,) the shared public initial model, or None if the threat model does not know it.
        node_sizes: (n,) each node's number of members (public, as the weights federated
            averaging publishes and Geiping et al. 2020, Sec. 5, assume known), or None.
    """

    log: MessageLog
    threat: ThreatModel
    run: RunConfig
    defense: str
    defense_cfg: Any
    fm: FlatModel
    topology: Topology
    x0: Tensor | None = None
    node_sizes: tuple[int, ...] | None = None


def observe(built: Any, threat: ThreatModel | None = None) -> Observation:
    """The one way to build what a threat model sees of a built (trained) run.

    Args:
        built: a `privbench.engine.runner.Built`, or any object with its `trainer`, `ctx` and
            `defense` (e.g. a reference system the attacker trains itself).
        threat: who observes (default: an eavesdropper).

    Returns:
        The message log restricted to the threat model's receivers, with the public context:
        run and defense configuration, architecture, topology and the trainer's shared
        initialisation x0 (d,) on the CPU and every node's member count.
    """
    threat = threat or ThreatModel()
    ctx, trainer = built.ctx, built.trainer
    x0 = trainer.init_params()[0].detach().cpu()  # every node starts from this public model
    sizes = tuple(int(c) for c in ctx.data.counts.tolist())
    return Observation(ctx.bus.log.observed_by(threat.receivers()), threat, ctx.run,
                       built.defense, trainer.cfg, ctx.fm, ctx.topology, x0, sizes)


def threat_for(kind: str, topology: Topology, victim: int, t: int = 0) -> ThreatModel:
    """The one factory of concrete threat models around a victim.

    Args:
        kind: "neighbour" (the victim's first out-neighbour in round t: it receives the victim's
            messages), "colluding" (the victim's in-neighbours in round t pooling what they
            receive; the victim itself when it has none), "eavesdropper", or a placement
            anywhere in the graph (`PLACEMENTS`, e.g. "hops:2", "node:5").
        topology: the run's graph.
        victim: the audited node.
        t: the round whose neighbourhood is read.

    Raises:
        ConfigError: an unknown kind, or a neighbour threat on a victim with no out-neighbour.
    """
    if ":" in kind:
        return placed(kind, topology, victim)
    if kind == "neighbour":
        outs = topology.out_neighbours(t, victim)
        if not outs:
            raise ConfigError(f"node {victim} has no out-neighbour in round {t}, so no curious "
                              "neighbour receives its messages; use --threat eavesdropper")
        return ThreatModel("neighbour", (outs[0],))
    if kind == "colluding":
        return ThreatModel("colluding", tuple(topology.in_neighbours(t, victim)) or (victim,))
    return ThreatModel(kind)


PLACEMENTS = ("node:K", "nodes:A,B,...", "hops:H", "hops:HxM", "degree:M", "random:M")


def is_threat(spec: str) -> bool:
    """Whether `spec` names a threat kind or a placement (checked against a graph later)."""
    return spec in THREATS or spec.split(":", 1)[0] in {"node", "nodes", "hops", "degree",
                                                          "random"}


def hop_distances(topology: Topology, source: int) -> list[int]:
    """Hops from `source` to every node along the message flow (any graph period), -1 if none.

    A message goes from i to j when adjacency[j, i]; the distance from a victim to an attacker
    is the fewest relays its information needs to reach the attacker.
    """
    adj = topology.graphs.any(dim=0)  # (n, n) [j, i]: i sends to j in some period
    dist = [-1] * topology.n
    dist[source], frontier = 0, [source]
    while frontier:
        nxt = []
        for i in frontier:
            for j in torch.nonzero(adj[:, i]).flatten().tolist():
                if dist[j] < 0:
                    dist[j] = dist[i] + 1
                    nxt.append(j)
        frontier = nxt
    return dist


def _ints(text: str, spec: str) -> list[int]:
    try:
        return [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"bad threat placement {spec!r}; accepted: "
                          f"{', '.join(PLACEMENTS)}") from None


def placed(spec: str, topology: Topology, victim: int) -> ThreatModel:
    """A colluding set placed anywhere in the graph relative to `victim` (see `PLACEMENTS`).

    Raises:
        ConfigError: an unknown placement, a node out of range, the victim among the attackers,
            or no node at the asked distance.
    """
    head, _, rest = spec.partition(":")
    n, nums = topology.n, _ints(rest, spec)
    if head in ("node", "nodes"):
        chosen = nums
    elif head == "hops" and len(nums) in (1, 2):
        dist = hop_distances(topology, victim)
        at = [j for j in range(n) if dist[j] == nums[0]]
        want = nums[1] if len(nums) == 2 else 1
        if nums[0] < 1 or len(at) < want:
            raise ConfigError(f"threat {spec!r}: {len(at)} node(s) at {nums[0]} hops from node "
                              f"{victim} (distances on this graph: 1..{max(dist)})")
        chosen = at[:want]
    elif head in ("degree", "random") and len(nums) == 1:
        chosen = _by_degree(topology, victim, nums[0]) if head == "degree" else \
            _random_far(topology, victim, nums[0], spec)
    else:
        raise ConfigError(f"bad threat placement {spec!r}; accepted: {', '.join(PLACEMENTS)}")
    bad = [j for j in chosen if not 0 <= j < n]
    if bad or not chosen:
        raise ConfigError(f"threat {spec!r}: nodes must be in [0, {n - 1}], got {chosen}")
    if victim in chosen:
        raise ConfigError(f"threat {spec!r} includes the victim node {victim}")
    return ThreatModel("colluding", tuple(sorted(set(chosen))), spec)


def _by_degree(topology: Topology, victim: int, m: int) -> list[int]:
    """The m nodes (victim excluded) with the most in-neighbours over all periods."""
    deg = topology.graphs.any(dim=0).sum(dim=1).tolist()  # (n,) in-degree
    order = sorted((j for j in range(topology.n) if j != victim), key=lambda j: (-deg[j], j))
    if m < 1 or m > len(order):
        raise ConfigError(f"threat degree:{m}: between 1 and {len(order)} attackers")
    return order[:m]


def _random_far(topology: Topology, victim: int, m: int, spec: str) -> list[int]:
    """m random nodes at 2 hops or more from the victim (seeded by the victim)."""
    dist = hop_distances(topology, victim)
    far = [j for j in range(topology.n) if dist[j] != 0 and dist[j] != 1]
    if m < 1 or m > len(far):
        raise ConfigError(f"threat {spec!r}: between 1 and {len(far)} non-neighbours of node "
                          f"{victim} exist")
    gen = torch.Generator().manual_seed(victim)
    return [far[i] for i in torch.randperm(len(far), generator=gen)[:m].tolist()]


ViewKind = Literal["gradient", "sign", "partial"]


@dataclass(frozen=True)
class LocalSteps:
    """What an attacker knows of the local optimisation behind an update (Geiping et al. 2020,
    Sec. 5): the start model is the view's `params`; from it the victim ran `len(steps)` steps
    of (momentum) SGD, step s on its samples `steps[s]` = [a, b) of `samples` processed ones,
    and released (start - end) / `scale`.

    Attributes:
        lr: the local step size.
        steps: per step, the [start, stop) slice of the processed samples it used (a batch
            repeated every step: ((0, B),) * E; one epoch: consecutive slices of the members).
        samples: how many distinct samples the steps use.
        scale: the released update is (start model - end model) / scale.
        momentum: heavy-ball momentum of the local steps (buffer reset at the start).
        weight_decay: L2 term added to every local gradient.
    """

    lr: float
    steps: tuple[tuple[int, int], ...]
    samples: int
    scale: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not self.steps or any(not 0 <= a < b <= self.samples for a, b in self.steps):
            raise ValueError(f"local steps {self.steps} do not slice {self.samples} samples")

    @staticmethod
    def epoch(members: int, batch_size: int, lr: float, scale: float, momentum: float = 0.0,
              weight_decay: float = 0.0) -> LocalSteps:
        """One pass over `members` samples in consecutive batches of `batch_size` (the last
        one partial)."""
        cuts = tuple((a, min(a + batch_size, members)) for a in range(0, members, batch_size))
        return LocalSteps(lr, cuts, members, scale, momentum, weight_decay)


@dataclass(frozen=True)
class GradientView:
    """An estimate of a victim's released gradient at a known model.

    Attributes:
        victim: the node whose data produced it.
        round: the round it was computed in.
        params: (d,) the model at which the gradient was taken (known to the attacker).
        gradient: (d,) the estimate, on the scale of a batch-mean gradient (clipped and noisy
            for DP defenses); for kind "sign" its signs carry the information.
        kind: "gradient" (all coordinates), "sign" (sign-only message) or "partial" (only the
            coordinates in `mask` are observed, e.g. DPPS's shared layers).
        mask: (d,) bool observed coordinates for "partial" (and for "sign" views of sparse
            messages, e.g. DeFL-VP's rand-k updates), else None.
        batch_size: the victim's (public or expected) batch size in that round.
        source: how it was derived (e.g. "(x_i^t - x_i^{t+1/2}) / lr").
        exact: whether it equals the released quantity exactly (False for estimates).
        local_epoch: the released quantity sums several optimiser steps (a local epoch over
            every member of the node, e.g. DeFL-VP's G2 pseudo-gradient, or E local steps), not
            one batch's gradient at `params`: a single-gradient inversion does not apply to it;
            a multi-step one does, from `local`.
        local: the local steps that produced the update, as the attacker knows them (None: not
            known, or one batch's gradient); a multi-step inversion simulates them.
    """

    victim: int
    round: int
    params: Tensor
    gradient: Tensor
    kind: ViewKind
    mask: Tensor | None
    batch_size: int
    source: str
    exact: bool = True
    local_epoch: bool = False
    local: LocalSteps | None = None

    @property
    def samples(self) -> int:
        """How many distinct samples are behind the view (the batch, or the local steps')."""
        return self.local.samples if self.local is not None else int(self.batch_size)
