"""DP-DFedSAM: DFedSAM's sharpness-aware local step, made sample-level DP, inside push-sum.

ADP-VRSGP's DFedSAM baseline (Wu et al., arXiv:2510.20157, Sec. 6 and Table 2, ref. [47]: Shi et
al., "Improving the Model Consistency of Decentralized Federated Learning", ICML 2023; the paper's
one line, "SAM flat local models robust to Gaussian noise", also fits DP-FedSAM, Shi et al., CVPR
2023), ported as this implementation's rule for ADP-VRSGP's baselines (the paper does not say how
they were ported): run over the same SGP gossip, keep its own mechanism, use the same
(epsilon, delta) accountant. DFedSAM's local step is SAM (Foret et al.,
ICLR 2021), w <- w - lr grad f(w + rho grad f(w) / ||grad f(w)||), whose ascent gradient is a
second look at the batch. Made DP at the sample level as DP-SAT does (Park et al.,
"Differentially Private Sharpness-Aware Training", ICML 2023, Alg. 2): the ascent direction is
the node's previous *privatized* gradient, so each round releases one Gaussian-mechanism
gradient and the accounting is DP-SGP's, unchanged. Each round, for every node i at once:

    e_i^t = rho gbar_i^{t-1} / ||gbar_i^{t-1}||   (e_i^0 = 0; post-processing of a release)
    B_i^t ~ Poisson(q_i) over D_i,  q_i = |B| / |D_i|
    gbar_i^t = (sum_b clip(grad f(z_i^t + e_i^t; b), G) + sigma_i G u_i^t) / |B|,  u ~ N(0, I_d)
    x_i^{t+1/2} = x_i^t - lr gbar_i^t
    x^{t+1} = P^t x^{t+1/2},  w^{t+1} = P^t w^t      (push-sum, as DP-SGP, `defenses/dp_sgp.py`)

sigma_i is calibrated per node with DP-SGP's plan ("dp_sgp"): the same noise for the same
(epsilon, delta, q, T), so the two rows differ only in where the gradient is taken. rho = 0 is
DP-SGP exactly (tested). Messages: push-sum `model` and `weight`, covered by post-processing.

Port choices (the paper states none): one local step per round (DFedSAM takes K local SAM steps
per communication round; K > 1 would compose K T releases, more noise per step for the same
epsilon, and a different comparison than the table's 1,000 releases per node for every row);
rho a config option, default 0.05 (SAM's), tuned with the step on validation for the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from defenses._plans import model_message_kinds
from defenses.dp_sgp import DPSGP, DPSGPConfig
from privbench.errors import ConfigError
from privbench.registry import DEFENSES
from privbench.threat.observation import Observation
from privbench.threat.rebuild import push_sum_release


@dataclass(frozen=True)
class DPDFedSAMConfig(DPSGPConfig):
    """DP-SGP's hyper-parameters and the SAM radius.

    Attributes:
        rho: SAM perturbation radius (L2, in parameter space); 0 turns DP-DFedSAM into DP-SGP.
    """

    rho: float = 0.05

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and self.rho >= 0):
            raise ConfigError(f"dp_dfedsam rho must be a finite number >= 0, got {self.rho}")


def sam_shift(release: Tensor, rho: float) -> Tensor:
    """(n, d) rho g / ||g|| for each row g of `release` (n, d); zero where a row is zero."""
    norm = release.norm(dim=1, keepdim=True)  # (n, 1)
    return release * (rho / norm.clamp_min(1e-30)) * (norm > 0)


@DEFENSES.register("dp_dfedsam")
class DPDFedSAM(DPSGP):
    """DP-SGP whose gradient is taken at the SAM point of the node's previous release."""

    Config = DPDFedSAMConfig
    kinds = model_message_kinds("DP-SAT (sharpness-aware DP-SGD)")
    view_lookback = 2  # a view of round t needs round t - 1's release (from round t - 2's messages)
    # DP-SGP's linear gossip of the releases, so network-DP accounting over the messages is
    # exact; a graph-level inversion evaluates release k at the pre-mix z_i^k, without the SAM
    # shift of norm rho (not modelled there)
    release = "gbar_i^k = (sum_j clip(g_j(z + rho e)) + N) / B"
    view_source = "(x_i^t - x_i^{t+1/2}) / lr at the SAM point"

    def gradient_point(self, z: Tensor) -> Tensor:
        """(n, d) z + rho gbar^{t-1} / ||gbar^{t-1}|| (z in round 0: nothing released yet)."""
        if self.last_release is None or self.cfg.rho == 0:
            return z
        return z + sam_shift(self.last_release, self.cfg.rho)

    @classmethod
    def view_point(cls, obs: Observation, victim: int, t: int, z: Tensor) -> Tensor:
        """(d,) z_i^t + rho gbar_i^{t-1} / ||gbar_i^{t-1}||, the round t-1 release rebuilt from
        the messages like the round-t one (z_i^0 in round 0).

        Raises:
            NotApplicable: when the threat model cannot rebuild the round t-1 release (see
                `push_sum_release`).
        """
        rho = float(obs.defense_cfg.rho)
        if t == 0 or rho == 0:
            return z
        prev, _ = push_sum_release(obs, victim, t - 1, obs.run.lr)
        return z + sam_shift(prev[None], rho)[0]
