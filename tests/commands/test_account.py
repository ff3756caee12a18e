"""Tests of `privbench account`: `run_account` on a parser built by `add_account_arguments`."""

from __future__ import annotations

import argparse
import json

import pytest

from privbench.commands.account import add_account_arguments, parse_options, run_account
from privbench.errors import ConfigError, UnknownNameError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="privbench account")
    add_account_arguments(parser)
    return parser.parse_args(list(argv))


def test_table_shows_noise_and_both_modes(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_account(parse("--defense", "dp_sgp", "--eps", "2", "--delta", "1e-5",
                             "--rounds", "100", "--sample-rate", "0.02"))
    out = capsys.readouterr().out
    assert code == 0
    assert "dp_sgp" in out and "sigma=" in out
    assert "noise calibrated with the rigorous accountant" in out
    assert "noise calibrated with the paper's own formula" in out
    assert out.count("  paper ") >= 2 and out.count("  calibrated ") >= 2


def test_json_output_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    run_account(parse("--defense", "dpdl", "--eps", "1", "--delta", "1e-5", "--rounds", "50",
                      "--sample-rate", "0.05", "--accountant", "rdp", "-o", "n_agents=6",
                      "-o", "degree=3", "--calibrate-with", "calibrated", "--json"))
    plans = json.loads(capsys.readouterr().out)
    assert len(plans) == 1 and plans[0]["defense"] == "dpdl"
    assert plans[0]["calibrated_with"] == "calibrated"
    assert [r["mode"] for r in plans[0]["reports"]][:2] == ["paper", "calibrated"]
    assert plans[0]["reports"][1]["epsilon"] <= 1.0


def test_pure_defense_with_default_accountant(capsys: pytest.CaptureFixture[str]) -> None:
    run_account(parse("--defense", "dpps", "--eps", "4", "--delta", "1e-5", "--rounds", "40"))
    out = capsys.readouterr().out
    assert "b=" in out and "sensitivity" in out and "accountant=basic" in out  # its own default


def test_parse_options_types() -> None:
    assert parse_options("dyn_d2p", ["rho_mu=3"]) == {"rho_mu": 3.0}
    assert parse_options("dpdl", ["degree=4", "n-agents=8"]) == {"degree": 4, "n_agents": 8}
    assert parse_options("dpdl", ["degree=none"]) == {"degree": None}


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--eps", "0"], "epsilon must be > 0"),
        (["--eps", "-1"], "epsilon must be > 0"),
        (["--delta", "0"], r"delta must be in \(0, 1\)"),
        (["--delta", "1.5"], r"delta must be in \(0, 1\)"),
        (["--sample-rate", "0"], r"sample rate must be in \(0, 1\]"),
        (["--sample-rate", "2"], r"sample rate must be in \(0, 1\]"),
        (["--rounds", "0"], "rounds must be an integer >= 1"),
        (["--accountant", "moments"], "unknown accountant 'moments'"),
        (["--calibrate-with", "magic"], "unknown calibrate-with"),
        (["-o", "rho_mu"], "KEY=VALUE"),
        (["-o", "sigma=3"], "unknown option 'sigma'"),
        (["-o", "rho_mu=fast"], "rho_mu"),
        (["--max-distinct", "-1"], "max-distinct"),
    ],
)
def test_bad_input_raises_config_error(argv: list[str], match: str) -> None:
    # later flags override the valid defaults (argparse keeps the last value)
    args = parse("--defense", "dyn_d2p", "--eps", "1", "--delta", "1e-5", "--rounds", "20", *argv)
    with pytest.raises(ConfigError, match=match) as err:
        run_account(args)
    assert "\n" not in str(err.value)


def test_unknown_defense_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match="private defenses: adp_vrsgp, const_d2p, "):
        run_account(parse("--defense", "nope", "--eps", "1", "--delta", "1e-5"))


@pytest.mark.parametrize("delta", ["1e-15", "1e-300"])
def test_tiny_delta_is_refused_for_pld_and_answered_by_rdp(delta, capsys) -> None:
    from privbench.cli import main

    code = main(["account", "--defense", "dp_sgp", "--eps", "1", "--delta", delta,
                 "--rounds", "50", "--calibrate-with", "calibrated"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "PLD accountant" in err
    run_account(parse("--defense", "dp_sgp", "--eps", "1", "--delta", delta, "--rounds", "50",
                      "--accountant", "rdp", "--calibrate-with", "calibrated", "--json"))
    (plan,) = json.loads(capsys.readouterr().out)
    assert 0.99 <= plan["reports"][1]["epsilon"] <= 1.0


def test_the_cheap_delta_floor_is_the_pld_accountants() -> None:
    # account_cli keeps its own copy (importing the accountant costs seconds): the two must agree
    from privbench.accounting.gaussian import PLD_MIN_DELTA
    from privbench.commands.account import LIGHT_MIN_DELTA

    assert LIGHT_MIN_DELTA == PLD_MIN_DELTA


@pytest.mark.parametrize("defense", ["dp_sgp", "dpdl"])
def test_tiny_delta_is_refused_before_the_accountants_are_imported(defense: str) -> None:
    # the refusal must not wait for torch / dp-accounting imports (seconds): checked by what
    # the process has loaded, not by a clock
    import subprocess
    import sys

    code = ("import sys; from privbench.cli import main; "
            f"rc = main(['account', '--defense', '{defense}', '--eps', '1', '--delta', '1e-300']); "
            "print(rc, 'torch' in sys.modules, 'dp_accounting' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["2", "False", "False"]
    assert "--accountant rdp" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_default_block_and_accountant_follow_the_defense_config(capsys) -> None:
    from defenses.dpdl import DPDLConfig
    from defenses.dyn_d2p import DynD2PConfig
    from privbench.commands.account import calibration_of

    assert calibration_of("dyn_d2p").default_mode == DynD2PConfig().calibrate_with
    assert calibration_of("dpdl").default_mode == DPDLConfig().calibration_mode == "calibrated"
    assert calibration_of("dpdl").accountant == DPDLConfig().accountant == "rdp"
    run_account(parse("--defense", "dyn_d2p", "--eps", "1", "--delta", "1e-5",
                      "--rounds", "20", "--sample-rate", "0.05", "-o", "rho_mu=1"))
    out = capsys.readouterr().out
    assert out.count("(what the defense uses by default)") == 1
    assert "rigorous accountant (what the defense uses by default)" in out
    assert "gdp_clt" in out and " yes " in out  # the CLT reading, flagged approximate


def test_dpdl_is_planned_on_the_run_graph_with_its_own_accountant(capsys) -> None:
    base = ("--defense", "dpdl", "--eps", "2", "--delta", "1e-5", "--rounds", "30",
            "--sample-rate", "0.1", "--calibrate-with", "calibrated")
    run_account(parse(*base))
    out = capsys.readouterr().out
    assert "accountant=rdp" in out and "graph: random_out, 8 nodes" in out
    run_account(parse(*base, "--topology", "ring", "--nodes", "6", "--json"))
    (ring,) = json.loads(capsys.readouterr().out)
    run_account(parse(*base, "--topology", "complete", "--nodes", "6", "--json"))
    (complete,) = json.loads(capsys.readouterr().out)
    assert "graph: ring, 6 nodes" in ring["notes"][0]
    assert ring["noise"]["sigma"] != pytest.approx(complete["noise"]["sigma"], rel=1e-3)
    for plan in (ring, complete):
        strict = plan["reports"][1]
        assert strict["accountant"] == "rdp" and 1.98 <= strict["epsilon"] <= 2.0


# ---------------------------------------------------------------- every private defense


def _private() -> list[str]:
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    return [n for n in DEFENSES.names() if DEFENSES.get(n).private]


def _plans(capsys, *argv: str) -> list[dict]:
    assert run_account(parse(*argv, "--json")) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("defense", _private())
def test_every_private_defense_has_a_plan(defense: str, capsys) -> None:
    plans = _plans(capsys, "--defense", defense, "--eps", "1", "--delta", "1e-5",
                   "--rounds", "20", "--sample-rate", "0.05")
    assert plans and all(p["defense"] == defense for p in plans)
    for plan in plans:
        assert plan["noise"] and [r["mode"] for r in plan["reports"]][:2] == ["paper",
                                                                              "calibrated"]
    rigorous = next(p for p in plans if p["calibrated_with"] == "calibrated")
    assert 0.98 <= rigorous["reports"][1]["epsilon"] <= 1.0  # the target, never above


def test_a_defense_without_noise_or_without_a_plan_is_refused(monkeypatch) -> None:
    from privbench.cli import main
    from privbench.engine.trainer import Trainer
    from privbench.registry import DEFENSES

    args = ("--eps", "1", "--delta", "1e-5", "--rounds", "20")
    with pytest.raises(ConfigError, match="d_psgd is not a private defense") as err:
        run_account(parse("--defense", "d_psgd", *args))
    assert "private defenses: adp_vrsgp," in str(err.value)

    class Mine(Trainer):  # a plugin's own private trainer that declares no plan
        private = True

    monkeypatch.setitem(DEFENSES._items, "mine", Mine)
    with pytest.raises(ConfigError, match="mine declares no privacy plan"):
        run_account(parse("--defense", "mine", *args))
    assert main(["account", "--defense", "mine", *args]) == 2


def test_an_option_the_defense_fixes_is_refused_naming_its_value(capsys) -> None:
    args = ("--eps", "1", "--delta", "1e-5", "--rounds", "20", "--sample-rate", "0.05")
    with pytest.raises(ConfigError, match=r"rho_mu of 'const_d2p' is fixed .*rho_mu=1\.0"):
        run_account(parse("--defense", "const_d2p", *args, "-o", "rho_mu=3"))
    (dyn_mu,) = _plans(capsys, "--defense", "dyn_mu_d2p", *args, "-o", "rho_mu=3",
                       "--calibrate-with", "calibrated")
    assert dyn_mu["noise"]["mu_last"] == pytest.approx(3 ** (19 / 20) * dyn_mu["noise"]["mu_0"])
    with pytest.raises(ConfigError, match="calibrates its noise one way"):
        run_account(parse("--defense", "dp_dpsgd", *args, "--calibrate-with", "paper"))


TRAIN = {"rounds": 30, "nodes": 4, "device": "cpu", "eval_every": 30, "epsilon": 1.0}


def _trainer(name: str):
    from privbench.config import RunConfig
    from privbench.engine.runner import build

    return build(RunConfig(**TRAIN), name).trainer


def _account(capsys, name: str, rate: float, *extra: str) -> dict:
    (plan,) = _plans(capsys, "--defense", name, "--eps", "1", "--delta", "1e-5",
                     "--rounds", str(TRAIN["rounds"]), "--nodes", str(TRAIN["nodes"]),
                     "--sample-rate", repr(rate), "--calibrate-with", "calibrated", *extra)
    return plan


@pytest.mark.parametrize("name", ["const_d2p", "dyn_c_d2p", "dyn_mu_d2p"])
def test_a_dyn_d2p_variant_is_planned_as_its_trainer_draws(name: str, capsys) -> None:
    trainer = _trainer(name)
    plan = _account(capsys, name, trainer.rates[1])
    assert plan["noise"]["mu_0"] == pytest.approx(trainer.mu_0[1], rel=1e-12)
    assert plan["noise"]["mu_last"] == pytest.approx(trainer.mu[-1, 1], rel=1e-12)


def test_dp_dfedsam_and_d_psgd_rr_are_planned_as_their_trainers_draw(capsys) -> None:
    sam = _trainer("dp_dfedsam")
    plan = _account(capsys, "dp_dfedsam", float(sam.rates[1, 0].double()))
    assert plan["noise"]["sigma"] == pytest.approx(sam.plans[1].noise["sigma"], rel=1e-6)
    rr = _trainer("d_psgd_rr")
    plan = _account(capsys, "d_psgd_rr", 1.0, "-o", f"dim={rr.d}")
    assert plan["noise"]["keep_prob"] == pytest.approx(rr.plan.noise["keep_prob"], rel=1e-12)
    assert "control_variates=False" in plan["notes"][0]
    assert all(not r["uncovered"] for r in plan["reports"])  # no control variates sent


@pytest.mark.parametrize("name", ["dp_dpsgd", "muffliato"])
def test_a_gossip_dp_sgd_defense_is_planned_as_its_trainer_draws(name: str, capsys) -> None:
    trainer = _trainer(name)
    node = int(trainer.rates.argmax())  # the one-sigma rule's worst node
    plan = _account(capsys, name, float(trainer.rates[node]))
    assert plan["noise"]["sigma"] == pytest.approx(float(trainer.sigma[node]), rel=1e-6)
    if name == "muffliato":
        assert (plan["noise"]["gossip_steps"], plan["noise"]["releases"]) == (
            trainer.steps, trainer.releases)
    reported = next(r for r in trainer.privacy() if r["node"] == node
                    and r["mode"] == "calibrated")
    assert plan["reports"][1]["epsilon"] == pytest.approx(float(reported["epsilon"]), rel=1e-6)


def test_dpdl_full_reading_is_flagged_approximate(capsys) -> None:
    args = ("--eps", "2", "--delta", "1e-5", "--rounds", "30", "--sample-rate", "0.1",
            "--calibrate-with", "calibrated")
    for extra in ((), ("-o", "n_agents=6", "-o", "degree=3")):  # the run's graph, the formula
        (plan,) = _plans(capsys, "--defense", "dpdl", *args, *extra)
        full = plan["reports"][2]
        assert full["note"].startswith("full reading") and full["approximate"] is True
        assert "not an upper bound" in full["note"]
        assert plan["reports"][1]["approximate"] is False  # the strict reading is a bound


def test_defl_vp_covers_its_control_variates_as_its_trainer_does(capsys) -> None:
    """The calibrated default builds its control variates from privatized signs (order rr_vr,
    what the audit of its default run measures), the paper's Alg. 3 reading sends them in the
    clear; the order is the trainer's, not an -o option."""
    from privbench.registry import DEFENSES

    assert DEFENSES.get("defl_vp").Config().order == "rr_vr"
    run_account(parse("--defense", "defl_vp", "--eps", "1", "--delta", "1e-5", "--rounds", "20",
                      "--json"))
    plans = {p["calibrated_with"]: p for p in json.loads(capsys.readouterr().out)}
    assert all(not r["uncovered"] for r in plans["calibrated"]["reports"])
    assert all(r["uncovered"] == ["control_variate"] for r in plans["paper"]["reports"])
    with pytest.raises(ConfigError, match="option order of 'defl_vp' is fixed by the defense"):
        run_account(parse("--defense", "defl_vp", "--eps", "1", "--delta", "1e-5",
                          "-o", "order=vr_rr"))


def test_an_epsilon_of_zero_is_said_to_be_exact(capsys) -> None:
    """At ε = 1e-6 the RDP conversion reaches 0 (the noise alone meets δ): printed as 0 with
    the reason, never as a rounded number."""
    run_account(parse("--defense", "dp_dpsgd", "--eps", "1e-6", "--delta", "1e-5", "--json"))
    plans = json.loads(capsys.readouterr().out)
    assert any(r["epsilon"] == 0.0 for p in plans for r in p["reports"])
    run_account(parse("--defense", "dp_dpsgd", "--eps", "1e-6", "--delta", "1e-5"))
    assert "an ε of 0 is exact, not rounded" in capsys.readouterr().out
    run_account(parse("--defense", "dp_dpsgd", "--eps", "1", "--delta", "1e-5"))
    assert "of 0 is exact" not in capsys.readouterr().out
