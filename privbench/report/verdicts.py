"""Verdicts by severity, per (defense, ε) cell and per defense (the worst cell wins).

Levels, most severe first (`LEVELS`):

* violates: the guarantee is broken: an empirical ε lower bound above the ε the cell is held to
  (the realized ε when the privacy report has one, else the calibrated claim), a realized ε
  above the ε the defense assumed (DPPS / PartPSP's sensitivity estimate), or a data-dependent
  message kind outside the DP guarantee that an attack which succeeded read (its gradient views
  or observed model were derived from that kind: the attack result's `uses`).
* under_reports: the paper's own ε is below the rigorous (calibrated) ε of the same run by more
  than 1%: the paper's accounting claims more privacy than the mechanism gives.
* diverged: training produced a non-finite model or messages (`results.cell_state`); the
  attacks that need them did not run, so no attack result of the cell is read.
* leaks: an attack succeeds, clear of chance (membership: the AUC interval's lower end above 0.5;
  inversion: PSNR >= 20 dB on [0, 1] images), while the empirical ε stays within the claim: a
  leak the claimed ε permits.
* uninformative: no attack succeeded, but the model learned nothing (its accuracy's interval
  reaches chance), so the attacks' failure says nothing of the defense.
* resists: the model learned and no attack run succeeded.

A mechanism audit finding (noise missing, reused or unbounded contributions, sampling other than
the ledger's; `privbench.audit.mechanism`) is a violation too.

Non-private baselines get the level "reference": what the attacks reach without any defense.
A cell's verdict is the most severe level any of its findings reaches, so the verdict does not
depend on the order of cells or attacks. Every finding names its evidence; violations and
under-reports also say what would fix them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TypedDict

from privbench.metrics.roc import clear_of_chance
from privbench.report import bounds
from privbench.report.gate_mechanism import held_epsilon, request_findings
from privbench.results.records import AttackResult, AuditCell, AuditRun, JsonObject, as_cell, as_run
from privbench.results.store import (
    CellState,
    attack_metric,
    auc_interval,
    cell_state,
    claimed_eps,
    claimed_for_audit,
    dataset_classes,
    eps_text,
    finite_or_none,
    fmt_num,
    noise_feedback_text,
    uncovered_leaks,
)

LEVELS = ("violates", "under_reports", "diverged", "leaks", "uninformative", "resists")
TITLES = {"violates": "violates its guarantee", "under_reports": "under-reports ε",
          "diverged": "diverged", "leaks": "leaks within its guarantee",
          "uninformative": "uninformative (the model did not learn)", "resists": "resists",
          "reference": "reference (no DP)"}
PSNR_LEAK_DB = 20.0  # a reconstruction at or above this PSNR on [0, 1] images is recognisable
UNDER_REPORT_MARGIN = 0.01  # paper ε below calibrated ε by more than this fraction


class Finding(TypedDict, total=False):
    """One finding of a cell's verdict: its level, the evidence in words, what would fix it,
    and for an attack's finding its strength (PSNR or AUC: the strongest is quoted first)."""

    level: str
    evidence: str
    fix: str
    strength: float


class MembershipFinding(TypedDict, total=False):
    """One membership attack's AUC, its interval, whether it is clear of chance, the message
    kinds it read, and (for a private cell) the AUC bound of the claim and the distance to it."""

    attack: str
    auc: float
    ci: tuple[float, float] | None
    uses: list[str]
    success: bool
    bound_auc: float
    closeness: float | None


class CellVerdict(TypedDict):
    """The verdict of one cell: level and its title, the cell named for people, its findings
    and its training state."""

    level: str
    title: str
    where: str
    findings: list[Finding]
    state: CellState


class DefenseVerdict(TypedDict):
    """The verdict of one defense: its worst cell's level, the title, whether it is private,
    every cell's verdict (input order) and the evidence lines, the most severe first."""

    level: str
    title: str
    private: bool
    cells: list[CellVerdict]
    reasons: list[str]


def severity(level: str) -> int:
    """Rank of a level: 0 is the most severe ("reference" ranks after "resists")."""
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def where(cell: AuditCell | JsonObject) -> str:
    """How a cell is named to people: "ε=1", "no DP", or its setting's label."""
    cell = as_cell(cell)
    if cell.setting:
        return str(cell.setting.get("label", "paper setting"))
    return eps_text(cell.epsilon)


def _ok(att: AttackResult) -> bool:
    return att.status.measured


def membership_findings(cell: AuditCell) -> list[MembershipFinding]:
    """Per membership attack: AUC, interval, success and distance to the DP bound."""
    eps, delta, _ = claimed_for_audit(cell)
    out = []
    for name, att in sorted(cell.attacks.items()):
        auc = finite_or_none(att.metrics.get("auc"))
        if auc is None or not _ok(att):
            continue
        ci = auc_interval(att)
        item: MembershipFinding = {"attack": name, "auc": auc, "ci": ci, "uses": list(att.uses),
                                   "success": clear_of_chance(ci, 0.5)}
        if eps is not None:
            b_auc = bounds.eps_delta_auc(eps, delta or 0.0)
            item.update(bound_auc=b_auc, closeness=bounds.closeness(auc, b_auc))
        out.append(item)
    return out


def _text_auc(m: MembershipFinding) -> str:
    ci = m.get("ci")
    text = f"{m['attack']} AUC {fmt_num(m['auc'])}"
    if ci:
        text += f" [{fmt_num(ci[0])}, {fmt_num(ci[1])}]"
    if m.get("closeness") is not None:
        text += (f", {100 * m['closeness']:.0f}% of the way from chance to the DP bound "
                 f"(AUC ≤ {fmt_num(m['bound_auc'])})")
    return text


def _inversion_hits(cell: AuditCell) -> list[tuple[str, float, list[str]]]:
    """(attack, PSNR, message kinds its views were derived from) of recognisable inversions."""
    hits = []
    for name, att in sorted(cell.attacks.items()):
        psnr = finite_or_none(att.metrics.get("psnr"))
        if _ok(att) and psnr is not None and psnr >= PSNR_LEAK_DB:
            hits.append((name, psnr, list(att.uses)))
    return sorted(hits, key=lambda h: -h[1])  # the strongest first


def realized_overspend(cell: AuditCell | JsonObject) -> str | None:
    """A sentence when a defense's realized ε (DPPS / PartPSP: the noise drawn w.r.t. the true
    sensitivity) exceeds the ε it assumed, else None."""
    cell = as_cell(cell)
    reps = cell.privacy
    real = [r for r in reps if r.get("reading") == "realized"]
    assumed = [r for r in reps if r.get("mode") == "calibrated" and r.get("reading") == "assumed"]
    if not real or not assumed:
        return None
    worst = max(float(r["epsilon"]) for r in real)  # "inf" -> inf
    top = max(assumed, key=lambda r: float(r["epsilon"]))
    claim = float(top["epsilon"])
    if worst <= claim * (1 + 1e-6):
        return None
    per_round = finite_or_none(top.get("epsilon_round"))
    if per_round and claim != per_round:
        ran = round(claim / per_round)
        stopped = (f"; training stopped there, so it is below the target {eps_text(target)}"
                   if isinstance(target := cell.epsilon, (int, float)) and claim < target
                   else "")
        claim_text = (f"{fmt_num(claim)} (its per-round ε {fmt_num(per_round)} composed over "
                      f"the {ran} rounds that ran{stopped})")
    else:
        claim_text = fmt_num(claim)
    check = real[0].get("sensitivity_check") or {}
    below = _rounds(check, "estimate_below_real")
    why = f"the sensitivity estimate fell below the real one in {below}"
    if check.get("non_finite_count"):
        why += f", {_rounds(check, 'non_finite_count')} non-finite"
        cause = noise_feedback_text(real)  # non-finite already checked: self_feeding's case
        why += f"; {cause}" if cause else ""
    return f"realized ε {fmt_num(worst)} exceeds the assumed ε {claim_text} ({why})"


def _rounds(check: Mapping[str, object], key: str) -> str:
    """'1 round', 'N rounds', or '? rounds' when the privacy report lacks the count."""
    n = check.get(key, "?")
    return f"{n} round" if n == 1 else f"{n} rounds"


def self_feeding(cell: AuditCell) -> str | None:
    """Why a DPPS cell went non-finite when its noise alone grows the next round's sensitivity
    (the privacy report's `noise_feedback`, growth > 1 per round), else None."""
    real = [r for r in cell.privacy if r.get("reading") == "realized"]
    if not real or not (real[0].get("sensitivity_check") or {}).get("non_finite_count"):
        return None
    return noise_feedback_text(real)


def _accounting_findings(cell: AuditCell, here: str, emp: float | None) -> list[Finding]:
    """Findings read from the privacy reports alone (they hold whatever training did); `emp`:
    the cell's empirical ε where its attacks are read."""
    findings: list[Finding] = []
    overspend = realized_overspend(cell)
    if overspend:
        fix = ("a per-round ε above the bound named (sharing fewer coordinates lowers it): "
               "below it the noise feeds its own sensitivity, whatever the graph or estimate"
               if self_feeding(cell) else
               "bound the sensitivity by clipping instead of estimating it, or run on a "
               "doubly-stochastic graph where Lemma 2 holds")
        findings.append({"level": "violates", "evidence": f"{here}: {overspend}", "fix": fix})
    paper, cal = claimed_eps(cell, "paper"), claimed_eps(cell, "calibrated")
    if paper is not None and cal is not None and paper < cal * (1 - UNDER_REPORT_MARGIN):
        measured = (f"; an attack here certifies ε ≥ {fmt_num(emp)}, above the paper's ε"
                    if emp is not None and emp > paper else "")
        findings.append({"level": "under_reports", "evidence": f"{here}: the paper's ε "
                         f"{fmt_num(paper)} is below the rigorous ε {fmt_num(cal)}{measured}",
                         "fix": "report (and calibrate noise with) the rigorous accountant"})
    return findings


def mechanism_findings(cell: AuditCell, here: str) -> list[Finding]:
    """The mechanism audit's findings (each a violation) and a measured ε above its claim."""
    att = cell.attacks.get("mechanism")
    mech = att.mechanism if att is not None and _ok(att) else None
    if not mech:
        return []
    out: list[Finding] = [{"level": "violates", "evidence": f"{here}: mechanism audit: {text}",
            "fix": "noise every covered message afresh each round, with the sensitivity and "
                   "sampling the ledger accounts"} for text in mech.get("findings") or []]
    out += [{"level": "violates", "evidence": f"{here}: the ledger is not held to the request: "
             f"{text}", "fix": "calibrate and state the ledger for the ε, δ and rounds the run "
                               "asks"} for text in request_findings(cell, mech)]
    eps = mech.get("epsilon") or {}
    lo = (eps.get("interval") or [None])[0]
    if eps.get("applicable") and finite_or_none(lo) is not None and \
            lo > held_epsilon(cell, eps):
        out.append({"level": "violates", "evidence": f"{here}: the mechanism audit measures ε "
                    f"{fmt_num(eps['epsilon'])} [{fmt_num(eps['interval'][0])}, "
                    f"{fmt_num(eps['interval'][1])}] above the ε it is held to "
                    f"{fmt_num(held_epsilon(cell, eps))} (claimed {fmt_num(eps['claimed'])})",
                    "fix": "the noise drawn or the sampling "
                    "rate is not the one the ledger accounts"})
    return out


def _attack_findings(cell: AuditCell, here: str) -> list[Finding]:
    """Findings from the attacks that ran: an empirical ε above the claim, recognisable
    reconstructions (the strongest attack quoted), membership inference clear of chance."""
    findings: list[Finding] = []
    private = bool(cell.privacy)
    eps, _, which = claimed_for_audit(cell)
    emp = attack_metric(cell, "empirical_epsilon")
    if private and emp is not None and eps is not None and emp > eps:
        findings.append({"level": "violates", "evidence": f"{here}: empirical ε lower bound "
                         f"{fmt_num(emp)} exceeds the {which} ε {fmt_num(eps)}",
                         "fix": "the noise or the accounting is wrong for what the trainer "
                                "does: check the sampling and sensitivity the accountant assumes"})
    leaks = set(uncovered_leaks(cell)) if private else set()
    hits = _inversion_hits(cell)
    if hits:
        name, psnr, uses = hits[0]
        others = "".join(f"; {n} {fmt_num(p)} dB" for n, p, _ in hits[1:])
        exploited = sorted(leaks & set(uses))
        if exploited:
            findings.append({"level": "violates", "strength": psnr,
                             "evidence": f"{here}: {name} reconstructs "
                             f"the victim's images (PSNR {fmt_num(psnr)} dB{others}) from "
                             f"{', '.join(exploited)}, a data-dependent message outside the DP "
                             "guarantee", "fix": f"noise or stop sending {', '.join(exploited)} "
                                                 "(cover it by the mechanism)"})
        else:
            findings.append({"level": "leaks", "strength": psnr,
                             "evidence": f"{here}: {name} reconstructs the "
                             f"victim's images (PSNR {fmt_num(psnr)} dB ≥ {PSNR_LEAK_DB:g}"
                             f"{others})"})
    for m in sorted(membership_findings(cell), key=lambda m: -m["auc"]):
        exploited = sorted(leaks & set(m["uses"]))
        if m["success"] and exploited:
            findings.append({"level": "violates", "strength": m["auc"],
                             "evidence": f"{here}: {_text_auc(m)}, read "
                             f"from {', '.join(exploited)}, a data-dependent message outside "
                             "the DP guarantee", "fix": f"noise or stop sending "
                                                        f"{', '.join(exploited)}"})
        elif m["success"]:
            findings.append({"level": "leaks", "strength": m["auc"],
                             "evidence": f"{here}: {_text_auc(m)}"})
    if leaks and not any(f["level"] == "violates" for f in findings):
        findings.append({"level": "resists", "evidence": f"{here}: {', '.join(sorted(leaks))} "
                         "lies outside the DP guarantee; no attack here exploited it"})
    return findings


def cell_verdict(cell: AuditCell | JsonObject, classes: int | None = None
                 ) -> CellVerdict:
    """The verdict of one (defense, ε) cell: level, findings (level, evidence, fix) and the
    cell's training state (`results.cell_state`; `classes` sets chance accuracy).

    A diverged cell is judged on its privacy reports and its mechanism audit only (its attacks
    did not run on a finite model); a cell whose model did not learn is "uninformative", never
    "resists".
    """
    cell = as_cell(cell)
    here = where(cell)
    private = bool(cell.privacy)
    state = cell_state(cell, classes)
    emp = None if state["kind"] == "diverged" else attack_metric(cell, "empirical_epsilon")
    findings = _accounting_findings(cell, here, emp) if private else []
    findings += mechanism_findings(cell, here) if private else []
    if state["kind"] == "diverged":
        findings.append({"level": "diverged", "evidence": f"{here}: {state['text']}; its "
                         "attacks are not read (no empirical ε, no attack verdict)"})
    else:
        findings += _attack_findings(cell, here)
        if state["kind"] == "uninformative" and not any(
                f["level"] in ("violates", "leaks") for f in findings):
            findings.append({"level": "uninformative", "evidence": f"{here}: {state['text']}: "
                             "no attack succeeded, but on a model that learned nothing"})
    if not any(f["level"] != "resists" for f in findings):
        findings.append({"level": "resists", "evidence": f"{here}: no attack succeeded "
                         f"(PSNR < {PSNR_LEAK_DB:g} dB, no AUC interval clear of 0.5)"})
    level = min((f["level"] for f in findings), key=severity)
    if not private:
        level = "reference"
    return {"level": level, "title": TITLES[level], "where": here, "findings": findings,
            "state": state}


def _title(level: str, per: list[CellVerdict]) -> str:
    """The defense's title: its level, then the cells whose training did not give a model to
    judge (diverged, did not learn) when the level does not already say so."""
    title = TITLES[level]
    for kind, words in (("diverged", "diverged"), ("uninformative", "did not learn")):
        at = [v["where"] for v in per if v["state"]["kind"] == kind]
        if at and level != kind:
            title += f"; {words} at {', '.join(at)}"
    return title


def verdicts(results: AuditRun | JsonObject) -> dict[str, DefenseVerdict]:
    """Per defense: the worst cell's level over its ε grid, with every cell's verdict, ordered
    by severity (then name), the non-private references last.

    Returns:
        {defense: {"level", "title", "private", "cells": [cell verdicts in input order],
        "reasons": evidence lines of the findings, the most severe first (within a level in
        cell order, the strongest attack first)}}.
    """
    results = as_run(results)
    classes = dataset_classes(results)
    by_def: dict[str, list[AuditCell]] = defaultdict(list)
    for cell in results.cells:
        by_def[cell.defense].append(cell)
    out: dict[str, DefenseVerdict] = {}
    for name, cells in by_def.items():
        per = [cell_verdict(c, classes) for c in cells]
        private = any(c.privacy for c in cells)
        level = min((v["level"] for v in per), key=severity) if private else "reference"
        found = sorted((f for v in per for f in v["findings"]),
                       key=lambda f: (severity(f["level"]), -f.get("strength", 0.0),
                                      f["evidence"]))
        reasons = _with_fixes([f for f in found if private or f["level"] != "resists"])
        out[name] = {"level": level, "title": _title(level, per), "private": private,
                     "cells": per, "reasons": reasons or [f["evidence"] for f in found]}
    order = sorted(out, key=lambda n: (not out[n]["private"], severity(out[n]["level"]), n))
    return {n: out[n] for n in order}


def _with_fixes(found: list[Finding]) -> list[str]:
    """Each finding's evidence, with its fix where that fix was not said by an earlier finding
    of the same defense (cells at several ε often share one)."""
    said: set[str] = set()
    out = []
    for f in found:
        fix = f.get("fix")
        out.append(f["evidence"] + (f" — fix: {fix}" if fix and fix not in said else ""))
        said.add(fix or "")
    return out


def verdict_summary(results: AuditRun | JsonObject) -> str:
    """The terminal's verdict block: one line per defense, its level and the finding that set
    it (the most severe, with its fix), and how many more findings the report lists."""
    lines = ["verdicts (per defense, its most severe cell; every finding in index.html):"]
    for name, v in verdicts(results).items():
        more = len(v["reasons"]) - 1
        tail = f" (+{more} more finding{'s' if more != 1 else ''})" if more > 0 else ""
        lines.append(f"  {name}: {v['title']} — {v['reasons'][0]}{tail}")
    return "\n".join(lines)

