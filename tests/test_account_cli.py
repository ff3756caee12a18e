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
