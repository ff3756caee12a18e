"""The privacy regression gate: `privbench check RESULTS.json --policy privacy.toml`.

A policy is TOML. Each `[[bound]]` table applies to the cells it selects (`defense`, default "*";
`eps`, default every ε; "none" selects the non-private cell, "private" every cell with a
privacy claim, at any ε of the grid or a paper setting, "requested" every cell at an ε of the
grid, whatever the grid) and names any of these bounds:

    max_psnr, max_ssim, min_mse, max_lpips_similarity (= max of 1 - LPIPS), max_label_accuracy,
    max_auc, max_tpr_at_fpr = {fpr = 0.01, tpr = 0.05}, min_accuracy,
    require_sampling_match (the sampling scheme drawn is the scheme each ledger accounts),
    max_measured_ratio (the mechanism audit's measured ε, at the run's δ over its rounds, / the
    smaller of the requested and the claimed ε: fails when the lower end of its interval is
    above the bound, on a ledger stated for another δ or round count or claiming more than was
    asked, and when the audit could not measure it, saying why; `gate_mechanism`),
    require_mechanism (the mechanism audit ran and found nothing: every covered data-dependent
    message noised, noise fresh across rounds and nodes, one sample's contribution bounded,
    the replay equal to the run), require_sampling_rate (every node's realised sampling rate
    consistent with its ledger's: a test on the rate, not the scheme's name),
    max_empirical_ratio (empirical ε lower bound / claimed ε; fails when the audit's cap, the ε a
    perfect attack would certify, is not above the bound), require_coverage (no uncovered
    data-dependent message kind), min_psnr / min_auc (floors that prove an attack still works,
    for the non-private baseline: a gate that can fail both ways)

Reconstruction and MIA metrics are read as the worst case over a cell's attacks
(`privbench.results.attack_metric`). A `[tolerance]` table gives, per metric, how far a value may
move toward less privacy relative to `--baseline BASELINE.json` before it is flagged (defaults
below; `--tolerance` scales them all).

A check that cannot tell its bound from one `factor` times weaker is INCONCLUSIVE, with what it
resolved and what would resolve it; `[inconclusive]` sets `action` ("fail", the default, or
"warn") and `factor` (default `gate_mechanism.DEFAULT_FACTOR`).

Exit codes: 0 all checks hold, 1 any violated, 2 malformed policy or results (one-line error).
The gate never passes having checked nothing: a bound with selectors but no limit, a run where
no check was evaluated, and a `--baseline` sharing no (defense, ε) cell with the results are
each a failed check (exit 1) that says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict
from xml.etree import ElementTree as ET

from privbench.config import read_toml
from privbench.errors import ConfigError
from privbench.report.gate_mechanism import DEFAULT_FACTOR, MECHANISM_RULES, Check
from privbench.report.text import plain
from privbench.results.outcome import Word
from privbench.results.records import AttackResult, AuditCell, AuditRun, JsonObject, as_cell, as_run
from privbench.results.store import (
    attack_metric,
    cell_state,
    claimed_eps,
    dataset_classes,
    eps_label,
    finite_or_none,
    fmt_num,
    uncovered_leaks,
)

# bound key -> (metric, comparison): value must be <= bound for "max", >= for "min".
SIMPLE_BOUNDS: dict[str, tuple[str, str]] = {
    "max_psnr": ("psnr", "max"), "max_ssim": ("ssim", "max"), "min_mse": ("mse", "min"),
    "max_label_accuracy": ("label_accuracy", "max"), "max_auc": ("auc", "max"),
    "min_accuracy": ("accuracy", "min"), "min_psnr": ("psnr", "min"), "min_auc": ("auc", "min"),
    "max_lpips_similarity": ("lpips_similarity", "max"),
}
OTHER_BOUNDS = ("max_tpr_at_fpr", "max_empirical_ratio", "require_coverage",
                "require_sampling_match", "max_measured_ratio", "require_mechanism",
                "require_sampling_rate")
FLAGS = ("require_coverage", "require_sampling_match", "require_mechanism",
         "require_sampling_rate")
SELECTORS = ("defense", "eps")
# Direction in which a metric moving means *less* privacy, and its default tolerance.
BASELINE_METRICS: dict[str, tuple[int, float]] = {
    "psnr": (+1, 1.0), "ssim": (+1, 0.05), "mse": (-1, 0.002), "label_accuracy": (+1, 0.1),
    "auc": (+1, 0.03), "tpr_at_1%_fpr": (+1, 0.03), "empirical_epsilon": (+1, 0.25),
}


class TprLimit(TypedDict):
    """`max_tpr_at_fpr = {fpr = ..., tpr = ...}`."""

    fpr: float
    tpr: float


class Bound(TypedDict, total=False):
    """One `[[bound]]` table of a policy: its selectors and limits (see the module's doc)."""

    defense: str
    eps: float | str
    max_psnr: float
    max_ssim: float
    min_mse: float
    max_lpips_similarity: float
    max_label_accuracy: float
    max_auc: float
    max_tpr_at_fpr: TprLimit
    min_accuracy: float
    min_psnr: float
    min_auc: float
    max_empirical_ratio: float
    max_measured_ratio: float
    require_coverage: bool
    require_sampling_match: bool
    require_mechanism: bool
    require_sampling_rate: bool


class Inconclusive(TypedDict, total=False):
    """`[inconclusive]`: what a check that could not decide does (`action`, "fail" or "warn",
    default "fail") and how far above its bound a check's interval may reach before it cannot
    decide (`factor`, default `gate_mechanism.DEFAULT_FACTOR`)."""

    action: str
    factor: float


class Policy(TypedDict, total=False):
    """A policy file: its bounds, the baseline tolerances by metric, and what an inconclusive
    check does."""

    bound: list[Bound]
    tolerance: dict[str, float]
    inconclusive: Inconclusive


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file (one-line ConfigError on any problem)."""
    policy = read_toml(path, "policy file")
    unknown = set(policy) - {"bound", "tolerance", "inconclusive"}
    if unknown:
        raise ConfigError(f"policy {path}: unknown section(s) {sorted(unknown)}; "
                          "accepted: [[bound]], [tolerance], [inconclusive]")
    bounds = policy.get("bound", [])
    if not isinstance(bounds, list) or not bounds:
        raise ConfigError(f"policy {path}: needs at least one [[bound]] table")
    accepted = sorted([*SIMPLE_BOUNDS, *OTHER_BOUNDS, *SELECTORS])
    for i, b in enumerate(bounds):
        for key, value in b.items():
            if key not in accepted:
                raise ConfigError(f"policy {path}: bound #{i + 1} has unknown key {key!r}; "
                                  f"accepted: {', '.join(accepted)}")
            _check_type(path, i, key, value)
    for key, value in policy.get("tolerance", {}).items():
        if key not in BASELINE_METRICS or not _is_number(value) or value < 0:
            raise ConfigError(f"policy {path}: tolerance {key!r} must be a metric of "
                              f"{', '.join(BASELINE_METRICS)} with a number >= 0")
    _check_inconclusive(path, policy.get("inconclusive", {}))
    return policy  # type: ignore[return-value]  (checked above)


def _check_inconclusive(path: str | Path, table: object) -> None:
    """`[inconclusive]`: action "fail" or "warn", factor a number > 1."""
    where = f"policy {path}: [inconclusive]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table with action and factor")
    for key, value in table.items():
        ok = (value in ("fail", "warn") if key == "action" else
              _is_number(value) and value > 1 if key == "factor" else None)
        if ok is None:
            raise ConfigError(f"{where} has unknown key {key!r}; accepted: action, factor")
        if not ok:
            raise ConfigError(f"{where} {key} = {value!r}: action is \"fail\" or \"warn\", "
                              "factor a number > 1")


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_type(path: str | Path, i: int, key: str, value: object) -> None:
    where = f"policy {path}: bound #{i + 1} {key}"
    if key in SIMPLE_BOUNDS or key in ("max_empirical_ratio", "max_measured_ratio"):
        ok = _is_number(value)
    elif key in FLAGS:
        ok = isinstance(value, bool)
    elif key == "defense":
        ok = isinstance(value, str)
    elif key == "eps":
        ok = _is_number(value) or value in ("none", "private", "requested")
    else:  # max_tpr_at_fpr
        ok = (isinstance(value, dict) and set(value) == {"fpr", "tpr"}
              and all(_is_number(v) for v in value.values()))
    if not ok:
        raise ConfigError(f"{where} has the wrong type ({type(value).__name__}: {value!r})")


def _selects(bound: Bound, cell: AuditCell) -> bool:
    if bound.get("defense", "*") not in ("*", cell.defense):
        return False
    if "eps" not in bound:
        return True
    eps = cell.epsilon
    if bound["eps"] == "none":
        return eps is None and not cell.setting  # a paper-setting cell is not "no DP"
    if bound["eps"] == "private":
        return eps is not None or bool(cell.setting)
    if bound["eps"] == "requested":
        return eps is not None and not cell.setting
    return eps is not None and abs(eps - float(bound["eps"])) < 1e-9


def _metric(cell: AuditCell, metric: str) -> float | None:
    if metric == "accuracy":
        return finite_or_none(cell.accuracy)
    if metric == "lpips_similarity":
        lp = attack_metric(cell, "lpips")
        return None if lp is None else 1.0 - lp
    return attack_metric(cell, metric)


def _not_applicable(cell: AuditCell, metric: str) -> str | None:
    """Why no attack of the cell can measure `metric` (say no inversion fits a defense whose
    every release is a local epoch's update): each attack that reports it declared itself not
    applicable; None when one ran, failed, was skipped, or none reports it."""
    carriers = [a for a in cell.attacks.values() if metric in a.metrics]
    if carriers and all(a.status.word is Word.NOT_APPLICABLE for a in carriers):
        return carriers[0].status.text
    return None


def _tpr_at(cell: AuditCell, fpr: float) -> tuple[float | None, bool]:
    """Best TPR at FPR <= fpr over the cell's attacks, and whether every reading is resolved.

    Read exactly: from an attack's `tpr_at_fpr` entry at this FPR when it stores one, else from
    its exact ROC corners (`roc_steps`); only results without either (older files) fall back to
    the plotted `roc` grid, which can under-read the TPR between grid points. A reading is
    resolved when the attack has enough non-members for one false positive under the FPR.
    """
    best, resolved = None, True
    for att in cell.attacks.values():
        if not att.status.measured:
            continue
        tpr, ok = _exact_tpr(att, fpr)
        resolved = resolved and ok
        if tpr is None:
            continue
        best = tpr if best is None else max(best, tpr)
    return best, resolved


def _exact_tpr(att: AttackResult, fpr: float) -> tuple[float | None, bool]:
    """One attack's TPR at FPR <= fpr (exact where stored) and whether it is resolved."""
    n_neg = att.n_nonmembers
    ok = n_neg is None or n_neg * fpr >= 1.0 - 1e-9
    for item in att.tpr_at_fpr:
        if abs(float(item["fpr"]) - fpr) < 1e-12:
            return item.get("tpr"), bool(item.get("resolved", ok)) and item.get("tpr") is not None
    roc = att.roc_steps or att.roc or {}
    pts = [t for f, t in zip(roc.get("fpr", []), roc.get("tpr", []), strict=False)
           if f <= fpr + 1e-12]
    return (max(pts) if pts else None), ok


def cell_label(cell: AuditCell | JsonObject) -> str:
    """defense@ε (or defense@no-DP, defense@paper at a fixed paper setting, defense@paper-eps8
    at the paper's reading of ε = 8)."""
    cell = as_cell(cell)
    eps, setting = cell.epsilon, cell.setting
    if setting:
        return f"{cell.defense}@{setting.get('name', 'paper')}"
    return f"{cell.defense}@{'no-DP' if eps is None else eps_label(eps)}"


ATTACK_BOUNDS = frozenset(k for k, (m, _) in SIMPLE_BOUNDS.items() if m != "accuracy") | {
    "max_tpr_at_fpr", "max_empirical_ratio"}


# the attack kinds that train their own run (`privbench.audit.attack`: the canary audit
# retrains the defense with its canaries, the mechanism audit replays its own run): their
# readings stand on a cell whose training diverged
OWN_RUN_KINDS = frozenset({"canary", "mechanism"})


def check_bound(bound: Bound, cell: AuditCell | JsonObject,
                classes: int | None = None, factor: float = DEFAULT_FACTOR) -> list[Check]:
    """Evaluate one [[bound]] table on one cell (a record, or a results.json cell object). On
    a diverged cell (`results.cell_state`) every attack bound fails as not measured, except
    what the audits that train their own run measure (the canary audit's empirical ratio, as
    the mechanism rules read the mechanism audit); on one whose model did not learn, its detail
    says so. `factor`: how far above its bound an interval may reach before the check is
    INCONCLUSIVE."""
    cell = as_cell(cell)
    out = []
    label = cell_label(cell)
    state = cell_state(cell, classes)
    if state["kind"] == "diverged":
        own = {k: a for k, a in cell.attacks.items() if a.kind in OWN_RUN_KINDS}
        cell = dataclasses.replace(cell, attacks=own)
        kept = {"max_empirical_ratio"} if attack_metric(cell, "empirical_epsilon") else set()
        out = [Check(f"{label} {key}", False, f"not measured: training {state['text']}")
               for key in bound if key in ATTACK_BOUNDS - kept]
        bound = {k: v for k, v in bound.items()  # type: ignore[assignment]
                 if k not in ATTACK_BOUNDS - kept}
    out += _checks(bound, cell, label, factor)
    if state["kind"] == "uninformative":
        out = [dataclasses.replace(c, detail=f"{c.detail}; {state['text']}")
               if c.name.removeprefix(f"{label} ").split(" ")[0] in ATTACK_BOUNDS else c
               for c in out]
    return out


def _checks(bound: Bound, cell: AuditCell, label: str, factor: float) -> list[Check]:
    out = []
    for key, limit in bound.items():
        if key in SIMPLE_BOUNDS:
            metric, kind = SIMPLE_BOUNDS[key]
            value = _metric(cell, metric)
            why = _not_applicable(cell, metric) if value is None else None
            if why is not None:
                out.append(Check(f"{label} {key}", True, f"{metric} {why}", applicable=False))
                continue
            if value is None:
                out.append(Check(f"{label} {key}", False, f"{metric} was not measured"))
                continue
            ok = value <= limit if kind == "max" else value >= limit
            out.append(Check(f"{label} {key}", ok,
                             f"{metric} = {fmt_num(value)} (bound {limit:g})"))
        elif key == "max_tpr_at_fpr":
            tpr, resolved = _tpr_at(cell, limit["fpr"])
            ok = tpr is not None and resolved and tpr <= limit["tpr"]
            shown = (f"unresolved (too few non-members for FPR {limit['fpr']:g})"
                     if not resolved else "not measured" if tpr is None else fmt_num(tpr))
            out.append(Check(f"{label} max_tpr_at_fpr", ok,
                             f"TPR at FPR <= {limit['fpr']:g} = {shown} (bound {limit['tpr']:g})"))
        elif key == "max_empirical_ratio":
            out.append(empirical_ratio_check(label, cell, limit))
        elif key == "require_coverage" and limit:
            leaks = uncovered_leaks(cell)
            out.append(Check(f"{label} require_coverage", not leaks,
                             "all data-dependent messages covered" if not leaks else
                             "uncovered data-dependent messages: " + ", ".join(leaks)))
        elif key == "require_sampling_match" and limit:
            out.append(sampling_check(label, cell))
        elif key in MECHANISM_RULES and limit is not False:
            out.append(MECHANISM_RULES[key](label, cell, limit, factor))
    return out


def sampling_check(label: str, cell: AuditCell) -> Check:
    """The sampling the trainer drew (`sampling_drawn`, recorded by the data layer while the
    cell trained) is the sampling every privacy report accounts (its `sampling` field); a ledger
    without subsampling amplification ("none") fits any draw."""
    name = f"{label} require_sampling_match"
    drawn = cell.trained.sampling_drawn
    claimed = {str(r.get("sampling")) for r in cell.privacy}
    if drawn is None:
        return Check(name, False, "the sampling drawn was not recorded")
    if not cell.privacy or "None" in claimed:
        return Check(name, False, "a privacy report records no sampling model")
    wrong = sorted((claimed - {"none"}) - set(drawn))
    detail = f"drawn {', '.join(drawn) or 'nothing'}; accounted {', '.join(sorted(claimed))}"
    return Check(name, not wrong and (claimed == {"none"} or set(drawn) <= claimed), detail)


def empirical_ratio_check(label: str, cell: AuditCell | JsonObject,
                          limit: float) -> Check:
    """empirical ε / claimed ε <= limit, and only where the audit could have failed it.

    The empirical ε is the largest lower bound over the cell's audits (`attack_metric`), its cap
    the largest ε any of them could certify with a perfect attack (`empirical_epsilon_cap`: the
    canary count of the one-run audit, the member / non-member counts of the ROC bound). A cap
    below limit x claimed means no outcome of the audit could exceed the bound: that check cannot
    fail, so it is not a pass. An audit that reports `empirical_ratio` (the canary audit: each
    node's bound over that node's own claim in the audited run) is held to that ratio too.
    """
    name = f"{label} max_empirical_ratio"
    cell = as_cell(cell)
    emp, cal = attack_metric(cell, "empirical_epsilon"), claimed_eps(cell, "calibrated")
    cap = attack_metric(cell, "empirical_epsilon_cap")
    own = attack_metric(cell, "empirical_ratio")  # an audit's bound over its node's own claim
    if emp is None or not cal:
        return Check(name, False, "empirical or calibrated ε missing")
    ratio = max(emp / cal, own or 0.0)
    detail = (f"empirical {emp:.3g} (cap {'not recorded' if cap is None else f'{cap:.3g}'}) / "
              f"claimed {cal:.3g} = {emp / cal:.3g}"
              + ("" if own is None else f"; over the audited node's own claim {own:.3g}")
              + f" (bound {limit:g})")
    if cap is None or cap <= limit * cal:
        return Check(name, True, f"INCONCLUSIVE: the audit cannot fail, a perfect attack "
                                 f"certifies at most the cap, not above {limit:g} x {cal:.3g}; "
                                 f"{detail}; more canaries (a larger cap) would resolve it",
                     inconclusive=True)
    if ratio > limit:
        return Check(name, False, f"overspend: ε is at least {emp:.3g}; {detail}")
    return Check(name, True, f"no evidence of overspend (ε >= {emp:.3g} shown; the audit could "
                             f"show up to {cap / cal:.3g}x the claim); {detail}")


def compare_baseline(results: AuditRun, baseline: AuditRun, tolerances: Mapping[str, float],
                     scale: float = 1.0) -> list[Check]:
    """Flag metrics that moved toward less privacy than the baseline beyond their tolerance."""
    base_cells = {cell_label(c): c for c in baseline.cells}
    common = [cell_label(c) for c in results.cells if cell_label(c) in base_cells]
    if not common:
        return [Check("baseline", False, "the baseline shares no (defense, ε) cell with the "
                      f"results (baseline: {', '.join(sorted(base_cells)) or 'no cells'}); "
                      "nothing was compared")]
    out = []
    for cell in results.cells:
        label = cell_label(cell)
        ref = base_cells.get(label)
        if ref is None:
            continue
        for metric, (direction, default_tol) in BASELINE_METRICS.items():
            now, before = attack_metric(cell, metric), attack_metric(ref, metric)
            if now is None or before is None:
                continue
            tol = tolerances.get(metric, default_tol) * scale
            worse = (now - before) * direction
            out.append(Check(f"{label} baseline {metric}", worse <= tol,
                             f"{metric} {fmt_num(before)} -> {fmt_num(now)} (tolerance {tol:g} "
                             "toward less privacy)"))
    return out


def run_checks(results: AuditRun | JsonObject, policy: Policy,
               baseline: AuditRun | JsonObject | None = None,
               scale: float = 1.0) -> list[Check]:
    """Every check of a policy (and optional baseline) on an audit's results."""
    results = as_run(results)
    undecided = policy.get("inconclusive", {})
    factor = float(undecided.get("factor", DEFAULT_FACTOR))
    checks: list[Check] = []
    for i, bound in enumerate(policy.get("bound", [])):
        if not _limits(bound):
            checks.append(Check(f"bound #{i + 1}", False, "policy error: the bound has no limit "
                                f"(only selectors); give one of {', '.join(SIMPLE_BOUNDS)}, "
                                f"{', '.join(OTHER_BOUNDS)}"))
            continue
        cells = [c for c in results.cells if _selects(bound, c)]
        if not cells:
            sel = f"defense={bound.get('defense', '*')}, eps={bound.get('eps', '*')}"
            msg = f"selects no cell of the results ({sel})"
            checks.append(Check(f"bound #{i + 1}", False, msg))
        found = [c for cell in cells
                 for c in check_bound(bound, cell, dataset_classes(results), factor)]
        if found and not any(c.applicable and not c.inconclusive for c in found):
            found.append(Check(f"bound #{i + 1}", False, "checked nothing: every check it "
                               "selected is not applicable or inconclusive"))
        checks.extend(found)
    if baseline is not None:
        checks.extend(compare_baseline(results, as_run(baseline), policy.get("tolerance", {}),
                                       scale))
    if not checks:
        checks.append(Check("policy", False, "no check was evaluated (no bound selected a "
                            "cell with a limit to check)"))
    warn = undecided.get("action", "fail") == "warn"
    return [dataclasses.replace(c, passed=warn) if c.inconclusive else c for c in checks]


def _limits(bound: Bound) -> list[str]:
    """The keys of a bound that check something (`require_coverage = false` checks nothing)."""
    return [k for k, v in bound.items() if k not in SELECTORS
            and not (k in FLAGS and v is False)]


def junit_xml(checks: list[Check]) -> str:
    """JUnit XML with one testcase per check."""
    failures = sum(not c.passed for c in checks)
    suite = ET.Element("testsuite", name="privbench-check", tests=str(len(checks)),
                       failures=str(failures), errors="0")
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname="privbench.check", name=c.name)
        detail = plain(c.detail)
        if c.inconclusive:
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="result", value="inconclusive")
        if c.inconclusive and c.passed:  # the policy warns
            ET.SubElement(case, "system-err").text = f"INCONCLUSIVE (warning): {detail}"
        elif not c.passed:
            ET.SubElement(case, "failure", message=detail).text = detail
        elif not c.applicable:
            ET.SubElement(case, "skipped", message=detail)
        else:
            ET.SubElement(case, "system-out").text = detail
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def verdict_word(check: Check) -> str:
    """What a check's result line says: INCONCLUSIVE, N/A, PASS or FAIL."""
    return ("INCONCLUSIVE" if check.inconclusive else "N/A" if not check.applicable
            else "PASS" if check.passed else "FAIL")


def format_table(checks: list[Check]) -> str:
    """A readable table of every check."""
    width = max((len(c.name) for c in checks), default=10)
    lines = [f"{'check':<{width}}  {'result':<12}  detail"]
    for c in checks:
        lines.append(f"{c.name:<{width}}  {verdict_word(c):<12}  {plain(c.detail)}")
    failed = sum(not c.passed and not c.inconclusive for c in checks)
    na = sum(not c.applicable for c in checks)
    undecided = [c for c in checks if c.inconclusive]
    action = "failing" if any(not c.passed for c in undecided) else "warning"
    lines.append(f"{len(checks) - failed - na - len(undecided)} passed, {failed} failed"
                 + (f", {na} not applicable" if na else "")
                 + (f", {len(undecided)} inconclusive ({action})" if undecided else ""))
    return "\n".join(lines)
