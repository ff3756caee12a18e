"""`privbench account`: the noise a defense uses for a budget, and the epsilon both modes give it.

Usage (wired into `privbench/cli.py` by the lead):

    privbench account --defense dyn_d2p --eps 1 --delta 1e-4 --rounds 4000 --sample-rate 0.0128
    privbench account --defense dpdl --eps 2 --delta 1e-5 -o n_agents=20 -o degree=3 --json

For each calibration (`calibrated`: a rigorous accountant; `paper`: the paper's own formula) it
prints the noise parameters and every `EpsilonReport` of that noise (paper formula and calibrated
accountant, plus extra readings) with delta, accountant, unit, whether it is approximate, the
sampling model, and the message kinds it does not cover. Which calibration the defense uses by
default, and its default accountant, are read from the defense's config defaults (the one place
they are stated). DPDL is planned on the run's graph (`--topology`, `--nodes`, `--seed`; the
`train` defaults otherwise) with the trainer's own `defenses.dpdl.plan_privacy`, reporting the
worst node; `-o n_agents=.. -o degree=..` selects the uniform-weight formula (weights 1/degree)
instead. Bad input raises `privbench.errors.ConfigError` (the CLI prints it on one line and
exits 2).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from typing import TYPE_CHECKING, Any

from privbench.errors import ConfigError

if TYPE_CHECKING:
    from privbench.accounting import PrivacyPlan

# The accountants (dp-accounting, scipy) and the defense registry (torch) take seconds to import:
# they are imported inside the functions that use them, after the cheap checks, so a refused
# input answers at once.

LIGHT_MIN_DELTA = 1e-12
"""Below this delta the default accountants do not answer (PLD truncates each Gaussian PLD's
tail at 1e-15; see `privbench.accounting.gaussian.PLD_MIN_DELTA`): refused before any import
unless an accountant is named explicitly."""


def check_cheap(args: argparse.Namespace) -> None:
    """The checks that need no accountant: a refused delta answers in milliseconds."""
    if not 0.0 < args.delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {args.delta!r}")
    if args.delta < LIGHT_MIN_DELTA and args.accountant is None:
        raise ConfigError(f"delta={args.delta:g} is below what the PLD accountant resolves "
                          f"(>= {LIGHT_MIN_DELTA:g}, its tail truncation is 1e-15); use a "
                          "larger delta or name an accountant (--accountant rdp)")


def add_account_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `privbench account` options to `parser` (values are checked in `run_account`)."""
    parser.add_argument("--defense", required=True,
                        help="privacy plan: a DP defense's registry key (`privbench list`)")
    parser.add_argument("--eps", type=float, required=True, help="target epsilon (> 0)")
    parser.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    parser.add_argument("--rounds", type=int, default=1000,
                        help="iterations / communication rounds T (default 1000)")
    parser.add_argument("--sample-rate", type=float, default=0.01,
                        help="Poisson sampling rate q = B / |D_i| in (0, 1] (default 0.01)")
    parser.add_argument("--accountant", default=None,
                        help="pld or rdp for Gaussian defenses; basic or advanced composition "
                             "for pure-epsilon ones (pld/rdp mean basic there); default: the "
                             "defense's own default accountant")
    parser.add_argument("--topology", default=None,
                        help="graph for defenses whose privacy depends on it (dpdl); default: "
                             "the train command's")
    parser.add_argument("--nodes", type=int, default=None,
                        help="number of nodes of that graph (default: the train command's)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of that graph (default: the train command's)")
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
    from privbench.accounting import plan_options

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
    header = ("  mode", "epsilon", "delta", "accountant", "unit", "approx", "sampling",
              "uncovered", "note")
    default = default_mode(first.defense)
    for plan in plans:
        who = ("the rigorous accountant" if plan.calibrated_with == "calibrated"
               else "the paper's own formula")
        if plan.calibrated_with == default:
            who += " (what the defense uses by default)"
        lines += ["", f"noise calibrated with {who}:",
                  "  noise: " + "  ".join(f"{k}={_fmt(v)}" for k, v in plan.noise.items())]
        rows = [header] + [
            (f"  {r.mode}", _fmt(r.epsilon), f"{r.delta:g}", r.accountant, r.unit,
             "yes" if r.approximate else "no", r.sampling, ",".join(r.uncovered) or "-", r.note)
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
    check_cheap(args)
    from privbench.accounting import (
        MODES,
        PRIVACY_PLANS,
        AccountantOptions,
        ApproximateAccountingWarning,
        make_plan,
    )

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
    accountant = args.accountant or default_accountant(name)
    order = sorted(modes, key=lambda m: m != default_mode(name))
    with warnings.catch_warnings():  # approximations are flagged in the table instead
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        if name == "dpdl" and not kwargs:
            plans = [dpdl_graph_plan(args, accountant, m) for m in order]
        else:
            plans = [make_plan(name, args.eps, args.delta, args.rounds, args.sample_rate,
                               accountant, calibrate_with=m, options=options, **kwargs)
                     for m in order]
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(format_plans(plans))
    return 0


def _defense_config(name: str) -> Any:
    """The defense's default config (the one place its calibration defaults are stated)."""
    from privbench.registry import DEFENSES, load_plugins

    load_plugins()
    return DEFENSES.get(name).Config() if name in DEFENSES else None


def default_mode(name: str) -> str:
    """"calibrated" or "paper": which calibration defense `name` uses by default."""
    from privbench.accounting import MODES

    cfg = _defense_config(name)
    mode = getattr(cfg, "calibration_mode", getattr(cfg, "calibrate_with", "calibrated"))
    return mode if mode in MODES else "calibrated"


def default_accountant(name: str) -> str:
    """The accountant defense `name` calibrates with by default (the plan's when not stated)."""
    import inspect

    from privbench.accounting import PRIVACY_PLANS

    cfg = _defense_config(name)
    stated = getattr(cfg, "accountant", getattr(cfg, "composition", None))
    if isinstance(stated, str):
        return stated
    return inspect.signature(PRIVACY_PLANS.get(name)).parameters["accountant"].default


def dpdl_graph_plan(args: argparse.Namespace, accountant: str, mode: str) -> PrivacyPlan:
    """DPDL's plan on the run's graph, by the trainer's own `plan_privacy`: the worst node.

    Every node samples at rate q = --sample-rate (q |D| = B exactly for |D| = 10^6).
    """
    import torch

    from defenses.dpdl import DPDL, DPDLConfig, default_alpha, graph_periods, plan_privacy
    from defenses.dpdl import privacy_reports as dpdl_reports
    from privbench.accounting import EpsilonReport, PrivacyPlan
    from privbench.config import RunConfig, replace_checked
    from privbench.runner import with_default_topology
    from privbench.seeding import Streams
    from privbench.topology import build_topology

    over = {k: v for k, v in (("topology", args.topology), ("nodes", args.nodes),
                              ("seed", args.seed)) if v is not None}
    run = with_default_topology(replace_checked(RunConfig(), over, where="account"), DPDL)
    topo = build_topology(run.topology, run.nodes, Streams(run.seed).get("topology"),
                          k=run.out_degree, time_varying=run.time_varying,
                          symmetric=True if DPDL.mixing == "doubly" else None)
    reading = "strict" if mode == "calibrated" else "paper"
    cfg = DPDLConfig(accountant=accountant, calibrate_with=reading)
    size = 10**6
    batch = max(1, round(args.sample_rate * size))
    ws = [g[0] for g in graph_periods(topo, cfg.weights, torch.device("cpu"))]
    alpha = default_alpha(cfg, topo.name)
    plan = plan_privacy(cfg, ws, [size] * topo.n, batch, args.eps, args.delta, args.rounds,
                        alpha)
    reports = dpdl_reports(plan, cfg, args.delta, args.rounds)
    worst = max(range(topo.n), key=lambda i: next(
        _eps(r) for r in reports if r["node"] == i and r["reading"] == "strict"))
    mine = {r["reading"]: r for r in reports if r["node"] == worst}
    fields = ("epsilon", "delta", "accountant", "mode", "unit", "uncovered", "approximate",
              "note", "sampling")
    as_report = [EpsilonReport(**{k: (_eps(mine[rd]) if k == "epsilon" else mine[rd][k])
                                  for k in fields}) for rd in ("paper", "strict", "full")]
    noise = {"sigma": plan.sigma[worst], "node": worst, "nodes": topo.n}
    return PrivacyPlan("dpdl", noise, tuple(as_report), mode, args.eps, args.delta, args.rounds,
                       batch / size, accountant,
                       (f"graph: {run.topology}, {topo.n} nodes, seed {run.seed}, weights "
                        f"{cfg.weights}; worst node {worst}",))


def _eps(report: dict[str, Any]) -> float:
    e = report["epsilon"]
    return math.inf if e == "inf" else float(e)
