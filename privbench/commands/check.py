"""`privbench check`: the privacy regression gate, results against a policy."""

from __future__ import annotations

import argparse

from privbench.errors import PrivbenchError


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
    return 0 if all(c.passed for c in checks) else 1
