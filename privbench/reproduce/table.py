"""Render a reproduction's table from its runs.jsonl lines alone (no training, byte-stable).

Three tables: accuracy (mean ± sample sd over seeds, %, "k of N seeds" where a cell has fewer
runs than the table has seeds; the paper's row under each of ours), the
epsilon the noise buys (paper / calibrated, largest over nodes, mean over seeds), and the paper's
orderings paired by seed (mean difference in points ± sample sd, the seeds where it holds, and a
verdict per epsilon: "holds" when mean - 2 se > 0, "fails" when mean + 2 se < 0, else
"unresolved", and "unresolved" below MIN_PAIRS paired seeds; a claim is "reproduced" when it
holds at every epsilon, "partly" at some, "refuted" when it holds at none and fails at some,
"not resolved" otherwise; judged over the epsilons that
have runs: a cell with none is "untested" and the verdict counts the epsilons it rests on).
"""

from __future__ import annotations

import math
import statistics

from privbench.reproduce.line import RunLine
from privbench.reproduce.spec import METRICS, Reproduction, Scale
from privbench.results.store import counted


def _eps_head(repro: Reproduction) -> str:
    return " | ".join(f"{repro.grid_symbol}={e:g}" for e in repro.eps)


def _sep(cols: int) -> str:
    return "|---" * cols + "|"


def _points(repro: Reproduction, rec: RunLine) -> float | None:
    """The line's accuracy (%) under the table's metric; None for a run with none (a diverged
    run: its average model is NaN and its nodes' accuracies are not recorded)."""
    value = rec.get(repro.metric)
    if value is None or not math.isfinite(float(value)):
        return None
    return 100.0 * float(value)


def _diverged(recs: list[RunLine], what: str = "diverged") -> str:
    """' (k of n diverged, round r)' for the cell of these lines ('' when none did)."""
    rounds = sorted({int(r["diverged_round"]) for r in recs if r["diverged_round"] is not None})
    if not rounds:
        return ""
    k = sum(r["diverged_round"] is not None for r in recs)
    at = f"round {rounds[0]}" if len(rounds) == 1 else f"rounds {rounds[0]}-{rounds[-1]}"
    return f" ({k} of {len(recs)} {what}, {at})"


def _mean_sd(xs: list[float], digits: int = 1, seeds: int = 1) -> str:
    """Mean ± sample sd; a cell resting on fewer runs than the table has seeds says how many
    (a mean over 3 of 5 seeds must not read as one over all 5)."""
    if not xs:
        return "–"
    few = f" ({len(xs)} of {seeds} seeds)" if len(xs) < seeds else ""
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}" + (few or " (1 run)")
    return f"{statistics.fmean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}{few}"


def _cells(repro: Reproduction, records: list[RunLine], label: str
           ) -> list[list[RunLine] | None]:
    """Per grid value, the method's lines (a non-private method: all its lines; None where
    the row is not run)."""
    mine = [r for r in records if r["method"] == label]
    if not repro.method(label).private:
        return [mine for _ in repro.eps]
    return [[r for r in mine if r["eps"] == e] if repro.runs_at(label, e) else None
            for e in repro.eps]


def _accuracy_table(repro: Reproduction, records: list[RunLine]) -> list[str]:
    paper = dict(repro.paper)
    seeds = len({int(r["seed"]) for r in records})
    lines = [f"| method | {_eps_head(repro)} |", _sep(len(repro.eps) + 1)]
    for m in repro.methods:
        cells = []
        for recs in _cells(repro, records, m.label):
            if recs is None:
                cells.append("not run")
                continue
            points = [p for p in (_points(repro, r) for r in recs) if p is not None]
            if points or not recs:
                cells.append(_mean_sd(points, seeds=seeds) + _diverged(recs))
            else:
                cells.append("diverged" + _diverged(recs, "runs"))
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


def _epsilon_table(repro: Reproduction, records: list[RunLine]) -> list[str]:
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


def _pairs(repro: Reproduction, records: list[RunLine], better: str, worse: str,
           eps: float) -> list[tuple[float | None, float | None]]:
    """Per seed both rows have run at `eps` (in seed order), their accuracies (%; None: that
    run diverged, so the seed has no paired difference)."""
    a, b = _by_seed(repro, records, better, eps), _by_seed(repro, records, worse, eps)
    return [(a[s], b[s]) for s in sorted(set(a) & set(b))]


def _by_seed(repro: Reproduction, records: list[RunLine], label: str, eps: float
             ) -> dict[int, float | None]:
    m = repro.method(label)
    return {int(r["seed"]): _points(repro, r) for r in records
            if r["method"] == label and (not m.private or r["eps"] == eps)}


# with 2 pairs the sd has one degree of freedom: under no true difference, mean > 2 se by chance
# 15 % of the time (Student t, 1 df), against 9 % with 3 pairs and 2.3 % for a known sd
MIN_PAIRS = 3


def verdict_at(diffs: list[float]) -> str:
    """"holds" / "fails" / "unresolved" at 2 standard errors (unresolved below MIN_PAIRS seeds)."""
    if len(diffs) < MIN_PAIRS:
        return "unresolved"
    mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    if mean - 2 * se > 0:
        return "holds"
    if mean + 2 * se < 0:
        return "fails"
    return "unresolved"


UNTESTED = "untested"  # a cell the claim covers where no seed has both rows (none run yet)


def claim_verdict(per_eps: list[str]) -> str:
    """"reproduced" (holds at every epsilon), "partly" (at some), "refuted" (at none and
    reversed at some), else "not resolved" (too few seeds to tell either way).

    Cells with no runs (`UNTESTED`) are no evidence either way: the verdict is over the tested
    cells and says how many of the claim's cells that is ("reproduced (2 of 4 ε run)"), so a
    claim that holds wherever it was run never reads "partly"; with none tested it is "untested".
    """
    tested = [v for v in per_eps if v != UNTESTED]
    if not tested:
        return UNTESTED
    held = sum(v == "holds" for v in tested)
    if held == len(tested):
        verdict = "reproduced"
    elif held:
        verdict = "partly"
    else:
        verdict = "refuted" if "fails" in tested else "not resolved"
    return verdict if len(tested) == len(per_eps) else \
        f"{verdict} ({len(tested)} of {len(per_eps)} ε run)"


def _claim(repro: Reproduction, records: list[RunLine], better: str, worse: str
           ) -> tuple[list[str], str]:
    """One claimed ordering: its cell per grid value and its verdict."""
    cells, verdicts = [], []
    for e in repro.eps:
        if not (repro.runs_at(better, e) and repro.runs_at(worse, e)):
            cells.append("not run")  # the paper claims it only where both rows are
            continue
        pairs = _pairs(repro, records, better, worse, e)
        d = [a - b for a, b in pairs if a is not None and b is not None]
        v = verdict_at(d)
        lost = len(pairs) - len(d)  # seeds where either row diverged
        note = f" ({counted(lost, 'seed')} diverged)" if lost else ""
        verdicts.append(v if d or lost else UNTESTED)  # diverged seeds were tested
        if not d:
            cells.append("–" + note)
            continue
        sd = f" ± {statistics.stdev(d):.1f}" if len(d) > 1 else ""
        held = sum(x > 0 for x in d)
        cells.append(f"{statistics.fmean(d):+.1f}{sd} ({held}/{len(d)}) {v}{note}")
    return cells, claim_verdict(verdicts)


def _ordering_table(repro: Reproduction, records: list[RunLine]) -> list[str]:
    lines = [f"| paper's claim | {_eps_head(repro)} | verdict |", _sep(len(repro.eps) + 2)]
    for better, worse in repro.orderings:
        cells, verdict = _claim(repro, records, better, worse)
        lines.append(f"| {better} > {worse} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def _setting(scale: Scale, records: list[RunLine]) -> str:
    run = dict(scale.run)
    seeds = sorted({int(r["seed"]) for r in records})
    keys = ("dataset", "model", "nodes", "topology", "partition", "rounds", "batch_size", "lr",
            "delta")
    text = ", ".join(f"{k} {run[k]}" for k in keys if k in run)
    return f"{text}; seeds {', '.join(map(str, seeds)) or '–'} " \
        f"({counted(len(records), 'run')})" + _devices(records)


def _devices(records: list[RunLine]) -> str:
    """'; runs on cuda with torch X (n), cpu with torch Y (m)' when any run left the CPU (a
    table whose lines came from different machines says so; all-CPU tables say nothing)."""
    counts: dict[str, int] = {}
    for r in records:
        torch_version = r.get("fields", {}).get("versions.torch", "unrecorded")
        where = f"{str(r.get('device', 'cpu')).split(':')[0]} with torch {torch_version}"
        counts[where] = counts.get(where, 0) + 1
    if all(w.startswith("cpu ") for w in counts):
        return ""
    return "; runs on " + ", ".join(f"{w} ({n})" for w, n in sorted(counts.items()))


def render(repro: Reproduction, scale: Scale, records: list[RunLine]) -> str:
    """The markdown of a reproduction from its runs (deterministic in the lines' content)."""
    repro = repro.at(scale)
    out = [f"**{repro.title}**, privbench at the {scale.name!r} scale: {scale.note}.", "",
           f"Setting: {_setting(scale, records)}.", "",
           f"{METRICS[repro.metric]} (%), mean ± sample sd over seeds; the paper's numbers "
           "in italics:", "", *_accuracy_table(repro, records), "",
           "ε the noise buys per node (paper accountant / calibrated, largest over nodes, mean "
           "over seeds):", "", *_epsilon_table(repro, records), "",
           "The paper's orderings, paired by seed (mean difference in points ± sd, seeds where "
           f"it holds; *holds* / *fails* at 2 standard errors over at least {MIN_PAIRS} seeds, "
           "else *unresolved*; a claim is "
           "*reproduced* when it holds at every ε, *partly* at some, *refuted* when it holds at "
           "none and fails at some, else *not resolved*; over the ε run when some are not):", "",
           *_ordering_table(repro, records)]
    return "\n".join(out) + "\n"


SUMMARY_HEAD = ("| paper | scale | seeds | headline claim | per column: mean difference "
                "(seeds where it holds) | verdict | all its claims |")


def summary_row(repro: Reproduction, scale: Scale, records: list[RunLine]) -> str:
    """One reproduction's line of the summary: its headline claim (the first ordering) per
    column and its verdict, and the tally of the verdicts of all its claims at this scale."""
    table = repro.at(scale)
    seeds = len({int(r["seed"]) for r in records})
    if not table.orderings:
        return f"| {repro.name} | {scale.name} | {seeds} | – | – | – | – |"
    claims = [_claim(table, records, a, b) for a, b in table.orderings]
    (better, worse), (cells, verdict) = table.orderings[0], claims[0]
    columns = zip(table.eps, cells, strict=True)
    per = "; ".join(f"{table.grid_symbol}={e:g}: {c}" for e, c in columns if c != "not run")
    tally: dict[str, int] = {}
    for _, v in claims:
        word = v.split(" (")[0]  # "reproduced (2 of 4 ε run)": reproduced, on part of the grid
        tally[word] = tally.get(word, 0) + 1
    order = ("reproduced", "partly", "refuted", "not resolved", UNTESTED)
    tallied = ", ".join(f"{tally[w]} {w}" for w in order if w in tally)
    part = sum(v.endswith("ε run)") for _, v in claims)
    tallied += f"; {part} judged on part of its columns" if part else ""
    return (f"| {repro.name} | {scale.name} | {seeds} | {better} > {worse} | {per} | "
            f"{verdict} | {len(claims)}: {tallied} |")


def summary(rows: list[str]) -> str:
    """The summary table of every committed reproduction (one `summary_row` each)."""
    return "\n".join([SUMMARY_HEAD, _sep(7), *rows]) + "\n"
