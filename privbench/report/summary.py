"""The terminal summary of an audit, one row per cell: a table that fits 100 columns, a wide
one with every column (`--wide`), and the same rows as CSV (`privbench report --csv`)."""

from __future__ import annotations

import csv
import io
import textwrap
from dataclasses import asdict, dataclass

from privbench.results.records import AuditCell, AuditRun, JsonObject, as_run

# the widest table the default view may print (a terminal, a CI log)
COLUMNS = 100


def _eps_column(cell: AuditCell) -> str:
    """A summary row's ε: "1", "-" (no DP), "paper" (a fixed paper setting) or "paper@8" (the
    paper's reading of ε = 8)."""
    setting = cell.setting
    if setting:
        return "paper" if setting.get("epsilon") is None else f"paper@{setting['epsilon']:g}"
    return "-" if cell.epsilon is None else f"{cell.epsilon:g}"


@dataclass(frozen=True)
class SummaryRow:
    """One cell's row, as numbers (None: not measured, or not read because training diverged);
    `training` is the cell's state in words, `trained` for a run that trained normally."""

    defense: str
    eps: str
    accuracy: float | None
    psnr: float | None
    ssim: float | None
    label_accuracy: float | None
    auc: float | None
    auc_low: float | None
    auc_high: float | None
    tpr_at_1pct_fpr: float | None
    tpr_low: float | None
    tpr_high: float | None
    eps_paper: float | None
    eps_calibrated: float | None
    eps_empirical: float | None
    eps_empirical_cap: float | None
    verdict: str
    training: str


def summary_rows(results: AuditRun | JsonObject) -> list[SummaryRow]:
    """The rows of every cell, in the audit's order, with the cell's verdict (the report's)."""
    from privbench.report.verdicts import verdicts
    from privbench.results.store import attack_interval, attack_metric, claimed_eps

    results = as_run(results)
    judged = {id(c): v for name, d in verdicts(results).items()
              for c, v in zip([c for c in results.cells if c.defense == name],
                              d["cells"], strict=True)}
    rows = []
    for c in results.cells:
        v = judged[id(c)]
        ran = v["state"]["kind"] != "diverged"  # a diverged cell shows no attack result

        def m(key: str, cell: AuditCell = c, ran: bool = ran) -> float | None:
            return attack_metric(cell, key) if ran else None

        def ci(key: str, cell: AuditCell = c, ran: bool = ran) -> tuple[float | None, ...]:
            iv = attack_interval(cell, key) if ran else None
            return (None, None) if iv is None else (iv[0], iv[1])

        rows.append(SummaryRow(
            c.defense, _eps_column(c), c.accuracy, m("psnr"), m("ssim"), m("label_accuracy"),
            m("auc"), *ci("auc"), m("tpr_at_1%_fpr"), *ci("tpr_at_1%_fpr"),
            claimed_eps(c, "paper"), claimed_eps(c, "calibrated"), m("empirical_epsilon"),
            m("empirical_epsilon_cap"), v["level"].replace("_", "-"), v["state"]["text"]))
    return rows


def _f(v: float | None) -> str:
    from privbench.results.store import fmt_num

    return fmt_num(v, missing="-")


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{_f(low)},{_f(high)}]"


def summary_table(results: AuditRun | JsonObject, wide: bool = False) -> str:
    """The terminal summary in the report's number format. The default fits `COLUMNS` columns:
    accuracy, the inversion's PSNR / SSIM, the membership AUC with its 95 % interval, TPR at
    1 % FPR, the calibrated and empirical ε and the verdict, with a note under the table for
    each cell whose training did not go as planned; `wide` adds the label accuracy, TPR's
    interval, the paper's ε, the empirical cap and the training column."""
    rows = summary_rows(results)
    return _wide(rows) if wide else _narrow(rows)


def _narrow(rows: list[SummaryRow]) -> str:
    width = max([len("defense"), *(len(r.defense) for r in rows)])
    lines = [f"{'defense':<{width}} {'ε':>7} {'acc':>6} {'PSNR':>5} {'SSIM':>8} "
             f"{'AUC [95% CI]':<19} {'TPR@1%':>8} {'ε cal':>8} {'ε emp':>6}  verdict"]
    notes = []
    for r in rows:
        lines.append(f"{r.defense:<{width}} {r.eps:>7} {_f(r.accuracy):>6} {_f(r.psnr):>5} "
                     f"{_f(r.ssim):>8} {_f(r.auc) + ' ' + _ci(r.auc_low, r.auc_high):<19} "
                     f"{_f(r.tpr_at_1pct_fpr):>8} {_f(r.eps_calibrated):>8} "
                     f"{_f(r.eps_empirical):>6}  {r.verdict}")
        if r.training != "trained":
            notes += textwrap.wrap(f"{r.defense} ε {r.eps}: {r.training}", COLUMNS,
                                   initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines + (["training:", *notes] if notes else []))


def _wide(rows: list[SummaryRow]) -> str:
    head = (f"{'defense':<12} {'eps':>9} {'acc':>6} {'PSNR':>6} {'SSIM':>8} {'label':>6} "
            f"{'AUC':>6} {'95% CI':>15} {'TPR@1%':>7} {'95% CI':>15} {'eps_paper':>9} "
            f"{'eps_cal':>8} {'eps_emp':>8} {'cap':>5}  {'verdict':<13} training")
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.defense:<12} {r.eps:>9} {_f(r.accuracy):>6} {_f(r.psnr):>6} {_f(r.ssim):>8} "
            f"{_f(r.label_accuracy):>6} {_f(r.auc):>6} {_ci(r.auc_low, r.auc_high):>15} "
            f"{_f(r.tpr_at_1pct_fpr):>7} {_ci(r.tpr_low, r.tpr_high):>15} "
            f"{_f(r.eps_paper):>9} {_f(r.eps_calibrated):>8} {_f(r.eps_empirical):>8} "
            f"{_f(r.eps_empirical_cap):>5}  {r.verdict:<13} {r.training}")
    return "\n".join(lines)


def summary_csv(results: AuditRun | JsonObject) -> str:
    """The rows as CSV, one header line of `SummaryRow`'s field names, numbers at full precision
    (an empty field: not measured), ε infinite as "inf"."""
    buf = io.StringIO()
    rows = summary_rows(results)
    writer = csv.DictWriter(buf, fieldnames=list(SummaryRow.__dataclass_fields__),
                            lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v
                         for k, v in asdict(r).items()})
    return buf.getvalue()
