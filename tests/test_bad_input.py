"""Bad input across commands and files: one line, exit 2, no traceback, nothing damaged."""

from __future__ import annotations

import json

import pytest

from privbench.cli import main
from privbench.results import SCHEMA_VERSION, write_json


def _one_line_error(capsys, needle: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("privbench: error: ") and needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unwritable_output_folder(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", "--rounds", "1", "--out", str(blocker / "sub"), "--quiet"]) == 2
    _one_line_error(capsys, "cannot create output folder")


def test_a_failing_command_leaves_earlier_results_untouched(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text('{"keep": true}')
    assert main(["train", "--nodes", "0", "--out", str(out)]) == 2
    assert (out / "results.json").read_text() == '{"keep": true}'
    capsys.readouterr()


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01garbage", "not a valid safetensors file"),
    (None, "not found"),
])
def test_attack_on_a_corrupt_or_missing_message_log(tmp_path, capsys, content, needle):
    run = tmp_path / "train"
    assert main(["train", "--nodes", "3", "--rounds", "2", "--out", str(run), "--quiet",
                 "--device", "cpu"]) == 0
    capsys.readouterr()
    log = run / "messages.safetensors"
    if content is None:
        log.unlink()
    else:
        log.write_bytes(content)
    assert main(["attack", "--messages", str(run), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    _one_line_error(capsys, needle)


def test_attack_on_a_results_file_of_another_schema_version(tmp_path, capsys):
    run = tmp_path / "train"
    run.mkdir()
    write_json(run / "results.json", {"schema_version": SCHEMA_VERSION + 1, "kind": "train"})
    assert main(["attack", "--messages", str(run), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    _one_line_error(capsys, f"this privbench reads schema_version {SCHEMA_VERSION}")


def test_report_of_a_train_result_is_refused(tmp_path, capsys):
    path = tmp_path / "r.json"
    write_json(path, {"schema_version": SCHEMA_VERSION, "kind": "train"})
    assert main(["report", str(path), "-o", str(tmp_path / "x.html")]) == 2
    _one_line_error(capsys, "renders audit results")


@pytest.mark.parametrize("args,needle", [
    (["train", "--alpha", "0", "--partition", "dirichlet"], "alpha must be > 0"),
    (["train", "--partition", "zipf"], "unknown partition 'zipf'"),
    (["train", "--out-degree", "0"], "out_degree must be >= 1"),
    (["train", "--lr", "-1"], "lr must be > 0"),
    (["train", "--set", "max_per_node=1"], "max_per_node must be >= 2"),
    (["train", "--set", "defense.momentum=fast"], "momentum must be float"),
    (["train", "--set", "holdout=1.5"], "holdout must be in [0, 1)"),
    (["train", "--topology", "two_hub", "--nodes", "2"], "nodes must be >= 3"),
    (["train", "--defense", "d_psgd", "--topology", "exponential"], "undirected"),
    (["check", "missing.json", "--policy", "p.toml"], "not found"),
    (["bench", "nothing"], "invalid choice"),
    (["bench", "distributed", "--ranks", "0"], "--ranks must be >= 1"),
    (["train", "--backend", "mpi"], "invalid choice: 'mpi'"),
    (["attack", "--threat", "near:2"], "unknown threat model 'near:2'"),
    (["leakage", "--defense", "nope"], "unknown defense 'nope'"),
    (["leakage", "--victims", "0"], "victims must be in [1, 8]"),
    (["leakage", "--victims", "2", "--inversion-victims", "3"],
     "inversion_victims must be in [1, 2]"),
    (["leakage", "--inversion", "nope"], "unknown attack 'nope'"),
    (["leakage", "--sizes", "2,x"], "--sizes must be comma-separated integers"),
    (["train", "--backend", "distributed", "--dist-timeout", "0"], "--dist-timeout must be > 0"),
    (["reproduce", "nope"], "unknown reproduction 'nope'"),
    (["reproduce", "dyn_d2p", "--scale", "big"], "has no scale 'big'; accepted: reduced, paper"),
    (["reproduce", "dyn_d2p", "--seeds", "1,x"], "--seeds must be comma-separated integers"),
])
def test_more_bad_arguments(args, needle, tmp_path, capsys):
    full = [*args, "--out", str(tmp_path / "o"), "--quiet"] if args[0] == "train" else args
    assert main(full) == 2
    _one_line_error(capsys, needle)


def test_bad_toml_config(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("nodes = [")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, "is not valid TOML")
    cfg.write_text('defense = "x"\n')
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, "[defense] must be a table")


def test_results_json_round_trips_as_valid_json(tmp_path):
    write_json(tmp_path / "r.json", {"schema_version": SCHEMA_VERSION, "x": float("nan")})
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] == SCHEMA_VERSION
