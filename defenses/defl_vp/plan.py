"""DeFL-VP's accounting (Xiu et al., Sec. 4.2, Alg. 3 / Eq. 14, Theorem 1, Corollary 2):
randomized response on the d-dim sign vector once per round, read per coordinate (Alg. 3), per
vector (Theorem 1 + Corollary 2) or composed over the d T coordinate releases (calibrated)."""

from __future__ import annotations

from privbench.accounting import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    EpsilonReport,
    PrivacyLedger,
    PrivacyPlan,
    RandomizedResponseEvent,
    account,
    defl_vp_readings,
    per_release_epsilon,
)
from privbench.accounting.plans import (
    PURE_PLAN_ACCOUNTANTS,
    assemble_plan,
    check_plan_request,
    checked_factor,
    pure_rule,
)
from privbench.accounting.validation import check_choice, check_count


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
    req = check_plan_request(epsilon, delta, rounds, sample_rate, accountant,
                             PURE_PLAN_ACCOUNTANTS, calibrate_with)
    eps, delta, rounds, q, accountant = req
    order = check_choice(order, "DeFL-VP order", ("vr_rr", "rr_vr"))
    rule, notes = pure_rule(accountant, laplace=False)
    uncovered = ("control_variate",) if order == "vr_rr" and control_variates else ()
    dim = check_count(dim, "dim")
    if calibrate_with == "calibrated":
        eps_coord = per_release_epsilon(eps, dim * rounds, rule, delta)
    else:
        eps_coord = eps
    eps_coord /= checked_factor(noise_factor)  # more noise: a smaller per-coordinate epsilon
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
    return assemble_plan("defl_vp", noise, reports, calibrate_with, req, notes, eps_coord,
                 "randomized-response epsilon of each coordinate in round t", noise_factor)
