"""`privbench report`: an audit's HTML report rendered (or several audits merged) from results
alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from privbench.errors import PrivbenchError


def cmd_report(args: argparse.Namespace) -> int:
    """`privbench report RESULTS.json [...] -o report.html`: render/merge without training code."""
    from privbench.report import merge_results
    from privbench.results.store import atomic_write_text, read_results

    items = [read_results(p, "audit", "`privbench report` renders audit results written by "
                          "`privbench attack`") for p in args.results]
    for path, item in zip(args.results, items, strict=True):  # named by its folder
        item.setdefault("run_name", Path(path).resolve().parent.name)
    merged = merge_results(items)
    atomic_write_text(args.output, _render(merged, merged["run_name"]))
    print(f"wrote {args.output}")
    return 0


def _render(results: dict[str, Any], name: str) -> str:
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
