"""Compose one node's ledger into an `EpsilonReport`.

Gaussian events go to the chosen Gaussian accountant (PLD, RDP or the GDP CLT); pure-epsilon
events (Laplace, randomized response) to basic or advanced composition. A ledger holding both is
the basic composition of the two parts: epsilon = eps_gauss + eps_pure at delta = delta_gauss +
delta_pure, with delta split in half when advanced composition needs a delta' of its own.
"""

from __future__ import annotations

from privbench.accounting.events import LaplaceEvent, PrivacyLedger
from privbench.accounting.gaussian import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    effective_accountant,
    gaussian_epsilon,
)
from privbench.accounting.pure import compose_pure
from privbench.accounting.report import EpsilonReport
from privbench.accounting.validation import (
    GAUSSIAN_ACCOUNTANTS,
    MODES,
    PURE_COMPOSITIONS,
    check_choice,
    check_delta,
)
from privbench.errors import ConfigError


def account(
    ledger: PrivacyLedger,
    delta: float,
    accountant: str = "pld",
    *,
    mode: str = "calibrated",
    pure_composition: str = "basic",
    options: AccountantOptions = DEFAULT_OPTIONS,
    note: str = "",
) -> EpsilonReport:
    """The epsilon of everything recorded in `ledger`, at `delta`.

    Args:
        ledger: one node's ledger (its unit and uncovered message kinds go into the report).
        delta: target delta in (0, 1) (pure-only ledgers under basic composition report 0).
        accountant: Gaussian accountant: "pld" (default), "rdp" or "gdp_clt" (approximate);
            without-replacement events are composed with RDP (the report names it).
        mode: "calibrated" or "paper" (recorded in the report).
        pure_composition: "basic" (default) or "advanced" for Laplace / randomized response,
            "laplace_pld" (tight PLD composition) for Laplace only.
        options: numerical accountant settings.
        note: free text carried into the report.

    Returns:
        The report; `approximate` is True iff the GDP CLT was applied to subsampled steps;
        `sampling` names the Gaussian events' sampling model ("none" for pure-only ledgers).
    """
    delta = check_delta(delta)
    accountant = check_choice(accountant, "accountant", GAUSSIAN_ACCOUNTANTS)
    pure_composition = check_choice(pure_composition, "pure composition", PURE_COMPOSITIONS)
    check_choice(mode, "mode", MODES)
    gauss, pure = ledger.gaussian_events, ledger.pure_events
    if pure_composition == "laplace_pld" and not all(isinstance(e, LaplaceEvent) for e in pure):
        raise ConfigError("pure composition laplace_pld composes Laplace events only; use basic "
                          "or advanced for randomized response")
    sampling = gauss[0].sampling if gauss else "none"
    accountant = effective_accountant((e.sampling for e in gauss), accountant)
    atoms = [e.atoms for e in pure]
    if gauss and pure:
        pure_delta = delta / 2 if pure_composition != "basic" else 0.0
        eps = gaussian_epsilon(gauss, delta - pure_delta, accountant, options)
        eps += compose_pure(atoms, pure_composition, pure_delta or delta)
        name, used_delta = f"{accountant}+{pure_composition}", delta
    elif pure:
        eps = compose_pure(atoms, pure_composition, delta)
        name = pure_composition
        used_delta = delta if pure_composition != "basic" else 0.0
    else:
        eps = gaussian_epsilon(gauss, delta, accountant, options)
        name, used_delta = accountant, delta
    # the CLT is exact for un-subsampled steps (GDP composition) and approximate otherwise
    approximate = accountant == "gdp_clt" and any(e.sampling_rate < 1 for e in gauss)
    return EpsilonReport(
        epsilon=eps,
        delta=used_delta,
        accountant=name,
        mode=mode,
        unit=ledger.unit,
        uncovered=ledger.uncovered,
        approximate=approximate,
        note=note,
        sampling=sampling,
    )
