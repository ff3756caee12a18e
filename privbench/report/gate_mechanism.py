"""The gate's mechanism rules (`max_measured_ratio`, `require_mechanism`,
`require_sampling_rate`) and what each check resolved.

`max_measured_ratio` holds the mechanism audit's measured ε (composed at the run's δ over the
rounds the run runs, from the noise, rate and sensitivity measured) to the request as well as to
the claim: to the smaller of the ε the cell asked for (a cell of the ε grid; a paper setting asks
for none) and the ε its ledger claims. A ledger stated for another δ or round count than the
run's, or a claim above the request, fails the check as such, whatever was measured.

Every check says what it resolved. The measured ε's interval is a confidence interval: a pass
rules out an overspend above its upper end. A check whose upper end reaches beyond `factor`
times the bound cannot tell the claim from a much weaker one: it is INCONCLUSIVE, with what it
resolved and what would resolve it, and the policy decides whether that fails or warns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privbench.results.records import AuditCell, MechanismEpsilon, MechanismReport

# How far above the bound a check's interval may reach before it is INCONCLUSIVE: a factor of 2
# is the smallest overspend the mutation classes make (halved noise doubles a pure ε and more
# than doubles a subsampled Gaussian one), so a check that cannot exclude twice its bound
# cannot be relied on to catch halved noise.
DEFAULT_FACTOR = 2.0
# A claim within this relative distance of the request is the request (calibration solves for
# ε to a relative tolerance of 1e-3, `privbench.accounting.calibrate`).
CLAIM_RTOL = 1e-3


@dataclass(frozen=True)
class Check:
    """One evaluated check. `applicable` False: every attack that could measure the check's
    metric declared itself not applicable to the cell (its reason in `detail`); such a check does
    not fail, is shown as N/A, and a bound whose every check is N/A fails (it checked nothing).
    `inconclusive`: the check could not tell the claim from a much weaker one; `passed` is then
    the policy's choice (`[inconclusive] action`: "warn" passes, "fail" fails)."""

    name: str
    passed: bool
    detail: str
    applicable: bool = True
    inconclusive: bool = False


def num(x: object) -> str:
    """A number for a check's detail (3 significant digits, ∞, n/a)."""
    return "n/a" if x is None else "∞" if x == float("inf") else f"{float(x):.3g}"


def _mechanism(cell: AuditCell) -> tuple[MechanismReport | None, str]:
    """The cell's mechanism audit, or None with why there is none."""
    att = cell.attacks.get("mechanism")
    if att is None:
        return None, "the cell has no mechanism audit (add `mechanism` to the audit's attacks)"
    if not att.status.measured:
        return None, f"the mechanism audit did not run: {att.status}"
    if att.mechanism is None:
        raise KeyError("mechanism")
    return att.mechanism, ""


def requested_epsilon(cell: AuditCell) -> float | None:
    """The ε the cell asked for: its grid ε (None for a paper setting or reading, which asks
    for the paper's noise, and for a non-private cell)."""
    return None if cell.setting else cell.epsilon


def request_findings(cell: AuditCell, mech: MechanismReport) -> list[str]:
    """Where the ledger is not held to the request: the audit's ledger findings (another δ or
    round count than the run's) and a claim above the requested ε."""
    found = list(mech.get("ledger_findings") or [])
    eps, asked = mech.get("epsilon") or {}, requested_epsilon(cell)
    claimed = eps.get("claimed")
    if asked is not None and isinstance(claimed, (int, float)) and \
            claimed > asked * (1 + CLAIM_RTOL):
        found.append(f"the ledger claims ε = {num(claimed)}, the run asks {num(asked)}")
    return found


def held_epsilon(cell: AuditCell, eps: MechanismEpsilon) -> float:
    """The ε a measured ε is held to: the smaller of the claim and the request."""
    claimed, asked = float(eps["claimed"]), requested_epsilon(cell)
    return claimed if asked is None else min(claimed, asked)


def resolution(eps: MechanismEpsilon, held: float, limit: float, factor: float
               ) -> tuple[str, str]:
    """("fail" | "inconclusive" | "pass", what the measured ε's interval resolved) against
    `held` (the ε the run is held to) and the bound `limit` on measured / held."""
    lo, hi = (v / held for v in eps["interval"])
    if lo > limit:
        return "fail", f"overspend: the measured ε is at least {num(lo)}x the ε held to"
    if hi > factor * limit:
        return "inconclusive", (f"INCONCLUSIVE: resolved only that the overspend is below "
                                f"{num(hi)}x (cannot tell the claim from one {num(factor)}x "
                                f"weaker); {_what_resolves(eps, factor)}")
    return "pass", f"no evidence of overspend; rules out more than {num(hi)}x"


def _what_resolves(eps: MechanismEpsilon, factor: float) -> str:
    """What would narrow the interval enough: for randomized response the pooled coordinates
    needed (the flip rate's half-width shrinks as 1 / sqrt(coordinates)), else more rounds."""
    trials, interval = eps.get("flip_trials"), eps.get("flip_interval")
    claim_p = eps.get("ledger_flip_rate")
    if not (isinstance(trials, int) and interval and isinstance(claim_p, float)):
        return "more audited rounds (mechanism.rounds) narrow the noise and sampling-rate intervals"
    q = min(claim_p, 1 - claim_p)
    coord = math.log((1 - q) / q) if q > 0 else math.inf
    weaker = 1 / (1 + math.exp(factor * coord)) if math.isfinite(coord) else 0.0
    gap, half = abs(q - weaker), (interval[1] - interval[0]) / 2
    need = trials * (half / gap) ** 2 if gap > 0 else math.inf
    return (f"the flip rate is measured to ±{num(half)} over {trials:,} pooled coordinates; "
            f"telling the claim's flip rate 1/2 - {num(0.5 - q)} from 1/2 - {num(0.5 - weaker)} "
            f"needs about "
            f"{num(need)} ({num(need / trials)}x: more audited rounds, mechanism.rounds)")


def measured_ratio_check(label: str, cell: AuditCell, limit: float,
                         factor: float = DEFAULT_FACTOR) -> Check:
    """The mechanism audit's measured ε against the smaller of the requested and the claimed
    ε (module docstring): fails on a ledger not held to the request, when the interval lies
    above the bound, and when no measured ε exists (saying why); INCONCLUSIVE when the interval
    reaches beyond `factor` x the bound."""
    name = f"{label} max_measured_ratio"
    mech, why = _mechanism(cell)
    if mech is None:
        return Check(name, False, why)
    eps = mech["epsilon"]
    found = request_findings(cell, mech)
    if not eps.get("applicable"):
        return Check(name, False, "; ".join([*found, f"not measured: {eps.get('reason')}"]))
    claimed, asked = float(eps["claimed"]), requested_epsilon(cell)
    held = held_epsilon(cell, eps)
    lo, hi = eps["interval"]
    what = (f"node {eps['node']}: measured ε {num(eps['epsilon'])} [{num(lo)}, {num(hi)}]"
            + (f" at the run's δ = {eps['delta']:.3g} over {eps['composed_rounds']} rounds"
               if "composed_rounds" in eps else "")
            + f" vs claimed {num(claimed)}"
            + ("" if asked is None else f", requested {num(asked)}")
            + f" (bound {limit:g} x {num(held)}; {_basis(eps)})")
    if found:
        return Check(name, False, "ledger not held to the request: " + "; ".join(found)
                     + f"; {what}")
    state, text = resolution(eps, held, limit, factor)
    return Check(name, state != "fail", f"{text}; {what}", inconclusive=state == "inconclusive")


def _basis(eps: MechanismEpsilon) -> str:
    """What the measured ε was recomposed from."""
    if "z_ratio" in eps:
        return (f"noise multiplier x{num(eps['z_ratio'])}, sampling rate {num(eps['rate'])} vs "
                f"{num(eps['ledger_rate'])}")
    if "flip_rate" in eps:
        return (f"flip rate {num(eps['flip_rate'])} vs {num(eps['ledger_flip_rate'])}"
                + (f"; {eps['note']}" if eps.get("note") else ""))
    return str(eps.get("basis", ""))


def mechanism_check(label: str, cell: AuditCell, _: object, factor: float = DEFAULT_FACTOR
                    ) -> Check:
    """The mechanism audit ran and found nothing (coverage, freshness, bounded contributions,
    an exact replay)."""
    name = f"{label} require_mechanism"
    mech, why = _mechanism(cell)
    if mech is None:
        return Check(name, False, why)
    found = mech["findings"]
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return Check(name, not found, "; ".join(found[:3]) + more if found else
                 f"noise on every covered message, fresh across rounds and nodes "
                 f"(largest correlation {num(mech['freshness']['max_correlation_rounds'])} / "
                 f"{num(mech['freshness']['max_correlation_nodes'])}), contributions bounded, "
                 f"over {len(mech['rounds'])} replayed rounds")


def sampling_rate_check(label: str, cell: AuditCell, _: object,
                        factor: float = DEFAULT_FACTOR) -> Check:
    """Every node's realised sampling is consistent with its ledger's scheme and rate; a pass
    says how far above the ledger's rate the interval reaches."""
    name = f"{label} require_sampling_rate"
    mech, why = _mechanism(cell)
    if mech is None:
        return Check(name, False, why)
    rows = mech["sampling"]
    if not rows:
        return Check(name, False, "no batch was drawn through the sampling path")
    bad = [r for r in rows if not r["consistent"]]
    worst = max(rows, key=lambda r: abs((r["rate"] or 0) - (r["ledger_rate"] or 0)))
    detail = (f"node {worst['node']}: {worst['scheme']} rate {num(worst['rate'])}"
              + (f" [{num(worst['rate_interval'][0])}, {num(worst['rate_interval'][1])}]"
                 if "rate_interval" in worst else "")
              + f" vs ledger {num(worst['ledger_rate'])}")
    reach = max((r["rate_interval"][1] / r["ledger_rate"] for r in rows
                 if "rate_interval" in r and r["ledger_rate"]), default=None)
    head = (f"{len(bad)} of {len(rows)} nodes inconsistent; " if bad else
            "every node consistent" + ("" if reach is None else
                                       f" (rules out a rate above {num(reach)}x the ledger's)")
            + "; ")
    return Check(name, not bad, head + detail)


MECHANISM_RULES = {"max_measured_ratio": measured_ratio_check,
                   "require_mechanism": mechanism_check,
                   "require_sampling_rate": sampling_rate_check}
