"""What privbench guarantees about its results, the parts that need no audit run:
strict JSON read back losslessly, no temporary file left behind, a gate that cannot pass having
checked nothing, and validation of loose options before any training starts."""

from __future__ import annotations

import copy
import json
import math
import os

import pytest

from privbench.cli import main
from privbench.report import gate
from privbench.results import store as results
from privbench.results.store import SCHEMA_VERSION, atomic_write_text, read_results, write_json


def _reject(name):
    raise ValueError(f"bare {name} is not JSON")


def _one_line(capsys, needle: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("privbench: error: ") and needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def _audit_results() -> dict:
    return {"schema_version": SCHEMA_VERSION, "kind": "audit", "command": "privbench attack",
            "config": {"run": {"dataset": "digits", "model": "mlp", "nodes": 4, "seed": 0},
                       "threat": "eavesdropper"},
            "environment": {"python": "3"},
            "cells": [{"defense": "dp", "epsilon": 1.0, "status": "ok", "accuracy": float("nan"),
                       "privacy": [{"mode": "calibrated", "epsilon": 1.0, "node": 0,
                                    "delta": 1e-5, "accountant": "pld", "unit": "sample",
                                    "uncovered": []}],
                       "messages": [{"name": "model", "covered": True, "data_dependent": True,
                                     "description": "x"}],
                       "attacks": {"mia": {"status": "ok", "uses": ["model"],
                                           "metrics": {"auc": 0.5, "empirical_epsilon":
                                                       float("inf")},
                                           "roc": {"fpr": [0.0, 1.0], "tpr": [0.0, 1.0]}}}}]}


def test_non_finite_values_are_strict_json_and_read_back_losslessly(tmp_path):
    data = _audit_results()
    data["cells"][0]["history"] = [{"loss": float("-inf")}]
    write_json(tmp_path / "r.json", data)
    text = (tmp_path / "r.json").read_text()
    json.loads(text, parse_constant=_reject)  # no bare NaN / Infinity
    back = read_results(tmp_path / "r.json")
    cell = back["cells"][0]
    assert math.isnan(cell["accuracy"]) and cell["history"][0]["loss"] == -math.inf
    assert cell["attacks"]["mia"]["metrics"]["empirical_epsilon"] == math.inf
    (tmp_path / "bare.json").write_text(text.replace('"nan"', "NaN"))
    with pytest.raises(results.DataError, match="bare NaN is not JSON"):
        read_results(tmp_path / "bare.json")


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    target.write_text("good")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new")
    assert target.read_text() == "good" and sorted(p.name for p in tmp_path.iterdir()) == [
        "results.json"]
    (tmp_path / ".x.json.abc.tmp").write_text("left by kill -9")
    assert results.remove_stale_temps(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def _check(tmp_path, policy: str, res: dict, *extra: str) -> int:
    rp, pp = tmp_path / "results.json", tmp_path / "policy.toml"
    write_json(rp, res)
    pp.write_text(policy)
    return main(["check", str(rp), "--policy", str(pp), *extra])


def test_a_bound_without_a_limit_fails_with_the_reason(tmp_path, capsys):
    assert _check(tmp_path, '[[bound]]\ndefense = "dp"\neps = 1.0\n', _audit_results()) == 1
    out = capsys.readouterr().out
    assert "policy error: the bound has no limit" in out and "0 passed, 1 failed" in out
    assert _check(tmp_path, '[[bound]]\nrequire_coverage = false\n', _audit_results()) == 1
    assert "has no limit" in capsys.readouterr().out


def test_a_baseline_sharing_no_cell_fails_with_the_reason(tmp_path, capsys):
    other = copy.deepcopy(_audit_results())
    other["cells"][0]["defense"] = "someone_else"
    write_json(tmp_path / "base.json", other)
    policy = '[[bound]]\nmax_auc = 0.9\n'
    assert _check(tmp_path, policy, _audit_results(), "--baseline",
                  str(tmp_path / "base.json")) == 1
    out = capsys.readouterr().out
    assert "baseline shares no (defense, ε) cell" in out and "someone_else@1" in out
    assert _check(tmp_path, policy, _audit_results(), "--baseline",
                  str(tmp_path / "results.json")) == 0  # with a common cell it passes


def test_zero_checks_fail():
    checks = gate.run_checks(_audit_results(), {"bound": []})
    assert [c.passed for c in checks] == [False] and "no check was evaluated" in checks[0].detail


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr("privbench.engine.loop.train", refuse)
    monkeypatch.setattr("privbench.pipeline.sweep.train", refuse)


@pytest.mark.parametrize("args,needle", [
    (["attack", "--defense", ""], "--defense needs at least one defense"),
    (["attack", "--attack", ","], "--attack needs at least one attack"),
    (["attack", "--set", "audit.reference_models=-3"], "reference_models must be >= 1, got -3"),
    (["attack", "--set", "audit.victim=99", "--nodes", "4"],
     "victim must be a node index in 0..3, got 99"),
    (["attack", "--set", "audit.inversion_rounds=500", "--rounds", "10"],
     "inversion_rounds must be < rounds (10), got 500"),
    (["attack", "--run-name", "../../x"], "--run-name must be a plain folder name"),
    (["attack", "--out", "o\udcff"], "--out is not valid UTF-8 text ('o\\udcff')"),
    (["train", "--out", "o\udcff"], "--out is not valid UTF-8 text"),
    (["train", "--config", "."], "config file . is a directory"),
    (["attack", "--resume=maybe"], "invalid choice: 'maybe'"),
    (["bench", "engine", "--nodes", "0"], "bench node counts must be >= 2, got 0"),
    (["bench", "engine", "--repeats", "-1"], "bench --repeats must be >= 1, got -1"),
    (["bench", "scale", "--max-stack-gib", "nan"], "--max-stack-gib must be a finite number"),
])
def test_loose_options_fail_at_the_door(args, needle, tmp_path, capsys, no_training,
                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    if args[0] == "attack":
        args = [*args, "--quiet", "--device", "cpu"]
    assert main(args) == 2
    _one_line(capsys, needle)
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


def test_a_full_disk_while_saving_models_is_one_line(tmp_path, capsys, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text('{"keep": true}')

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    assert main(["train", "--nodes", "3", "--rounds", "1", "--batch-size", "2", "--device",
                 "cpu", "--out", str(out), "--quiet", "--overwrite"]) == 2
    _one_line(capsys, "No space left on device")
    assert (out / "results.json").read_text() == '{"keep": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


_TRAIN = ["train", "--nodes", "3", "--rounds", "1", "--batch-size", "2", "--device", "cpu",
          "--quiet"]


@pytest.mark.parametrize("command,result,key", [
    (_TRAIN, "results.json", "run"),
    (["tune", "--nodes", "3", "--rounds", "1", "--batch-size", "2", "--device", "cpu",
      "--defense", "dp_sgp", "--grid", "lr=0.1", "--skip-test", "--quiet"], "tune.json",
     "candidates"),
])
def test_a_result_already_in_out_is_replaced_only_with_overwrite(tmp_path, capsys, command,
                                                                 result, key):
    out = tmp_path / "run"
    out.mkdir()
    (out / result).write_text('{"keep": true}')
    assert main([*command, "--out", str(out)]) == 2  # refused before any training
    _one_line(capsys, f"{out / result} exists (a result file is never overwritten silently)")
    assert (out / result).read_text() == '{"keep": true}'
    assert main([*command, "--out", str(out), "--overwrite"]) == 0
    written = json.loads((out / result).read_text())
    assert key in written and "keep" not in written
    assert "untuned_test" not in written  # --skip-test: no test-set runs (tune)


@pytest.mark.parametrize("command", [
    _TRAIN, ["tune", "--defense", "dp_sgp", "--grid", "lr=0.1", "--quiet"],
    ["leakage", "--defense", "d_psgd", "--rounds", "2", "--quiet"]])
def test_a_folder_another_run_writes_into_is_refused(tmp_path, capsys, command):
    from privbench.results.fingerprint import folder_lock

    out = tmp_path / "run"
    with folder_lock(out):  # another privbench process writing there
        assert main([*command, "--out", str(out)]) == 2
    _one_line(capsys, f"output folder {out} is in use by another privbench run")
    assert [p.name for p in out.iterdir()] == [".privbench.lock"]


def test_names_with_dollar_signs_render(tmp_path):
    from privbench.report import render_html

    res = _audit_results()
    res["cells"][0]["accuracy"] = 0.5
    res["cells"].append({**copy.deepcopy(res["cells"][0]), "defense": "$\\undefinedmacro^$",
                         "epsilon": 2.0})
    html = render_html(res, run_name="<script>x</script>")
    assert "&lt;script&gt;" in html and "<script>x</script>" not in html


def test_gate_labels_close_eps_cells_apart():
    cells = [{"defense": "dp", "epsilon": e} for e in (1.0000001, 1.0000004, 1.0, None)]
    assert [gate.cell_label(c) for c in cells] == ["dp@1.0000001", "dp@1.0000004", "dp@1",
                                                   "dp@no-DP"]


def test_claim_rows_take_the_worst_node_of_each_reading():
    def rep(node, eps, reading, uncovered=()):
        return {"node": node, "mode": "paper", "reading": reading, "accountant": "rdp",
                "unit": "sample-level", "epsilon": eps, "delta": 1e-5,
                "uncovered": list(uncovered)}
    cell = {"privacy": [rep(0, 0.4, "paper", ["cross_grad"]), rep(0, 0.5, "full"),
                        rep(1, 0.9, "paper", ["momentum"]), rep(1, "inf", "full")]}
    rows = results.claim_rows(cell)
    assert [(r["reading"], r["epsilon"], r["nodes"]) for r in rows] == [
        ("paper", 0.9, 2), ("full", "inf", 2)]
    assert rows[0]["uncovered"] == ["cross_grad", "momentum"]
    assert cell["privacy"][0]["uncovered"] == ["cross_grad"]  # the cell's reports untouched
