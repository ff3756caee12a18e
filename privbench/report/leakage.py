"""The leakage map's HTML page: the graph with the attackers marked, attack success against the
attacker's distance and colluding-set size, and network DP beside the empirical bounds.

Self-contained (figures are PNG data URIs); every number comes from `leakage.json`.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from privbench.report.plots import _png, plt
from privbench.results import fmt_num

DISTANCE_AXIS = ("1 hop", "2 hops", "3 hops", "eavesdropper")


def _label(cell: dict[str, Any]) -> str:
    eps = cell.get("epsilon")
    return cell["defense"] if eps is None else f"{cell['defense']} ε={fmt_num(eps)}"


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):  # a reading stored as text (e.g. an infinite realized epsilon)
        return html.escape(x)
    if isinstance(x, float) and not math.isfinite(x):
        return "∞" if x > 0 else "–"
    return fmt_num(x) if isinstance(x, float) and abs(x) >= 100 else f"{x:.{digits}g}"


def _series(cells: list[dict[str, Any]], section: str, key: str,
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
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    ax.set_prop_cycle(color=plt.cm.tab20(np.arange(len(series)) % 20))  # distinct colours
    alone = order.index("eavesdropper") if "eavesdropper" in order else -1
    for name, pts in sorted(series.items()):
        line = sorted(p for p in pts if p[0] != alone)  # distances joined; the eavesdropper not
        drawn = ax.plot(*zip(*line, strict=True), marker="o", label=name) if line else None
        extra = [p for p in pts if p[0] == alone]
        if extra:
            colour = drawn[0].get_color() if drawn else None
            ax.plot(*zip(*extra, strict=True), marker="s", linestyle="none", color=colour,
                    label=None if drawn else name)
    if floor is not None:
        ax.axhline(floor, linestyle="--", color="grey", linewidth=1)
    ax.set_xticks(range(len(order)), order)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    return _png(fig)


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
    return _png(fig)


def _marks(results: dict[str, Any]) -> dict[int, str]:
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


def _row_html(cell: dict[str, Any], row: dict[str, Any]) -> str:
    inv, mia, net = row["inversion"], row["membership"], row.get("network_dp") or {}
    ident = inv.get("identifiability") or {}
    inv_cells = ([_fmt(inv.get("psnr")), _fmt(inv.get("ssim")), _fmt(inv.get("label_accuracy")),
                  html.escape(inv.get("via", "")),
                  _fmt(ident.get("condition")) if ident else "–"]
                 if inv["status"] == "ok" else
                 [f'<td colspan="5" class="na">{html.escape(inv["status"])}</td>'])
    ci = mia.get("auc_ci")
    mia_cells = ([_fmt(mia.get("auc")), f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "–",
                  _fmt(mia.get("tpr_at_1%_fpr")), _fmt(mia.get("empirical_epsilon"))]
                 if mia.get("status") == "ok" else
                 [f'<td colspan="4" class="na">{html.escape(str(mia.get("status")))}</td>'])
    claimed = cell.get("claimed_epsilon") or {}
    paper, cal = _fmt(claimed.get("paper")), _fmt(claimed.get("calibrated"))
    net_cells = [_fmt(net.get("network_epsilon")), paper, cal, _fmt(net.get("visibility"))] \
        if net.get("applicable", "network_mu" in net) else ["–", paper, cal, "–"]
    tds = [html.escape(_label(cell)), html.escape(row["placement"])]
    tds += inv_cells + mia_cells + net_cells
    return "<tr>" + "".join(t if t.startswith("<td") else f"<td>{t}</td>" for t in tds) + "</tr>"


HEADER = ("<tr><th>defense</th><th>attacker</th><th>PSNR</th><th>SSIM</th><th>label acc</th>"
          "<th>views via</th><th>cond(K)</th><th>AUC</th><th>95% CI</th><th>TPR@1%</th>"
          "<th>ε emp (LB)</th><th>ε network</th><th>ε paper</th><th>ε calibrated</th>"
          "<th>visibility</th></tr>")


def render_leakage(results: dict[str, Any]) -> str:
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
    rows = "".join(_row_html(c, r) for c in cells for r in c["rows"])
    assumptions = next((r["network_dp"]["assumptions"] for c in cells for r in c["rows"]
                        if (r.get("network_dp") or {}).get("assumptions")), [])
    imgs = "".join(f'<img src="{f}" alt="figure">' for f in figs if f)
    setting = html.escape(", ".join(f"{k}={v}" for k, v in cfg.items()))
    notes = "".join(f"<li>{html.escape(a)}</li>" for a in assumptions)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>privbench leakage map</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1200px}}
table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:3px 6px}}
td.na{{color:#777;font-size:11px}}img{{margin:4px}}</style></head><body>
<h1>How far does a leak travel?</h1>
<p>Attacks by a curious node 1, 2, 3 hops from each victim, an eavesdropper and colluding sets of
random non-neighbours. Beyond the victim's neighbours the views come from gossip inversion (El
Mrini, Cyffers, Bellet, ICML 2024): least squares over what the attackers received across
rounds; "not applicable" means the linear system does not identify the victim (rank deficit) or
the defense's messages are not a linear gossip. Network-DP ε (Muffliato-style pairwise network
DP, computed from the attackers' exact linear view, no subsampling) holds under the assumptions
below; the calibrated ε is the guarantee.</p>
<p><small>Setting: {setting}</small></p>
{imgs}
<h2>Table</h2><table>{HEADER}{rows}</table>
<h2>Network-DP assumptions</h2><ul>{notes}</ul>
</body></html>
"""


def by_distance(results: dict[str, Any]) -> str:
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


def _cell_value(row: dict[str, Any] | None, section: str, key: str) -> str:
    part = (row or {}).get(section) or {}
    if section != "network_dp" and part.get("status") != "ok":
        return "n/a" if part else "–"
    return _fmt(part.get(key))


def markdown(results: dict[str, Any]) -> str:
    """The leakage map as a Markdown table (PSNR / label accuracy, AUC / TPR@1%, network and
    calibrated ε per defense and attacker placement), for READMEs."""
    head = ("| defense | attacker | views via | PSNR (dB) | label acc | AUC | TPR@1% | ε emp | "
            "ε network | ε paper | ε calibrated |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for cell in results["cells"]:
        for row in cell["rows"]:
            inv, mia = row["inversion"], row["membership"]
            net = row.get("network_dp") or {}
            if inv["status"] == "ok":
                inv_part = [inv.get("via", ""), _fmt(inv.get("psnr")),
                            _fmt(inv.get("label_accuracy"))]
            else:
                inv_part = [_short(inv["status"]), "–", "–"]
            mia_part = ([_fmt(mia.get("auc")), _fmt(mia.get("tpr_at_1%_fpr")),
                         _fmt(mia.get("empirical_epsilon"))] if mia.get("status") == "ok"
                        else [_short(str(mia.get("status"))), "–", "–"])
            claimed = cell.get("claimed_epsilon") or {}
            net_part = [_fmt(net.get("network_epsilon")), _fmt(claimed.get("paper")),
                        _fmt(claimed.get("calibrated"))]
            lines.append("| " + " | ".join([_label(cell), row["placement"], *inv_part,
                                             *mia_part, *net_part]) + " |")
    return head + "\n".join(lines) + "\n"


def _short(status: str) -> str:
    """A not-applicable status cut to its kind (for table cells)."""
    for key, text in (("not a linear gossip", "n/a: not a linear gossip"),
                      ("rank deficit", "n/a: rank deficit"),
                      ("not observed", "n/a: not observed")):
        if key in status:
            return text
    return status[:40]
