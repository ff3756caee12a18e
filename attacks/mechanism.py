"""The mechanism audit's configuration: the noise, sampling and sensitivity a run really drew,
measured against its ledger, and the ε they compose to (`privbench.audit.mechanism`).

Not an attack on messages: an auditor that holds the run (its state, ground truth and ledger)
replays audited rounds with the noise off and with one sample removed or made extreme, so it
needs no model training beyond those replays. `privbench attack` runs it through
`privbench.audit.mechanism.audit_mechanism`; `privbench check` reads it with the policy rules
`max_measured_ratio`, `require_mechanism` and `require_sampling_rate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from privbench.audit.attack import Attack
from privbench.audit.mechanism_replay import MechanismSettings
from privbench.errors import ConfigError
from privbench.registry import ATTACKS


@dataclass(frozen=True)
class MechanismConfig:
    """Attributes:
    rounds: audited rounds, spread over the run (each replayed three or four times); at least
        the number of nodes, so that every node is probed.
    level: two-sided error probability of each interval (noise scale, sampling rate).
    runs: independent runs audited (seeds seed, seed + 1, ...): randomized response's flip
        rate is pooled over all of them, for power where one run's flips cannot resolve the
        claim; each further run costs one more audit.
    """

    rounds: int = 8
    level: float = 1e-5
    runs: int = 1

    def __post_init__(self) -> None:
        if self.rounds < 2:
            raise ConfigError(f"mechanism.rounds must be >= 2, got {self.rounds}")
        if not 0 < self.level < 1:
            raise ConfigError(f"mechanism.level must be in (0, 1), got {self.level}")
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise ConfigError(f"mechanism.runs must be an integer >= 1, got {self.runs!r}")

    def settings(self) -> MechanismSettings:
        """The audit's settings."""
        return MechanismSettings(rounds=self.rounds, level=self.level, runs=self.runs)


@ATTACKS.register("mechanism")
class MechanismAudit(Attack):
    """The mechanism audit's configuration; run by the sweep (it replays rounds)."""

    Config = MechanismConfig
    kind = "mechanism"
    needs = frozenset({"retrain"})
