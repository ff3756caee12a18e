"""Two audits side by side: for every cell both hold, what moved toward less privacy, by how
much, and whether the move is clear of the metrics' 95 % intervals (`privbench report OLD NEW
--compare`)."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

from privbench.report.gate import BASELINE_METRICS, cell_label
from privbench.results.records import AuditRun, JsonObject, as_run
from privbench.results.store import attack_interval, attack_metric, finite_or_none, fmt_num

# a move is shown "within noise" unless both intervals exist and are disjoint
CLEAR, WITHIN, NO_INTERVAL = "clear", "within the intervals", "no interval"


@dataclass(frozen=True)
class Move:
    """One metric of one cell in both audits. `direction` +1: a higher value leaks more (AUC,
    PSNR), -1: a lower one does (MSE), 0: not a privacy metric (accuracy, shown for context)."""

    cell: str
    metric: str
    before: float
    after: float
    before_ci: tuple[float, float] | None
    after_ci: tuple[float, float] | None
    direction: int

    @property
    def toward_less_privacy(self) -> bool:
        return (self.after - self.before) * self.direction > 0

    @property
    def resolved(self) -> str:
        """Whether the move is clear of both 95 % intervals (they do not overlap)."""
        if self.before_ci is None or self.after_ci is None:
            return NO_INTERVAL
        apart = self.after_ci[0] > self.before_ci[1] or self.before_ci[0] > self.after_ci[1]
        return CLEAR if apart else WITHIN


@dataclass(frozen=True)
class Comparison:
    """Every metric of every shared cell, and the cells only one audit holds."""

    moves: tuple[Move, ...]
    only_before: tuple[str, ...]
    only_after: tuple[str, ...]

    def worse(self) -> list[Move]:
        """The moves toward less privacy, the clear ones first, then by size."""
        worse = [m for m in self.moves if m.toward_less_privacy]
        return sorted(worse, key=lambda m: (m.resolved != CLEAR, -abs(m.after - m.before)))


_METRICS: dict[str, int] = {"accuracy": 0, **{k: d for k, (d, _) in BASELINE_METRICS.items()}}


def _value(cell: object, metric: str) -> tuple[float | None, tuple[float, float] | None]:
    if metric == "accuracy":
        return finite_or_none(cell.accuracy), None  # type: ignore[attr-defined]
    ci = attack_interval(cell, metric)  # type: ignore[arg-type]
    return attack_metric(cell, metric), None if ci is None else (ci[0], ci[1])  # type: ignore[arg-type]


def compare_runs(before: AuditRun | JsonObject,
                 after: AuditRun | JsonObject) -> Comparison:
    """Compare two audits cell by cell (a cell is its defense and ε, `gate.cell_label`)."""
    old = {cell_label(c): c for c in as_run(before).cells}
    new = {cell_label(c): c for c in as_run(after).cells}
    moves = []
    for label, cell in new.items():
        if label not in old:
            continue
        for metric, direction in _METRICS.items():
            (b, bci), (a, aci) = _value(old[label], metric), _value(cell, metric)
            if a is not None and b is not None:
                moves.append(Move(label, metric, b, a, bci, aci, direction))
    return Comparison(tuple(moves), tuple(k for k in old if k not in new),
                      tuple(k for k in new if k not in old))


def _ci(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" [{fmt_num(ci[0])}, {fmt_num(ci[1])}]"


def comparison_text(cmp: Comparison) -> str:
    """The terminal summary: one line per move toward less privacy, then what was unmatched."""
    worse = cmp.worse()
    cells = len({m.cell for m in cmp.moves})
    lines = [f"{len(worse)} of {sum(m.direction != 0 for m in cmp.moves)} privacy metrics over "
             f"{cells} shared cell(s) moved toward less privacy "
             f"({sum(m.resolved == CLEAR for m in worse)} clear of their 95 % intervals)"]
    for m in worse:
        lines.append(f"  {m.cell} {m.metric}: {fmt_num(m.before)}{_ci(m.before_ci)} -> "
                     f"{fmt_num(m.after)}{_ci(m.after_ci)} ({m.resolved})")
    for what, labels in (("only in the first", cmp.only_before),
                         ("only in the second", cmp.only_after)):
        if labels:
            lines.append(f"cells {what}: {', '.join(labels)}")
    return "\n".join(lines)


_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>privbench: {before} vs {after}</title><style>
body{{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1rem}}
.scroll{{overflow-x:auto}} table{{border-collapse:collapse;width:100%}}
th,td{{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}}
td.num{{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}}
th:first-child,td:first-child{{position:sticky;left:0;background:#fff}}
.worse{{color:#a40000;font-weight:600}}
.muted{{color:#666}}</style></head><body>
<h1>{before} → {after}</h1><p>{summary}</p>
<div class="scroll"><table><thead><tr><th>cell</th><th>metric</th><th>{before}</th>
<th>{after}</th><th>change</th><th>toward less privacy</th><th>intervals</th></tr></thead>
<tbody>{rows}</tbody></table></div>{unmatched}
<p class="muted">Intervals are each audit's 95 % intervals (bootstrap for an AUC,
Clopper-Pearson for a TPR); a move is clear when they do not overlap. Accuracy is shown for
context: it is not a privacy metric.</p></body></html>
"""


def render_comparison(cmp: Comparison, before: str, after: str) -> str:
    """A self-contained page: every shared metric, the moves toward less privacy first."""
    order = {id(m): i for i, m in enumerate(cmp.worse())}
    rows = sorted(cmp.moves, key=lambda m: (order.get(id(m), len(order)), m.cell))
    cells = []
    for m in rows:
        worse = m.toward_less_privacy
        cells.append(Markup(
            "<tr{}><td>{}</td><td>{}</td><td class=num>{}{}</td><td class=num>{}{}</td>"
            "<td class=num>{}</td><td>{}</td><td>{}</td></tr>").format(
            Markup(' class="worse"') if worse else "", m.cell, m.metric, fmt_num(m.before),
            _ci(m.before_ci), fmt_num(m.after), _ci(m.after_ci),
            fmt_num(m.after - m.before), "yes" if worse else "–" if m.direction == 0 else "no",
            "–" if m.direction == 0 else m.resolved))
    unmatched = "".join(
        str(Markup("<p>Cells only in {}: {}</p>").format(name, ", ".join(labels)))
        for name, labels in ((before, cmp.only_before), (after, cmp.only_after)) if labels)
    summary = comparison_text(cmp).splitlines()[0]
    return _PAGE.format(before=escape(before), after=escape(after), summary=escape(summary),
                        rows="".join(cells), unmatched=unmatched)
