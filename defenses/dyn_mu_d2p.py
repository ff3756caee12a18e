"""Dyn[mu]-D2P (Alg. 4): constant clip bound C_bar, growing budget mu_k (eqs. 7, 8).

A thin alias of `dyn_d2p` with `variant="dyn_mu"` (Zhu et al., "Dyn-D2P: Dynamic Differentially
Private Decentralized Learning with Provable Utility Guarantee", Sec. 3 and Appendix D), so
that the audit grid and `privbench train --defense dyn_mu_d2p` can name the variant directly. Every
field, choice and deviation is documented in `defenses/dyn_d2p.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from defenses.dyn_d2p import DynD2P, DynD2PConfig
from privbench.registry import DEFENSES


@dataclass(frozen=True)
class DynMuD2PConfig(DynD2PConfig):
    """`DynD2PConfig` with variant "dyn_mu"."""

    variant: str = "dyn_mu"


@DEFENSES.register("dyn_mu_d2p")
class DynMuD2P(DynD2P):
    """Dyn[mu]-D2P (Alg. 4)."""

    Config = DynMuD2PConfig
