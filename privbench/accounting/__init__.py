"""Privacy accounting for privbench: ledgers, accountants, calibration and the plan record.

Every defense reports an honest epsilon through this package (delta, accountant,
mode, unit of privacy and uncovered message kinds with every number). The pieces:

- events and ledgers (`events`): Gaussian (subsampled by Poisson sampling or by fixed-size
  batches without replacement, `SAMPLINGS`; any per-step noise), Laplace and randomized-response
  mechanisms recorded in one immutable `PrivacyLedger` per node;
- accountants (`compose`, `gaussian`, `pure`, `gdp`): dp-accounting PLD (default) and RDP for
  Gaussian events, basic / advanced composition for pure-epsilon events, and the mu-GDP CLT of
  Dyn-D2P (Dyn-D2P paper, eqs. (4) and (6)), which is approximate and says so;
- calibration (`calibrate`): target (epsilon, delta) + schedule shape -> noise scale;
- each paper's own formula (`papers`, `gdp`), cited to paper sections, equations and theorems;
- plans (`plans`): the `PrivacyPlan` record (the noise a defense uses for a target budget and
  the epsilon both modes give it) and what every plan function checks and assembles. Each
  defense's own plan lives with the defense (`Trainer.privacy_plan`).

Every epsilon is an `EpsilonReport` carrying delta, accountant, mode ("paper" or "calibrated"),
unit ("sample-level" or "node-level"), the message kinds it does not cover, and whether it is an
approximation. All functions are pure; bad input raises `privbench.errors.ConfigError`.
"""

from privbench.accounting.calibrate import (
    calibrate_noise_scale,
    schedule_epsilon_fn,
    solve_monotone,
)
from privbench.accounting.compose import account, account_schedule
from privbench.accounting.events import (
    Event,
    GaussianEvent,
    LaplaceEvent,
    PrivacyLedger,
    RandomizedResponseEvent,
    gaussian_schedule,
    node_ledgers,
)
from privbench.accounting.gaussian import (
    DEFAULT_OPTIONS,
    INTEGER_RDP_ORDERS,
    TF_PRIVACY_RDP_ORDERS,
    AccountantOptions,
    bucket_terms,
    gaussian_epsilon,
)
from privbench.accounting.gdp import (
    clt_mu_total,
    dyn_d2p_growth,
    dyn_d2p_mu0,
    dyn_d2p_mu_bar,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
)
from privbench.accounting.papers import (
    adp_vrsgp_alpha,
    adp_vrsgp_fitted_c2,
    adp_vrsgp_noise_factors,
    adp_vrsgp_paper_epsilon,
    adp_vrsgp_paper_sigma_hat,
    adp_vrsgp_theorem1_sigma_hat,
    defl_vp_readings,
    dpps_b,
    dpps_round_epsilon,
)
from privbench.accounting.plans import PrivacyPlan
from privbench.accounting.pure import (
    advanced_composition,
    basic_composition,
    laplace_scale,
    per_release_epsilon,
    rr_epsilon,
    rr_keep_prob,
)
from privbench.accounting.report import ApproximateAccountingWarning, EpsilonReport
from privbench.accounting.validation import (
    GAUSSIAN_ACCOUNTANTS,
    MODES,
    PURE_COMPOSITIONS,
    SAMPLINGS,
    UNITS,
    check_delta,
    check_epsilon,
    check_sampling_rate,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "GAUSSIAN_ACCOUNTANTS",
    "INTEGER_RDP_ORDERS",
    "MODES",
    "PURE_COMPOSITIONS",
    "SAMPLINGS",
    "TF_PRIVACY_RDP_ORDERS",
    "UNITS",
    "AccountantOptions",
    "ApproximateAccountingWarning",
    "EpsilonReport",
    "Event",
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyLedger",
    "PrivacyPlan",
    "RandomizedResponseEvent",
    "account",
    "account_schedule",
    "adp_vrsgp_alpha",
    "adp_vrsgp_fitted_c2",
    "adp_vrsgp_noise_factors",
    "adp_vrsgp_paper_epsilon",
    "adp_vrsgp_paper_sigma_hat",
    "adp_vrsgp_theorem1_sigma_hat",
    "advanced_composition",
    "basic_composition",
    "bucket_terms",
    "calibrate_noise_scale",
    "check_delta",
    "check_epsilon",
    "check_sampling_rate",
    "clt_mu_total",
    "defl_vp_readings",
    "dpps_b",
    "dpps_round_epsilon",
    "dyn_d2p_growth",
    "dyn_d2p_mu0",
    "dyn_d2p_mu_bar",
    "gaussian_epsilon",
    "gaussian_schedule",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "laplace_scale",
    "node_ledgers",
    "per_release_epsilon",
    "rr_epsilon",
    "rr_keep_prob",
    "schedule_epsilon_fn",
    "solve_monotone",
]
