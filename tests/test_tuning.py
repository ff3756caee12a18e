"""`privbench tune`: the grid, the validation carve (never the test set), saved tuned values and
their use by the audit sweep (reported with where they came from)."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import numpy as np
import pytest
import torch

from privbench import runner, sweep, tuning
from privbench.cli import main
from privbench.config import RunConfig, replace_checked
from privbench.data import carve_validation, split_nodes
from privbench.errors import ConfigError
from privbench.provenance import code_digest, code_revision
from privbench.registry import load_plugins
from privbench.testing import TINY_RUN

load_plugins()
TINY = replace_checked(RunConfig(), {**TINY_RUN, "max_per_node": 40}, where="run")


def test_grid_is_the_product_with_checked_types():
    cands = tuning.parse_grid(["lr=0.1,0.2", "clip=1,2,2"], "dp_sgp")
    assert [(c.run, c.defense) for c in cands] == [
        ({"lr": 0.1}, {"clip": 1.0}), ({"lr": 0.1}, {"clip": 2.0}),
        ({"lr": 0.2}, {"clip": 1.0}), ({"lr": 0.2}, {"clip": 2.0})]
    assert tuning.parse_grid(["lr_constant=10"], "adp_vrsgp")[0].defense == {"lr_constant": 10.0}
    for bad in (["bogus=1"], ["lr="], ["clip=abc"], []):
        with pytest.raises(ConfigError):
            tuning.parse_grid(bad, "dp_sgp")


def test_validation_is_carved_from_members_only(digits):
    data = split_nodes(digits, 4, holdout=0.25, seed=0)
    val = carve_validation(digits, data, 0.2, seed=1)
    before = {int(i) for i in data.idx[data.idx >= 0]}
    members = {int(i) for i in val.idx[val.idx >= 0]}
    held = {int(i) for i in val.idx_out[val.idx_out >= 0]}
    assert members < before and not members & held
    assert len(val.y_test) == len(before) - len(members)  # validation = the members carved out
    assert int(val.counts.sum()) == len(members)
    carved = np.array(sorted(before - members))
    assert torch.equal(val.x_test, digits.x_train[carved])  # train samples, not the test set


def test_tuning_never_reads_the_test_set(monkeypatch, digits):
    cands = tuning.parse_grid(["lr=0.1,0.4"], "sgp")
    first = tuning.tune(TINY, "sgp", cands, 0.25, progress=False)
    scrambled = dataclasses.replace(digits, y_test=(digits.y_test + 1) % 10)
    monkeypatch.setattr(runner, "load_dataset", lambda *a, **k: scrambled)
    second = tuning.tune(TINY, "sgp", cands, 0.25, progress=False)
    val = [c["validation_accuracy"] for c in first["candidates"]]
    assert val == [c["validation_accuracy"] for c in second["candidates"]]
    assert first["best"] == second["best"] == int(np.argmax(val))
    # the test accuracy, reported for the record, does see the scrambled labels
    assert second["untuned_test"]["accuracy"] != first["untuned_test"]["accuracy"]


def _entry(clip: float, **settings):
    return {"epsilon": 8.0, "run": {"lr": 0.3}, "defense": {"clip": clip}, "command": "cmd",
            "settings": {**tuning.tuned_settings(TINY, "dp_sgp"), **settings}}


def test_sweep_applies_matching_tuned_values_and_reports_them(tmp_path):
    audit = sweep.audit_config("quick", ["dp_sgp", "dp_dpsgd"], [8.0], ["mia_threshold"],
                               None, {})
    tuned = {"dp_sgp": [_entry(0.5)], "dp_dpsgd": [_entry(0.7, rounds=999)]}
    res = sweep.Sweep(TINY, {}, audit, tmp_path / "a", progress=False, tuned=tuned).run()
    cells = {c["defense"]: c for c in res["cells"]}
    assert cells["dp_sgp"]["defense_config"]["clip"] == 0.5
    assert cells["dp_sgp"]["tuned"]["run"] == {"lr": 0.3}
    assert "Papernot & Steinke 2022" in cells["dp_sgp"]["tuned"]["note"]
    assert "tuned" not in cells["dp_dpsgd"]  # tuned for other settings: not applied
    assert cells["dp_dpsgd"]["defense_config"]["clip"] == 1.0
    assert list(res["config"]["tuned"]["cells"]) == ["dp_sgp@8"]
    html = (tmp_path / "a" / "index.html").read_text()
    assert "tuned.toml" in html and "Papernot" in html


def test_save_entry_replaces_the_same_cell_and_keeps_others(tmp_path):
    path = tmp_path / "tuned.toml"
    path.write_text("# header\n\n")
    res = {"candidates": [{"run": {}, "defense": {"clip": 1.0}, "validation_accuracy": 0.5}],
           "best": 0, "validation": 0.2, "untuned_test": {"accuracy": 0.1}}
    for defense, clip in (("dp_sgp", 1.0), ("dpdl", 2.0), ("dp_sgp", 3.0)):
        res["candidates"][0]["defense"] = {"clip": clip}
        text = tuning.toml_entry("quick", defense, TINY, res, f"privbench tune {clip}")
        tuning.save_entry(path, text, "quick", defense, TINY.epsilon)
    data = tomllib.loads(path.read_text())
    assert path.read_text().startswith("# header")
    assert [e["defense"]["clip"] for e in data["quick"]["dp_sgp"]] == [3.0]
    assert [e["defense"]["clip"] for e in data["quick"]["dpdl"]] == [2.0]
    assert tuning.entry_for(data["quick"]["dp_sgp"], TINY, 1.0,
                            "dp_sgp")[0]["command"].endswith("3.0")
    assert "# test accuracy (reported, not used for the choice): untuned 0.1" in path.read_text()
    assert f"# tuned by {code_revision()} (code sha256 {code_digest()})" in path.read_text()
    del res["untuned_test"]  # a tune run with --skip-test
    text = tuning.toml_entry("quick", "dpdl", TINY, res, "privbench tune --skip-test")
    assert "# test accuracy (reported, not used for the choice): not measured" in text


def test_committed_tuned_file_parses_and_records_its_commands():
    for preset, defenses in tuning.load_tuned().items():
        assert preset in sweep.PRESETS
        for defense, entries in defenses.items():
            for e in entries:
                assert e["command"].startswith("privbench tune ")
                assert f"--defense {defense} " in e["command"] and "--save" in e["command"]
                assert set(e["settings"]) == set(tuning.MATCH_FIELDS)


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_the_committed_tuned_values_apply_to_the_default_audit(eps):
    # the default audit runs topology "auto"; every committed quick entry (tuned on the graph
    # "auto" resolves to) must apply to it, or the audit silently trains untuned defaults
    run = replace_checked(RunConfig(), sweep.PRESETS["quick"]["run"], where="run")
    assert run.topology == "auto"
    quick = tuning.load_tuned()["quick"]
    assert {"adp_vrsgp", "dp_sgp", "dyn_d2p", "dpdl", "defl_vp"} <= set(quick)
    for defense, entries in quick.items():
        entry, why = tuning.entry_for(entries, run, eps, defense)
        assert entry is not None, (defense, why)


def test_tune_cli_writes_every_candidate(tmp_path, capsys):
    code = main(["tune", "--defense", "sgp", "--grid", "lr=0.1,0.3", "--nodes", "4",
                 "--rounds", "5", "--batch-size", "2", "--device", "cpu", "--quiet",
                 "--set", "max_per_node=30", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "Papernot & Steinke 2022" in out and "best on validation" in out
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert [c["label"] for c in saved["candidates"]] == ["lr=0.1", "lr=0.3"]
    assert saved["environment"]["code"] == code_revision()  # which code tuned it
    assert main(["tune", "--defense", "sgp", "--grid", "nope=1", "--out", str(tmp_path)]) == 2


def test_inert_keys_are_those_whose_values_alone_never_changed_the_models():
    def row(sha, **kw):
        return {"run": {k: v for k, v in kw.items() if k == "lr"},
                "defense": {k: v for k, v in kw.items() if k != "lr"}, "models_sha256": sha}

    rows = [row("a", lr=0.1, clip=1.0), row("a", lr=0.1, clip=2.0),
            row("b", lr=0.2, clip=1.0), row("b", lr=0.2, clip=2.0)]
    assert tuning.inert_keys(rows) == ["clip"]
    rows[3]["models_sha256"] = "c"  # one pair differs: clip did something
    assert tuning.inert_keys(rows) == []
    assert tuning.inert_keys([row("a", lr=0.1), row("a", lr=0.2)]) == ["lr"]
    assert tuning.inert_keys([row("a", lr=0.1, clip=1.0), row("a", lr=0.2, clip=2.0)]) == []
    assert tuning.inert_keys([row(None, lr=0.1), row(None, lr=0.2)]) == []  # unknown: not judged


def test_tune_names_a_key_the_defense_does_not_read(tmp_path, capsys):
    """Dyn-D2P's default variant decays clip_0; clip_bar is read only by const / dyn_mu."""
    code = main(["tune", "--defense", "dyn_d2p", "--grid", "clip_bar=0.5,4", "--grid",
                 "clip_0=0.5,4", "--nodes", "3", "--rounds", "3", "--batch-size", "4",
                 "--device", "cpu", "--quiet", "--skip-test", "--set", "max_per_node=30",
                 "--eps", "8", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "note: clip_bar changed nothing" in out and "clip_0 changed" not in out
    assert json.loads((tmp_path / "tune.json").read_text())["inert"] == ["clip_bar"]


def test_user_settings_win_over_tuned_values_and_untuned_ignores_them(monkeypatch):
    from privbench import cli

    monkeypatch.setattr(tuning, "load_tuned", lambda: {"quick": {"dp_sgp": [_entry(0.5)]}})
    parse = cli.build_parser().parse_args
    args = parse(["attack", "--lr", "0.7"])
    args.sets = ["defense.clip=2"]
    entry = cli._tuned_entries(args, {"clip": "2"})["dp_sgp"][0]
    assert entry["run"] == {} and entry["defense"] == {}
    plain = cli._tuned_entries(parse(["attack"]), {})["dp_sgp"][0]
    assert plain["run"] == {"lr": 0.3} and plain["defense"] == {"clip": 0.5}
    assert cli._tuned_entries(parse(["attack", "--untuned"]), {}) == {}


def test_train_applies_the_entry_tuned_for_its_exact_settings(tmp_path, monkeypatch, capsys):
    # `privbench train` uses an entry of any preset whose settings are exactly the run's, says
    # so and records it; the user's flags win, --untuned and other settings leave the defaults
    monkeypatch.setattr(tuning, "load_tuned", lambda: {"paper": {"dp_sgp": [_entry(0.5)]}})
    flags = ["train", "--defense", "dp_sgp", "--nodes", "4", "--rounds", "10", "--batch-size",
             "2", "--device", "cpu", "--quiet", "--record", "none", "--set", "max_per_node=40",
             "--set", "eval_every=10"]

    def run(*extra: str) -> dict:
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        assert main([*flags, *extra, "--out", str(out)]) == 0
        return json.loads((out / "results.json").read_text())

    tuned = run()
    assert "tuned values for dp_sgp from privbench/presets/tuned.toml: lr=0.3 clip=0.5" in (
        capsys.readouterr().out)
    assert tuned["run"]["lr"] == 0.3 and tuned["defense_config"]["clip"] == 0.5
    assert tuned["tuned"]["command"] == "cmd" and "Papernot" in tuned["tuned"]["note"]
    mine = run("--lr", "0.05")
    assert mine["run"]["lr"] == 0.05 and mine["defense_config"]["clip"] == 0.5
    assert mine["tuned"]["run"] == {}
    capsys.readouterr()
    for extra in (["--untuned"], ["--nodes", "5"]):
        plain = run(*extra)
        assert plain["tuned"] is None and "tuned values" not in capsys.readouterr().out
        assert plain["run"]["lr"] == RunConfig().lr
