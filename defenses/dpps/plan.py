"""DPPS's accounting (Zhou et al., Sec. 4.1, Lemma 1, Theorem 1) and its baselines' (PartPSP,
PEDFL: DPPS's Sec. 5.4): Laplace noise of scale gamma_n S(t) / b on the pushed vector, each round
(b / gamma_n)-DP w.r.t. the L1 sensitivity S(t); the paper does not compose across rounds, the
calibrated reading composes the T rounds (basic, advanced or Laplace PLD)."""

from __future__ import annotations

from privbench.accounting import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    EpsilonReport,
    LaplaceEvent,
    PrivacyLedger,
    PrivacyPlan,
    account,
    dpps_b,
    dpps_round_epsilon,
    per_release_epsilon,
)
from privbench.accounting.plans import (
    EPS_UNIT,
    PURE_PLAN_ACCOUNTANTS,
    assemble_plan,
    check_plan_request,
    checked_factor,
    pure_rule,
)


def plan_dpps_family(defense: str, epsilon: float, delta: float, rounds: int,
                     sample_rate: float, accountant: str, gamma_n: float, calibrate_with: str,
                     noise_factor: float = 1.0,
                     uncovered: tuple[str, ...] = ("sensitivity",)) -> PrivacyPlan:
    """The plan of a DPPS-family defense `defense` (its plan function's docstring says how)."""
    req = check_plan_request(epsilon, delta, rounds, sample_rate, accountant,
                             PURE_PLAN_ACCOUNTANTS, calibrate_with)
    eps, delta, rounds, q, accountant = req
    rule, notes = pure_rule(accountant)
    if calibrate_with == "calibrated":
        eps_round = per_release_epsilon(eps, rounds, rule, delta)
    else:
        eps_round = eps  # the paper's Theorem 1 budget is per round; it does not compose
    eps_round /= checked_factor(noise_factor)  # Laplace scale S(t) / eps_round grows with it
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
    return assemble_plan(defense, noise, reports, calibrate_with, req, notes, eps_round,
                 EPS_UNIT + " (Laplace scale S(t) / epsilon_t per coordinate)", noise_factor)


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
    return plan_dpps_family("dpps", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor)


def plan_partpsp(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    gamma_n: float = 1e-3,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """PartPSP: DPPS applied to the shared parameters only (Algorithm 2)."""
    return plan_dpps_family("partpsp", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor)


def plan_pedfl(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "basic", *,
    gamma_n: float = 1e-3,
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """PEDFL (DPPS's baseline, its Sec. 5.4): DPPS's Laplace calibration on the
    gossiped models, noise from their oracle L1 sensitivity, so no data-dependent scalar is sent
    (nothing uncovered)."""
    return plan_dpps_family("pedfl", epsilon, delta, rounds, sample_rate, accountant, gamma_n,
                      calibrate_with, noise_factor, uncovered=())
