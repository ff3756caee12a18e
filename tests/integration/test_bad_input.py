"""Bad input across commands and files: one line, exit 2, no traceback, nothing damaged."""

from __future__ import annotations

import json

import pytest

from privbench.cli import main
from privbench.results.store import SCHEMA_VERSION, write_json


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


def _refuse_training(monkeypatch) -> None:
    """Any training is a failure: the input must be refused before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr("privbench.engine.loop.train", refuse)
    monkeypatch.setattr("privbench.pipeline.sweep.train", refuse)


TINY_ATTACK = ["attack", "--defense", "dp_sgp", "--attack", "mia_threshold", "--nodes", "4",
               "--rounds", "3", "--device", "cpu", "--quiet"]


@pytest.mark.parametrize("extra,needle", [
    (["--threat", "node:99"], "threat 'node:99': nodes must be in [0, 3], got [99]"),
    (["--eps", "1,1e300"], "at epsilon=1e+300"),  # the second cell's ε: no noise reaches it
    (["--set", "audit.attack_config.mia_threshold.nosuch=1"], "unknown attack key 'nosuch'"),
])
def test_attack_checks_every_cell_before_any_cell_trains(tmp_path, capsys, monkeypatch, extra,
                                                         needle):
    _refuse_training(monkeypatch)
    out = tmp_path / "reports" / "audit"
    assert main([*TINY_ATTACK, "--out", str(out), *extra]) == 2
    _one_line_error(capsys, needle)
    assert not (tmp_path / "reports").exists()  # no folder, no lock, no train.json


@pytest.mark.parametrize(("args", "needle"), [
    (["--defense", "dp_sgp", "--eps", "1,1e300"],
     "dp_sgp eps=1e+300: no mu reaches delta=1e-05 at epsilon=1e+300"),
    (["--defense", "sgp", "--distances", "1,99"],
     "--distances 99: no victim has a node 99 hops away"),
], ids=["eps", "distance"])
def test_leakage_checks_every_run_before_any_run_trains(tmp_path, capsys, monkeypatch, args,
                                                        needle):
    _refuse_training(monkeypatch)
    monkeypatch.setattr("privbench.audit.leakage.train", lambda *a, **k: pytest.fail("trained"))
    assert main(["leakage", *args, "--rounds", "2", "--quiet",
                 "--out", str(tmp_path / "new" / "leak")]) == 2
    _one_line_error(capsys, needle)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("args", [
    ["train", "--defense", "dp_sgp", "--eps", "1e300", "--nodes", "4", "--rounds", "2",
     "--device", "cpu", "--quiet"],
    [*TINY_ATTACK, "--eps", "1e300"],
    ["tune", "--defense", "dp_sgp", "--eps", "1e300", "--grid", "lr=0.1,0.2", "--nodes", "4",
     "--rounds", "2", "--device", "cpu", "--quiet"],
    ["leakage", "--defense", "dp_sgp", "--eps", "1e300", "--rounds", "2", "--quiet"],
], ids=["train", "attack", "tune", "leakage"])
def test_a_refused_command_leaves_no_folder_or_lock(tmp_path, capsys, monkeypatch, args):
    # refused once the output folder is claimed (the ε is checked when the run is built)
    _refuse_training(monkeypatch)
    assert main([*args, "--out", str(tmp_path / "new" / "out")]) == 2
    _one_line_error(capsys, "epsilon=1e+300")
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"  # a folder that was there keeps what it held, no lock
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert main([*args, "--out", str(existing / "out")]) == 2
    capsys.readouterr()
    assert sorted(p.name for p in existing.rglob("*")) == ["notes.txt"]


def test_a_refused_command_keeps_a_folder_that_holds_results(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text('{"keep": true}')
    assert main(["train", "--eps", "1e300", "--defense", "dp_sgp", "--rounds", "1",
                 "--out", str(out), "--overwrite", "--quiet", "--device", "cpu"]) == 2
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == [".privbench.lock", "results.json"]


def _interrupt_after(monkeypatch, target: str, calls: int) -> None:
    """`target` (module.function) raises KeyboardInterrupt on its call number `calls`."""
    import importlib

    module, name = target.rsplit(".", 1)
    real, seen = getattr(importlib.import_module(module), name), []

    def stop(*args, **kwargs):
        seen.append(1)
        if len(seen) == calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(target, stop)


def _stopped_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("privbench: interrupted; "), err
    return err.strip()


def test_ctrl_c_in_train_says_nothing_is_kept_and_how_to_keep_it(tmp_path, capsys, monkeypatch):
    _interrupt_after(monkeypatch, "privbench.engine.loop.train", 1)
    args = ["train", "--nodes", "3", "--rounds", "2", "--device", "cpu", "--quiet",
            "--out", str(tmp_path / "t")]
    assert main(args) == 130
    line = _stopped_line(capsys)
    assert "nothing of the run is kept" in line
    assert f"`privbench {' '.join(args)} --checkpoint-every MINUTES` saves checkpoints" in line


def test_ctrl_c_in_train_names_the_checkpoint_it_keeps(tmp_path, capsys, monkeypatch):
    from privbench.engine import checkpoint

    out = tmp_path / "t"
    real = checkpoint.Saver.__call__

    def save_then_stop(self, rounds_done, result):
        self.last = float("-inf")  # save now, whatever the interval
        real(self, rounds_done, result)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.Saver, "__call__", save_then_stop)
    args = ["train", "--nodes", "3", "--rounds", "4", "--device", "cpu", "--quiet",
            "--checkpoint-every", "10", "--out", str(out)]
    assert main(args) == 130
    line = _stopped_line(capsys)
    assert (out / "checkpoint.ckpt").is_file()
    assert line == (f"privbench: interrupted; kept: the checkpoint {out / 'checkpoint.ckpt'}; "
                    f"`privbench {' '.join(args)}` continues from it")


@pytest.mark.parametrize("args,target,written", [
    (["tune", "--defense", "sgp", "--grid", "lr=0.1,0.2", "--nodes", "3", "--rounds", "2",
      "--device", "cpu", "--quiet"], "privbench.pipeline.tuning.tune", "tune.json"),
    (["leakage", "--defense", "sgp", "--rounds", "2", "--quiet"],
     "privbench.audit.leakage.run_leakage", "leakage.json"),
], ids=["tune", "leakage"])
def test_ctrl_c_in_tune_and_leakage_says_nothing_is_kept(tmp_path, capsys, monkeypatch, args,
                                                        target, written):
    _interrupt_after(monkeypatch, target, 1)
    out = tmp_path / "o"
    assert main([*args, "--out", str(out)]) == 130
    line = _stopped_line(capsys)
    assert f"nothing of the run is kept ({out / written} is written when it ends)" in line
    assert line.endswith(f"`privbench {' '.join([*args, '--out', str(out)])}` starts again")


def test_ctrl_c_in_reproduce_counts_the_runs_kept(tmp_path, capsys, monkeypatch):
    import dataclasses

    from privbench.reproduce import REPRODUCTIONS, load
    from privbench.reproduce.spec import Scale

    load()
    base = REPRODUCTIONS.get("dyn_d2p")
    scale = Scale("reduced", (("dataset", "digits"), ("model", "mlp"), ("nodes", 4),
                              ("topology", "exponential"), ("rounds", 2), ("batch_size", 16),
                              ("lr", 0.2), ("delta", 1e-4), ("holdout", 0.0),
                              ("eval_every", 2)), (0,), "a test's tiny setting")
    if "tiny_interrupted" not in REPRODUCTIONS:
        REPRODUCTIONS.add("tiny_interrupted", dataclasses.replace(
            base, name="tiny_interrupted", scales=(scale,), eps=(1.0, 3.0),
            paper=tuple((label, row[2:]) for label, row in base.paper)))
    _interrupt_after(monkeypatch, "privbench.reproduce.runs.run_job", 3)
    out = tmp_path / "r"
    args = ["reproduce", "tiny_interrupted", "--quiet", "--checkpoint-every", "0", "--out",
            str(out)]
    assert main(args) == 130
    line = _stopped_line(capsys)
    assert line == (f"privbench: interrupted; kept: 2 runs in {out / 'runs.jsonl'}; "
                    f"`privbench {' '.join(args)}` trains the rest")
