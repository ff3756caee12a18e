"""PartPSP: partial communication + DPPS for non-convex optimisation (Algorithm 2).

Zhou, Xue, Chen, "Differentially Private Perturbed Push-Sum Protocol and Its Application in
Non-Convex Optimization" (2025), Algorithm 2, Eqs. 5, 7-10, 22-25
(algorithm), Sec. 5.4 (split), Sec. 3.3 (synchronization interval), Sec. 4.1 (privacy).

The model is split into local parameters l_i (plain SGD, never sent, never noised) and shared
parameters s_i (push-summed with DPPS). The mechanism, the trainer and every choice/deviation live
once in `defenses/dpps.py` (whose key `dpps` is the all-shared SGP-DP baseline); this module only
changes the default split to the paper's PartPSP-1 (Sec. 5.4): the model's first layer is shared
(the input layer Linear(D->10) of `psp_mlp`; a ResNet's first convolutional block, the stem with
stage 1). `--set defense.shared_layers=2` gives PartPSP-2 (Linear(D->10) and Linear(10->D) shared; a
ResNet's stem, stage 1 and stage 2), `shared_prefixes` any other split.

Messages (Algorithm 1): `shared` (noisy shared numerator, covered), `weight` (push-sum weight,
public), `sensitivity` (S_i of Eq. 22, NOT covered: it leaks gamma_s ||g_i,s||_1). The local part
never appears in any message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from defenses.dpps import DPPS, DPPSConfig
from defenses.dpps.plan import plan_partpsp
from privbench.engine.privacy import PlanFunction
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class PartPSPConfig(DPPSConfig):
    """PartPSP hyper-parameters: `DPPSConfig` with the PartPSP-1 default split (Sec. 5.4).

    Attributes:
        shared_layers: the model's input-side layers shared: 1 = PartPSP-1 (default),
            2 = PartPSP-2, -1 = all (SGP-DP).
    """

    shared_layers: int = 1


@DEFENSES.register("partpsp")
class PartPSP(DPPS):
    """PartPSP (Algorithm 2): local SGD step, L1-clipped shared gradient, DPPS on the shared."""

    Config = PartPSPConfig
    plan_function: ClassVar[PlanFunction] = staticmethod(plan_partpsp)  # its accounting
