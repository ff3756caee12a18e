"""Privacy plans: the noise a defense uses for a target budget, and the epsilon both modes give it.

A defense's plan function (declared through its `Trainer.privacy_plan`) maps (epsilon, delta,
rounds, sample_rate, accountant) -> `PrivacyPlan`: the noise parameters the defense must use, and
the epsilon that BOTH modes assign to that noise (paper formula first, calibrated accountant
second, readings beyond those after). By default the noise is calibrated with the rigorous
accountant (`calibrate_with="calibrated"`); `calibrate_with="paper"` reproduces the paper's own
noise. One plan describes one node (every node has its own ledger; budgets are never summed).
Here: the plan record and what every plan function checks and assembles the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypedDict

import numpy as np

from privbench.accounting.report import EpsilonReport, ReportDict
from privbench.accounting.validation import (
    MODES,
    check_choice,
    check_count,
    check_delta,
    check_epsilon,
    check_sampling_rate,
)
from privbench.errors import ConfigError

GAUSSIAN_PLAN_ACCOUNTANTS = ("pld", "rdp")
PURE_PLAN_ACCOUNTANTS = ("pld", "rdp", "basic", "advanced", "laplace_pld")



class ScheduleSummary(TypedDict):
    """A plan's per-round schedule, summarised (`PrivacyPlan.to_dict`)."""

    unit: str
    first: float
    last: float
    min: float
    max: float
    rounds: int


class PlanDict(TypedDict):
    """A `PrivacyPlan` as JSON (`PrivacyPlan.to_dict`)."""

    defense: str
    noise: dict[str, float]
    reports: list[ReportDict]
    calibrated_with: str
    target: dict[str, float]
    rounds: int
    sample_rate: float
    accountant: str
    notes: list[str]
    schedule: ScheduleSummary | None


@dataclass(frozen=True)
class PrivacyPlan:
    """The noise a defense uses for a target budget, with the epsilon both modes assign to it.

    Attributes:
        defense: registry name of the defense.
        noise: noise parameters, name -> value (e.g. {"sigma": 1.1}, {"b": 0.002}).
        reports: paper report first, calibrated report second, further readings after.
        calibrated_with: "calibrated" or "paper": which formula produced `noise`.
        epsilon, delta, rounds, sample_rate, accountant: the request.
        notes: one-line caveats for the table / report.
        schedule: (rounds,) the per-round noise level the trainer draws, in `schedule_unit`
            (Gaussian plans: the noise multiplier z_t = noise std / sensitivity; pure plans: the
            per-round epsilon of the release). The reports are composed from exactly this
            schedule, so a trainer drawing from it reports the epsilon of what it drew.
        schedule_unit: what a schedule entry is.
    """

    defense: str
    noise: Mapping[str, float]
    reports: tuple[EpsilonReport, ...]
    calibrated_with: str
    epsilon: float
    delta: float
    rounds: int
    sample_rate: float
    accountant: str
    notes: tuple[str, ...] = field(default=())
    schedule: tuple[float, ...] = field(default=())
    schedule_unit: str = ""

    def __post_init__(self) -> None:
        noise = {str(k): float(v) for k, v in self.noise.items()}
        object.__setattr__(self, "noise", MappingProxyType(noise))
        object.__setattr__(self, "schedule", tuple(float(v) for v in self.schedule))
        if self.schedule and len(self.schedule) != self.rounds:
            raise ConfigError(f"a plan's schedule needs one entry per round ({self.rounds}), "
                              f"got {len(self.schedule)}")

    def report(self, mode: str) -> EpsilonReport:
        """The first report of `mode` ("paper" or "calibrated")."""
        check_choice(mode, "mode", MODES)
        return next(r for r in self.reports if r.mode == mode)

    def to_dict(self) -> PlanDict:
        """A JSON-ready dict."""
        return {
            "defense": self.defense,
            "noise": dict(self.noise),
            "reports": [r.to_dict() for r in self.reports],
            "calibrated_with": self.calibrated_with,
            "target": {"epsilon": self.epsilon, "delta": self.delta},
            "rounds": self.rounds,
            "sample_rate": self.sample_rate,
            "accountant": self.accountant,
            "notes": list(self.notes),
            "schedule": ({"unit": self.schedule_unit, "first": self.schedule[0],
                          "last": self.schedule[-1], "min": min(self.schedule),
                          "max": max(self.schedule), "rounds": len(self.schedule)}
                         if self.schedule else None),
        }


PlanRequestValues = tuple[float, float, int, float, str]


def check_plan_request(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str,
    accountants: tuple[str, ...], calibrate_with: str,
) -> PlanRequestValues:
    """The checked (epsilon, delta, rounds, sample_rate, accountant) of a plan request."""
    check_choice(calibrate_with, "calibrate_with", MODES)
    return (
        check_epsilon(epsilon),
        check_delta(delta),
        check_count(rounds, "rounds"),
        check_sampling_rate(sample_rate, "sample rate"),
        check_choice(accountant, "accountant", accountants),
    )


Z_UNIT = "noise multiplier z_t (Gaussian noise std / sensitivity)"
EPS_UNIT = "epsilon of round t's release"


def assemble_plan(defense: str, noise: dict[str, float], reports: list[EpsilonReport],
                  calibrate_with: str, request: PlanRequestValues, notes: tuple[str, ...] = (),
                  schedule: Any = (), unit: str = Z_UNIT, noise_factor: float = 1.0
                  ) -> PrivacyPlan:
    """The plan of a checked `request` with its schedule broadcast to one entry per round (a
    `noise_factor` other than 1 is said in the notes)."""
    eps, delta, rounds, q, accountant = request
    if noise_factor != 1.0:
        notes = (*notes, f"noise scaled by {noise_factor:g} after calibration (deliberately "
                         "mis-calibrated); the reports are those of the scaled noise")
    return PrivacyPlan(defense, noise, tuple(reports), calibrate_with, eps, delta, rounds, q,
                       accountant, notes, tuple(np.broadcast_to(schedule, (rounds,))), unit)


def checked_factor(noise_factor: float) -> float:
    """The checked `noise_factor` (> 0, finite)."""
    f = float(noise_factor)
    if not (f > 0 and np.isfinite(f)):
        raise ConfigError(f"noise_factor must be a finite number > 0, got {noise_factor!r}")
    return f


def pure_rule(accountant: str, laplace: bool = True) -> tuple[str, tuple[str, ...]]:
    """(the pure composition rule for `accountant`, the note when a Gaussian accountant was
    asked of a pure-epsilon mechanism)."""
    if accountant == "laplace_pld" and not laplace:
        raise ConfigError("accountant laplace_pld composes Laplace mechanisms only; use basic "
                          "or advanced")
    if accountant in ("basic", "advanced", "laplace_pld"):
        return accountant, ()
    return "basic", (f"pure-epsilon mechanism: accountant {accountant!r} applies to Gaussian "
                     "events; composed with basic composition",)

