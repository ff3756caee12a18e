"""White-box gradient-canary audit (one training run): ε lower bound, cap and estimate per node.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023 (Theorem 3.1,
§6 white-box) with the Dirac gradient canaries of Nasr et al., "Tight Auditing of Differentially
Private Machine Learning", USENIX Security 2023. Every node (or the one with the largest claim)
gets m canaries whose per-sample gradient the auditor controls, each included with probability
1/2 and drawn into the node's batches at the rate its sampler uses (its records keep the ledger's
rate); the defense is trained once more; the canaries are scored from what the threat model
around each node observes, all rounds jointly; the top and bottom scores are guessed "in" and
"out"; each node's bound is set against its own claim. `privbench.audit.canary_audit` has the
details.

Unlike a membership attack, this audit trains: `privbench attack` runs it through
`privbench.audit.canary_audit.gradient_canary_audit`. With m = 1000 canaries per node, k+ = k- = 100
(guess_fraction 0.2) and the Bonferroni level 0.05 / 6 of the quick preset's 6 nodes, a perfect
guesser certifies ε = 3.65 at δ = 1e-5 (the `empirical_epsilon_cap`), above the ε = 1 the
shipped policy gates. A claim of ε = 8 needs every canary guessed (guess_fraction = 1) and
m >= 12 978 on one audited node (`privbench.metrics.audit.canaries_for_cap`; with k+ = k- = m / 4
no m reaches 8: the 2 m δ term of the p-value grows with m). The quick preset's MLP has 17 226
coordinates, so that is `nodes = "worst"`, canaries = 13000, guess_fraction = 1: one training run
as for the default, measured at 39 s on 2 CPU cores against 12 s for 6 x 1000 canaries (scoring
13 000 canaries over 60 rounds; cap 8.001 against the claim 7.996).
"""

from __future__ import annotations

from dataclasses import dataclass

from privbench.audit.attack import Attack
from privbench.errors import ConfigError
from privbench.registry import ATTACKS


@dataclass(frozen=True)
class CanaryConfig:
    """Attributes:
    canaries: m, the number of canaries per audited node (each included with probability 1/2).
    norm_factor: canary gradient norm / the defense's claimed clip bound (>= 1).
    nodes: "all" (every node, each against its own claim) or "worst" (the node with the largest
        claim only: all m canaries on it).
    guess_fraction: share of each node's canaries guessed, half "in" (top scores), half "out"
        (bottom scores); the rest abstain. 1: every canary guessed (the largest cap).
    """

    canaries: int = 1000
    norm_factor: float = 10.0
    nodes: str = "all"
    guess_fraction: float = 0.2

    def __post_init__(self) -> None:
        if self.canaries < 2:
            raise ConfigError(f"canary.canaries must be >= 2, got {self.canaries}")
        if not self.norm_factor >= 1:
            raise ConfigError(f"canary.norm_factor must be >= 1, got {self.norm_factor}")
        if self.nodes not in ("all", "worst"):
            raise ConfigError(f"canary.nodes must be all or worst, got {self.nodes!r}")
        if not 0 < self.guess_fraction <= 1:
            raise ConfigError(f"canary.guess_fraction must be in (0, 1], got "
                              f"{self.guess_fraction}")


@ATTACKS.register("canary")
class CanaryAudit(Attack):
    """The one-run white-box audit's configuration; run by the sweep (it trains)."""

    Config = CanaryConfig
    kind = "canary"
    needs = frozenset({"retrain"})
