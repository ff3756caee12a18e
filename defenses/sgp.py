"""Stochastic Gradient Push (non-private baseline).

Assran, Loizou, Ballas, Rabbat, "Stochastic Gradient Push for Distributed Deep Learning",
ICML 2019, Algorithm 1: push-sum SGD on directed, time-varying graphs. Node i keeps a numerator
x_i and a weight w_i; each round

    z_i = x_i / w_i                         (de-biased model)
    x_i^{k+1/2} = x_i - lr * grad f_i(z_i)  (local step at the de-biased model)
    x_j^{k+1} = sum_i P_ji x_i^{k+1/2},  w_j^{k+1} = sum_i P_ji w_i
                                            (push-sum, P column-stochastic)

Messages (named as in every push-sum defense of this suite): `model` (P_ji x_i^{k+1/2}) and `weight`
(P_ji w_i). Neither is protected: this is the attackable baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.mixing import Mixer, push_sum
from privbench.engine.trainer import Context, Trainer
from privbench.errors import NotApplicable
from privbench.registry import DEFENSES
from privbench.threat.gossip_inversion import LinearGossip, gossip_spec
from privbench.threat.observation import GradientView, Observation
from privbench.threat.rebuild import push_sum_message_difference, push_sum_release


@dataclass(frozen=True)
class SGPConfig:
    """SGP hyper-parameters beyond the run's lr and batch size.

    Attributes:
        momentum: heavy-ball momentum on the local gradient (0 = plain SGD, as in Algorithm 1).
        weight_decay: L2 regularisation added to the gradient.
    """

    momentum: float = 0.0
    weight_decay: float = 0.0


@DEFENSES.register("sgp")
class SGP(Trainer):
    """Non-private push-sum SGD."""

    Config = SGPConfig
    kinds = (
        MessageKind("model", covered=False, description="P_ji * x_i^{k+1/2}, push-sum numerator"),
        MessageKind("weight", covered=False, data_dependent=False,
                    description="P_ji * w_i, push-sum weight"),
    )
    mixing = "column"

    def __init__(self, cfg: SGPConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.mixer = Mixer(ctx.topology, self.mixing, ctx.device)
        self.x = self.init_params()  # (n, d) numerators
        self.w = torch.ones(ctx.n, device=ctx.device)  # (n,) weights
        self.buf = torch.zeros_like(self.x)  # (n, d) momentum buffers

    def models(self) -> Tensor:
        """(n, d) de-biased models z = x / w."""
        return self.x / self.w[:, None]

    def round(self, t: int) -> None:
        """Local step at z, then push-sum."""
        z = self.models()
        x, y, mask = self.sample_batch(t)
        g = batch_grads(self.ctx.fm, z, x, y, mask) + self.cfg.weight_decay * z  # (n, d)
        self.buf = self.cfg.momentum * self.buf + g
        x_half = self.x - self.ctx.run.lr * self.buf
        self.x, self.w = push_sum(self.ctx.bus, self.mixer, t, x_half, self.w)

    @classmethod
    def linear_gossip(cls, obs: Observation) -> LinearGossip:
        """x^{k+1/2} = P x^{k-1/2} - lr m^k, m^k = g^k + beta m^{k-1}: push-sum of the numerators,
        release k computed at z_i^k = x_i^k / w_i^k."""
        return gossip_spec(obs, "column", lag=0, evaluated_at="premix",
                           release="g_i^k = grad f_i(z_i^k)", carry=obs.defense_cfg.momentum)

    @classmethod
    def gradient_views(cls, obs: Observation, victim: int, rounds: list[int]) -> list[GradientView]:
        """The victim's round-t batch gradient (x_i^t - x_i^{t+1/2}) / lr at z_i^t = x_i^t / w_i^t.

        Where the observer cannot rebuild x_i^t (a lone neighbour misses the other in-neighbours'
        messages), the difference of the victim's own consecutive observed messages instead
        (`push_sum_message_difference`: an estimate, mixed with its neighbours' share; without
        momentum only). Rounds where the victim's message is not observed are not applicable.

        With momentum m the released step is the buffer b_t = m b_{t-1} + g_t, so the gradient is
        de-momentumized: g_t = b_t - m b_{t-1} (needs round t-1 as well).

        Raises:
            NotApplicable: when the victim's pre-step model cannot be reconstructed.
        """
        lr, m = obs.run.lr, obs.defense_cfg.momentum

        def buffer(t: int) -> tuple[Tensor, Tensor]:
            return push_sum_release(obs, victim, t, lr)

        views = []
        for t in rounds:
            try:
                buf, z = buffer(t)
            except NotApplicable as exact_missing:
                views.append(_difference_view(obs, victim, t, lr, m, exact_missing))
                continue
            if m:
                buf = buf - m * buffer(t - 1)[0] if t > 0 else buf
            views.append(GradientView(victim, t, z, buf, "gradient", None, obs.run.batch_size,
                                      "(x_i^t - x_i^{t+1/2}) / lr, de-momentumized" if m else
                                      "(x_i^t - x_i^{t+1/2}) / lr"))
        return views


def _difference_view(obs: Observation, victim: int, t: int, lr: float, momentum: float,
                     exact_missing: NotApplicable) -> GradientView:
    """The message-difference estimate of round t (see `SGP.gradient_views`)."""
    if momentum:
        raise exact_missing
    g, at, s = push_sum_message_difference(obs, victim, t, lr)
    return GradientView(victim, t, at, g, "gradient", None, obs.run.batch_size,
                        f"w_i^t (u_{s} - u_t) / (lr (t - {s})), u = broadcast x_i^(r+1/2) / w_i^r "
                        "(includes the neighbours' mixing)", exact=False)
