"""`EpsilonReport`: the only form in which privbench states an epsilon.

Every reported epsilon carries delta, the accountant, the mode
(`paper` formula or `calibrated` rigorous accountant), the unit of privacy and the message kinds
it does not cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from privbench.accounting.validation import MODES, SAMPLINGS, UNITS, check_choice
from privbench.errors import ConfigError


class ApproximateAccountingWarning(UserWarning):
    """Emitted when an epsilon comes from an approximation that is not an upper bound.

    The mu-GDP central-limit-theorem composition used by Dyn-D2P (its Prop. 3, eq. (6)) is
    asymptotic and can under-report epsilon; reports computed with it set `approximate=True` too.
    """


class ReportDict(TypedDict):
    """An `EpsilonReport` as JSON (`EpsilonReport.to_dict`)."""

    epsilon: float | str
    delta: float
    accountant: str
    mode: str
    unit: str
    uncovered: list[str]
    approximate: bool
    note: str
    sampling: str


@dataclass(frozen=True)
class EpsilonReport:
    """One (epsilon, delta) statement with everything needed to read it honestly.

    Attributes:
        epsilon: the privacy loss (may be `math.inf`).
        delta: the delta it holds at (0.0 for pure-epsilon statements).
        accountant: how it was computed ("pld", "rdp", "gdp_clt", "basic", "advanced",
            "pld+basic", "closed-form", ...).
        mode: "paper" (the paper's own formula) or "calibrated" (a rigorous accountant).
        unit: "sample-level" (one record of a node's local data) or "node-level" (a whole node).
        uncovered: message kinds that the statement does not cover (data-dependent leaks).
        approximate: True when the number is an approximation, not an upper bound.
        note: one free-text line (reading of the paper, caveats).
        sampling: the sampling model the number assumes: "poisson" (add/remove-one,
            sensitivity C), "fixed_without_replacement" (replace-one, sensitivity 2C) or "none"
            (no subsampling amplification: pure-epsilon mechanisms on every round's message).
    """

    epsilon: float
    delta: float
    accountant: str
    mode: str
    unit: str
    uncovered: tuple[str, ...] = ()
    approximate: bool = False
    note: str = ""
    sampling: str = "none"

    def __post_init__(self) -> None:
        check_choice(self.mode, "mode", MODES)
        check_choice(self.unit, "unit", UNITS)
        check_choice(self.sampling, "sampling", ("none", *SAMPLINGS))
        if math.isnan(self.epsilon) or self.epsilon < 0:
            raise ConfigError(f"epsilon must be >= 0, got {self.epsilon!r}")
        if not 0 <= self.delta < 1:
            raise ConfigError(f"delta must be in [0, 1), got {self.delta!r}")
        object.__setattr__(self, "uncovered", tuple(self.uncovered))

    def to_dict(self) -> ReportDict:
        """A JSON-ready dict (infinite epsilon becomes the string "inf")."""
        return {
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else "inf",
            "delta": self.delta,
            "accountant": self.accountant,
            "mode": self.mode,
            "unit": self.unit,
            "uncovered": list(self.uncovered),
            "approximate": self.approximate,
            "note": self.note,
            "sampling": self.sampling,
        }
