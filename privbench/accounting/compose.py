"""Compose one node's ledger into an `EpsilonReport`.

Gaussian events go to the chosen Gaussian accountant (PLD, RDP or the GDP CLT); pure-epsilon
events (Laplace, randomized response) to basic or advanced composition. A ledger holding both is
the basic composition of the two parts: epsilon = eps_gauss + eps_pure at delta = delta_gauss +
delta_pure, with delta split in half when advanced composition needs a delta' of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privbench.accounting.events import LaplaceEvent, PrivacyLedger
from privbench.accounting.gaussian import (
    DEFAULT_OPTIONS,
    AccountantOptions,
    Composition,
    check_accountant_delta,
    clt_epsilon,
    composition,
    effective_accountant,
    gaussian_composition,
    schedule_terms,
)
from privbench.accounting.pure import compose_pure
from privbench.accounting.report import EpsilonReport
from privbench.accounting.validation import (
    GAUSSIAN_ACCOUNTANTS,
    MODES,
    PURE_COMPOSITIONS,
    SAMPLINGS,
    check_choice,
    check_delta,
    check_sampling_rate,
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
        note: free text carried into the report (followed by how the Gaussian accountant
            departed from `options`, when it did: see `gaussian.Composition`).

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
        comp = gaussian_composition(gauss, delta - pure_delta, accountant, options)
        eps = comp.epsilon + compose_pure(atoms, pure_composition, pure_delta or delta)
        name, used_delta = f"{comp.accountant}+{pure_composition}", delta
        note = "; ".join(n for n in (note, comp.note) if n)
    elif pure:
        eps = compose_pure(atoms, pure_composition, delta)
        name = pure_composition
        used_delta = delta if pure_composition != "basic" else 0.0
    else:
        comp = gaussian_composition(gauss, delta, accountant, options)
        eps, name, used_delta = comp.epsilon, comp.accountant, delta
        note = "; ".join(n for n in (note, comp.note) if n)
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


def account_schedule(
    multipliers: Sequence[float] | np.ndarray,
    sampling_rate: float,
    delta: float,
    accountant: str = "pld",
    *,
    sampling: str = "poisson",
    mode: str = "calibrated",
    options: AccountantOptions = DEFAULT_OPTIONS,
    note: str = "",
) -> EpsilonReport:
    """`account` of the sample-level ledger of a per-step Gaussian noise schedule
    (`gaussian_schedule(multipliers, sampling_rate, sampling)`), without an event per run: the
    same terms (`gaussian.schedule_terms`), so the same report, and a 10^6-step schedule of
    distinct multipliers (Dyn-D2P) costs a `np.unique`, not 10^6 events.

    Raises:
        ConfigError: a bad delta, accountant, mode, rate, sampling model or multiplier.
    """
    delta = check_delta(delta)
    accountant = check_choice(accountant, "accountant", GAUSSIAN_ACCOUNTANTS)
    check_choice(mode, "mode", MODES)
    q = check_sampling_rate(sampling_rate)
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    accountant = effective_accountant((sampling,), accountant)
    check_accountant_delta(delta, accountant)
    clt = accountant == "gdp_clt"
    terms = schedule_terms(np.asarray(multipliers, dtype=float), q, sampling,
                           None if clt else options.max_distinct)
    comp = (Composition(clt_epsilon(terms, delta), accountant) if clt
            else composition(terms, delta, accountant, options))
    return EpsilonReport(
        epsilon=comp.epsilon,
        delta=delta,
        accountant=comp.accountant,
        mode=mode,
        unit="sample-level",
        approximate=clt and q < 1,
        note="; ".join(n for n in (note, comp.note) if n),
        sampling=sampling,
    )
