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

Every registered private defense is planned as its trainer computes its noise (`ROUTES`): by its
`privbench.accounting.PRIVACY_PLANS` plan, with the options its config fixes (Const-D2P and
Dyn[C]-D2P: the dyn_d2p plan at rho_mu = 1; D-PSGD+RR: defl_vp without control variates;
DP-DFedSAM: dp_sgp), or by its trainer's own calibration helpers, on the run's graph
(`--topology`, `--nodes`, `--seed`; the `train` defaults otherwise) where privacy depends on it:
DPDL and DP-CGA (`plan_privacy`, the worst node), MUFFLIATO (ceil(T / K) releases, K from the
graph's spectral gap) and DP-DPSGD (`calibrate_sigmas`). For DPDL `-o n_agents=.. -o degree=..`
selects the uniform-weight formula (weights 1/degree) instead; for the other trainer-planned
defenses `-o` sets a field of their config. A defense that is not private, or a plugin's own
private trainer derived from none of these, is refused on one line. Bad input raises
`privbench.errors.ConfigError` (the CLI prints it on one line and exits 2).

Any epsilon and run length answers within seconds (the Gaussian accountant bounds its PLDs and
says where it departs from the asked grid: `privbench.accounting.gaussian.Composition`).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from privbench.errors import ConfigError

# A planner option's value (`-o KEY=VALUE`, typed by the option's default) or a config value a
# defense fixes for its planner.
OptionValue = bool | int | float | str | None
Options = dict[str, OptionValue]

if TYPE_CHECKING:
    from privbench.accounting import EpsilonReport, PrivacyPlan
    from privbench.config import JSONObject

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


def parse_options(name: str, items: list[str]) -> Options:
    """Parse repeated KEY=VALUE items against the options `name`'s planner accepts (and their
    types); an option the defense's config fixes is refused, naming its value."""
    accepted, fixed = route_for(name).options(name)
    out: Options = {}
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
    default = default_mode(first.defense)
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

    name = args.defense
    route = route_for(name)  # unknown / non-private names fail first
    if args.calibrate_with != "both" and args.calibrate_with not in MODES:
        raise ConfigError(f"unknown calibrate-with {args.calibrate_with!r}; "
                          "accepted: calibrated, paper, both")
    modes = route.modes if args.calibrate_with == "both" else (args.calibrate_with,)
    if any(m not in route.modes for m in modes):
        raise ConfigError(f"{name} calibrates its noise one way (its accountant, "
                          f"--accountant): --calibrate-with {args.calibrate_with} does not apply")
    if args.max_distinct is None or args.max_distinct < 0:
        raise ConfigError(f"max-distinct must be an integer >= 0, got {args.max_distinct!r}")
    options = AccountantOptions(pld_discretization=args.pld_discretization,
                                max_distinct=args.max_distinct or None)
    kwargs = parse_options(name, list(args.option))
    accountant = args.accountant or default_accountant(name)
    order = sorted(modes, key=lambda m: m != default_mode(name))
    request = Request(name, args.eps, args.delta, args.rounds, args.sample_rate, accountant,
                      options, args)
    with warnings.catch_warnings():  # approximations are flagged in the table instead
        warnings.simplefilter("ignore", ApproximateAccountingWarning)
        plans = [route.plan(request, m, kwargs) for m in order]
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(format_plans(plans))
    return 0


def _defense(name: str) -> Any:
    """The registered defense class `name` (plugins loaded)."""
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    return DEFENSES.get(name)


def _defense_config(name: str) -> Any:
    """The defense's default config (the one place its calibration defaults are stated)."""
    return _defense(name).Config()


def default_mode(name: str) -> str:
    """"calibrated" or "paper": which calibration defense `name` uses by default."""
    from privbench.accounting import MODES

    cfg = _defense_config(name)
    mode = getattr(cfg, "calibration_mode", getattr(cfg, "calibrate_with", "calibrated"))
    return mode if mode in MODES else "calibrated"


def default_accountant(name: str) -> str:
    """The accountant defense `name` calibrates with by default (its plan's when not stated)."""
    import inspect

    from privbench.accounting import PRIVACY_PLANS

    cfg = _defense_config(name)
    stated = getattr(cfg, "accountant", getattr(cfg, "composition", None))
    if isinstance(stated, str):
        return stated
    plan = route_for(name).plan_name
    return inspect.signature(PRIVACY_PLANS.get(plan)).parameters["accountant"].default


# ---------------------------------------------------------------- how each defense is planned


@dataclass(frozen=True)
class Request:
    """One `privbench account` request: the budget, the run's T and q, the accountant, the
    numerical options, and the parsed arguments (the graph flags)."""

    defense: str
    epsilon: float
    delta: float
    rounds: int
    sample_rate: float
    accountant: str
    options: Any
    args: argparse.Namespace


def _no_fixed(cfg: object, mode: str) -> Options:
    return {}


@dataclass(frozen=True)
class PlanRoute:
    """A defense planned by a `privbench.accounting.PRIVACY_PLANS` function, as its trainer
    calls it: `fixed(config, mode)` are the plan options the defense's config sets when its
    noise is calibrated by `mode` (and `-o` may not change); the others are `-o` options with
    the plan's defaults.

    Attributes:
        plan_name: the `PRIVACY_PLANS` key.
        fixed: (the defense's config, the calibration mode) -> the plan options it fixes.
    """

    plan_name: str
    fixed: Callable[[Any, str], Options] = _no_fixed
    modes: tuple[str, ...] = ("calibrated", "paper")

    def options(self, name: str) -> tuple[Options, Options]:
        """(accepted -o options with their defaults, the options the defense fixes)."""
        from privbench.accounting import plan_options

        fixed = self.fixed(_defense_config(name), default_mode(name))
        accepted = {k: v for k, v in plan_options(self.plan_name).items() if k not in fixed}
        return accepted, fixed

    def plan(self, req: Request, mode: str, kwargs: Options) -> PrivacyPlan:
        """The plan of `req` with the noise calibrated by `mode`."""
        from privbench.accounting import make_plan

        fixed = self.fixed(_defense_config(req.defense), mode)
        plan = make_plan(self.plan_name, req.epsilon, req.delta, req.rounds, req.sample_rate,
                         req.accountant, calibrate_with=mode, options=req.options,
                         **kwargs, **fixed)
        if req.defense == self.plan_name:
            return plan
        fixes = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
        return replace(plan, defense=req.defense, notes=(
            f"the {self.plan_name} plan, as the {req.defense} trainer calls it"
            + (f" ({fixes}, set by its config)" if fixes else ""), *plan.notes))


@dataclass(frozen=True)
class TrainerRoute:
    """A defense planned by its trainer's own calibration helpers (`defenses/`), on the run's
    graph where its privacy depends on it (`--topology`, `--nodes`, `--seed`).

    Attributes:
        build: (request, mode, the defense's config with `-o` applied) -> the plan.
        config_options: the config fields `-o` may set (defaults: the defense's config).
        modes: the calibrations the defense has.
        plan_name: the `PRIVACY_PLANS` key of `-o` options that plan by formula instead
            ("" when there is none).
    """

    build: Callable[[Request, str, Any], PrivacyPlan]
    config_options: tuple[str, ...] = ()
    modes: tuple[str, ...] = ("calibrated", "paper")
    plan_name: str = ""

    def options(self, name: str) -> tuple[Options, Options]:
        """(accepted -o options with their defaults, {}): config fields, or the formula
        plan's options."""
        if self.plan_name:
            return PlanRoute(self.plan_name).options(self.plan_name)
        cfg = _defense_config(name)
        return {k: getattr(cfg, k) for k in self.config_options}, {}

    def plan(self, req: Request, mode: str, kwargs: Options) -> PrivacyPlan:
        """The plan of `req` with the noise calibrated by `mode`."""
        if self.plan_name and kwargs:
            return PlanRoute(self.plan_name).plan(req, mode, kwargs)
        from privbench.accounting.validation import (
            check_choice,
            check_count,
            check_epsilon,
            check_sampling_rate,
        )
        from privbench.config import replace_checked

        check_epsilon(req.epsilon)
        check_count(req.rounds, "rounds")
        check_sampling_rate(req.sample_rate, "sample rate")
        check_choice(req.accountant, "accountant", ("pld", "rdp"))
        cfg = replace_checked(_defense_config(req.defense), kwargs, where="defense")
        return self.build(req, mode, cfg)


Route = PlanRoute | TrainerRoute


def _graph(req: Request, cls: Any) -> tuple[Any, Any]:
    """(run config, topology) of the run `train` would build from the graph flags."""
    from privbench.config import RunConfig, replace_checked
    from privbench.engine.runner import with_default_topology
    from privbench.seeding import Streams
    from privbench.topology import build_topology

    args = req.args
    over = {k: v for k, v in (("topology", args.topology), ("nodes", args.nodes),
                              ("seed", args.seed)) if v is not None}
    run = with_default_topology(replace_checked(RunConfig(), over, where="account"), cls)
    topo = build_topology(run.topology, run.nodes, Streams(run.seed).get("topology"),
                          k=run.out_degree, time_varying=run.time_varying,
                          symmetric=True if cls.mixing == "doubly" else None)
    return run, topo


def _graph_note(run: Any, topo: Any, extra: str) -> str:
    return f"graph: {run.topology}, {topo.n} nodes, seed {run.seed}; {extra}"


def _report(entry: JSONObject) -> EpsilonReport:
    """An `EpsilonReport` from a trainer's per-node report dict."""
    from privbench.accounting import EpsilonReport

    fields = ("delta", "accountant", "mode", "unit", "uncovered", "approximate", "note",
              "sampling")
    e = entry["epsilon"]
    return EpsilonReport(math.inf if e == "inf" else float(e), **{k: entry[k] for k in fields})


def _worst(reports: list[JSONObject], reading: str) -> int:
    """The node whose `reading` epsilon is largest."""
    return max((r for r in reports if r["reading"] == reading),
               key=lambda r: _report(r).epsilon)["node"]


MILLION = 10**6
"""Local dataset size the graph planners assume: q |D| = B exactly for rates with 6 digits."""


def _plan_dpdl(req: Request, mode: str, cfg: Any) -> PrivacyPlan:
    """DPDL on the run's graph by the trainer's own `plan_privacy`: the worst node."""
    import torch

    from defenses._graph import graph_periods
    from defenses.dpdl import DPDL, default_alpha, plan_privacy, privacy_reports
    from privbench.accounting import PrivacyPlan

    run, topo = _graph(req, DPDL)
    cfg = replace(cfg, accountant=req.accountant,
                  calibrate_with="strict" if mode == "calibrated" else "paper")
    batch = max(1, round(req.sample_rate * MILLION))
    ws = [g[0] for g in graph_periods(topo, cfg.weights, torch.device("cpu"))]
    plan = plan_privacy(cfg, ws, [MILLION] * topo.n, batch, req.epsilon, req.delta, req.rounds,
                        default_alpha(cfg, topo.name))
    reports = privacy_reports(plan, cfg, req.delta, req.rounds)
    worst = _worst(reports, "strict")
    mine = {r["reading"]: r for r in reports if r["node"] == worst}
    return PrivacyPlan("dpdl", {"sigma": plan.sigma[worst], "node": worst, "nodes": topo.n},
                       tuple(_report(mine[r]) for r in ("paper", "strict", "full")), mode,
                       req.epsilon, req.delta, req.rounds, batch / MILLION, req.accountant,
                       (_graph_note(run, topo, f"weights {cfg.weights}; worst node {worst}"),))


def _plan_dp_cga(req: Request, mode: str, cfg: Any) -> PrivacyPlan:
    """DP-CGA on the run's graph by the trainer's own `plan_privacy`: the worst node. The batch
    B is the train command's, |D| = B / q; sigma scales with B, the noise on each clipped batch
    mean (sigma C / B) does not."""
    import torch

    from defenses._graph import graph_periods
    from defenses.dp_cga import DPCGA, plan_privacy, privacy_reports
    from privbench.accounting import PrivacyPlan

    run, topo = _graph(req, DPCGA)
    cfg = replace(cfg, accountant=req.accountant,
                  calibrate_with="strict" if mode == "calibrated" else "paper")
    batch = run.batch_size
    size = max(batch, round(batch / req.sample_rate))
    ws = [g[0].cpu() for g in graph_periods(topo, cfg.weights, torch.device("cpu"))]
    plan = plan_privacy(cfg, ws, [size] * topo.n, batch, req.epsilon, req.delta, req.rounds)
    reports = privacy_reports(plan, cfg, req.delta, req.rounds)
    worst = _worst(reports, "strict")
    mine = {r["reading"]: r for r in reports if r["node"] == worst}
    sigma = plan.sigma[worst]
    noise = {"sigma": sigma, "noise_std_per_clip_on_mean": sigma / plan.divisors[worst],
             "batch": plan.divisors[worst], "releases_per_round": plan.releases[worst],
             "node": worst, "nodes": topo.n}
    return PrivacyPlan("dp_cga", noise, (_report(mine["paper"]), _report(mine["strict"])),
                       mode, req.epsilon, req.delta, req.rounds, plan.sample_rates[worst],
                       req.accountant, (
                           _graph_note(run, topo, f"weights {cfg.weights}; worst node {worst}"),
                           f"batch B = {batch}, |D| = {size}: sigma scales with B, the noise "
                           "on each clipped batch mean (sigma C / B) does not"))


def _gaussian_releases(req: Request, cfg: Any, releases: int, note: str,
                       ) -> tuple[float, tuple[EpsilonReport, ...]]:
    """(sigma, [paper, calibrated] reports) of `releases` releases at rate q, as DP-DPSGD's and
    MUFFLIATO's trainers calibrate (`calibrate_sigmas`) and report (`gaussian_node_reports`)."""
    from defenses._node_dp import RDP_OPTIONS, calibrate_sigmas, gaussian_node_reports

    opts = RDP_OPTIONS if req.accountant == "rdp" else req.options
    sigma = float(calibrate_sigmas(cfg.sigma_rule, req.epsilon, req.delta, releases,
                                   [req.sample_rate], [1.0], req.accountant, opts,
                                   cfg.sampling)[0])
    reports = gaussian_node_reports([req.sample_rate], [sigma], req.delta, releases,
                                    req.accountant, cfg.sampling, note)
    return sigma, tuple(_report(r) for r in reports)


def _plan_dp_dpsgd(req: Request, mode: str, cfg: Any) -> PrivacyPlan:
    """DP-DPSGD: one subsampled Gaussian release per round."""
    from privbench.accounting import PrivacyPlan

    sigma, reports = _gaussian_releases(req, cfg, req.rounds,
                                        "one subsampled Gaussian per round (A(DP)^2SGD)")
    return PrivacyPlan("dp_dpsgd", {"sigma": sigma}, reports, mode, req.epsilon, req.delta,
                       req.rounds, req.sample_rate, req.accountant,
                       ("sigma = noise std / clip bound, on the SUM of clipped per-sample "
                        "gradients",))


def _plan_muffliato(req: Request, mode: str, cfg: Any) -> PrivacyPlan:
    """MUFFLIATO: ceil(T / K) releases, K the accelerated mixing time of the run's graph."""
    import torch

    from defenses._graph import graph_periods
    from defenses.muffliato import Muffliato, gossip_constants
    from privbench.accounting import PrivacyPlan

    run, topo = _graph(req, Muffliato)
    mu, steps, omega = gossip_constants(
        cfg, [g[0] for g in graph_periods(topo, cfg.weights, torch.device("cpu"))])
    releases = math.ceil(req.rounds / steps)
    sigma, reports = _gaussian_releases(
        req, cfg, releases, f"one subsampled Gaussian per gradient step, every K = {steps} "
        f"rounds (omega = {omega:.4f}); local DP, no network amplification claimed")
    return PrivacyPlan("muffliato", {"sigma": sigma, "releases": releases, "gossip_steps": steps},
                       reports, mode, req.epsilon, req.delta, req.rounds, req.sample_rate,
                       req.accountant, (_graph_note(
                           run, topo, f"weights {cfg.weights}; mu = {mu:.4f}, K = {steps}: "
                           f"{releases} releases in {req.rounds} rounds"),))


def _dyn_d2p_fixed(cfg: Any, mode: str) -> Options:
    """Const-D2P and Dyn[C]-D2P hold the budget constant (eq. 9): rho_mu = 1."""
    return {} if cfg.dynamic_budget else {"rho_mu": cfg.budget_rho}


def _defl_vp_fixed(cfg: Any, mode: str) -> Options:
    """D-PSGD+RR sends no control variates (vr = false); DeFL-VP's order of VR and RR is its
    config's, read under the calibration: its calibrated default (eps_mode per_run) protects the
    control variates (rr_vr), the paper's Alg. 3 reading (eps_mode per_coordinate) sends them in
    the clear (vr_rr)."""
    if not cfg.vr:
        return {"control_variates": False}
    if mode == "paper" and cfg.eps_mode == "per_run":
        cfg = replace(cfg, eps_mode="per_coordinate")
    return {"order": cfg.order}


ROUTES: dict[str, Route] = {
    "dp_sgp": PlanRoute("dp_sgp"),
    "adp_vrsgp": PlanRoute("adp_vrsgp"),
    "dyn_d2p": PlanRoute("dyn_d2p", _dyn_d2p_fixed),
    "defl_vp": PlanRoute("defl_vp", _defl_vp_fixed),
    "dpps": PlanRoute("dpps"),
    "partpsp": PlanRoute("partpsp"),
    "pedfl": PlanRoute("pedfl"),
    "dpdl": TrainerRoute(_plan_dpdl, plan_name="dpdl"),
    "dp_cga": TrainerRoute(_plan_dp_cga, ("sampling", "sigma_rule", "weights")),
    "dp_dpsgd": TrainerRoute(_plan_dp_dpsgd, ("sampling",), modes=("calibrated",)),
    "muffliato": TrainerRoute(_plan_muffliato, ("sampling", "gossip_steps", "weights"),
                              modes=("calibrated",)),
}
"""How `account` plans each defense, by the registry name of the trainer class that
introduces it: a registered subclass (Const-D2P, D-PSGD+RR, DP-DFedSAM) is planned by its
parent's route with its own config."""


def route_for(name: str) -> Route:
    """The route of defense `name`: its own, or the nearest parent trainer's.

    Raises:
        UnknownNameError: `name` is not a registered defense (the private ones are listed).
        ConfigError: `name` is not private, or no route covers it (a plugin's own defense).
    """
    from privbench.errors import UnknownNameError
    from privbench.registry import DEFENSES

    _defense("dp_sgp")  # loads the plugins
    private = [n for n in DEFENSES.names() if DEFENSES.get(n).private]
    if name not in DEFENSES:
        raise UnknownNameError(f"unknown defense {name!r}; private defenses: "
                               f"{', '.join(private)}")
    cls = DEFENSES.get(name)
    if not cls.private:
        raise ConfigError(f"{name} is not a private defense (it adds no noise): nothing to "
                          f"account; private defenses: {', '.join(private)}")
    by_class = {DEFENSES.get(n): n for n in DEFENSES.names()}
    for klass in cls.__mro__:
        if by_class.get(klass) in ROUTES:
            return ROUTES[by_class[klass]]
    raise ConfigError(f"{name} has no privacy plan privbench account can use: its trainer "
                      "class derives from no defense with one (" + ", ".join(sorted(ROUTES))
                      + ")")
