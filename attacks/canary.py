"""White-box gradient-canary audit (one training run): an empirical ε lower bound with power.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023 (Theorem 3.1,
§6 white-box) with the Dirac gradient canaries of Nasr et al., "Tight Auditing of Differentially
Private Machine Learning", USENIX Security 2023. m canaries whose per-sample gradient the auditor
controls are each added to the victim's data with probability 1/2; the defense is trained once
more with them; each canary is guessed "in" / "out" from what the threat model observes of the
victim's messages; the guesses give the one-run ε lower bound (`privbench.metrics.audit`).

Unlike a membership attack, this audit trains: `privbench attack` runs it through
`privbench.membership.canary_audit(kind="gradient")` (the only place the canaries are built, the
run retrained and the bound computed). With m = 1000 and k+ = m / 5 "in" guesses (no "out"
guesses: an included canary the sampling never drew looks excluded) a perfect guesser certifies
ε ≈ 4.2 at δ = 1e-5 (the `cap` reported beside the bound), so a claim of ε = 1
that leaks more than it says can be caught, which the Clopper-Pearson bound over one victim's
few held-out samples cannot (its cap is 0.70 with 20 / 20 samples).
"""

from __future__ import annotations

from dataclasses import dataclass

from privbench.errors import ConfigError
from privbench.registry import ATTACKS


@dataclass(frozen=True)
class CanaryConfig:
    """Attributes:
    canaries: m, the number of canaries (each included with probability 1/2).
    norm_factor: canary gradient norm / the defense's claimed clip bound (>= 1).
    """

    canaries: int = 1000
    norm_factor: float = 10.0

    def __post_init__(self) -> None:
        if self.canaries < 2:
            raise ConfigError(f"canary.canaries must be >= 2, got {self.canaries}")
        if not self.norm_factor >= 1:
            raise ConfigError(f"canary.norm_factor must be >= 1, got {self.norm_factor}")


@ATTACKS.register("canary")
class CanaryAudit:
    """The one-run white-box audit's configuration; run by the sweep (it trains)."""

    Config = CanaryConfig
    level = "training"

    def __init__(self, cfg: CanaryConfig | None = None) -> None:
        self.cfg = cfg or CanaryConfig()
