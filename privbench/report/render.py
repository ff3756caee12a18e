"""Render an audit results dict (schema: `privbench.results`) to one self-contained HTML page.

Audit results hold `cells`, one per (defense, ε): accuracy, per-node privacy reports (paper and
calibrated ε), the defense's message kinds with their DP coverage, and per attack its status,
metrics, the message kinds it used, ROC points and a reconstruction gallery.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import jinja2

from privbench.metrics.roc import clear_of_chance
from privbench.report import plots
from privbench.results import (
    attack_interval,
    attack_metric,
    claimed_eps,
    finite_or_none,
    uncovered_leaks,
)

TEMPLATE = Path(__file__).with_name("template.html.j2")

# Headline thresholds (documented in the report): a reconstruction is "recognisable" at or above
# this PSNR (dB) on [0, 1] images, and membership leaks when the AUC is at or above this value.
PSNR_LEAK_DB = 20.0
AUC_LEAK = 0.6


def verdicts(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A headline verdict per defense: the worst leak found over its ε grid."""
    out: dict[str, dict[str, Any]] = {}
    by_def: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cell in results.get("cells", []):
        by_def[cell["defense"]].append(cell)
    for name, cells in by_def.items():
        reasons, level = [], "resists"
        private = any(c.get("privacy") for c in cells)
        leaks = sorted({k for c in cells for k in uncovered_leaks(c)})
        if leaks and private:
            reasons.append("data-dependent messages outside the DP guarantee: " + ", ".join(leaks))
            level = "leaks"
        for c in cells:
            eps = c.get("epsilon")
            where = f"ε={eps:g}" if isinstance(eps, (int, float)) else "no DP"
            psnr, auc = attack_metric(c, "psnr"), attack_metric(c, "auc")
            if psnr is not None and psnr >= PSNR_LEAK_DB:
                reasons.append(f"recognisable reconstructions at {where} (PSNR {psnr:.1f} dB)")
                level = "leaks"
            if auc is not None and auc >= AUC_LEAK and _clear_of_chance(c):
                reasons.append(f"membership inference at {where} (AUC {auc:.2f}"
                               f"{_ci_text(attack_interval(c, 'auc'))})")
                level = "leaks"
            realized = realized_overspend(c)
            if realized:
                reasons.append(f"{realized} at {where}")
                level = "violates"
            emp, cal = attack_metric(c, "empirical_epsilon"), claimed_eps(c, "calibrated")
            if emp is not None and cal is not None and emp > cal:
                reasons.append(f"empirical ε {emp:.2f} exceeds the calibrated ε {cal:.2f} "
                               f"at {where}")
                level = "violates"
        if not reasons:
            reasons.append("no attack run here succeeded (PSNR < "
                           f"{PSNR_LEAK_DB:g} dB, AUC < {AUC_LEAK:g})")
        out[name] = {"level": level if private or level != "resists" else "baseline",
                     "private": private, "reasons": reasons}
    return out


def _clear_of_chance(cell: dict[str, Any]) -> bool:
    """Whether the worst-case AUC's 95 % interval lies above chance (0.5); results without an
    interval (older files) are judged on the point value alone."""
    ci = attack_interval(cell, "auc")
    return ci is None or clear_of_chance(ci, 0.5)


def _ci_text(ci: list[float] | None) -> str:
    return "" if ci is None else f", 95 % CI [{ci[0]:.2f}, {ci[1]:.2f}]"


def realized_overspend(cell: dict[str, Any]) -> str | None:
    """A sentence when a defense's realized ε (DPPS / PartPSP: the noise drawn w.r.t. the true
    sensitivity) exceeds the ε it assumed, else None."""
    reps = cell.get("privacy", [])
    real = [r for r in reps if r.get("reading") == "realized"]
    assumed = [r for r in reps if r.get("mode") == "calibrated" and r.get("reading") == "assumed"]
    if not real or not assumed:
        return None
    as_float = [float(r["epsilon"]) for r in real]  # "inf" -> inf
    worst, claim = max(as_float), max(float(r["epsilon"]) for r in assumed)
    if worst <= claim * (1 + 1e-6):
        return None
    check = real[0].get("sensitivity_check") or {}
    why = (f"the sensitivity estimate fell below the real one in "
           f"{check.get('estimate_below_real', '?')} rounds")
    if check.get("non_finite_count"):
        why += f", {check['non_finite_count']} rounds non-finite"
    return f"realized ε {worst:.3g} exceeds the assumed ε {claim:.3g} ({why})"


def _plots(results: dict[str, Any]) -> dict[str, str | None]:
    series: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    base: dict[str, dict[str, float]] = defaultdict(dict)
    curves = []
    for cell in results.get("cells", []):
        eps, name = cell.get("epsilon"), cell["defense"]
        values = {"accuracy": finite_or_none(cell.get("accuracy")),
                  "psnr": attack_metric(cell, "psnr"), "ssim": attack_metric(cell, "ssim"),
                  "auc": attack_metric(cell, "auc")}
        for key, v in values.items():
            if v is None:
                continue
            if isinstance(eps, (int, float)):
                series[key][name].append((float(eps), v))
            else:
                base[key][name] = v
        for aname, att in cell.get("attacks", {}).items():
            roc = att.get("roc")
            if roc and roc.get("fpr"):
                where = f"ε={eps:g}" if isinstance(eps, (int, float)) else "no DP"
                curves.append((f"{name} {where} {aname}", roc["fpr"], roc["tpr"]))
    return {
        "accuracy": plots.metric_vs_eps(series["accuracy"], base["accuracy"], "test accuracy",
                                        "Utility: accuracy of the average model vs ε"),
        "psnr": plots.metric_vs_eps(series["psnr"], base["psnr"], "PSNR (dB, best attack)",
                                    "Reconstruction: PSNR vs ε"),
        "ssim": plots.metric_vs_eps(series["ssim"], base["ssim"], "SSIM (best attack)",
                                    "Reconstruction: SSIM vs ε"),
        "auc": plots.metric_vs_eps(series["auc"], base["auc"], "AUC (best MIA)",
                                   "Membership inference: AUC vs ε"),
        "roc": plots.roc_loglog(curves),
        "sensitivity": plots.sensitivity_traces(
            [(f"{c['defense']}@{c.get('epsilon')}", c["sensitivity_trace"])
             for c in results.get("cells", [])
             if c.get("sensitivity_trace")]),
    }


def _galleries(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cell in results.get("cells", []):
        for aname, att in cell.get("attacks", {}).items():
            gal = att.get("gallery")
            if gal and gal.get("true") and gal.get("reconstructed"):
                out.append({"defense": cell["defense"], "epsilon": cell.get("epsilon"),
                            "attack": aname,
                            "png": plots.image_grid([gal["true"], gal["reconstructed"]])})
    return out


def _message_map(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for cell in results.get("cells", []):
        for m in cell.get("messages", []):
            key = (cell["defense"], m["name"])
            row = rows.setdefault(key, {"defense": cell["defense"], **m, "used_by": set()})
            for aname, att in cell.get("attacks", {}).items():
                if m["name"] in att.get("uses", []):
                    row["used_by"].add(aname)
    return [dict(r, used_by=sorted(r["used_by"])) for _, r in sorted(rows.items())]


def _ci_cell(ci: list[float] | None) -> str:
    """An interval as shown under a value in the report's tables ("" when none)."""
    return "" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _fmt(x: Any, digits: int = 3) -> str:
    if x == float("inf") or x == "inf":
        return "∞"
    v = finite_or_none(x)
    return "–" if v is None else f"{v:.{digits}f}"


def render_html(results: dict[str, Any], run_name: str | None = None) -> str:
    """The self-contained audit page for an audit results dict.

    `run_name` (the output folder's name) titles the page; results.json does not hold it, so
    that the same audit written into another folder gives the same results.json.
    """
    results = {**results, "run_name": run_name or results.get("run_name") or "audit"}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    env.filters["fmt"] = _fmt
    env.filters["ci"] = _ci_cell
    env.globals.update(claimed_eps=claimed_eps, attack_metric=attack_metric,
                       attack_interval=attack_interval, uncovered_leaks=uncovered_leaks)
    return env.get_template(TEMPLATE.name).render(
        r=results, verdicts=verdicts(results), plots=_plots(results),
        galleries=_galleries(results), message_map=_message_map(results),
        psnr_leak=PSNR_LEAK_DB, auc_leak=AUC_LEAK)


def merge_results(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge several audit results into one (cells concatenated; later duplicates win)."""
    if len(items) == 1:
        return items[0]
    merged = dict(items[0])
    cells: dict[tuple[str, Any], dict[str, Any]] = {}
    for res in items:
        for cell in res.get("cells", []):
            cells[(cell["defense"], cell.get("epsilon"))] = cell
    merged["cells"] = list(cells.values())
    merged["run_name"] = " + ".join(str(r.get("run_name", "?")) for r in items)
    merged["merged_from"] = [r.get("run_name") for r in items]
    return merged
