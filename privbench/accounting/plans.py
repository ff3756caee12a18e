"""Privacy plans: the accounting half of each defense, registered in `PRIVACY_PLANS`.

A plan function maps (epsilon, delta, rounds, sample_rate, accountant) -> `PrivacyPlan`: the noise
parameters the defense must use, and the epsilon that BOTH modes assign to that noise (paper
formula first, calibrated accountant second, readings beyond those after). By default the noise is
calibrated with the rigorous accountant (`calibrate_with="calibrated"`); `calibrate_with="paper"`
reproduces the paper's own noise. Defense-specific settings are keyword-only with the
defenses' defaults. One plan describes one node (every node has its own ledger; budgets are
never summed).

| name | paper | noise | paper formula | calibrated |
|---|---|---|---|---|
| dp_sgp | ADP-VRSGP, Thm 1 at alpha == 1 | sigma | RDP (moments accountant) | PLD/RDP |
| adp_vrsgp | ADP-VRSGP, Sec. 4, Thm 1 | sigma_hat | Thm 1, c2 fitted | PLD/RDP, schedule |
| dyn_d2p | Dyn-D2P, Sec. 3, eqs. 4-9 | mu_0 | GDP CLT eqs. 4, 6, 8 | PLD/RDP, schedule |
| defl_vp | DeFL-VP, Alg. 3, Sec. 4.2 | keep_prob | Alg. 3 label | basic/advanced, d*T |
| dpps, partpsp, pedfl | DPPS, Sec. 4.1, Sec. 5.4 | b | Thm 1, per round | basic/advanced, T |
| dpdl | DPDL, Sec. V-A, App. A | sigma | `paper` reading, RDP | `strict` reading |
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypedDict

import numpy as np

from privbench.accounting.calibrate import calibrate_noise_scale
from privbench.accounting.compose import account, account_schedule
from privbench.accounting.events import (
    GaussianEvent,
    LaplaceEvent,
    PrivacyLedger,
    RandomizedResponseEvent,
)
from privbench.accounting.gaussian import DEFAULT_OPTIONS, AccountantOptions
from privbench.accounting.gdp import dyn_d2p_growth, dyn_d2p_mu0, gdp_mu
from privbench.accounting.papers import (
    adp_vrsgp_noise_factors,
    adp_vrsgp_paper_epsilon,
    adp_vrsgp_paper_sigma_hat,
    defl_vp_readings,
    dpps_b,
    dpps_round_epsilon,
)
from privbench.accounting.pure import per_release_epsilon
from privbench.accounting.report import EpsilonReport, ReportDict
from privbench.accounting.validation import (
    MODES,
    SAMPLINGS,
    check_choice,
    check_count,
    check_delta,
    check_epsilon,
    check_sampling_rate,
)
from privbench.errors import ConfigError
from privbench.registry import Registry

GAUSSIAN_PLAN_ACCOUNTANTS = ("pld", "rdp")
DPDL_FULL_NOTE = (  # DPDL's `full` reading, here and in the trainer's reports
    "full reading: cross-gradients + broadcast, paper noise; approximate, not an upper "
    "bound: it counts the neighbours' cross-gradient noise (eq. 40) as covering the "
    "broadcast, but under its own premise an observer sees those cross-gradients and so knows "
    "that noise (the strict reading counts the node's own noise only)")
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


PlanFunction = Callable[..., PrivacyPlan]
PRIVACY_PLANS: Registry[PlanFunction] = Registry("privacy plan")


def _request(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str,
    accountants: tuple[str, ...], calibrate_with: str,
) -> tuple[float, float, int, float, str]:
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


def _plan(defense: str, noise: dict[str, float], reports: list[EpsilonReport],
          calibrate_with: str, request: tuple, notes: tuple[str, ...] = (),
          schedule: Any = (), unit: str = Z_UNIT, noise_factor: float = 1.0) -> PrivacyPlan:
    eps, delta, rounds, q, accountant = request
    if noise_factor != 1.0:
        notes = (*notes, f"noise scaled by {noise_factor:g} after calibration (deliberately "
                         "mis-calibrated); the reports are those of the scaled noise")
    return PrivacyPlan(defense, noise, tuple(reports), calibrate_with, eps, delta, rounds, q,
                       accountant, notes, tuple(np.broadcast_to(schedule, (rounds,))), unit)


def _factor(noise_factor: float) -> float:
    """The checked `noise_factor` (> 0, finite)."""
    f = float(noise_factor)
    if not (f > 0 and np.isfinite(f)):
        raise ConfigError(f"noise_factor must be a finite number > 0, got {noise_factor!r}")
    return f


# ---------------------------------------------------------------- Gaussian plans


@PRIVACY_PLANS.register("dp_sgp")
def plan_dp_sgp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """Constant-noise DP-SGD inside push-sum (the DP-SGP baseline).

    Every round is one Poisson(q)-subsampled Gaussian step with noise multiplier sigma. Paper
    mode: the RDP (moments) accountant, as ADP-VRSGP's Theorem 1 follows; calibrated: `accountant`.
    """
    req = _request(epsilon, delta, rounds, sample_rate, accountant, GAUSSIAN_PLAN_ACCOUNTANTS,
                   calibrate_with)
    eps, delta, rounds, q, accountant = req
    paper_acc = "rdp"
    use = accountant if calibrate_with == "calibrated" else paper_acc
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    sigma = calibrate_noise_scale(eps, delta, np.ones(rounds), q, use, options,
                                  sampling=sampling) * _factor(noise_factor)
    ledger = PrivacyLedger().record(GaussianEvent(sigma, q, rounds, sampling))
    reports = [
        account(ledger, delta, paper_acc, mode="paper", options=options,
                note="moments-accountant (RDP) reading of constant-noise DP-SGD"),
        account(ledger, delta, accountant, mode="calibrated", options=options),
    ]
    return _plan("dp_sgp", {"sigma": sigma}, reports, calibrate_with, req,
                 ("sigma = noise std / clip bound, on the SUM of clipped per-sample gradients",),
                 sigma, Z_UNIT, noise_factor)


@PRIVACY_PLANS.register("adp_vrsgp")
def plan_adp_vrsgp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    tau: int = 5, s: float = 0.2, sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """ADP-VRSGP: step t uses noise multiplier alpha(T - t) * sigma_hat (Sec. 4, Theorem 1).

    Paper mode: Theorem 1 with c2 fitted to RDP at alpha == 1 (under-noises by 11-22%);
    calibrated: `accountant` over the heterogeneous schedule (Poisson, add/remove).
    """
    req = _request(epsilon, delta, rounds, sample_rate, accountant, GAUSSIAN_PLAN_ACCOUNTANTS,
                   calibrate_with)
    eps, delta, rounds, q, accountant = req
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    factors = adp_vrsgp_noise_factors(rounds, tau, s)
    if calibrate_with == "calibrated":
        sigma_hat = calibrate_noise_scale(eps, delta, factors, q, accountant, options,
                                          sampling=sampling)
    else:
        sigma_hat = adp_vrsgp_paper_sigma_hat(eps, delta, q, factors, options)
    sigma_hat *= _factor(noise_factor)
    schedule = sigma_hat * factors  # (T,) z_t, the product the calibration composed
    paper = EpsilonReport(
        adp_vrsgp_paper_epsilon(sigma_hat, delta, q, factors, options), delta,
        "closed-form (Theorem 1, c2 fitted to rdp)", "paper", "sample-level",
        approximate=True, sampling="poisson",
        note="Theorem 1 with c2 fitted at alpha == 1: not an upper bound for the decaying "
             "schedule (under-reports by up to ~22% at eps = 8); depends on the schedule only "
             "through sum_t 1/z_t^2",
    )
    noise = {"sigma_hat": sigma_hat, "z_first": schedule[0], "z_last": schedule[-1]}
    reports = [paper, account_schedule(schedule, q, delta, accountant, sampling=sampling,
                                       options=options)]
    return _plan("adp_vrsgp", noise, reports, calibrate_with, req, (
        "step t noise multiplier = alpha(T - t) * sigma_hat, alpha(k) = (floor(k/tau) + 10)^s",
        "sigma_hat is per unit of the CURRENT clip bound G_t",
    ), schedule, Z_UNIT, noise_factor)


@PRIVACY_PLANS.register("dyn_d2p")
def plan_dyn_d2p(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    rho_mu: float = 2.0, sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """Dyn-D2P: step k is mu_k-GDP, mu_k = mu_0 rho_mu^(k/K), noise multiplier 1/mu_k (eq. 7).

    Paper mode: eq. (4) -> mu_tot, eq. (8) -> mu_0 (CLT; approximate, warns). Calibrated: mu_0
    such that `accountant` over the schedule meets the target (the CLT is not an upper bound).
    rho_mu = 1 is Const-D2P / Dyn[C]-D2P (eq. 9).
    """
    req = _request(epsilon, delta, rounds, sample_rate, accountant, GAUSSIAN_PLAN_ACCOUNTANTS,
                   calibrate_with)
    eps, delta, rounds, q, accountant = req
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    growth = dyn_d2p_growth(rounds, rho_mu)
    shape = 1.0 / growth  # (K,) z_k = scale * shape_k, scale = 1 / mu_0
    if calibrate_with == "calibrated":
        scale = calibrate_noise_scale(eps, delta, shape, q, accountant, options,
                                      sampling=sampling)
    else:  # the paper's CLT (eqs. 4, 8) assumes Poisson sampling whatever is drawn
        scale = 1.0 / dyn_d2p_mu0(gdp_mu(eps, delta), q, rounds, rho_mu)
    scale *= _factor(noise_factor)
    mu0 = 1.0 / scale
    schedule = scale * shape  # (K,) z_k = 1 / mu_k
    # the same product the calibration composed: its accountant result is reused, not recomputed
    reports = [
        account_schedule(schedule, q, delta, "gdp_clt", sampling=sampling, mode="paper",
                         note="mu-GDP CLT, eqs. (4) and (6): an approximation, not an upper "
                              "bound"),
        account_schedule(schedule, q, delta, accountant, sampling=sampling, options=options),
    ]
    noise = {"mu_0": mu0, "mu_last": 1 / schedule[-1], "z_first": schedule[0],
             "z_last": schedule[-1]}
    return _plan("dyn_d2p", noise, reports, calibrate_with, req, (
        "sigma_k = C_k / mu_k on the SUM of clipped per-sample gradients",
    ), schedule, Z_UNIT, noise_factor)


# ---------------------------------------------------------------- pure-epsilon plans


def _pure_rule(accountant: str, laplace: bool = True) -> tuple[str, tuple[str, ...]]:
    if accountant == "laplace_pld" and not laplace:
        raise ConfigError("accountant laplace_pld composes Laplace mechanisms only; use basic "
                          "or advanced")
    if accountant in ("basic", "advanced", "laplace_pld"):
        return accountant, ()
    return "basic", (f"pure-epsilon mechanism: accountant {accountant!r} applies to Gaussian "
                     "events; composed with basic composition",)


@PRIVACY_PLANS.register("defl_vp")
def plan_defl_vp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    dim: int = 1_663_370, order: str = "vr_rr", control_variates: bool = True,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """DeFL-VP: randomized response on the d-dim sign vector, once per round (Alg. 3).

    Calibrated: per-coordinate epsilon such that the d * T coordinate releases compose (basic or
    advanced) to `epsilon` for the whole run (local DP of the node's messages: node-level).
    Paper mode: keep probability e^eps / (e^eps + 1) with `epsilon` read per coordinate per round
    (Alg. 3, what the experiments used); the per-vector reading (Theorem 1 + Corollary 2,
    T * d * eps) is the third report. Control variates are sent in the clear under
    order="vr_rr" (Sec. 4.2 privatizes the sign vector only); order="rr_vr" builds them from
    privatized signs;
    control_variates=False (no VR: D-PSGD+RR) sends none.
    """
    req = _request(epsilon, delta, rounds, sample_rate, accountant, PURE_PLAN_ACCOUNTANTS,
                   calibrate_with)
    eps, delta, rounds, q, accountant = req
    order = check_choice(order, "DeFL-VP order", ("vr_rr", "rr_vr"))
    rule, notes = _pure_rule(accountant, laplace=False)
    uncovered = ("control_variate",) if order == "vr_rr" and control_variates else ()
    dim = check_count(dim, "dim")
    if calibrate_with == "calibrated":
        eps_coord = per_release_epsilon(eps, dim * rounds, rule, delta)
    else:
        eps_coord = eps
    eps_coord /= _factor(noise_factor)  # more noise: a smaller per-coordinate epsilon
    event = RandomizedResponseEvent(eps_coord, dim, rounds)
    ledger = PrivacyLedger(unit="node-level", uncovered=uncovered).record(event)
    readings = defl_vp_readings(eps_coord, dim, rounds)
    reports = [
        EpsilonReport(readings["per_coordinate"], 0.0, "closed-form (Alg. 3 / Eq. 14 label)",
                      "paper", "node-level", uncovered,
                      note="per coordinate, per round: not composed over d coordinates, T rounds"),
        account(ledger, delta, mode="calibrated", pure_composition=rule, options=options),
        EpsilonReport(readings["total"], 0.0, "closed-form (Theorem 1 + Corollary 2)", "paper",
                      "node-level", uncovered,
                      note="per-vector reading: d*eps per round, T*d*eps over T rounds"),
    ]
    if q < 1:
        notes += ("no subsampling amplification: RR applies to every round's message",)
    noise = {"keep_prob": event.keep_prob, "coordinate_epsilon": eps_coord}
    return _plan("defl_vp", noise, reports, calibrate_with, req, notes, eps_coord,
                 "randomized-response epsilon of each coordinate in round t", noise_factor)


def _plan_dpps(defense: str, epsilon: float, delta: float, rounds: int, sample_rate: float,
               accountant: str, gamma_n: float, calibrate_with: str,
               noise_factor: float = 1.0,
               uncovered: tuple[str, ...] = ("sensitivity",)) -> PrivacyPlan:
    req = _request(epsilon, delta, rounds, sample_rate, accountant, PURE_PLAN_ACCOUNTANTS,
                   calibrate_with)
    eps, delta, rounds, q, accountant = req
    rule, notes = _pure_rule(accountant)
    if calibrate_with == "calibrated":
        eps_round = per_release_epsilon(eps, rounds, rule, delta)
    else:
        eps_round = eps  # the paper's Theorem 1 budget is per round; it does not compose
    eps_round /= _factor(noise_factor)  # Laplace scale S(t) / eps_round grows with the factor
    b = dpps_b(eps_round, gamma_n)
    ledger = PrivacyLedger(unit="node-level", uncovered=uncovered).record(
        LaplaceEvent(eps_round, rounds))
    reports = [
        EpsilonReport(dpps_round_epsilon(b, gamma_n), 0.0, "closed-form (Theorem 1)", "paper",
                      "node-level", uncovered,
                      note="per round (t > 0), node-indistinguishability; not composed"),
        account(ledger, delta, mode="calibrated", pure_composition=rule,
                note="nodes are the records; holds only if S(t) >= the true L1 sensitivity"),
    ]
    noise = {"b": b, "gamma_n": gamma_n, "epsilon_round": eps_round,
             "laplace_scale_per_sensitivity": 1.0 / eps_round}
    notes += ("Laplace scale per coordinate = S(t) / epsilon_round = gamma_n S(t) / b; if gamma_n "
              "decays, scale b with it",
              "under Eq. 22's estimate (the paper's b, or sensitivity_mode=estimated) the noise "
              "is in the next round's node differences: S grows about 1.13 d_s / "
              f"epsilon_round per round (d_s shared coordinates; 1.13 on the one-peer graph, less "
              f"on denser ones), so this budget stays bounded only for d_s below about "
              f"{eps_round / 1.13:.3g} (reports/reproduce/dpps/README.md: \"Why Eq. 22 cannot "
              "hold a calibrated ε\"); a calibrated run's default clip bound does not feed back")
    if q < 1:
        notes += ("no subsampling amplification: node-level unit",)
    return _plan(defense, noise, reports, calibrate_with, req, notes, eps_round,
                 EPS_UNIT + " (Laplace scale S(t) / epsilon_t per coordinate)", noise_factor)


@PRIVACY_PLANS.register("dpps")
def plan_dpps(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    gamma_n: float = 1e-3,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """DPPS: Laplace noise Lap(0, gamma_n S(t) / b) on the pushed vector (Eq. 8).

    Paper mode: b = epsilon * gamma_n (Theorem 1: each round (b/gamma_n)-DP, no composition).
    Calibrated: per-round epsilon whose T-fold composition (basic or advanced) is `epsilon`.
    The broadcast sensitivity scalar S_i(t) is data-dependent and not covered.
    """
    return _plan_dpps("dpps", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor)


@PRIVACY_PLANS.register("partpsp")
def plan_partpsp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    gamma_n: float = 1e-3,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """PartPSP: DPPS applied to the shared parameters only (Algorithm 2)."""
    return _plan_dpps("partpsp", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor)


@PRIVACY_PLANS.register("pedfl")
def plan_pedfl(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    gamma_n: float = 1e-3,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """PEDFL (DPPS's baseline, its Sec. 5.4): DPPS's Laplace calibration on the
    gossiped models, noise from their oracle L1 sensitivity, so no data-dependent scalar is sent
    (nothing uncovered)."""
    return _plan_dpps("pedfl", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor, uncovered=())


# ---------------------------------------------------------------- lookup helpers

_COMMON = ("calibrate_with", "options", "noise_factor")


def plan_options(name: str) -> dict[str, Any]:
    """The defense-specific keyword options of a plan and their defaults."""
    fn = PRIVACY_PLANS.get(name)
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _COMMON
    }


def make_plan(
    name: str, epsilon: float, delta: float, rounds: int, sample_rate: float,
    accountant: str = "pld", **kwargs: Any,
) -> PrivacyPlan:
    """Look up `name` in PRIVACY_PLANS and call it, checking option names first."""
    fn = PRIVACY_PLANS.get(name)
    accepted = set(plan_options(name)) | set(_COMMON)
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ConfigError(f"unknown option {unknown[0]!r} for privacy plan {name!r}; "
                          f"accepted: {', '.join(sorted(accepted)) or '(none)'}")
    return fn(epsilon, delta, rounds, sample_rate, accountant, **kwargs)

