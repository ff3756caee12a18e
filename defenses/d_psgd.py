"""D-PSGD: decentralized parallel SGD by gossip (non-private baseline).

Lian, Zhang, Zhang, Hsieh, Zhang, Liu, "Can Decentralized Algorithms Outperform Centralized
Algorithms?", NeurIPS 2017, Algorithm 1, on an undirected graph with a doubly-stochastic W:

    x_i^{k+1} = sum_j W_ij x_j^k - lr * grad f_i(x_i^k)

Message: `model` (x_i^k, broadcast to the neighbours), not protected.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from privbench.engine import Context, Trainer, batch_grads
from privbench.messages import MessageKind
from privbench.mixing import Mixer, gossip
from privbench.registry import DEFENSES


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
