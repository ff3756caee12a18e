"""D-PSGD: decentralized parallel SGD by gossip (non-private baseline).

Lian, Zhang, Zhang, Hsieh, Zhang, Liu, "Can Decentralized Algorithms Outperform Centralized
Algorithms?", NeurIPS 2017, Algorithm 1, on an undirected graph with a doubly-stochastic W:

    x_i^{k+1} = sum_j W_ij x_j^k - lr * grad f_i(x_i^k)

Message: `model` (x_i^k, broadcast to the neighbours), not protected.

Gradient view: from round k's models of the victim and its neighbours and the victim's round-k+1
model, g_i^k = (sum_j W_ij x_j^k - x_i^{k+1}) / lr at x_i^k (needs every term observed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, gossip
from privbench.engine.trainer import Context, Trainer
from privbench.errors import NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.gossip_inversion import LinearGossip, gossip_spec
from privbench.threat.observation import GradientView, Observation


@dataclass(frozen=True)
class DPSGDConfig:
    """D-PSGD hyper-parameters beyond the run's lr and batch size.

    Attributes:
        weight_decay: L2 regularisation added to the gradient.
    """

    weight_decay: float = 0.0


@DEFENSES.register("d_psgd")
class DPSGD(Trainer):
    """Non-private gossip SGD on an undirected graph."""

    Config = DPSGDConfig
    kinds = (MessageKind("model", covered=False, description="x_i^k, the current model"),)
    mixing = "doubly"

    def __init__(self, cfg: DPSGDConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.mixer = Mixer(ctx.topology, self.mixing, ctx.device)
        self.x = self.init_params()  # (n, d)

    def models(self) -> Tensor:
        """(n, d) current models."""
        return self.x

    def round(self, t: int) -> None:
        """Gradient at x_i^k, gossip of x^k, then the step."""
        x, y, mask = self.sample_batch(t)
        g = batch_grads(self.ctx.fm, self.x, x, y, mask) + self.cfg.weight_decay * self.x
        self.x = gossip(self.ctx.bus, self.mixer, t, self.x) - self.ctx.run.lr * g

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{k+1} = W x^k - lr g^k: gossip of the models, release k computed at x_i^k."""
        return gossip_spec(obs, "doubly", lag=1, evaluated_at="message",
                           release="g_i^k = grad f_i(x_i^k)")

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The victim's batch gradient (sum_j W_ij x_j^t - x_i^{t+1}) / lr at x_i^t.

        Raises:
            NotApplicable: when a needed model message is not observed.
        """
        views = []
        for t in rounds:
            w = obs.topology.mixing(t, "doubly")
            now, nxt = obs.log.get(t, "model"), obs.log.get(t + 1, "model")
            if now is None or nxt is None:
                raise NotApplicable(f"round {t} and {t + 1} model messages are not recorded")
            x_next = nxt.sent_by(victim)
            terms = [(j, now.sent_by(j)) for j in torch.nonzero(w[victim]).flatten().tolist()]
            missing = [j for j, x in terms if x is None]
            if x_next is None or missing:
                who = missing or [victim]
                raise NotApplicable(f"models of node(s) {who} in round {t} or {t + 1} are not "
                                    f"observed by the {obs.threat.kind} threat model")
            mixed = sum(w[victim, j] * x for j, x in terms)
            params = dict(terms)[victim]
            views.append(GradientView(victim, t, params, (mixed - x_next) / obs.run.lr,
                                      "gradient", None, obs.run.batch_size,
                                      "(sum_j W_ij x_j^t - x_i^{t+1}) / lr"))
        return views
