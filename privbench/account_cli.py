"""`privbench account`: the noise a defense uses for a budget, and the epsilon both modes give it.

Usage (wired into `privbench/cli.py` by the lead):

    privbench account --defense dyn_d2p --eps 1 --delta 1e-4 --rounds 4000 --sample-rate 0.0128
    privbench account --defense dpdl --eps 2 --delta 1e-5 -o n_agents=20 -o degree=3 --json

For each calibration (`calibrated`: a rigorous accountant, what defenses use by default; `paper`:
the paper's own formula) it prints the noise parameters and every `EpsilonReport` of that noise
(paper formula and calibrated accountant, plus extra readings) with delta, accountant, unit,
whether it is approximate, and the message kinds it does not cover. Bad input raises
`privbench.errors.ConfigError` (the CLI prints it on one line and exits 2).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from typing import Any

from privbench.accounting import (
    MODES,
    PRIVACY_PLANS,
    AccountantOptions,
    ApproximateAccountingWarning,
    PrivacyPlan,
    make_plan,
    plan_options,
)
from privbench.errors import ConfigError


def add_account_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `privbench account` options to `parser` (values are checked in `run_account`)."""
    parser.add_argument("--defense", required=True,
                        help=f"privacy plan, one of: {', '.join(PRIVACY_PLANS.names())}")
    parser.add_argument("--eps", type=float, required=True, help="target epsilon (> 0)")
    parser.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    parser.add_argument("--rounds", type=int, default=1000,
                        help="iterations / communication rounds T (default 1000)")
    parser.add_argument("--sample-rate", type=float, default=0.01,
                        help="Poisson sampling rate q = B / |D_i| in (0, 1] (default 0.01)")
    parser.add_argument("--accountant", default="pld",
                        help="pld (default) or rdp for Gaussian defenses; basic or advanced "
                             "composition for pure-epsilon ones (pld/rdp mean basic there)")
    parser.add_argument("--calibrate-with", default="both",
                        help="calibrated, paper or both (default): which formula sets the noise")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="defense-specific option, e.g. rho_mu=2, tau=5, dim=225034, "
                             "gamma_n=0.001, n_agents=10 (repeatable)")
    parser.add_argument("--pld-discretization", type=float, default=1e-3,
                        help="PLD value discretization interval (default 1e-3)")
    parser.add_argument("--max-distinct", type=int, default=48,
                        help="max distinct noise multipliers composed, conservative bucketing "
                             "(default 48; 0 = exact)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _convert(name: str, key: str, text: str, default: Any) -> Any:
    kinds = [type(default)] if default is not None else [int, float, str]
    if default is None and text.lower() == "none":
        return None
    for kind in kinds:
        try:
            return kind(text)
        except ValueError:
            continue
    kind_name = kinds[0].__name__
    raise ConfigError(f"option {key} of {name!r} must be {kind_name}, got {text!r}")


def parse_options(name: str, items: list[str]) -> dict[str, Any]:
    """Parse repeated KEY=VALUE items against the plan's keyword options and their types."""
    accepted = plan_options(name)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"option must be KEY=VALUE, got {item!r}")
        if key not in accepted:
            known = ", ".join(sorted(accepted)) or "(none)"
            raise ConfigError(f"unknown option {key!r} for {name!r}; accepted: {known}")
        out[key] = _convert(name, key, text.strip(), accepted[key])
    return out


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "inf"
    return f"{x:.6g}"


def format_plans(plans: list[PrivacyPlan]) -> str:
    """A readable text table of plans (pure; `run_account` prints it)."""
    first = plans[0]
    lines = [
        f"privbench account: {first.defense}  target eps={first.epsilon:g} delta={first.delta:g}"
        f"  rounds={first.rounds}  sample rate={first.sample_rate:g}"
        f"  accountant={first.accountant}",
    ]
    header = ("  mode", "epsilon", "delta", "accountant", "unit", "approx", "uncovered", "note")
    for plan in plans:
        who = ("the rigorous accountant (what the defense uses by default)"
               if plan.calibrated_with == "calibrated" else "the paper's own formula")
        lines += ["", f"noise calibrated with {who}:",
                  "  noise: " + "  ".join(f"{k}={_fmt(v)}" for k, v in plan.noise.items())]
        rows = [header] + [
            (f"  {r.mode}", _fmt(r.epsilon), f"{r.delta:g}", r.accountant, r.unit,
             "yes" if r.approximate else "no", ",".join(r.uncovered) or "-", r.note)
            for r in plan.reports
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
                  for row in rows]
    notes = dict.fromkeys(n for p in plans for n in p.notes)
    if notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in notes]
    return "\n".join(line.rstrip() for line in lines)


def run_account(args: argparse.Namespace) -> int:
    """Compute and print the plan(s) for `args`; returns the exit code 0.

    Raises:
        ConfigError: bad epsilon, delta, sampling rate, rounds, accountant or option.
        UnknownNameError: an unknown defense name.
    """
    name = args.defense
    PRIVACY_PLANS.get(name)  # unknown names fail first, listing the known ones
    modes = MODES if args.calibrate_with == "both" else (args.calibrate_with,)
    if any(m not in MODES for m in modes):
        raise ConfigError(f"unknown calibrate-with {args.calibrate_with!r}; "
                          "accepted: calibrated, paper, both")
    if args.max_distinct is None or args.max_distinct < 0:
        raise ConfigError(f"max-distinct must be an integer >= 0, got {args.max_distinct!r}")
    options = AccountantOptions(pld_discretization=args.pld_discretization,
                                max_distinct=args.max_distinct or None)
    kwargs = parse_options(name, list(args.option))
    order = sorted(modes, key=lambda m: m != "calibrated")
    with warnings.catch_warnings():  # approximations are flagged in the table instead
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        plans = [make_plan(name, args.eps, args.delta, args.rounds, args.sample_rate,
                           args.accountant, calibrate_with=m, options=options, **kwargs)
                 for m in order]
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(format_plans(plans))
    return 0
