"""Render an audit results dict (schema: `privbench.results`) to one self-contained HTML page.

Audit results hold `cells`, one per (defense, ε): accuracy, per-node privacy reports (paper and
calibrated ε), the defense's message kinds with their DP coverage, and per attack its status,
metrics, the message kinds it used, ROC points and a reconstruction gallery.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from markupsafe import Markup

from privbench.report import bounds, plots
from privbench.report.text import Notes, no_paths, prose
from privbench.report.verdicts import (
    LEVELS,
    PSNR_LEAK_DB,
    TITLES,
    membership_findings,
    verdicts,
    where,
)
from privbench.results.store import (
    attack_interval,
    attack_metric,
    auc_interval,
    cell_state,
    claimed_eps,
    claimed_for_audit,
    finite_or_none,
    fmt_num,
    uncovered_leaks,
)

TEMPLATE = Path(__file__).with_name("template.html.j2")

__all__ = ["merge_results", "render_html", "verdicts"]


def _plots(results: dict[str, Any]) -> dict[str, Any]:
    series: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    base: dict[str, dict[str, float]] = defaultdict(dict)
    extra: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for cell in results.get("cells", []):
        eps, name = cell.get("epsilon"), cell["defense"]
        setting = cell.get("setting") or {}
        values = {"accuracy": finite_or_none(cell.get("accuracy")),
                  "psnr": attack_metric(cell, "psnr"), "ssim": attack_metric(cell, "ssim"),
                  "auc": attack_metric(cell, "auc")}
        for key, v in values.items():
            if v is None:
                continue
            composed = finite_or_none(setting.get("composed_epsilon"))
            if setting and composed is not None:
                extra[key][f"{name} ({setting.get('label', 'paper')})"] = (composed, v)
            elif isinstance(eps, (int, float)):
                series[key][name].append((float(eps), v))
            elif not setting:
                base[key][name] = v
    colors = plots.palette([c["defense"] for c in results.get("cells", [])])
    out: dict[str, Any] = {
        "accuracy": plots.metric_vs_eps(series["accuracy"], base["accuracy"], "test accuracy",
                                        "Utility: accuracy of the average model vs ε",
                                        extra["accuracy"], colors),
        "psnr": plots.metric_vs_eps(series["psnr"], base["psnr"], "PSNR (dB, best attack)",
                                    "Reconstruction: PSNR vs ε", extra["psnr"], colors),
        "ssim": plots.metric_vs_eps(series["ssim"], base["ssim"], "SSIM (best attack)",
                                    "Reconstruction: SSIM vs ε", extra["ssim"], colors),
        "auc": plots.metric_vs_eps(series["auc"], base["auc"], "AUC (best MIA)",
                                   "Membership inference: AUC vs ε", extra["auc"], colors),
        "sensitivity": plots.sensitivity_traces(
            [(f"{c['defense']} {where(c)}", c["sensitivity_trace"])
             for c in results.get("cells", [])
             if c.get("sensitivity_trace")], colors),
    }
    out["roc"] = _roc_panels(results, colors)
    return out


def _auc_label(att: dict[str, Any]) -> str:
    auc = finite_or_none((att.get("metrics") or {}).get("auc"))
    if auc is None:
        return ""
    ci = auc_interval(att)
    return f"AUC {fmt_num(auc)}" + (f" [{fmt_num(ci[0])}, {fmt_num(ci[1])}]" if ci else "")


def _crossing_note(here: str, aname: str, att: dict[str, Any], fpr: np.ndarray,
                   tpr: np.ndarray, bound: np.ndarray, eps: float, which: str) -> str | None:
    """Where a curve rises above its cell's DP bound, what the empirical-ε test concluded."""
    above = tpr > np.interp(fpr, GRID, bound) + 1e-9
    if not above.any():
        return None
    emp = finite_or_none((att.get("metrics") or {}).get("empirical_epsilon"))
    test = ("no empirical ε was computed" if emp is None else
            f"the empirical-ε test certifies ε ≥ {fmt_num(emp)}, "
            + ("above" if emp > eps else "within") + f" the {which} ε {fmt_num(eps)}: "
            + ("a violation" if emp > eps else "the crossing is within sampling error"))
    return (f"{here} {aname} crosses the DP bound at FPR {fmt_num(float(fpr[above].min()))}"
            f"–{fmt_num(float(fpr[above].max()))}; {test}")


GRID = np.logspace(-3, 0, 200)


def _roc_panels(results: dict[str, Any], colors: dict[str, Any]) -> list[dict[str, Any]]:
    """One ROC panel per defense: every (ε, attack) curve with its AUC, interval and pointwise
    95 % TPR band, the FPR region its non-members cannot resolve, and the best curve any attack
    could reach under each cell's claimed (ε, δ) (and μ-GDP where the privacy report gives μ);
    where a curve crosses its bound, the panel says what the empirical-ε test concluded."""
    panels: dict[str, dict[str, Any]] = {}
    for cell in results.get("cells", []):
        name, here = cell["defense"], where(cell)
        p = panels.setdefault(name, {"curves": [], "bounds": [], "bands": [], "cells": 0,
                                     "unresolved": None, "notes": []})
        k = p["cells"]
        p["cells"] += 1
        rocs = [(a, att) for a, att in sorted(cell.get("attacks", {}).items())
                if (att.get("roc") or {}).get("fpr")
                and str(att.get("status", "")).startswith("ok")
                and cell_state(cell)["kind"] != "diverged"]  # its attacks are not read
        eps, delta, which = claimed_for_audit(cell)
        bound = (bounds.eps_delta_tpr(GRID, eps, delta or 0.0)
                 if rocs and eps is not None and finite_or_none(eps) is not None else None)
        for j, (aname, att) in enumerate(rocs):
            fpr, tpr = att["roc"]["fpr"], att["roc"]["tpr"]
            p["curves"].append((f"{here} {aname}: {_auc_label(att)}", fpr, tpr, k, j))
            n1, n0 = att.get("n_members"), att.get("n_nonmembers")
            p["bands"].append(plots.tpr_band(tpr, n1) if isinstance(n1, int) and n1 > 0
                              else None)
            if isinstance(n0, int) and n0 > 0:
                p["unresolved"] = max(p["unresolved"] or 0.0, 1.0 / n0)
            if bound is not None:
                note = _crossing_note(here, aname, att, np.asarray(fpr, dtype=float),
                                      np.asarray(tpr, dtype=float), bound, eps, which)
                p["notes"] += [note] if note else []
        if bound is not None:
            p["bounds"].append((f"DP bound, {which} ε={fmt_num(eps)}, δ={fmt_num(delta or 0)}",
                                GRID, bound, k))
        mus = [finite_or_none(r.get("mu")) for r in cell.get("privacy", [])
               if r.get("node", 0) == 0]
        mu = next((m for m in mus if m is not None), None)
        if rocs and mu is not None:
            p["bounds"].append((f"μ-GDP bound μ={fmt_num(mu)} ({here}, approximate CLT)", GRID,
                                bounds.gdp_tpr(GRID, mu), k))
    return [{"defense": name, "notes": p["notes"],
             "png": plots.roc_panel(name, p["curves"], p["bounds"], colors.get(name),
                                    p["bands"], p["unresolved"], p["notes"])}
            for name, p in panels.items() if p["curves"]]


def _galleries(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cell in results.get("cells", []):
        for aname, att in sorted(cell.get("attacks", {}).items()):
            for view in att.get("views") or [att]:
                gal = view.get("gallery")
                if not (gal and gal.get("true") and gal.get("reconstructed")):
                    continue
                psnr = gal.get("psnr") or [None] * len(gal["true"])
                caps = [f"v{gal.get('victim', '?')} r{gal.get('round', '?')}\n"
                        + ("–" if v is None else f"{fmt_num(v)} dB") for v in psnr]
                out.append({"defense": cell["defense"], "where": where(cell), "attack": aname,
                            "batch_size": view.get("batch_size"),
                            "victim": gal.get("victim"), "round": gal.get("round"),
                            "png": plots.image_pairs(gal["true"], gal["reconstructed"], caps)})
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
    return "" if not ci else f"[{fmt_num(ci[0])}, {fmt_num(ci[1])}]"


def _missing_reason(cell: dict[str, Any], key: str, state: dict[str, Any]) -> str:
    """Why a cell has no value for a metric (from the cell's statuses in results.json)."""
    if state["kind"] == "diverged":
        return (f"{cell['defense']} {where(cell)}: training {state['text']}; no attack result of "
                "the cell is read")
    atts = cell.get("attacks", {})
    holders = {a: att for a, att in atts.items() if key in (att.get("metrics") or {})}
    if not holders:
        return f"no attack in this audit measures {key}"
    for aname, att in sorted(holders.items()):
        if att.get("status") != "ok":
            return str(att.get("status"))  # the same note as the attack table's status
        if key == "lpips" and att.get("lpips_status") not in (None, "ok"):
            return lpips_reason(str(att["lpips_status"]))
        if key.startswith("tpr_at_") and att.get(f"{key}_resolved") is False:
            fpr = key.removeprefix("tpr_at_").removesuffix("_fpr")
            return (f"{aname}: TPR at {fpr} FPR is not resolved with "
                    f"{att.get('n_nonmembers')} non-members")
    return f"{key} was not computed (see results.json)"


def lpips_reason(status: str) -> str:
    """An LPIPS status for the page: no machine path, and how to provide the weights offline."""
    if "AlexNet" not in status:
        return no_paths(status)
    return ("LPIPS not computed: torchvision's AlexNet weights are not in the torch hub cache, "
            "and privbench never downloads them. To provide them offline, copy "
            "alexnet-owt-7be5be79.pth into $TORCH_HOME/hub/checkpoints/ (by default "
            "~/.cache/torch/hub/checkpoints/); lpips' own linear weights ship inside the lpips "
            "package")


def mechanism_row(cell: dict[str, Any], notes: Notes) -> dict[str, Any] | None:
    """The cell's mechanism audit in one row: measured ε [interval] against the claim, or why it
    was not measured (a numbered note), and its findings; None without a mechanism audit."""
    att = cell.get("attacks", {}).get("mechanism")
    if att is None:
        return None
    mech = att.get("mechanism") if str(att.get("status", "")).startswith("ok") else None
    if not mech:
        return {"measured": notes.status(str(att.get("status"))), "findings": []}
    eps = mech.get("epsilon") or {}
    if eps.get("applicable"):
        lo, hi = eps["interval"]
        rlo, rhi = eps["ratio_interval"]
        measured = Markup("{} [{}, {}] vs claimed {} (ratio {} [{}, {}])").format(
            fmt_num(eps["epsilon"]), fmt_num(lo), fmt_num(hi), fmt_num(eps["claimed"]),
            fmt_num(eps["ratio"]), fmt_num(rlo), fmt_num(rhi))
        if eps.get("basis") and "rounds" in eps:  # node-level: the sensitivity beside the realized
            measured += Markup("; {}").format(eps["basis"])
        if eps.get("note"):
            measured += notes.mark(str(eps["note"]), "")
    else:
        measured = notes.mark(str(eps.get("reason")), "not applicable")
    return {"measured": measured, "findings": list(mech.get("findings") or [])}


def _eps_reason(cell: dict[str, Any], mode: str) -> str:
    if not cell.get("privacy"):
        return "non-private baseline: no ε"
    return f"the {mode} reading is not reported by this defense"


def _config_shown(results: dict[str, Any]) -> dict[str, Any]:
    """The configuration with the base run's ε replaced by the ε of each cell."""
    cfg = json.loads(json.dumps(results.get("config", {})))
    run = cfg.get("run")
    if isinstance(run, dict) and "epsilon" in run:
        run["epsilon"] = "per cell: " + "; ".join(dict.fromkeys(  # labels hold commas
            where(c) for c in results.get("cells", []) if c.get("privacy")))
    return cfg


def render_html(results: dict[str, Any], run_name: str | None = None) -> str:
    """The self-contained audit page for an audit results dict.

    `run_name` (the output folder's name) titles the page; results.json does not hold it, so
    that the same audit written into another folder gives the same results.json.
    """
    results = {**results, "run_name": run_name or results.get("run_name") or "audit"}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    notes = Notes()
    judged = verdicts(results)
    per_cell = {id(c): v for c, v in zip(
        [c for name in judged for c in results.get("cells", []) if c["defense"] == name],
        [v for name in judged for v in judged[name]["cells"]], strict=True)}

    def verdict_of(cell: dict[str, Any]) -> dict[str, Any]:
        return per_cell[id(cell)]

    def metric(cell: dict[str, Any], key: str) -> Any:
        state = verdict_of(cell)["state"]
        if key == "accuracy":
            v = finite_or_none(cell.get("accuracy"))
        else:
            v = None if state["kind"] == "diverged" else attack_metric(cell, key)
        return fmt_num(v) if v is not None else notes.mark(_missing_reason(cell, key, state))

    def claim(cell: dict[str, Any], mode: str) -> Any:
        v = claimed_eps(cell, mode)
        return fmt_num(v) if v is not None else notes.mark(_eps_reason(cell, mode))

    def best_auc(cell: dict[str, Any]) -> Any:
        if verdict_of(cell)["state"]["kind"] == "diverged":
            return metric(cell, "auc")
        found = sorted(membership_findings(cell), key=lambda m: -m["auc"])
        if not found:
            return metric(cell, "auc")
        ci = found[0]["ci"]
        shown = Markup("{}").format(fmt_num(found[0]["auc"]))
        return shown + (Markup('<br><span class="muted">[{}, {}]</span>').format(
            fmt_num(ci[0]), fmt_num(ci[1])) if ci else "")

    env.filters["fmt"] = fmt_num
    env.filters["ci"] = _ci_cell
    env.filters["prose"] = prose
    env.filters["no_paths"] = no_paths
    env.globals.update(claimed_eps=claimed_eps, attack_metric=attack_metric,
                       attack_interval=attack_interval, uncovered_leaks=uncovered_leaks,
                       metric=metric, claim=claim, where=where, verdict_of=verdict_of,
                       best_auc=best_auc, mechanism_row=lambda c: mechanism_row(c, notes),
                       membership_findings=membership_findings, auc_label=_auc_label)
    return env.get_template(TEMPLATE.name).render(
        r=results, verdicts=judged, plots=_plots(results), levels=LEVELS,
        galleries=_galleries(results), message_map=_message_map(results),
        psnr_leak=PSNR_LEAK_DB, titles=TITLES, notes=notes, config=_config_shown(results))


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
