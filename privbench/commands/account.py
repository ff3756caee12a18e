"""`privbench account`: the noise a defense uses for a budget, and the epsilon both modes give it.

Usage (wired into `privbench/cli.py` by the lead):

    privbench account --defense dyn_d2p --eps 1 --delta 1e-4 --rounds 4000 --sample-rate 0.0128
    privbench account --defense dpdl --eps 2 --delta 1e-5 -o n_agents=20 -o degree=3 --json

For each calibration (`calibrated`: a rigorous accountant; `paper`: the paper's own formula) it
prints the noise parameters and every `EpsilonReport` of that noise (paper formula and calibrated
accountant, plus extra readings) with delta, accountant, unit, whether it is approximate, the
sampling model, and the message kinds it does not cover. Which calibration the defense uses by
default, and its default accountant, are read from the defense's config defaults (the one place
they are stated).

Every registered private defense is asked through the `Trainer` contract
(`privbench.engine.privacy`): its `calibration` (the calibrations it has, its default one and
accountant), its `plan_settings` (what `-o KEY=VALUE` may set, typed by the defaults, and what
its config fixes) and its `privacy_plan` for the request -- the plan its trainer calibrates its
noise from, on the run's graph (`--topology`, `--nodes`, `--seed`; the `train` defaults
otherwise) where its privacy depends on it. A defense that is not private, or a private one that
declares no plan, is refused on one line. Bad input raises `privbench.errors.ConfigError` (the
CLI prints it on one line and exits 2).

Any epsilon and run length answers within seconds (the Gaussian accountant bounds its PLDs and
says where it departs from the asked grid: `privbench.accounting.gaussian.Composition`).
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import TYPE_CHECKING

from privbench.errors import ConfigError

if TYPE_CHECKING:
    from privbench.accounting import PrivacyPlan
    from privbench.engine.privacy import Calibration, OptionValue, Settings
    from privbench.engine.trainer import Trainer

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
                        help="a private defense's registry key (`privbench list`)")
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
                        help="graph for defenses whose privacy depends on it (dpdl, dp_cga, "
                             "muffliato); default: the train command's")
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


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _convert(name: str, key: str, text: str, default: object) -> OptionValue:
    if isinstance(default, bool):
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ConfigError(f"option {key} of {name!r} must be true or false, got {text!r}")
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


def parse_options(name: str, items: list[str]) -> Settings:
    """Parse repeated KEY=VALUE items against the settings defense `name` declares (and their
    types); a setting the defense's config fixes is refused, naming its value."""
    cls = private_defense(name)
    declared = cls.plan_settings(cls.Config())
    accepted, fixed = declared.accepted, declared.fixed
    out: dict[str, OptionValue] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"option must be KEY=VALUE, got {item!r}")
        if key in fixed:
            raise ConfigError(f"option {key} of {name!r} is fixed by the defense "
                              f"({key}={fixed[key]!r}); accepted: "
                              f"{', '.join(sorted(accepted)) or '(none)'}")
        if key not in accepted:
            known = ", ".join(sorted(accepted)) or "(none)"
            raise ConfigError(f"unknown option {key!r} for {name!r}; accepted: {known}")
        out[key] = _convert(name, key, text.strip(), accepted[key])
    return out


def format_plans(plans: list[PrivacyPlan]) -> str:
    """A readable text table of plans (pure; `run_account` prints it)."""
    from privbench.report.text import plain
    from privbench.results.store import fmt_num  # every output's number format

    first = plans[0]
    lines = [
        f"privbench account: {first.defense}  target eps={first.epsilon:g} delta={first.delta:g}"
        f"  rounds={first.rounds}  sample rate={first.sample_rate:g}"
        f"  accountant={first.accountant}",
    ]
    header = ("  mode", "epsilon", "delta", "accountant", "unit", "approx", "sampling",
              "uncovered", "note")
    default = calibration_of(first.defense).default_mode
    for plan in plans:
        who = ("the rigorous accountant" if plan.calibrated_with == "calibrated"
               else "the paper's own formula")
        if plan.calibrated_with == default:
            who += " (what the defense uses by default)"
        lines += ["", f"noise calibrated with {who}:",
                  "  noise: " + "  ".join(f"{k}={fmt_num(v)}" for k, v in plan.noise.items())]
        rows = [header] + [
            (f"  {r.mode}", fmt_num(r.epsilon), fmt_num(r.delta), r.accountant, r.unit,
             "yes" if r.approximate else "no", r.sampling, ",".join(r.uncovered) or "-",
             plain(r.note))
            for r in plan.reports
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
                  for row in rows]
    notes = dict.fromkeys(n for p in plans for n in p.notes)
    if any(r.epsilon == 0 for p in plans for r in p.reports):
        notes[("an epsilon of 0 is exact, not rounded: the accountant bounds that reading at "
               "(0, delta), the noise is so large that delta alone covers the run")] = None
    if notes:
        lines += ["", "notes:"] + [f"  - {plain(n)}" for n in notes]
    return "\n".join(line.rstrip() for line in lines)


def run_account(args: argparse.Namespace) -> int:
    """Compute and print the plan(s) for `args`; returns the exit code 0.

    Raises:
        ConfigError: bad epsilon, delta, sampling rate, rounds, accountant or option; a defense
            that is not private or has no plan `account` can use.
        UnknownNameError: an unknown defense name.
    """
    check_cheap(args)
    from privbench.accounting import MODES, AccountantOptions, ApproximateAccountingWarning
    from privbench.engine.privacy import PlanRequest

    name = args.defense
    cls = private_defense(name)  # unknown / non-private names fail first
    cfg = cls.Config()
    calibration = cls.calibration(cfg)
    if args.calibrate_with != "both" and args.calibrate_with not in MODES:
        raise ConfigError(f"unknown calibrate-with {args.calibrate_with!r}; "
                          "accepted: calibrated, paper, both")
    modes = calibration.modes if args.calibrate_with == "both" else (args.calibrate_with,)
    if any(m not in calibration.modes for m in modes):
        raise ConfigError(f"{name} calibrates its noise one way (its accountant, "
                          f"--accountant): --calibrate-with {args.calibrate_with} does not apply")
    if args.max_distinct is None or args.max_distinct < 0:
        raise ConfigError(f"max-distinct must be an integer >= 0, got {args.max_distinct!r}")
    options = AccountantOptions(pld_discretization=args.pld_discretization,
                                max_distinct=args.max_distinct or None)
    settings = parse_options(name, list(args.option))
    order = sorted(modes, key=lambda m: m != calibration.default_mode)
    request = PlanRequest(name, args.eps, args.delta, args.rounds, args.sample_rate,
                          args.accountant or calibration.accountant, options, settings,
                          args.topology, args.nodes, args.seed)
    with warnings.catch_warnings():  # approximations are flagged in the table instead
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        plans = [cls.privacy_plan(cfg, request, m) for m in order]
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(format_plans(plans))
    return 0


def private_defense(name: str) -> type[Trainer]:
    """The registered defense class `name`, private and declaring its privacy plan.

    Raises:
        UnknownNameError: `name` is not a registered defense (the private ones are listed).
        ConfigError: `name` is not private, or declares no privacy plan.
    """
    from privbench.engine.trainer import Trainer, provides
    from privbench.errors import UnknownNameError
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    private = [n for n in DEFENSES.names() if DEFENSES.get(n).private]
    if name not in DEFENSES:
        raise UnknownNameError(f"unknown defense {name!r}; private defenses: "
                               f"{', '.join(private)}")
    cls = DEFENSES.get(name)
    if not cls.private:
        raise ConfigError(f"{name} is not a private defense (it adds no noise): nothing to "
                          f"account; private defenses: {', '.join(private)}")
    if not (issubclass(cls, Trainer) and provides(cls, "privacy_plan")
            and provides(cls, "calibration")):
        raise ConfigError(f"{name} declares no privacy plan privbench account can use: its "
                          "trainer class implements no Trainer.privacy_plan (nor "
                          "Trainer.calibration)")
    return cls


def calibration_of(name: str) -> Calibration:
    """How defense `name` calibrates its noise by default (its config's defaults)."""
    cls = private_defense(name)
    return cls.calibration(cls.Config())
