"""Render an audit (`privbench.results.records.AuditRun`) to one self-contained HTML page.

Audit results hold `cells`, one per (defense, ε): accuracy, per-node privacy reports (paper and
calibrated ε), the defense's message kinds with their DP coverage, and per attack its status,
metrics, the message kinds it used, ROC points and a reconstruction gallery.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import jinja2
import numpy as np
from markupsafe import Markup

from privbench.report import bounds, plots
from privbench.report.gate_mechanism import (
    DEFAULT_FACTOR,
    held_epsilon,
    request_findings,
    resolution,
)
from privbench.report.plots import Color
from privbench.report.text import Notes, no_paths, prose
from privbench.report.verdicts import (
    LEVELS,
    PSNR_LEAK_DB,
    TITLES,
    CellVerdict,
    membership_findings,
    verdicts,
    where,
)
from privbench.results import outcome
from privbench.results.records import (
    AttackResult,
    AuditCell,
    AuditRun,
    JsonObject,
    MessageRecord,
    as_run,
)
from privbench.results.store import (
    CellState,
    attack_interval,
    attack_metric,
    auc_interval,
    cell_state,
    claim_rows,
    claimed_eps,
    claimed_for_audit,
    finite_or_none,
    fmt_num,
    uncovered_leaks,
)

TEMPLATE = Path(__file__).with_name("template.html.j2")
# reconstruction galleries shown open; the others are one click away (each is a tall image)
GALLERIES_OPEN = 4

__all__ = ["merge_results", "render_html", "verdicts"]


class RocPanel(TypedDict):
    """One defense's ROC panel: its PNG and the notes under it."""

    defense: str
    notes: list[str]
    png: str | None


class Plots(TypedDict):
    """The report's figures (PNG data URIs; None where nothing is plotted)."""

    accuracy: str | None
    psnr: str | None
    ssim: str | None
    auc: str | None
    sensitivity: str | None
    roc: list[RocPanel]


class Pair(TypedDict):
    """A true image over its reconstruction (a PNG) and the lines under it."""

    png: str
    caption: list[str]


class GalleryPanel(TypedDict):
    """One reconstruction gallery of the report."""

    defense: str
    where: str
    attack: str
    batch_size: int | None
    victim: int | None
    round: int | None
    pairs: list[Pair]


class MessageRow(MessageRecord, total=False):
    """A row of the message map: a defense's message kind and the attacks that read it."""

    defense: str
    used_by: list[str]


class MechanismRow(TypedDict):
    """The mechanism audit of a cell in one row of the report."""

    measured: str
    findings: list[str]


def _plots(results: AuditRun) -> Plots:
    series: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    base: dict[str, dict[str, float]] = defaultdict(dict)
    extra: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for cell in results.cells:
        eps, name = cell.epsilon, cell.defense
        setting = cell.setting or {}
        values = {"accuracy": finite_or_none(cell.accuracy),
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
    colors = plots.palette([c.defense for c in results.cells])
    return {
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
            [(f"{c.defense} {where(c)}", c.trained.sensitivity_trace) for c in results.cells
             if c.trained.sensitivity_trace], colors),
        "roc": _roc_panels(results, colors),
    }


def _auc_label(att: AttackResult) -> str:
    auc = finite_or_none(att.metrics.get("auc"))
    if auc is None:
        return ""
    ci = auc_interval(att)
    return f"AUC {fmt_num(auc)}" + (f" [{fmt_num(ci[0])}, {fmt_num(ci[1])}]" if ci else "")


def _crossing_note(here: str, aname: str, att: AttackResult, fpr: np.ndarray,
                   tpr: np.ndarray, bound: np.ndarray, eps: float, which: str) -> str | None:
    """Where a curve rises above its cell's DP bound, what the empirical-ε test concluded."""
    above = tpr > np.interp(fpr, GRID, bound) + 1e-9
    if not above.any():
        return None
    emp = finite_or_none(att.metrics.get("empirical_epsilon"))
    test = ("no empirical ε was computed" if emp is None else
            f"the empirical-ε test certifies ε ≥ {fmt_num(emp)}, "
            + ("above" if emp > eps else "within") + f" the {which} ε {fmt_num(eps)}: "
            + ("a violation" if emp > eps else "the crossing is within sampling error"))
    return (f"{here} {aname} crosses the DP bound at FPR {fmt_num(float(fpr[above].min()))}"
            f"–{fmt_num(float(fpr[above].max()))}; {test}")


GRID = np.logspace(-3, 0, 200)


@dataclass
class _Panel:
    """A ROC panel while it is assembled (see `plots.roc_panel`)."""

    curves: list[tuple[str, list[float], list[float], int, int]] = field(default_factory=list)
    bounds: list[tuple[str, np.ndarray, np.ndarray, int]] = field(default_factory=list)
    bands: list[tuple[np.ndarray, np.ndarray] | None] = field(default_factory=list)
    cells: int = 0
    unresolved: float | None = None
    notes: list[str] = field(default_factory=list)


def _roc_panels(results: AuditRun, colors: Mapping[str, Color]) -> list[RocPanel]:
    """One ROC panel per defense: every (ε, attack) curve with its AUC, interval and pointwise
    95 % TPR band, the FPR region its non-members cannot resolve, and the best curve any attack
    could reach under each cell's claimed (ε, δ) (and μ-GDP where the privacy report gives μ);
    where a curve crosses its bound, the panel says what the empirical-ε test concluded."""
    panels: dict[str, _Panel] = {}
    for cell in results.cells:
        name, here = cell.defense, where(cell)
        p = panels.setdefault(name, _Panel())
        k = p.cells
        p.cells += 1
        rocs = [(a, att) for a, att in sorted(cell.attacks.items())
                if (att.roc or {}).get("fpr") and att.status.measured
                and cell_state(cell)["kind"] != "diverged"]  # its attacks are not read
        eps, delta, which = claimed_for_audit(cell)
        bound = (bounds.eps_delta_tpr(GRID, eps, delta or 0.0)
                 if rocs and eps is not None and finite_or_none(eps) is not None else None)
        for j, (aname, att) in enumerate(rocs):
            fpr, tpr = att.roc["fpr"], att.roc["tpr"]  # type: ignore[index]
            p.curves.append((f"{here} {aname}: {_auc_label(att)}", fpr, tpr, k, j))
            n1, n0 = att.n_members, att.n_nonmembers
            p.bands.append(plots.tpr_band(tpr, n1) if isinstance(n1, int) and n1 > 0 else None)
            if isinstance(n0, int) and n0 > 0:
                p.unresolved = max(p.unresolved or 0.0, 1.0 / n0)
            if bound is not None:
                note = _crossing_note(here, aname, att, np.asarray(fpr, dtype=float),
                                      np.asarray(tpr, dtype=float), bound, eps, which)
                p.notes += [note] if note else []
        if bound is not None:
            p.bounds.append((f"DP bound, {which} ε={fmt_num(eps)}, δ={fmt_num(delta or 0)}",
                                GRID, bound, k))
        mus = [finite_or_none(r.get("mu")) for r in cell.privacy if r.get("node", 0) == 0]
        mu = next((m for m in mus if m is not None), None)
        if rocs and mu is not None:
            p.bounds.append((f"μ-GDP bound μ={fmt_num(mu)} ({here}, approximate CLT)", GRID,
                                bounds.gdp_tpr(GRID, mu), k))
    return [{"defense": name, "notes": p.notes,
             "png": plots.roc_panel(name, p.curves, p.bounds, colors.get(name), p.bands,
                                    p.unresolved, p.notes)}
            for name, p in panels.items() if p.curves]


def _galleries(results: AuditRun) -> list[GalleryPanel]:
    out: list[GalleryPanel] = []
    for cell in results.cells:
        for aname, att in sorted(cell.attacks.items()):
            for view in att.views or [att.detail]:
                gal = view.get("gallery")
                if not (gal and gal.get("true") and gal.get("reconstructed")):
                    continue
                psnr = gal.get("psnr") or [None] * len(gal["true"])
                here = f"v{gal.get('victim', '?')} r{gal.get('round', '?')}"
                pairs: list[Pair] = [
                    {"png": plots.image_pair(t, r),
                     "caption": [here, "–" if v is None else f"{fmt_num(v)} dB"]}
                    for t, r, v in zip(gal["true"], gal["reconstructed"], psnr, strict=False)]
                out.append({"defense": cell.defense, "where": where(cell), "attack": aname,
                            "batch_size": view.get("batch_size"),
                            "victim": gal.get("victim"), "round": gal.get("round"),
                            "pairs": pairs})
    return out


def _message_map(results: AuditRun) -> list[MessageRow]:
    rows: dict[tuple[str, str], tuple[MessageRecord, set[str]]] = {}
    for cell in results.cells:
        for m in cell.messages:
            key = (cell.defense, m["name"])
            _, used = rows.setdefault(key, (m, set()))
            used.update(aname for aname, att in cell.attacks.items() if m["name"] in att.uses)
    return [{**m, "defense": key[0], "used_by": sorted(used)}  # type: ignore[typeddict-item]
            for key, (m, used) in sorted(rows.items())]


def _ci_cell(ci: list[float] | None) -> str:
    """An interval as shown under a value in the report's tables ("" when none)."""
    return "" if not ci else f"[{fmt_num(ci[0])}, {fmt_num(ci[1])}]"


def _missing_reason(cell: AuditCell, key: str, state: CellState) -> str:
    """Why a cell has no value for a metric (from the cell's statuses in results.json)."""
    if state["kind"] == "diverged":
        return (f"{cell.defense} {where(cell)}: training {state['text']}; no attack result of "
                "the cell is read")
    holders = {a: att for a, att in cell.attacks.items() if key in att.metrics}
    if not holders:
        return f"no attack in this audit measures {key}"
    for aname, att in sorted(holders.items()):
        if att.status != outcome.OK:
            return att.status.text  # the same note as the attack table's status
        lpips_status = att.detail.get("lpips_status")
        if key == "lpips" and lpips_status not in (None, "ok"):
            return lpips_reason(str(lpips_status))
        if key.startswith("tpr_at_") and att.detail.get(f"{key}_resolved") is False:
            fpr = key.removeprefix("tpr_at_").removesuffix("_fpr")
            return (f"{aname}: TPR at {fpr} FPR is not resolved with "
                    f"{att.n_nonmembers} non-members")
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


def mechanism_row(cell: AuditCell, notes: Notes) -> MechanismRow | None:
    """The cell's mechanism audit in one row: measured ε [interval] against the claim, or why it
    was not measured (a numbered note), and its findings; None without a mechanism audit."""
    att = cell.attacks.get("mechanism")
    if att is None:
        return None
    mech = att.mechanism if att.status.measured else None
    if not mech:
        return {"measured": notes.status(att.status.text), "findings": []}
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
        _, resolved = resolution(eps, held_epsilon(cell, eps), 1.0, DEFAULT_FACTOR)
        measured += Markup("<br>{}").format(resolved)
    else:
        measured = notes.mark(str(eps.get("reason")), "not applicable")
    return {"measured": measured,
            "findings": [*request_findings(cell, mech), *(mech.get("findings") or [])]}


def _eps_reason(cell: AuditCell, mode: str) -> str:
    if not cell.privacy:
        return "non-private baseline: no ε"
    return f"the {mode} reading is not reported by this defense"


def _config_shown(results: AuditRun | JsonObject) -> JsonObject:
    """The configuration (results.json's `config`, arbitrary JSON as written) with the base
    run's ε replaced by the ε of each cell."""
    results = as_run(results)
    cfg = json.loads(json.dumps(results.config.to_json() if results.config else {}))
    run = cfg.get("run")
    if isinstance(run, dict) and "epsilon" in run:
        run["epsilon"] = "per cell: " + "; ".join(dict.fromkeys(  # labels hold commas
            where(c) for c in results.cells if c.privacy))
    return cfg


def _json_text(value: object) -> str:
    """Indented JSON as people read it: ε as ε, never \\u03b5 (autoescaping makes it HTML)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def render_html(results: AuditRun | JsonObject, run_name: str | None = None) -> str:
    """The self-contained audit page for an audit (its record, or results.json's object).

    `run_name` (the output folder's name) titles the page; results.json does not hold it, so
    that the same audit written into another folder gives the same results.json.
    """
    results = as_run(results)
    run_name = run_name or results.detail.get("run_name") or "audit"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    notes = Notes()
    judged = verdicts(results)
    per_cell = {id(c): v for c, v in zip(
        [c for name in judged for c in results.cells if c.defense == name],
        [v for name in judged for v in judged[name]["cells"]], strict=True)}

    def verdict_of(cell: AuditCell) -> CellVerdict:
        return per_cell[id(cell)]

    def metric(cell: AuditCell, key: str) -> str:
        state = verdict_of(cell)["state"]
        if key == "accuracy":
            v = finite_or_none(cell.accuracy)
        else:
            v = None if state["kind"] == "diverged" else attack_metric(cell, key)
        return fmt_num(v) if v is not None else notes.mark(_missing_reason(cell, key, state))

    def claim(cell: AuditCell, mode: str) -> str:
        v = claimed_eps(cell, mode)
        return fmt_num(v) if v is not None else notes.mark(_eps_reason(cell, mode))

    def best_auc(cell: AuditCell) -> str:
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
    env.filters["json_text"] = _json_text
    env.globals.update(claimed_eps=claimed_eps, claim_rows=claim_rows, attack_metric=attack_metric,
                       attack_interval=attack_interval, uncovered_leaks=uncovered_leaks,
                       metric=metric, claim=claim, where=where, verdict_of=verdict_of,
                       best_auc=best_auc, mechanism_row=lambda c: mechanism_row(c, notes),
                       membership_findings=membership_findings, auc_label=_auc_label)
    return env.get_template(TEMPLATE.name).render(
        r=results, run_name=run_name, verdicts=judged, plots=_plots(results), levels=LEVELS,
        galleries=_galleries(results), message_map=_message_map(results),
        psnr_leak=PSNR_LEAK_DB, titles=TITLES, notes=notes, config=_config_shown(results),
        GALLERIES_OPEN=GALLERIES_OPEN)


def merge_results(items: list[AuditRun | JsonObject]) -> AuditRun:
    """Merge several audits into one (cells concatenated; later duplicates win); each one's
    `run_name` (in its `detail`) names it in the merged run's."""
    runs = [as_run(r) for r in items]
    if len(runs) == 1:
        return runs[0]
    cells: dict[tuple[str, float | None], AuditCell] = {}
    for res in runs:
        for cell in res.cells:
            cells[(cell.defense, cell.epsilon)] = cell
    names = [r.detail.get("run_name") for r in runs]
    return dataclasses.replace(runs[0], cells=tuple(cells.values()), detail={
        **runs[0].detail, "run_name": " + ".join(str(n or "?") for n in names),
        "merged_from": names})
