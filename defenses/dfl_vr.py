"""DFL+VR: DeFL-VP's D-PSGD baseline with exchanged control variates (variance reduction) only.

Baseline of Xiu et al., "DeFL-VP: Decentralized Federated Learning with Variance Reduction and
Differential Privacy", 2026, Table 1 (VR only, no RR, no compression: a choice of this
implementation; Sec. 5.2's prose suggests RR, but its accuracy is below both ablations that add
RR or compression to VR): y_i^t = v_i^t = g_i^t - h_i^t + h̄_i^t (Eq. 11) enters Eq. 17 with
eta = local_lr. Not private.

A thin alias of `defenses/defl_vp.py` with dp=none and compressor=none: exactly one module (VR)
added to D-PSGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from defenses.defl_vp import DeFLVP, DeFLVPConfig, message_kinds
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DFLVRConfig(DeFLVPConfig):
    """DeFL-VP config with DP and compression off (the paper's DFL+VR row)."""

    dp: Literal["rr", "sign", "none"] = "none"
    compressor: Literal["rand_k", "none"] = "none"


@DEFENSES.register("dfl_vr")
class DFLVR(DeFLVP):
    """DFL+VR (DeFL-VP paper, Table 1), non-private."""

    Config = DFLVRConfig
    kinds = message_kinds(DFLVRConfig())
    private = False
