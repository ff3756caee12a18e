"""The command line: list, train, and one-line errors with exit code 2 on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from privbench.cli import main


def test_list_prints_every_registry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for line in ("defenses:", "attacks:", "datasets:", "models:", "topologies:"):
        assert line in out
    assert "sgp" in out and "digits" in out and "random_out" in out


def test_train_writes_results_and_messages(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--defense", "sgp", "--rounds", "20", "--nodes", "4", "--device", "cpu",
                 "--out", str(out), "--quiet", "--record", "0:3"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "average-model test accuracy" in printed
    res = json.loads((out / "results.json").read_text())
    assert res["defense"] == "sgp" and res["run"]["rounds"] == 20
    assert len(res["accuracy"]["per_node"]) == 4
    assert {m["name"] for m in res["messages"]} == {"model", "weight"}
    assert (out / "messages.safetensors").exists() and (out / "ground_truth.safetensors").exists()
    index = json.loads((out / "messages.json").read_text())
    assert sorted({r["round"] for r in index["records"]}) == [0, 1, 2]



@pytest.mark.parametrize(("argv", "said", "not_said"), [
    ([], ["defense: sgp (the default, not private"], ["ε = 8"]),
    (["--defense", "dp_sgp"], ["ε = 8 per node (the default; --eps chooses)"], ["defense: sgp"]),
    (["--defense", "dp_sgp", "--eps", "8"], [], ["defense: sgp", "(the default; --eps"]),
    (["--defense", "sgp"], [], ["defense: sgp", "ε = 8"]),
])
def test_train_says_the_defaults_that_decide_what_it_means(argv, said, not_said, tmp_path,
                                                           capsys):
    """A run that trains the non-private default, or a private defense at the default ε, says
    so before it trains (`privbench.commands.train`, `defaults_used`)."""
    code = main(["train", *argv, "--rounds", "2", "--nodes", "4", "--device", "cpu",
                 "--out", str(tmp_path / "run"), "--quiet", "--record", "none", "--untuned"])
    assert code == 0
    printed = capsys.readouterr().out
    assert all(s in printed for s in said) and not any(s in printed for s in not_said)

@pytest.mark.parametrize("args,needle", [
    (["train", "--dataset", "imagenet"], "unknown dataset 'imagenet'; known:"),
    (["train", "--model", "vgg"], "unknown model 'vgg'; known:"),
    (["train", "--topology", "star"], "unknown topology 'star'; known:"),
    (["train", "--defense", "nope"], "unknown defense 'nope'; known:"),
    (["train", "--nodes", "1"], "nodes must be >= 2"),
    (["train", "--rounds", "0"], "rounds must be >= 1"),
    (["train", "--batch-size", "0"], "batch_size must be >= 1"),
    (["train", "--eps", "-1"], "epsilon must be > 0"),
    (["train", "--delta", "1.5"], "delta must be in (0, 1)"),
    (["train", "--dataset", "mnist", "--data-root", "/nonexistent"],
     "--data-root /nonexistent does not exist; accepted: an existing folder holding mnist"),
    (["train", "--set", "nosuch=1"], "unknown run key 'nosuch'"),
    (["train", "--set", "defense.nosuch=1"], "unknown defense key 'nosuch'"),
    (["train", "--set", "rounds=abc"], "rounds must be int"),
    (["train", "--config", "/nonexistent.toml"], "config file /nonexistent.toml not found"),
    (["train", "--device", "tpu"], "device"),
    (["train", "--record", "x:y"], "bad --record spec"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2(args, needle, capsys, tmp_path):
    assert main([*args, "--out", str(tmp_path / "o")] if args[0] == "train" else args) == 2
    err = capsys.readouterr().err
    assert err.startswith("privbench: error: ") and needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_toml_config_and_set_overrides(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('nodes = 3\nrounds = 5\nmodel = "mlp"\n[defense]\nmomentum = 0.5\n')
    out = tmp_path / "o"
    assert main(["train", "--config", str(cfg), "--set", "rounds=4", "--device", "cpu",
                 "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["run"]["nodes"] == 3 and res["run"]["rounds"] == 4
    assert res["defense_config"]["momentum"] == 0.5


def test_python_dash_m_entry_point_and_exit_code():
    proc = subprocess.run([sys.executable, "-m", "privbench", "train", "--nodes", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "privbench: error: nodes must be >= 2, got 0"


def test_help_and_version_do_not_import_torch():
    code = ("import sys\n"
            "from privbench.cli import main\n"
            "for argv in (['--help'], ['--version'], ['train', '--help'], ['attack', '--help']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as exc:\n"
            "        assert exc.code == 0, exc.code\n"
            "heavy = sorted(m for m in ('torch', 'dp_accounting', 'numpy') if m in sys.modules)\n"
            "print('heavy:', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "heavy: []" in proc.stdout
    assert "privbench 0." in proc.stdout  # --version, with the code's commit
    assert re.search(r"privbench 0\.\S+ \((git [0-9a-f]{40}|not a git checkout).*; "
                     r"code sha256 [0-9a-f]{64}\)", proc.stdout)


def test_attack_help_shows_the_presets_run_values(capsys):
    from privbench.pipeline.sweep import PRESETS

    with pytest.raises(SystemExit):
        main(["attack", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    quick = PRESETS["quick"]["run"]
    assert f"{quick['nodes']} in quick" in text and f"{quick['rounds']} in quick" in text
    # Every marked default is filled with preset values; a help text that merely contains the
    # marker (as --run-name's "audit-<preset>" once did) must not be mangled into "the preset's: )".
    assert re.findall(r"the preset's: \S", text) and "the preset's: )" not in text
    unwrapped = re.sub(r"-\s+", "-", text)  # argparse wraps lines after hyphens
    assert "default: audit-quick for the quick preset, audit-paper for the paper one" in unwrapped


def test_a_diverged_train_exits_nonzero_and_says_in_which_round(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--defense", "sgp", "--rounds", "20", "--nodes", "4", "--device", "cpu",
                 "--out", str(out), "--quiet", "--set", "lr=1e30", "--set", "eval_every=20"])
    assert code == 1
    captured = capsys.readouterr()
    res = json.loads((out / "results.json").read_text())
    r = res["diverged_round"]
    assert r is not None and r < 5  # caught in the round it happened, not at the evaluation
    assert f"diverged (NaN/Inf) in round {r + 1} of 20" in captured.err
    assert "privacy" not in captured.out or "{" not in captured.out


def test_a_diverged_partpsp_train_says_why_and_which_reading_is_which(tmp_path, capsys):
    """Calibrated to a whole-run epsilon under Eq. 22's estimate, PartPSP's noise grows its own
    sensitivity (reports/reproduce/dpps/README.md, "Why Eq. 22 cannot hold a calibrated ε"):
    `train` names that cause beside the round, and its privacy lines tell the assumed reading
    from the realized one."""
    code = main(["train", "--defense", "partpsp", "--eps", "8", "--rounds", "8", "--nodes", "6",
                 "--device", "cpu", "--out", str(tmp_path / "o"), "--set", "eval_every=8",
                 "--set", "defense.sensitivity_mode=estimated"])
    assert code == 1
    captured = capsys.readouterr()
    assert "the noise is in the next round's sensitivity" in captured.err
    assert "8320 shared coordinates" in captured.err
    lines = [ln for ln in captured.out.splitlines() if ln.startswith("privacy (node 0)")]
    assert any("calibrated (assumed) ε = " in ln for ln in lines)
    assert any("calibrated (realized) ε = ∞" in ln for ln in lines)


def test_train_prints_privacy_as_sentences(tmp_path, capsys):
    assert main(["train", "--defense", "dp_sgp", "--rounds", "3", "--nodes", "4", "--device",
                 "cpu", "--eps", "2", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("privacy")]
    assert lines and all("{" not in ln and " ε = " in ln and "δ = " in ln for ln in lines)


def test_list_describes_each_entry_and_marks_the_private_defenses(capsys):
    from privbench import registry
    from privbench.plugins import load_plugins

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    load_plugins()
    for reg in (registry.DEFENSES, registry.ATTACKS, registry.DATASETS, registry.MODELS,
                registry.TOPOLOGIES):
        for name in reg.names():
            module = getattr(reg.get(name), "__module__", "")
            if not module.startswith(("privbench", "attacks", "defenses")):
                continue  # an entry another test registered (test_bench's datasets)
            row = next(x for x in lines if x.split()[:1] == [name])
            words = row.split()
            if reg is registry.DEFENSES:  # the mark, then the description
                assert words[1] == ("DP" if reg.get(name).private else "-"), row
                words = words[1:]
            assert len(words) > 3, f"{name} has no description: {row!r}"
    row = {x.split()[0]: x for x in lines if x.startswith("  ")}
    assert row["dp_sgp"].split()[1] == "DP" and row["sgp"].split()[1] == "-"
    assert "Stochastic Gradient Push (non-private baseline)." in row["sgp"]
    assert "Improved Deep Leakage from Gradients (iDLG)." in row["idlg"]
    assert "MLP with hidden widths" in row["mlp"]


def test_attack_help_shows_the_default_eps_grid_attacks_and_defenses(capsys):
    from privbench.audit.config import DEFAULT_DEFENSES
    from privbench.pipeline.presets import PRESETS

    with pytest.raises(SystemExit):
        main(["attack", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, preset in PRESETS.items():
        eps = ", ".join(f"{e:g}" for e in preset["eps"])
        assert f"{eps} in {name}" in text, eps
        assert f"{', '.join(preset['attacks'])} in {name}" in text
    assert ", ".join(DEFAULT_DEFENSES) in text
    assert "the preset's)" not in text  # every preset default names its values


def test_train_writes_a_heartbeat_line_to_a_log(tmp_path, capsys, monkeypatch):
    # stderr is not a terminal here: no bar, but a line every HEARTBEAT_SECONDS
    import time

    from privbench import progress
    from privbench.engine import loop as engine

    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.01)
    real = engine.train

    def slow(trainer, progress=None, **kwargs):
        def step(n):
            time.sleep(0.05)
            progress(n)

        return real(trainer, progress=step, **kwargs)

    monkeypatch.setattr(engine, "train", slow)
    assert main(["train", "--defense", "sgp", "--rounds", "4", "--nodes", "3", "--device", "cpu",
                 "--out", str(tmp_path / "t")]) == 0
    beats = [x for x in capsys.readouterr().err.splitlines()
             if x.startswith("privbench: train sgp: round ")]
    assert beats and all(re.search(r"round \d of 4, \d+ s so far", x) for x in beats), beats
    assert main(["train", "--defense", "sgp", "--rounds", "4", "--nodes", "3", "--device", "cpu",
                 "--out", str(tmp_path / "q"), "--quiet"]) == 0
    assert "privbench: train" not in capsys.readouterr().err  # --quiet: nothing


def test_every_option_that_takes_a_value_says_its_default_in_help():
    """An option with a default names it in --help; an output file (`--junit`), a repeatable
    override (`--set`) or a run file (`--config`) has none to name."""
    import argparse

    from privbench.cli import build_parser

    none_to_name = {"--config", "--set", "--messages", "--resume", "--grid", "--save", "--merge",
                    "--csv", "--baseline", "--junit", "--markdown", "--plot", "--json",
                    "--option"}
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    silent = [f"{name} {a.option_strings[-1]}" for name, parser in sub.choices.items()
              for a in parser._actions
              if a.option_strings and a.nargs != 0 and not a.required
              and not isinstance(a, argparse._HelpAction)
              and a.option_strings[-1] not in none_to_name
              and "default" not in (a.help or "").lower()]
    assert silent == []
