"""Tests of `privbench account`: `run_account` on a parser built by `add_account_arguments`."""

from __future__ import annotations

import argparse
import json

import pytest

from privbench.account_cli import add_account_arguments, parse_options, run_account
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
    with pytest.raises(UnknownNameError, match="known: adp_vrsgp, defl_vp, dp_sgp"):
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
    from privbench.account_cli import LIGHT_MIN_DELTA
    from privbench.accounting.gaussian import PLD_MIN_DELTA

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
    from privbench.account_cli import default_accountant, default_mode

    assert default_mode("dyn_d2p") == DynD2PConfig().calibrate_with == "calibrated"
    assert default_mode("dpdl") == DPDLConfig().calibration_mode == "calibrated"
    assert default_accountant("dpdl") == DPDLConfig().accountant == "rdp"
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
