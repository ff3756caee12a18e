"""`privbench report`: an audit's HTML report rendered (or several audits merged) from results
alone."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from privbench.commands.common import refuse_existing
from privbench.errors import PrivbenchError

if TYPE_CHECKING:
    from privbench.results.records import AuditRun


def cmd_report(args: argparse.Namespace) -> int:
    """`privbench report RESULTS.json [...] -o report.html`: render/merge without training code."""
    from privbench.report import merge_results
    from privbench.results.store import atomic_write_text, read_audit

    output = Path(args.output)
    if output.resolve() in {Path(p).resolve() for p in args.results}:
        raise PrivbenchError(f"-o {output} names one of the results files it renders; "
                             "choose another -o")
    if args.compare and (len(args.results) != 2 or args.csv):
        raise PrivbenchError(f"--compare takes two results files, the earlier audit then the "
                             f"later one, and no --csv; got {len(args.results)} file(s)"
                             + (" and --csv" if args.csv else ""))
    refuse_existing(output, args.overwrite, "-o")
    if args.csv:
        refuse_existing(Path(args.csv), args.overwrite, "--csv")
    items = [read_audit(p, "`privbench report` renders audit results written by "
                        "`privbench attack`") for p in args.results]
    items = [dataclasses.replace(item, detail={  # each named by its folder
        "run_name": Path(path).resolve().parent.name, **item.detail})
        for path, item in zip(args.results, items, strict=True)]
    if args.compare:
        return _compare(args, items)
    merged = merge_results(list(items))
    atomic_write_text(args.output, _render(merged, str(merged.detail["run_name"])))
    print(f"wrote {args.output}")
    if args.csv:
        from privbench.report.summary import summary_csv

        atomic_write_text(args.csv, summary_csv(merged))
        print(f"wrote {args.csv}")
    return 0


def _compare(args: argparse.Namespace, items: list[AuditRun]) -> int:
    """`--compare OLD NEW`: what moved toward less privacy, printed and as a page."""
    from privbench.report.compare import compare_runs, comparison_text, render_comparison
    from privbench.results.store import atomic_write_text

    cmp = compare_runs(*items)
    names = [str(Path(p)) for p in args.results]
    print(comparison_text(cmp))
    atomic_write_text(args.output, render_comparison(cmp, *names))
    print(f"wrote {args.output}")
    return 0


def _render(results: AuditRun, name: str) -> str:
    """The report page; a results file that passes the schema check but still lacks what the
    page shows (hand-edited, another tool's) is a one-line error, never a traceback."""
    from jinja2.exceptions import UndefinedError

    from privbench.report import render_html

    try:
        return render_html(results, run_name=name)
    except (LookupError, TypeError, ValueError, AttributeError, UndefinedError) as exc:
        reason = str(exc).replace("\n", " ")[:200]
        raise PrivbenchError(f"cannot render the report: the results do not match the audit "
                             f"schema ({type(exc).__name__}: {reason})") from None
