"""`privbench check`: the privacy regression gate, results against a policy."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from privbench.errors import PrivbenchError

if TYPE_CHECKING:
    from privbench.report.gate import Check


def cmd_check(args: argparse.Namespace) -> int:
    """`privbench check`: exit 0 when every policy bound holds, 1 when any is violated."""
    from privbench.report import gate
    from privbench.results.records import AuditRun
    from privbench.results.store import atomic_write_text, read_results

    if args.tolerance <= 0:
        raise PrivbenchError(f"--tolerance must be > 0, got {args.tolerance}")
    policy = gate.load_policy(args.policy)
    results = AuditRun.from_json(read_results(args.results))  # schema-checked, then the record
    baseline = AuditRun.from_json(read_results(args.baseline)) if args.baseline else None
    checks = gate.run_checks(results, policy, baseline, args.tolerance)
    print(gate.format_table(checks))
    if args.junit:
        atomic_write_text(args.junit, gate.junit_xml(checks))
    _for_ci(args, checks)
    return 0 if all(c.passed for c in checks) else 1


def _for_ci(args: argparse.Namespace, checks: list[Check]) -> None:
    """The Markdown summary (`--markdown FILE`; appended to `$GITHUB_STEP_SUMMARY`, GitHub's job
    summary, when that is set) and, under GitHub Actions, one annotation per failed or
    inconclusive check."""
    from privbench.report.ci import annotations, markdown_summary
    from privbench.results.store import atomic_write_text

    summary = markdown_summary(checks, args.results, args.policy)
    if args.markdown:
        atomic_write_text(args.markdown, summary)
    if step_summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(step_summary, "a", encoding="utf-8") as f:  # the job's steps share it
                f.write(summary)
        except OSError as exc:
            raise PrivbenchError(f"cannot append to $GITHUB_STEP_SUMMARY ({step_summary}): "
                                 f"{exc.strerror}") from None
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotations(checks, args.results):
            print(line)
