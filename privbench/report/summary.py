"""The terminal summary of an audit: one row per cell."""

from __future__ import annotations

from collections.abc import Mapping

from privbench.results.records import AuditCell, AuditRun, Json, as_run


def _eps_column(cell: AuditCell) -> str:
    """A summary row's ε: "1", "-" (no DP), "paper" (a fixed paper setting) or "paper@8" (the
    paper's reading of ε = 8)."""
    setting = cell.setting
    if setting:
        return "paper" if setting.get("epsilon") is None else f"paper@{setting['epsilon']:g}"
    return "-" if cell.epsilon is None else f"{cell.epsilon:g}"


def summary_table(results: AuditRun | Mapping[str, Json]) -> str:
    """The terminal summary: one row per (defense, ε), in the report's number format, with the
    cell's verdict and what happened to its training (a diverged cell shows no attack result)."""
    from privbench.report.verdicts import verdicts
    from privbench.results.store import attack_interval, attack_metric, claimed_eps, fmt_num

    results = as_run(results)
    judged = {id(c): v for name, d in verdicts(results).items()
              for c, v in zip([c for c in results.cells if c.defense == name],
                              d["cells"], strict=True)}

    def f(v: float | None) -> str:
        return fmt_num(v, missing="-")

    def ci(c: AuditCell, key: str) -> str:
        iv = attack_interval(c, key)
        return "-" if iv is None else f"[{fmt_num(iv[0])},{fmt_num(iv[1])}]"

    head = (f"{'defense':<12} {'eps':>9} {'acc':>6} {'PSNR':>6} {'SSIM':>8} {'label':>6} "
            f"{'AUC':>6} {'95% CI':>15} {'TPR@1%':>7} {'95% CI':>15} {'eps_paper':>9} "
            f"{'eps_cal':>8} {'eps_emp':>8} {'cap':>5}  {'verdict':<13} training")
    lines = [head]
    for c in results.cells:
        v = judged[id(c)]
        ran = v["state"]["kind"] != "diverged"

        def m(key: str) -> str:
            return f(attack_metric(c, key)) if ran else "-"  # noqa: B023 (used in this loop)

        lines.append(
            f"{c.defense:<12} {_eps_column(c):>9} {f(c.accuracy):>6} "
            f"{m('psnr'):>6} {m('ssim'):>8} {m('label_accuracy'):>6} {m('auc'):>6} "
            f"{ci(c, 'auc') if ran else '-':>15} {m('tpr_at_1%_fpr'):>7} "
            f"{ci(c, 'tpr_at_1%_fpr') if ran else '-':>15} {f(claimed_eps(c, 'paper')):>9} "
            f"{f(claimed_eps(c, 'calibrated')):>8} {m('empirical_epsilon'):>8} "
            f"{m('empirical_epsilon_cap'):>5}  {v['level'].replace('_', '-'):<13} "
            f"{v['state']['text']}")
    return "\n".join(lines)
