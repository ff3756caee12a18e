"""D-PSGD+RR: DeFL-VP's D-PSGD baseline with sign randomized response (no VR, no compression).

Baseline of Xiu et al., "DeFL-VP: Decentralized Federated Learning with Variance Reduction and
Differential Privacy", 2026, Tables 1-2 (the DeFL-VP paper): y_i^t = RR(sign(g_i^t), eps) /
(2p - 1) enters Eq. 17 with step eta_sign; g_i^t is the G2 local-epoch pseudo-gradient.

A thin alias of `defenses/defl_vp.py` (same trainer, same messages, same accounting) with
vr=false and compressor=none: exactly one module (RR) added to D-PSGD (a choice of this
implementation: every baseline adds or removes one module). Every DeFL-VP
switch still applies (`--set defense.<field>=<value>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from defenses.defl_vp import DeFLVP, DeFLVPConfig, message_kinds
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DPSGDRRConfig(DeFLVPConfig):
    """DeFL-VP config with VR and compression off (the paper's D-PSGD+RR row)."""

    vr: bool = False
    compressor: Literal["rand_k", "none"] = "none"


@DEFENSES.register("d_psgd_rr")
class DPSGDRR(DeFLVP):
    """D-PSGD+RR (DeFL-VP paper, Tables 1-2)."""

    Config = DPSGDRRConfig
    kinds = message_kinds(DPSGDRRConfig())
