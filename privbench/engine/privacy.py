"""What a defense declares about its privacy, as the `Trainer` contract types it.

A private defense describes its own mechanism: the calibrations it has (`Calibration`), the
settings an `account` request may change (`PlanSettings`), its privacy plan for a request
(`PlanRequest` -> `privbench.accounting.PrivacyPlan`, the plan its trainer draws the noise from)
and its clip bound (`ClipBound`). `privbench account`, the mechanism audit and the canary audit
read these declarations; the audits measure the mechanism against them.

A defense whose privacy is one formula of (epsilon, delta, rounds, sample rate, accountant) -- a
plan function, keyword-only settings after the accountant -- declares it with `formula_plan`
and `formula_settings`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from privbench.accounting import DEFAULT_OPTIONS, AccountantOptions, PrivacyPlan
from privbench.errors import ConfigError

# A plan setting's value (`account -o KEY=VALUE`, typed by the setting's default).
OptionValue = bool | int | float | str | None
Settings = Mapping[str, OptionValue]
PlanFunction = Callable[..., PrivacyPlan]

BOTH_MODES = ("calibrated", "paper")  # a defense with a rigorous and a paper calibration

# The arguments every plan function takes besides its own settings.
COMMON_PLAN_ARGUMENTS = ("calibrate_with", "options", "noise_factor")


def _frozen(settings: Settings) -> Mapping[str, OptionValue]:
    return MappingProxyType(dict(settings))


@dataclass(frozen=True)
class PlanRequest:
    """A privacy plan asked of a defense: the budget, the run's length and sample rate, the
    accountant, and the graph a graph-dependent defense plans on.

    Attributes:
        defense: the registry name of the defense asked (a subclass plans as itself).
        epsilon, delta: the target budget of one node.
        rounds: T; sample_rate: q = B / |D_i|.
        accountant: the accountant (or pure composition rule) that calibrates.
        options: the accountants' numerical options.
        settings: values of the defense's `PlanSettings.accepted`, already typed.
        topology, nodes, seed: the graph (None: the `train` command's default).
    """

    defense: str
    epsilon: float
    delta: float
    rounds: int
    sample_rate: float
    accountant: str
    options: AccountantOptions = DEFAULT_OPTIONS
    settings: Mapping[str, OptionValue] = field(default_factory=dict)
    topology: str | None = None
    nodes: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", _frozen(self.settings))


@dataclass(frozen=True)
class PlanSettings:
    """What a request may set of a defense's plan.

    Attributes:
        accepted: setting -> its default (the type a value is parsed to).
        fixed: setting -> the value the defense's config sets (a request may not change it).
    """

    accepted: Mapping[str, OptionValue] = field(default_factory=dict)
    fixed: Mapping[str, OptionValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accepted", _frozen(self.accepted))
        object.__setattr__(self, "fixed", _frozen(self.fixed))


@dataclass(frozen=True)
class Calibration:
    """How a private defense calibrates its noise.

    Attributes:
        modes: the calibrations it has: "calibrated" (a rigorous accountant) and/or "paper"
            (the paper's own formula).
        default_mode: the one its config uses.
        accountant: the accountant (or pure composition rule) its config calibrates with.
    """

    modes: tuple[str, ...]
    default_mode: str
    accountant: str

    def __post_init__(self) -> None:
        if self.default_mode not in self.modes:
            raise ConfigError(f"a defense's default calibration {self.default_mode!r} is not "
                              f"one of its calibrations ({', '.join(self.modes)})")


@dataclass(frozen=True)
class ClipBound:
    """The bound a defense clips each sample's contribution to, or why it has none.

    Attributes:
        value: the claimed per-sample clip bound C (None: no clip bound).
        reason: what bounds the sensitivity instead, when `value` is None.
    """

    value: float | None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.value is None and not self.reason:
            raise ConfigError("a defense without a clip bound says why (ClipBound.reason)")
        if self.value is not None and not (0 < self.value < math.inf):
            raise ConfigError(f"a clip bound is a finite number > 0, got {self.value!r}")

    @classmethod
    def of(cls, value: float | None) -> ClipBound:
        """The bound a clip setting gives: none where clipping is off (None or inf)."""
        if value is None or value == math.inf:
            return cls(None, "clipping is off: nothing bounds one sample's gradient")
        return cls(float(value))


def plan_arguments(plan: PlanFunction) -> dict[str, OptionValue]:
    """A plan function's own keyword-only settings and their defaults."""
    return {p.name: p.default for p in inspect.signature(plan).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in COMMON_PLAN_ARGUMENTS}


def plan_accountant(plan: PlanFunction) -> str:
    """The accountant a plan function calibrates with by default."""
    return inspect.signature(plan).parameters["accountant"].default


def call_plan(plan: PlanFunction, epsilon: float, delta: float, rounds: int, sample_rate: float,
              accountant: str, **kwargs: object) -> PrivacyPlan:
    """`plan(...)` with its setting names checked first (an unknown one is refused)."""
    accepted = set(plan_arguments(plan)) | set(COMMON_PLAN_ARGUMENTS)
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ConfigError(f"unknown option {unknown[0]!r} for privacy plan "
                          f"{plan.__name__.removeprefix('plan_')!r}; accepted: "
                          f"{', '.join(sorted(accepted)) or '(none)'}")
    return plan(epsilon, delta, rounds, sample_rate, accountant, **kwargs)


def formula_settings(plan: PlanFunction, fixed: Settings | None = None) -> PlanSettings:
    """The settings of a defense planned by `plan`: the plan's keyword settings, less those
    the defense's config `fixed`."""
    fixed = dict(fixed or {})
    return PlanSettings({k: v for k, v in plan_arguments(plan).items() if k not in fixed}, fixed)


def formula_plan(plan: PlanFunction, req: PlanRequest, mode: str,
                 fixed: Settings | None = None) -> PrivacyPlan:
    """`req` planned by `plan` with the noise calibrated by `mode`, the request's settings and
    the ones the defense's config `fixed`; a defense planned by another's formula is named, and
    the plan says whose formula it is and what the config set."""
    fixed = dict(fixed or {})
    out = call_plan(plan, req.epsilon, req.delta, req.rounds, req.sample_rate, req.accountant,
                    calibrate_with=mode, options=req.options, **req.settings, **fixed)
    if req.defense == out.defense:
        return out
    fixes = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
    return replace(out, defense=req.defense, notes=(
        f"the {out.defense} plan, as the {req.defense} trainer calls it"
        + (f" ({fixes}, set by its config)" if fixes else ""), *out.notes))
