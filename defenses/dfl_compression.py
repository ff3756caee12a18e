"""DFL+Compression: DeFL-VP's D-PSGD baseline with the unbiased rand-k compressor only.

Baseline of Xiu et al., "DeFL-VP: Decentralized Federated Learning with Variance Reduction and
Differential Privacy", 2026, Tables 1 and 5 (the DeFL-VP paper): y_i^t = C(g_i^t) with rand-k
(k = ceil(0.2 d); the paper asks only for an unbiased compressor, Eqs. 8-9) enters Eq. 17 with
eta = local_lr. Not private.

A thin alias of `defenses/defl_vp.py` with vr=false and dp=none: exactly one module
(compression) added to D-PSGD (a choice of this implementation: every baseline adds or removes
one module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from defenses.defl_vp import DeFLVP, DeFLVPConfig, message_kinds
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DFLCompressionConfig(DeFLVPConfig):
    """DeFL-VP config with VR and DP off (the paper's DFL+Compression row)."""

    vr: bool = False
    dp: Literal["rr", "sign", "none"] = "none"


@DEFENSES.register("dfl_compression")
class DFLCompression(DeFLVP):
    """DFL+Compression (DeFL-VP paper, Tables 1 and 5), non-private."""

    Config = DFLCompressionConfig
    kinds = message_kinds(DFLCompressionConfig())
    private = False
