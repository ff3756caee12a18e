"""Dyn[C]-D2P (Alg. 3): dynamic clip bound C_k, constant budget mu_bar (eq. 9).

A thin alias of `dyn_d2p` with `variant="dyn_c"` (Zhu et al., "Dyn-D2P: Dynamic Differentially
Private Decentralized Learning with Provable Utility Guarantee", Sec. 3 and Appendix D), so
that the audit grid and `privbench train --defense dyn_c_d2p` can name the variant directly. Every
field, choice and deviation is documented in `defenses/dyn_d2p.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from defenses.dyn_d2p import DynD2P, DynD2PConfig
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DynCD2PConfig(DynD2PConfig):
    """`DynD2PConfig` with variant "dyn_c"."""

    variant: str = "dyn_c"


@DEFENSES.register("dyn_c_d2p")
class DynCD2P(DynD2P):
    """Dyn[C]-D2P (Alg. 3)."""

    Config = DynCD2PConfig
