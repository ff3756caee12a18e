"""D-PSGD: decentralized parallel SGD by gossip (non-private baseline).

Lian, Zhang, Zhang, Hsieh, Zhang, Liu, "Can Decentralized Algorithms Outperform Centralized
Algorithms?", NeurIPS 2017, Algorithm 1, on an undirected graph with a doubly-stochastic W:

    x_i^{k+1} = sum_j W_ij x_j^k - lr * grad f_i(x_i^k)

Message: `model` (x_i^k, broadcast to the neighbours), not protected.

Gradient view: from round k's models of the victim and its neighbours and the victim's round-k+1
model, g_i^k = (sum_j W_ij x_j^k - x_i^{k+1}) / lr at x_i^k (needs every term observed).

Local steps (`local_steps` E, a choice of this implementation; 1 is Algorithm 1): the node takes
E SGD steps on its round-k batch from x_i^k (the local update of Geiping et al. 2020, Sec. 5:
several steps on one batch with a public step size and count) and steps by their sum,

    x_i^{k+1} = sum_j W_ij x_j^k - lr sum_{e<E} grad f_i(x̂_e),  x̂_0 = x_i^k,
    x̂_{e+1} = x̂_e - lr grad f_i(x̂_e),

so the view is the sum of the E gradients, with the steps the attacker knows
(`privbench.threat.observation.LocalSteps`) for a multi-step inversion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, gossip
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.gossip_inversion import LinearGossip, gossip_spec
from privbench.threat.observation import GradientView, LocalSteps, Observation


@dataclass(frozen=True)
class DPSGDConfig:
    """D-PSGD hyper-parameters beyond the run's lr and batch size.

    Attributes:
        weight_decay: L2 regularisation added to the gradient.
        local_steps: SGD steps on the round's batch before the gossip step (1: Algorithm 1).
    """

    weight_decay: float = 0.0
    local_steps: int = 1

    def __post_init__(self) -> None:
        if self.local_steps < 1:
            raise ConfigError(f"local_steps must be >= 1, got {self.local_steps}")


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
        lr, wd = self.ctx.run.lr, self.cfg.weight_decay
        step, local = torch.zeros_like(self.x), self.x  # (n, d) the gradients summed, x̂_e
        for _ in range(self.cfg.local_steps):  # every step on the round's batch
            g = batch_grads(self.ctx.fm, local, x, y, mask) + wd * local  # (n, d)
            step, local = step + g, local - lr * g
        self.x = gossip(self.ctx.bus, self.mixer, t, self.x) - lr * step

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{k+1} = W x^k - lr g^k: gossip of the models, release k computed at x_i^k."""
        return gossip_spec(obs, "doubly", lag=1, evaluated_at="message",
                           release="g_i^k = grad f_i(x_i^k)")

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The victim's batch gradient (sum_j W_ij x_j^t - x_i^{t+1}) / lr at x_i^t (with
        local steps: their gradients summed, the steps in the view's `local`).

        Raises:
            NotApplicable: when a needed model message is not observed.
        """
        local = _local_steps(obs)
        note = f" = the sum of {len(local.steps)} local steps' gradients" if local else ""
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
                                      "(sum_j W_ij x_j^t - x_i^{t+1}) / lr" + note,
                                      local_epoch=local is not None, local=local))
        return views


def _local_steps(obs: Observation) -> LocalSteps | None:
    """The E steps on one batch behind a view (None for E = 1: one batch's gradient)."""
    e, b = getattr(obs.defense_cfg, "local_steps", 1), obs.run.batch_size
    return LocalSteps(obs.run.lr, ((0, b),) * e, b, obs.run.lr,
                      weight_decay=obs.defense_cfg.weight_decay) if e > 1 else None
