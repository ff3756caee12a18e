"""The leakage map's HTML page: the graph with the attackers marked, attack success against the
attacker's distance and colluding-set size, and network DP beside the empirical bounds.

Self-contained (figures are PNG data URIs); every number comes from `leakage.json`.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from privbench.report.plots import palette, plt, png_uri, shade_of
from privbench.report.text import Notes, no_paths, prose
from privbench.report.verdicts import PSNR_LEAK_DB
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.results.store import eps_text, fmt_num

if TYPE_CHECKING:  # the map's JSON as `run_leakage` writes it
    from privbench.audit.leakage import LeakageCell, LeakageMap, LeakageRow

DISTANCE_AXIS = ("1 hop", "2 hops", "3 hops", "eavesdropper")
# why a cell of the table holds no number
NO_SYSTEM = ("no gossip inversion: the attacker received the victim's release itself, so there "
             "is no linear system whose condition number to show")
NO_INTERVAL = "the attack stored no interval for this AUC"
NO_CLAIM = "a non-private baseline: no ε is claimed"
NO_NETWORK = ("no network-DP bound: it is computed for linear-gossip DP defenses whose "
              "releases carry fresh noise")


def _label(cell: LeakageCell) -> str:
    eps = cell.get("epsilon")
    return cell["defense"] if eps is None else f"{cell['defense']} {eps_text(eps)}"


def _fmt(x: Any) -> str:
    """A value in the report's one number format ("inf" stored as text reads ∞)."""
    if isinstance(x, str) and x not in ("inf", "-inf", "nan"):
        return html.escape(x)
    return fmt_num(x)


def _measured(part: Mapping[str, object]) -> bool:
    """Whether a section of a leakage.json row was measured (its status read once, typed)."""
    return Status.parse(str(part.get("status"))) == outcome.OK


def status_text(status: Any) -> str:
    """A status with a repeated "not applicable: " prefix said once."""
    return re.sub(r"^(not applicable: )+", "not applicable: ", str(status))


def _series(cells: list[LeakageCell], section: str, key: str,
            order: list[str]) -> dict[str, list[tuple[int, float]]]:
    """Per cell label, (x index in `order`, value) of `section[key]` for the placements."""
    out: dict[str, list[tuple[int, float]]] = {}
    for cell in cells:
        pts = []
        for row in cell["rows"]:
            val = (row.get(section) or {}).get(key)
            if row["placement"] in order and isinstance(val, (int, float)) and math.isfinite(val):
                pts.append((order.index(row["placement"]), float(val)))
        if pts:
            out[_label(cell)] = pts
    return out


def _line_plot(series: dict[str, list[tuple[int, float]]], order: list[str], ylabel: str,
               title: str, floor: float | None = None) -> str | None:
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(5.0, 3.4))  # about a phone's width: its text stays legible
    colors = palette([name.split(" ")[0] for name in series])
    alone = order.index("eavesdropper") if "eavesdropper" in order else -1
    seen: dict[str, int] = {}
    for name, pts in sorted(series.items()):
        defense = name.split(" ")[0]
        seen[defense] = seen.get(defense, -1) + 1
        color = shade_of(colors[defense], seen[defense])  # one colour per defense, ε in shades
        line = sorted(p for p in pts if p[0] != alone)  # distances joined; the eavesdropper not
        drawn = (ax.plot(*zip(*line, strict=True), marker="o", label=name, color=color)
                 if line else None)
        extra = [p for p in pts if p[0] == alone]
        if extra:
            ax.plot(*zip(*extra, strict=True), marker="s", linestyle="none", color=color,
                    label=None if drawn else name)
    if floor is not None:
        ax.axhline(floor, linestyle="--", color="grey", linewidth=1)
    ax.set_xticks(range(len(order)), order)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(0.0, -0.14), frameon=False,
              ncol=2)  # under the axes: the figure keeps its width, a phone its text size
    return png_uri(fig)


def _graph(adjacency: list[list[int]], victim: int, marks: dict[int, str]) -> str:
    """The graph on a circle: the victim in red, each placement's attacker labelled."""
    a = np.asarray(adjacency, dtype=bool)
    n = len(a)
    ang = 2 * np.pi * np.arange(n) / n
    xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    fig, ax = plt.subplots(figsize=(3.4, 3.4))
    for j, i in zip(*np.nonzero(a), strict=True):
        ax.plot(*xy[[i, j]].T, color="lightgrey", linewidth=1, zorder=1)
    colours = ["red" if k == victim else ("orange" if k in marks else "steelblue")
               for k in range(n)]
    ax.scatter(xy[:, 0], xy[:, 1], s=260, c=colours, zorder=2)
    for k in range(n):
        ax.annotate(str(k), xy[k], ha="center", va="center", color="white", fontsize=8)
        if k in marks:
            ax.annotate(marks[k], xy[k] * 1.28, ha="center", va="center", fontsize=7)
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.5, 1.5)
    ax.set_axis_off()
    ax.set_title(f"victim {victim} (red), attackers (orange)", fontsize=9)
    return png_uri(fig)


def _marks(results: LeakageMap) -> dict[int, str]:
    """Node -> hop placement label around victim 0 on the run's graph."""
    cell = results["cells"][0]
    a = np.asarray(cell["topology"], dtype=bool)
    dist, frontier, seen = {0: 0}, [0], {0}
    while frontier:
        nxt = []
        for i in frontier:
            for j in np.nonzero(a[:, i])[0].tolist():
                if j not in seen:
                    seen.add(j)
                    dist[j] = dist[i] + 1
                    nxt.append(j)
        frontier = nxt
    wanted = {p["distance"] for p in results["placements"] if p["distance"]}
    marks: dict[int, str] = {}
    for h in sorted(wanted):
        at = sorted(j for j, d in dist.items() if d == h)
        if at:
            marks[at[0]] = f"{h} hop{'s' if h > 1 else ''}"
    return marks


def _na(status: Any, span: int, notes: Notes) -> str:
    """A not-applicable status across `span` columns: its kind here, its reason in a note."""
    return f'<td colspan="{span}" class="na">{notes.status(status_text(status))}</td>'


def _worst(cells: list[LeakageCell]) -> dict[str, float]:
    """The most leaking value of PSNR, AUC and empirical ε over the private cells' rows."""
    out: dict[str, float] = {}
    for cell in cells:
        if cell.get("epsilon") is None:
            continue
        for row in cell["rows"]:
            for section, key in (("inversion", "psnr"), ("membership", "auc"),
                                 ("membership", "empirical_epsilon")):
                part = row.get(section) or {}
                v = part.get(key)
                if _measured(part) and isinstance(v, (int, float)) \
                        and math.isfinite(v):
                    out[key] = max(out.get(key, -math.inf), float(v))
    return out


# a value at or below these leaks nothing and is never flagged as the worst (an AUC at chance,
# an empirical ε of 0, a reconstruction under the report's leak threshold)
NO_LEAK = {"psnr": PSNR_LEAK_DB, "auc": 0.5, "empirical_epsilon": 0.0}


def _flag(value: Any, key: str, worst: dict[str, float], private: bool) -> str:
    text = _fmt(value)
    if private and isinstance(value, (int, float)) and worst.get(key) == value \
            and value > NO_LEAK[key]:
        return f'<td class="worst" title="the most leaking private cell">{text} ▲</td>'
    return text


def _row_html(cell: LeakageCell, row: LeakageRow, notes: Notes,
              worst: dict[str, float]) -> str:
    inv, mia, net = row["inversion"], row["membership"], row.get("network_dp") or {}
    ident = inv.get("identifiability") or {}
    private = cell.get("epsilon") is not None
    inv_cells = ([_flag(inv.get("psnr"), "psnr", worst, private), _fmt(inv.get("ssim")),
                  _fmt(inv.get("label_accuracy")), html.escape(inv.get("via", "")),
                  _fmt(ident.get("condition")) if ident else notes.mark(NO_SYSTEM)]
                 if _measured(inv) else [_na(inv["status"], 5, notes)])
    ci = mia.get("auc_ci")
    mia_cells = ([_flag(mia.get("auc"), "auc", worst, private),
                  f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else notes.mark(NO_INTERVAL),
                  _fmt(mia.get("tpr_at_1%_fpr")),
                  _flag(mia.get("empirical_epsilon"), "empirical_epsilon", worst, private)]
                 if _measured(mia) else [_na(mia.get("status"), 4, notes)])
    claimed = cell.get("claimed_epsilon") or {}
    paper, cal = (_fmt(claimed.get(k)) if private else notes.mark(NO_CLAIM)
                  for k in ("paper", "calibrated"))
    why = net.get("reason") or (NO_NETWORK if private else NO_CLAIM)
    net_cells = [_fmt(net.get("network_epsilon")), paper, cal, _fmt(net.get("visibility"))] \
        if net.get("applicable", "network_mu" in net) else \
        [notes.mark(why), paper, cal, notes.mark(why)]
    tds = [html.escape(_label(cell)), html.escape(row["placement"])]
    tds += inv_cells + mia_cells + net_cells
    return "<tr>" + "".join(t if t.startswith("<td") else f"<td>{t}</td>" for t in tds) + "</tr>"


HEADER = ("<tr><th>defense</th><th>attacker</th><th>PSNR</th><th>SSIM</th><th>label acc</th>"
          "<th>views via</th><th>cond(K)</th><th>AUC</th><th>95% CI</th><th>TPR@1%</th>"
          "<th>ε emp (LB)</th><th>ε network</th><th>ε paper</th><th>ε calibrated</th>"
          "<th>visibility</th></tr>")


def render_leakage(results: LeakageMap) -> str:
    """The leakage map page."""
    cells, cfg = results["cells"], results["config"]
    order = [p["label"] for p in results["placements"] if p["distance"] or
             p["spec"] == "eavesdropper"]
    sizes = [p["label"] for p in results["placements"] if p["size"] and not p["distance"]]
    figs = [
        _graph(cells[0]["topology"], 0, _marks(results)),
        _line_plot(_series(cells, "inversion", "psnr", order), order, "PSNR (dB)",
                   "Inversion (batch-1 view) vs the attacker's distance", floor=20.0),
        _line_plot(_series(cells, "membership", "auc", order), order, "AUC",
                   "Message-level membership inference vs distance", floor=0.5),
        _line_plot(_series(cells, "network_dp", "network_epsilon", order), order,
                   "network-DP ε (theory)", "Pairwise network DP vs distance"),
        _line_plot(_series(cells, "membership", "empirical_epsilon", order), order,
                   "empirical ε (lower bound)", "Empirical ε vs distance"),
        _line_plot(_series(cells, "inversion", "psnr", sizes), sizes, "PSNR (dB)",
                   "Inversion vs colluding-set size (random non-neighbours)", floor=20.0),
    ]
    notes, worst = Notes(), _worst(cells)
    rows = "".join(_row_html(c, r, notes, worst) for c in cells for r in c["rows"])
    note_list = "".join(f'<li id="note{k}">{prose(r)}</li>'
                        for k, r in enumerate(notes.reasons, start=1))
    assumptions = next((r["network_dp"]["assumptions"] for c in cells for r in c["rows"]
                        if (r.get("network_dp") or {}).get("assumptions")), [])
    imgs = "".join(f'<img src="{f}" alt="figure">' for f in figs if f)
    setting = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(no_paths(_setting_value(v)))}</td>"
        "</tr>" for k, v in cfg.items())
    notes = "".join(f"<li>{html.escape(a)}</li>" for a in assumptions)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>privbench leakage map</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1400px}}
table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:3px 6px}}
th{{text-align:left}}td.na{{color:#777;font-size:11px}}img{{margin:4px;max-width:100%}}
td.worst{{background:#fbd5d5;font-weight:600}}.scroll{{overflow-x:auto;max-width:100%}}
@media (max-width:600px){{body{{margin:.5em}}}}</style></head><body>
<h1>How far does a leak travel?</h1>
<p>Attacks by a curious node 1, 2, 3 hops from each victim, an eavesdropper and colluding sets of
random non-neighbours. Beyond the victim's neighbours the views come from gossip inversion (El
Mrini, Cyffers, Bellet, ICML 2024): least squares over what the attackers received across
rounds; "not applicable" means the linear system does not identify the victim (rank deficit) or
the defense's messages are not a linear gossip. Network-DP ε (Muffliato-style pairwise network
DP, computed from the attackers' exact linear view, no subsampling) holds under the assumptions
below; the calibrated ε is the guarantee.</p>
<h2>Setting</h2><div class="scroll"><table class="setting">{setting}</table></div>
{imgs}
<h2>Table</h2>
<p>▲ marks the most leaking value over the private cells (highest PSNR, AUC, empirical ε),
where it leaks at all (PSNR ≥ {PSNR_LEAK_DB:g} dB, AUC above 0.5, empirical ε above 0).</p>
<div class="scroll"><table>{HEADER}{rows}</table></div>
<ol>{note_list}</ol>
<h2>Network-DP assumptions</h2><ul>{notes}</ul>
</body></html>
"""


def _setting_value(v: Any) -> str:
    """A setting's value for people: lists joined by commas, none as "–"."""
    if isinstance(v, (list, tuple)):
        return ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
    if v is None:
        return "–"
    return f"{v:g}" if isinstance(v, float) else str(v)


def by_distance(results: LeakageMap) -> str:
    """Markdown: per (defense, ε), inversion PSNR, membership AUC and network-DP ε against the
    attacker's placement (1, 2, 3 hops, eavesdropper, colluding sets), one column each."""
    order = [p["label"] for p in results["placements"]]
    cols = " | ".join(order)
    sep = "|---" * (len(order) + 2) + "|\n"
    out = []
    for title, section, key in (("inversion PSNR (dB)", "inversion", "psnr"),
                                ("membership AUC", "membership", "auc"),
                                ("network-DP ε", "network_dp", "network_epsilon")):
        lines = []
        for cell in results["cells"]:
            rows = {r["placement"]: r for r in cell["rows"]}
            vals = [_cell_value(rows.get(p), section, key) for p in order]
            if section == "network_dp" and all(v == "–" for v in vals):
                continue
            cal = _fmt((cell.get("claimed_epsilon") or {}).get("calibrated"))
            lines.append(f"| {_label(cell)} | " + " | ".join(vals) + f" | {cal} |")
        out.append(f"**{title}**\n\n| defense | {cols} | ε calibrated |\n{sep}" +
                   "\n".join(lines) + "\n")
    return "\n".join(out)


def terminal_summary(results: LeakageMap) -> str:
    """The map for a terminal (under 100 columns): per (defense, ε) and attacker placement, the
    inversion's PSNR and the membership AUC ("n/a" where the attack does not apply there; the
    reason is in leakage.html)."""
    order = [p["label"] for p in results["placements"]]
    short = [lab.replace("eavesdropper", "eavesdr.").replace(" colluding", " coll.")
             for lab in order]
    width = max([len("defense"), *(len(_label(c)) for c in results["cells"])])
    out = []
    for title, section, key in (("inversion PSNR (dB)", "inversion", "psnr"),
                                ("membership AUC", "membership", "auc")):
        lines = [title, f"{'defense':<{width}} " + " ".join(f"{h:>8}" for h in short)]
        for cell in results["cells"]:
            rows = {r["placement"]: r for r in cell["rows"]}
            vals = [html.unescape(_cell_value(rows.get(p), section, key)) for p in order]
            lines.append(f"{_label(cell):<{width}} " + " ".join(f"{v:>8}" for v in vals))
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _cell_value(row: LeakageRow | None, section: str, key: str) -> str:
    part = (row or {}).get(section) or {}
    if section != "network_dp" and not _measured(part):
        return "n/a" if part else "–"
    return _fmt(part.get(key))


def markdown(results: LeakageMap) -> str:
    """The leakage map as a Markdown table (PSNR / label accuracy, AUC / TPR@1%, network and
    calibrated ε per defense and attacker placement), for READMEs."""
    head = ("| defense | attacker | views via | PSNR (dB) | label acc | AUC | TPR@1% | ε emp | "
            "ε network | ε paper | ε calibrated |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for cell in results["cells"]:
        for row in cell["rows"]:
            inv, mia = row["inversion"], row["membership"]
            net = row.get("network_dp") or {}
            if _measured(inv):
                inv_part = [inv.get("via", ""), _fmt(inv.get("psnr")),
                            _fmt(inv.get("label_accuracy"))]
            else:
                inv_part = [_short(inv["status"]), "–", "–"]
            mia_part = ([_fmt(mia.get("auc")), _fmt(mia.get("tpr_at_1%_fpr")),
                         _fmt(mia.get("empirical_epsilon"))] if _measured(mia)
                        else [_short(str(mia.get("status"))), "–", "–"])
            claimed = cell.get("claimed_epsilon") or {}
            net_part = [_fmt(net.get("network_epsilon")), _fmt(claimed.get("paper")),
                        _fmt(claimed.get("calibrated"))]
            lines.append("| " + " | ".join([_label(cell), row["placement"], *inv_part,
                                             *mia_part, *net_part]) + " |")
    return head + "\n".join(lines) + "\n"


def _short(status: str) -> str:
    """A not-applicable status cut to its kind (for table cells)."""
    status = status_text(status)
    for key, text in (("not a linear gossip", "n/a: not a linear gossip"),
                      ("rank deficit", "n/a: rank deficit"),
                      ("not observed", "n/a: not observed")):
        if key in status:
            return text
    return status[:40]
