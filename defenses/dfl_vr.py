"""DFL+VR: the card's D-PSGD baseline with exchanged control variates (variance reduction) only.

Baseline of Xiu et al., "DeFL-VP: Decentralized Federated Learning with Variance Reduction and
Differential Privacy", 2026, Table 1 (card-defl-vp.md §5.1, §8 A19: VR only, no RR, no
compression): y_i^t = v_i^t = g_i^t - h_i^t + h̄_i^t (Eq. 11) enters Eq. 17 with
eta = local_lr. Not private.

A thin alias of `defenses/defl_vp.py` with dp=none and compressor=none: exactly one module (VR)
added to the card's D-PSGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from defenses.defl_vp import DeFLVP, DeFLVPConfig, _kinds
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DFLVRConfig(DeFLVPConfig):
    """DeFL-VP config with DP and compression off (card §5.1 row DFL+VR)."""

    dp: Literal["rr", "sign", "none"] = "none"
    compressor: Literal["rand_k", "none"] = "none"


@DEFENSES.register("dfl_vr")
class DFLVR(DeFLVP):
    """DFL+VR (card §5.1), non-private."""

    Config = DFLVRConfig
    kinds = _kinds(DFLVRConfig())
    private = False
