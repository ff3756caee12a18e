"""Render a reproduction's table from its runs.jsonl lines alone (no training, byte-stable).

Three tables: accuracy (mean ± sample sd over seeds, %, the paper's row under each of ours), the
epsilon the noise buys (paper / calibrated, largest over nodes, mean over seeds), and the paper's
orderings paired by seed (mean difference in points ± sample sd, the seeds where it holds, and a
verdict per epsilon: "holds" when mean - 2 se > 0, "fails" when mean + 2 se < 0, else
"unresolved"; a claim is "reproduced" when it holds at every epsilon, "partly" at some, "refuted"
when it holds at none and fails at some, "not resolved" otherwise).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from privbench.reproduce.spec import METRICS, Reproduction, Scale


def _eps_head(repro: Reproduction) -> str:
    return " | ".join(f"{repro.grid_symbol}={e:g}" for e in repro.eps)


def _sep(cols: int) -> str:
    return "|---" * cols + "|"


def _points(repro: Reproduction, rec: dict[str, Any]) -> float:
    """The line's accuracy (%) under the table's metric."""
    return 100.0 * float(rec[repro.metric])


def _mean_sd(xs: list[float], digits: int = 1) -> str:
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f} (1 run)"
    return f"{statistics.fmean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def _cells(repro: Reproduction, records: list[dict[str, Any]], label: str
           ) -> list[list[dict[str, Any]] | None]:
    """Per grid value, the method's lines (a non-private method: all its lines; None where
    the row is not run)."""
    mine = [r for r in records if r["method"] == label]
    if not repro.method(label).private:
        return [mine for _ in repro.eps]
    return [[r for r in mine if r["eps"] == e] if repro.runs_at(label, e) else None
            for e in repro.eps]


def _accuracy_table(repro: Reproduction, records: list[dict[str, Any]]) -> list[str]:
    paper = dict(repro.paper)
    lines = [f"| method | {_eps_head(repro)} |", _sep(len(repro.eps) + 1)]
    for m in repro.methods:
        cells = []
        for recs in _cells(repro, records, m.label):
            if recs is None:
                cells.append("not run")
                continue
            text = _mean_sd([_points(repro, r) for r in recs])
            diverged = sum(r["diverged_round"] is not None for r in recs)
            cells.append(text + (f" ({diverged} diverged)" if diverged else ""))
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
        if m.label in paper:
            lines.append(f"| *paper: {m.label}* | " +
                         " | ".join("–" if v is None else f"*{v:.2f}*"
                                    for v in paper[m.label]) + " |")
    return lines


def _fmt_eps(x: float | None) -> str:
    if x is None:
        return "–"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def _epsilon_table(repro: Reproduction, records: list[dict[str, Any]]) -> list[str]:
    lines = [f"| method | {_eps_head(repro)} |", _sep(len(repro.eps) + 1)]
    for m in repro.methods:
        if not m.private:
            continue
        cells = []
        for recs in _cells(repro, records, m.label):
            if recs is None:
                cells.append("not run")
                continue
            parts = []
            for key in ("epsilon_paper", "epsilon_calibrated"):
                vals = [r[key] for r in recs if r[key] is not None]
                parts.append(_fmt_eps(statistics.fmean(vals) if vals else None))
            cells.append(" / ".join(parts))
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    return lines


def paired_differences(repro: Reproduction, records: list[dict[str, Any]], better: str,
                       worse: str, eps: float) -> list[float]:
    """Accuracy points of `better` minus `worse` at `eps`, one per seed both have run."""
    def by_seed(label: str) -> dict[int, float]:
        m = repro.method(label)
        return {int(r["seed"]): _points(repro, r) for r in records
                if r["method"] == label and (not m.private or r["eps"] == eps)}

    a, b = by_seed(better), by_seed(worse)
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def verdict_at(diffs: list[float]) -> str:
    """"holds" / "fails" / "unresolved" at 2 standard errors (unresolved below 2 seeds)."""
    if len(diffs) < 2:
        return "unresolved"
    mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    if mean - 2 * se > 0:
        return "holds"
    if mean + 2 * se < 0:
        return "fails"
    return "unresolved"


def claim_verdict(per_eps: list[str]) -> str:
    """"reproduced" (holds at every epsilon), "partly" (at some), "refuted" (at none and
    reversed at some), else "not resolved" (too few seeds to tell either way)."""
    held = sum(v == "holds" for v in per_eps)
    if held == len(per_eps):
        return "reproduced"
    if held:
        return "partly"
    return "refuted" if "fails" in per_eps else "not resolved"


def _ordering_table(repro: Reproduction, records: list[dict[str, Any]]) -> list[str]:
    lines = [f"| paper's claim | {_eps_head(repro)} | verdict |", _sep(len(repro.eps) + 2)]
    for better, worse in repro.orderings:
        cells, verdicts = [], []
        for e in repro.eps:
            if not (repro.runs_at(better, e) and repro.runs_at(worse, e)):
                cells.append("not run")  # the paper claims it only where both rows are
                continue
            d = paired_differences(repro, records, better, worse, e)
            v = verdict_at(d)
            verdicts.append(v)
            if not d:
                cells.append("–")
                continue
            sd = f" ± {statistics.stdev(d):.1f}" if len(d) > 1 else ""
            held = sum(x > 0 for x in d)
            cells.append(f"{statistics.fmean(d):+.1f}{sd} ({held}/{len(d)}) {v}")
        lines.append(f"| {better} > {worse} | " + " | ".join(cells) +
                     f" | {claim_verdict(verdicts)} |")
    return lines


def _setting(scale: Scale, records: list[dict[str, Any]]) -> str:
    run = dict(scale.run)
    seeds = sorted({int(r["seed"]) for r in records})
    keys = ("dataset", "model", "nodes", "topology", "partition", "rounds", "batch_size", "lr",
            "delta")
    text = ", ".join(f"{k} {run[k]}" for k in keys if k in run)
    return f"{text}; seeds {', '.join(map(str, seeds)) or '–'} ({len(records)} runs)"


def render(repro: Reproduction, scale: Scale, records: list[dict[str, Any]]) -> str:
    """The markdown of a reproduction from its runs (deterministic in the lines' content)."""
    repro = repro.at(scale)
    out = [f"**{repro.title}**, privbench at the {scale.name!r} scale: {scale.note}.", "",
           f"Setting: {_setting(scale, records)}.", "",
           f"{METRICS[repro.metric]} (%), mean ± sample sd over seeds; the paper's numbers "
           "in italics:", "", *_accuracy_table(repro, records), "",
           "ε the noise buys per node (paper accountant / calibrated, largest over nodes, mean "
           "over seeds):", "", *_epsilon_table(repro, records), "",
           "The paper's orderings, paired by seed (mean difference in points ± sd, seeds where "
           "it holds; *holds* / *fails* at 2 standard errors, else *unresolved*; a claim is "
           "*reproduced* when it holds at every ε, *partly* at some, *refuted* when it holds at "
           "none and fails at some, else *not resolved*):", "",
           *_ordering_table(repro, records)]
    return "\n".join(out) + "\n"
