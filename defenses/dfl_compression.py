"""DFL+Compression: the card's D-PSGD baseline with the unbiased rand-k compressor only.

Baseline of Xiu et al., "DeFL-VP: Decentralized Federated Learning with Variance Reduction and
Differential Privacy", 2026, Tables 1 and 5 (card-defl-vp.md §5.1): y_i^t = C(g_i^t) with rand-k
(k = ceil(0.2 d), card §1.6) enters Eq. 17 with eta = local_lr. Not private.

A thin alias of `defenses/defl_vp.py` with vr=false and dp=none: exactly one module
(compression) added to the card's D-PSGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from defenses.defl_vp import DeFLVP, DeFLVPConfig, _kinds
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DFLCompressionConfig(DeFLVPConfig):
    """DeFL-VP config with VR and DP off (card §5.1 row DFL+Compression)."""

    vr: bool = False
    dp: Literal["rr", "sign", "none"] = "none"


@DEFENSES.register("dfl_compression")
class DFLCompression(DeFLVP):
    """DFL+Compression (card §5.1), non-private."""

    Config = DFLCompressionConfig
    kinds = _kinds(DFLCompressionConfig())
    private = False
