"""Const-D2P (Alg. 5, baseline): constant clip bound C_bar and budget mu_bar (eq. 9).

A thin alias of `dyn_d2p` with `variant="const"` (Zhu et al., "Dyn-D2P: Dynamic Differentially
Private Decentralized Learning with Provable Utility Guarantee", Sec. 3 and Appendix D), so
that the audit grid and `privbench train --defense const_d2p` can name the variant directly. Every
field, choice and deviation is documented in `defenses/dyn_d2p.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from defenses.dyn_d2p import DynD2P, DynD2PConfig
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class ConstD2PConfig(DynD2PConfig):
    """`DynD2PConfig` with variant "const"."""

    variant: str = "const"


@DEFENSES.register("const_d2p")
class ConstD2P(DynD2P):
    """Const-D2P (Alg. 5, baseline)."""

    Config = ConstD2PConfig
