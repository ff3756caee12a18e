"""What a trainer works with (`Context`) and the `Trainer` contract.

All n nodes' parameters are one `(n, d)` tensor; a defense is a `Trainer` that implements one
round as: local step (gradients and clipped sums: `privbench.engine.grads`) -> messages out
through the bus -> combine (`privbench.engine.mixing`). The round loop (`train`,
`privbench.engine.loop`) exists once.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from privbench.accounting import PrivacyPlan
from privbench.config import JSONObject, RunConfig
from privbench.data.datasets import NodeData
from privbench.engine.comm import Comm
from privbench.engine.messages import MessageBus, MessageKind
from privbench.engine.privacy import Calibration, ClipBound, PlanRequest, PlanSettings
from privbench.engine.truth import GroundTruth
from privbench.errors import NotApplicable
from privbench.models import FlatModel
from privbench.seeding import Streams
from privbench.topology import Topology

# Per-round diagnostics by quantity (`Trainer.sensitivity_trace`): one value per round, a
# per-node list per round, or a flag per round.
RoundTrace = dict[str, list[float] | list[list[float]] | list[bool]]


@dataclass
class Context:
    """What a trainer works with: the run's pieces, already built and on the device."""

    run: RunConfig
    fm: FlatModel
    data: NodeData
    topology: Topology
    bus: MessageBus
    truth: GroundTruth
    streams: Streams
    device: torch.device
    comm: Comm = field(default_factory=Comm)

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self.data.n

    def draw(self, t: int, rates: Tensor | None = None,
             batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The one sampling path: round t's batches for every node, recorded as ground truth.

        Samples (Poisson at `rates`, else uniform fixed-size batches without replacement of
        `batch_size`, default the run's), records the drawn slots in `truth` (what the attacks
        are graded against) and gathers them. A trainer that samples any other way trains but
        cannot be graded; the contract test (tests/contracts/test_sampling_contract.py) fails for
        it.

        Args:
            rates: (n, 1) per-node Poisson sampling rates, or None for fixed-size batches.
            batch_size: the fixed batch size (ignored with `rates`).

        Returns:
            x (n, k, C, H, W), y (n, k), mask (n, k): k = B for fixed batches (padding masked
            where |D_i| < B), the largest realised Poisson batch (>= 1) otherwise.
        """
        gen = self.streams.get("batch")
        if rates is not None:
            slots, mask = self.data.poisson(rates, gen)  # (n, k)
        else:
            slots, mask = self.data.sample(batch_size or self.run.batch_size, gen)  # (n, B)
        self.truth.record(t, slots, mask)
        x, y = self.data.gather(slots)
        return x, y, mask

    def draw_epoch(self, t: int) -> tuple[Tensor, Tensor]:
        """Round t's pass over every member (a local epoch), recorded as ground truth.

        Returns:
            perm (n, M): each node's members in a random order, padding slots last; members
            (n, M) bool: the slots of real members whose data this process holds. The caller
            gathers `perm` in chunks (`data.gather`); every member is recorded as used.
        """
        data = self.data
        n, m = data.y.shape
        keys = torch.rand(n, m, generator=self.streams.get("batch"), device=data.y.device)
        perm = keys.masked_fill(data.arange_mask(), 2.0).argsort(dim=1)  # (n, M) padding last
        pos = torch.arange(m, device=data.y.device)  # (M,)
        members = (pos[None] < data.counts[:, None]) & data.held_rows()  # (n, M)
        self.truth.record(t, perm, members)
        return perm, members


class Trainer(abc.ABC):
    """A decentralized learning algorithm: one round = local step -> messages out -> combine.

    The whole contract is declared here; the contract tests (tests/contracts/: the defense
    contract, sampling, DP self-check, plan-is-the-noise) and tests/distributed/ check it for
    every registered defense.

    Required:

    | member | what |
    |---|---|
    | `Config` | a frozen dataclass; every setting the paper leaves open a field with a default |
    | `kinds` | every message kind it sends (`MessageKind`, with `covered` / `data_dependent`) |
    | `round(t)` | one round for all nodes, state stacked (n, d), batches drawn only through |
    |  | `ctx.draw` / `ctx.draw_epoch` / `sample_batch`, payloads sent only through `ctx.bus` |
    | `models()` | (n, d) the models evaluated |

    Declared with defaults (override as the algorithm needs):

    | member | default | what it enables |
    |---|---|---|
    | `mixing` | "column" | push-sum ("column") or gossip ("doubly") |
    | `private` | False | a DP defense: ε grid, calibration, the privacy verdicts |
    | `privacy()` | [] | per-node ε reports composed from the noise schedule it draws |
    | `calibration(cfg)` | NotApplicable | private: its calibrations and default accountant |
    | `plan_settings(cfg)` | none | private: what a plan request may set |
    | `privacy_plan(cfg, req, mode)` | NotApplicable | private: the plan it draws its noise |
    |  |  | from, for a `PlanRequest` (`privbench account`, the mechanism audit) |
    | `clip_bound(cfg)` | none, why | the per-sample clip bound the canary audit scales to |
    | `default_topology` | "random_out" | the graph of a run with topology "auto" |
    | `samples_in(t)` | True | rounds that draw no data (the sampling contract) |
    | `structure(fm, cfg)` | sizes | what part of the model it sends (fingerprints) |
    | `gradient_views(obs, victim, rounds)` | NotApplicable | gradient inversion and |
    |  |  | message-level membership attacks |
    | `view_lookback` | 1 | rounds before t that `gradient_views` reads |
    | `all_views(obs, victim)` | None | views derived jointly for all rounds |
    | `linear_gossip(obs)` | None | gossip inversion beyond the neighbours |
    | `release_noise()` | None | network DP in the leakage map, the mechanism audit's ε |
    | `sensitivity_trace()` | None | the estimated vs real sensitivity check (report) |

    The README ("Extending") has a complete minimal example, tested from its text.
    """

    Config: ClassVar[type]
    kinds: ClassVar[tuple[MessageKind, ...]]
    mixing: ClassVar[str] = "column"  # "column" (push-sum) or "doubly" (gossip)
    default_topology: ClassVar[str] = "random_out"  # the graph of a run with topology "auto"
    private: ClassVar[bool] = False
    # rounds before t whose messages `gradient_views` reads for round t (x_i^t comes from round
    # t - 1's messages; ADP-VRSGP's gradient fusion also unmixes round t - 1's release: 2)
    view_lookback: ClassVar[int] = 1

    def __init__(self, cfg: Any, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    @classmethod
    def structure(cls, fm: FlatModel, cfg: Any) -> JSONObject:
        """What the code builds from a configuration, beyond the configuration: the model's
        parameter count and its layers' sizes (input side first, as a split counts them).
        A trainer that sends only part of the model adds how much it sends. An audit cell's
        fingerprint and a reproduction line hold it, so a code change that makes another model
        or split of the same configuration is caught on resume or merge, not mixed in."""
        sizes = [int(fm.slice_of(layer).sum()) for layer in fm.layers]
        return {"parameters": fm.d, "layers": sizes}

    def samples_in(self, t: int) -> bool:
        """Whether round t draws data (True for every round of a one-step-per-round trainer;
        MUFFLIATO's gossip-only rounds do not): the sampling contract checks it."""
        return True

    def init_params(self) -> Tensor:
        """(n, d) identical initial models (a shared, public initialisation)."""
        x0 = self.ctx.fm.init(self.ctx.streams.fresh("init", device="cpu")).to(self.ctx.device)
        return x0.expand(self.ctx.n, -1).clone()

    def sample_batch(self, t: int) -> tuple[Tensor, Tensor, Tensor]:
        """Round t's uniform mini-batches for every node, recorded as ground truth.

        Returns:
            x (n, B, C, H, W), y (n, B), mask (n, B).
        """
        return self.ctx.draw(t, batch_size=self.ctx.run.batch_size)

    @abc.abstractmethod
    def round(self, t: int) -> None:
        """Run round t for all nodes."""

    @abc.abstractmethod
    def models(self) -> Tensor:
        """(n, d) the nodes' current models as they would be evaluated (de-biased for push-sum)."""

    @classmethod
    def calibration(cls, cfg: Any) -> Calibration:
        """How a private defense calibrates its noise (`privbench.engine.privacy.Calibration`).

        Raises:
            NotApplicable: the defense adds no noise (the default).
        """
        raise NotApplicable(f"{cls.__name__} adds no noise: it has no calibration")

    @classmethod
    def plan_settings(cls, cfg: Any) -> PlanSettings:
        """What a `PlanRequest` may set of this defense's plan (default: nothing)."""
        return PlanSettings()

    @classmethod
    def privacy_plan(cls, cfg: Any, req: PlanRequest, mode: str) -> PrivacyPlan:
        """The noise this defense draws for `req` and the epsilon both modes give it, with the
        noise calibrated by `mode` (one of `calibration(cfg).modes`): the same plan its trainer
        calibrates from, for the config `cfg`.

        Raises:
            NotApplicable: the defense adds no noise (the default).
        """
        raise NotApplicable(f"{cls.__name__} adds no noise: it has no privacy plan")

    @classmethod
    def clip_bound(cls, cfg: Any) -> ClipBound:
        """The per-sample clip bound the defense claims for the config `cfg`, or why it has
        none (the default: none)."""
        return ClipBound(None, f"{cls.__name__} declares no clip bound")

    def privacy(self) -> list[JSONObject]:
        """Per-node ε reports (empty for non-private trainers): each an
        `EpsilonReport.to_dict()` with its node, reading and the defense's own fields (the
        noise, the sample rate, ...), as results.json holds them."""
        return []

    @classmethod
    def gradient_views(cls, obs: Any, victim: int, rounds: list[int],
                       **options: Any) -> list[Any]:
        """What an observer derives of the victim's released gradient in each of `rounds`: a
        list of `privbench.threat.GradientView` from the `Observation` `obs` (the message
        itself, a difference of parameter messages over the public step size, or de-momentumized
        momentum messages).

        Raises:
            NotApplicable: the defense derives no view (the default), or the threat model does
                not observe what the view needs; the attacks then say "not applicable".
        """
        raise NotApplicable(f"defense {obs.defense!r} provides no gradient views")

    @classmethod
    def all_views(cls, obs: Any, victim: int) -> list[Any] | None:
        """Every gradient view of the victim at once, where a source derives them jointly (gossip
        inversion solves all rounds together); None (the default): ask `gradient_views` round by
        round."""
        return None

    @classmethod
    def linear_gossip(cls, obs: Any) -> Any | None:
        """The linear system relating a gossip's releases over rounds
        (`privbench.threat.gossip_inversion.LinearGossip`), which gossip inversion solves for a
        victim beyond the observers' neighbours; None (the default): the messages are not a
        linear gossip of the releases (compressed, per-edge or partial)."""
        return None

    def release_noise(self) -> np.ndarray | None:
        """(T, n) the noise multiplier of every node's release in every round, read by network
        DP and the mechanism audit; None (the default): no Gaussian release per round."""
        return None

    def sensitivity_trace(self) -> RoundTrace | None:
        """Per round, a data-dependent sensitivity estimate vs its real value (`S_est`,
        `S_real`, `sync` lists) for the report's check; None (the default): the noise does not
        rest on an estimate."""
        return None


def node_models(trainer: Trainer) -> Tensor:
    """(n, d) every node's current model, each row from the rank that runs the node."""
    return trainer.ctx.comm.gather_rows(trainer.models())


def provides(cls: type, member: str) -> bool:
    """Whether a trainer class provides an optional member of the contract itself (not
    `Trainer`'s default), e.g. `provides(cls, "gradient_views")`."""
    def code(owner: type) -> Any:
        attr = getattr(owner, member)
        return getattr(attr, "__func__", attr)

    return code(cls) is not code(Trainer)
