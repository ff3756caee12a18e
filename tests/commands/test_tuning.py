"""`privbench tune`: the grid, the validation carve (never the test set), saved tuned values and
their use by the audit sweep (reported with where they came from)."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import numpy as np
import pytest
import torch

from privbench.cli import main
from privbench.config import RunConfig, replace_checked
from privbench.data.datasets import carve_validation, split_nodes
from privbench.engine import runner
from privbench.errors import ConfigError
from privbench.pipeline import sweep, tune_preset, tuning
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.results.provenance import code_digest, code_revision
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
    res = sweep.Sweep(TINY, {}, audit, tmp_path / "a", progress=False, tuned=tuned).run().to_json()
    cells = {c["defense"]: c for c in res["cells"]}
    assert cells["dp_sgp"]["defense_config"]["clip"] == 0.5
    assert cells["dp_sgp"]["tuned"]["run"] == {"lr": 0.3}
    assert "Papernot & Steinke 2022" in cells["dp_sgp"]["tuned"]["note"]
    # tuned for other settings: not applied, and said
    assert cells["dp_dpsgd"]["tuned"]["entry"] is None
    assert cells["dp_dpsgd"]["tuned"]["reason"].startswith(
        "no tuned entry at ε = 8 for these settings")
    assert cells["dp_dpsgd"]["defense_config"]["clip"] == 1.0
    assert list(res["config"]["tuned"]["cells"]) == ["dp_sgp@8"]
    assert list(res["config"]["tuned"]["missing"]) == ["dp_dpsgd@8"]
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
    assert tuning.entry_for(data["quick"]["dp_sgp"], TINY, TINY.epsilon,
                            "dp_sgp")[0]["command"].endswith("3.0")
    assert data["quick"]["dp_sgp"][0]["candidates"] == 1
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
    # "auto" resolves to) must apply to it, or the audit silently trains untuned defaults.
    # Every cell of the default audit has an entry tuned at its own ε (and for its paper
    # setting or reading).
    run = replace_checked(RunConfig(), {**sweep.PRESETS["quick"]["run"], "epsilon": eps},
                          where="run")
    assert run.topology == "auto"
    quick = tuning.load_tuned()["quick"]
    for cell in tune_preset.preset_cells("quick"):
        if cell.eps not in (None, eps):
            continue
        entry, why = tuning.entry_for(quick.get(cell.defense, []), run, cell.eps,
                                      cell.defense, dict(cell.fixed))
        assert entry is not None, (cell, why)
        assert entry["command"] == tune_preset.cell_command(
            "privbench tune --preset quick --all", cell, "privbench/presets/tuned.toml")


def test_the_paper_presets_dp_cells_say_they_have_no_entry_at_their_eps():
    # the paper preset's DP defenses are not tuned: each DP cell says so, naming its ε
    run = replace_checked(RunConfig(), sweep.PRESETS["paper"]["run"], where="run")
    paper = tuning.load_tuned()["paper"]
    for defense in (d for d in sweep.DEFAULT_DEFENSES if DEFENSES.get(d).private):
        for eps in sweep.PRESETS["paper"]["eps"]:
            entry, why = tuning.entry_for(paper.get(defense, []), run, eps, defense)
            assert entry is None and why.startswith(f"no tuned entry at ε = {eps:g}"), why


def test_tune_cli_writes_every_candidate(tmp_path, capsys):
    code = main(["tune", "--defense", "sgp", "--grid", "lr=0.1,0.3", "--nodes", "4",
                 "--rounds", "5", "--batch-size", "2", "--device", "cpu", "--quiet",
                 "--set", "max_per_node=30", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "Papernot & Steinke 2022" in out and "best on validation" in out
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert [c["label"] for c in saved["candidates"]] == ["lr=0.1", "lr=0.3"]
    # the typed records name every key written (the command adds what it ran and where)
    assert set(saved) == set(tuning.TuneResult.__annotations__) | {
        "command", "preset", "run", "defense_overrides", "environment"}
    assert all(set(c) == set(tuning.CandidateRow.__annotations__) for c in saved["candidates"])
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
    from privbench.commands.common import tuned_entries_from_args

    monkeypatch.setattr(tuning, "load_tuned", lambda: {"quick": {"dp_sgp": [_entry(0.5)]}})
    parse = cli.build_parser().parse_args
    args = parse(["attack", "--lr", "0.7"])
    args.sets = ["defense.clip=2"]
    entry = tuned_entries_from_args(args, {"clip": "2"})["dp_sgp"][0]
    assert entry["run"] == {} and entry["defense"] == {}
    plain = tuned_entries_from_args(parse(["attack"]), {})["dp_sgp"][0]
    assert plain["run"] == {"lr": 0.3} and plain["defense"] == {"clip": 0.5}
    assert tuned_entries_from_args(parse(["attack", "--untuned"]), {}) == {}


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
        assert "tuned values" not in capsys.readouterr().out
        assert plain["run"]["lr"] == RunConfig().lr
        if extra == ["--untuned"]:
            assert plain["tuned"] is None
        else:  # looked up, none fits: recorded with the reason
            assert plain["tuned"]["entry"] is None
            assert plain["tuned"]["reason"].startswith(
                "no tuned entry at ε = 8 for these settings")


def _at(eps: float | None, clip: float, defense: str = "dp_sgp", **extra):
    entry = {"run": {}, "defense": {"clip": clip}, "command": "privbench tune --grid clip=1,2",
             "settings": tuning.tuned_settings(TINY, defense), **extra}
    return entry if eps is None else {**entry, "epsilon": eps}


def test_the_lookup_takes_the_cells_own_eps_and_says_when_it_has_none():
    entries = [_at(8.0, 0.5), _at(1.0, 2.0)]
    assert tuning.entry_for(entries, TINY, 1.0, "dp_sgp")[0]["defense"] == {"clip": 2.0}
    assert tuning.entry_for(entries, TINY, 8.0, "dp_sgp")[0]["defense"] == {"clip": 0.5}
    entry, why = tuning.entry_for(entries, TINY, 2.0, "dp_sgp")  # never the nearest ε's
    assert entry is None and why == "no tuned entry at ε = 2 (entries: ε = 1, ε = 8)"
    why = tuning.entry_for([], TINY, 1.0, "dp_sgp")[1]
    assert why == "no tuned entry at ε = 1 (none for dp_sgp)"
    run, over, used = tuning.apply_tuned(entries, TINY, 2.0, "dp_sgp")
    assert run == TINY and over == {} and used["entry"] is None
    assert used["reason"].endswith(": untuned defaults")
    assert used["privacy_cost"]["rule"] == "none"
    _, _, used = tuning.apply_tuned(entries, TINY, 1.0, "dp_sgp")
    assert used["entry"] == "dp_sgp at ε = 1" and used["tuned_at_epsilon"] == 1.0
    assert used["privacy_cost"]["rule"] == "not charged"
    assert used["privacy_cost"]["candidates"] == 2  # from the command's grid
    assert "Papernot & Steinke 2022" in used["privacy_cost"]["meaning"]


def test_a_non_private_or_fixed_setting_entry_holds_at_every_eps_and_fixed_values_match():
    # a non-private defense's entry, old ones recorded with an ε too, holds at every ε
    sgp = [_at(8.0, 0.0, "sgp") | {"defense": {"momentum": 0.9}}]
    assert tuning.entry_for(sgp, TINY, 1.0, "sgp")[0] is not None
    assert tuning.entry_for(sgp, TINY, None, "sgp")[0] is not None
    # DeFL-VP's paper reading and its calibrated cells each get their own entry
    calibrated = {**_at(1.0, 0.0, "defl_vp"), "defense": {"eta_sign": 0.003}}
    reading = {**_at(1.0, 0.0, "defl_vp"), "defense": {"eta_sign": 0.1},
               "fixed": {"eps_mode": "per_coordinate"}}
    pick = tuning.entry_for([reading, calibrated], TINY, 1.0, "defl_vp", {})[0]
    assert pick is calibrated
    pick = tuning.entry_for([calibrated, reading], TINY, 1.0, "defl_vp",
                            {"eps_mode": "per_coordinate"})[0]
    assert pick is reading
    entry, why = tuning.entry_for([calibrated], TINY, 1.0, "defl_vp",
                                  {"eps_mode": "per_coordinate"})
    assert entry is None and "with eps_mode=per_coordinate" in why
    # a paper setting with no ε target (PartPSP's b): its entry records none, holds at any
    paper = {**_at(None, 1.0, "partpsp"), "fixed": {"b": 5.0}}
    assert tuning.entry_for([paper], TINY, None, "partpsp", {"b": "5"})[0] is paper
    entry, why = tuning.entry_for([paper], TINY, 8.0, "partpsp", {})
    assert entry is None and why == "no tuned entry at ε = 8 (entries: every ε with b=5)"


def test_a_sweep_cell_without_an_entry_at_its_eps_runs_the_defaults_and_says_so(tmp_path, capsys):
    from privbench.commands import attack as attack_cmd

    audit = sweep.audit_config("quick", ["sgp", "dp_sgp"], [1.0, 8.0], ["mia_threshold"], None,
                               {})
    tuned = {"dp_sgp": [{**_entry(0.5), "candidates": 12, "preset": "quick"}],
             "sgp": [{**_at(None, 0.0, "sgp"), "defense": {"momentum": 0.5}}]}
    record = sweep.Sweep(TINY, {}, audit, tmp_path / "a", progress=False, tuned=tuned).run()
    cells = {c["epsilon"]: c for c in record.to_json()["cells"]}
    assert cells[None]["defense_config"]["momentum"] == 0.5  # a non-private entry: any ε
    assert cells[None]["tuned"]["privacy_cost"]["rule"] == "none"
    assert cells[8.0]["defense_config"]["clip"] == 0.5
    default = DEFENSES.get("dp_sgp").Config().clip
    assert cells[1.0]["defense_config"]["clip"] == default != 0.5  # not ε = 8's value
    assert cells[1.0]["tuned"]["entry"] is None
    assert cells[1.0]["tuned"]["reason"] == ("no tuned entry at ε = 1 (entries: ε = 8): "
                                             "untuned defaults")
    cost = cells[8.0]["tuned"]["privacy_cost"]
    assert cost["rule"] == "not charged" and cost["candidates"] == 12
    written = json.loads((tmp_path / "a" / "results.json").read_text())
    summary = written["config"]["tuned"]
    assert summary["cells"]["dp_sgp@8"]["entry"] == "quick.dp_sgp at ε = 8"
    assert summary["cells"]["dp_sgp@8"]["privacy_cost"]["candidates"] == 12
    assert summary["missing"]["dp_sgp@1"]["reason"].startswith("no tuned entry at ε = 1")
    html = (tmp_path / "a" / "index.html").read_text()
    assert "none: no tuned entry at ε = 1 (entries: ε = 8): untuned defaults" in html
    assert "not charged (12 candidates): the cell&#39;s ε covers one training run" in html
    attack_cmd._print_tuned(record)
    out = capsys.readouterr().out
    assert "  dp_sgp@1: no tuned entry at ε = 1 (entries: ε = 8): untuned defaults" in out
    assert ("  dp_sgp@8: lr=0.3 clip=0.5 (entry quick.dp_sgp at ε = 8; privacy cost not "
            "charged, 12 candidates)") in out


def test_train_takes_the_entry_of_its_own_eps_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tuning, "load_tuned", lambda: {"paper": {"dp_sgp": [_entry(0.5)]}})
    flags = ["train", "--defense", "dp_sgp", "--nodes", "4", "--rounds", "10", "--batch-size",
             "2", "--device", "cpu", "--quiet", "--record", "none", "--set", "max_per_node=40",
             "--set", "eval_every=10", "--eps", "1", "--out", str(tmp_path)]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert ("dp_sgp: no tuned entry at ε = 1 (entries: ε = 8): untuned defaults "
            "(privbench/presets/tuned.toml)") in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["defense_config"]["clip"] == DEFENSES.get("dp_sgp").Config().clip != 0.5
    assert saved["run"]["lr"] == RunConfig().lr != 0.3
    assert saved["tuned"]["entry"] is None


def test_save_entry_keys_on_eps_and_fixed_values(tmp_path):
    path = tmp_path / "tuned.toml"
    # an entry written before ε-free entries: a non-private defense's with an ε
    path.write_text("# header\n\n[[quick.sgp]]\nepsilon = 8.0\nrun = { lr = 0.1 }\n"
                    "defense = {  }\nsettings = {  }\ncommand = \"old\"\n\n")
    res = {"candidates": [{"run": {"lr": 0.5}, "defense": {}, "validation_accuracy": 0.5}],
           "best": 0, "validation": 0.2}
    text = tuning.toml_entry("quick", "sgp", TINY, res, "new", eps_free=True)
    assert "epsilon" not in text
    tuning.save_entry(path, text, "quick", "sgp")
    assert [e["command"] for e in tomllib.loads(path.read_text())["quick"]["sgp"]] == ["new"]
    res["candidates"][0].update(run={}, defense={"eta_sign": 0.1})
    for fixed in ({}, {"eps_mode": "per_coordinate"}, {}):
        text = tuning.toml_entry("quick", "defl_vp", TINY, res, f"cmd {fixed}", fixed=fixed)
        tuning.save_entry(path, text, "quick", "defl_vp")
    kept = tomllib.loads(path.read_text())["quick"]["defl_vp"]
    assert sorted(e.get("fixed", {}).get("eps_mode", "-") for e in kept) == [
        "-", "per_coordinate"]


SMALL_GRIDS = {"sgp": ("lr=0.1,0.3",), "d_psgd": ("lr=0.2",), "adp_vrsgp": ("clip=1,3",),
               "defl_vp": ("eta_sign=0.01",), "dyn_d2p": ("lr=0.2,0.5",),
               "partpsp": ("clip=1",), "dpdl": ("lr=0.05",)}


def test_the_whole_preset_tune_writes_every_cell_and_resumes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tune_preset, "TUNE_GRIDS", SMALL_GRIDS)
    run = replace_checked(RunConfig(), {**sweep.PRESETS["quick"]["run"], "nodes": 3,
                                        "rounds": 2, "batch_size": 4, "max_per_node": 60,
                                        "device": "cpu"}, where="run")
    save, out = tmp_path / "tuned.toml", tmp_path / "tune"
    command = "privbench tune --preset quick --all --save tuned.toml"
    rows = tune_preset.tune_preset(run, "quick", out, command, test=False, save=save,
                                   progress=False)
    cells = tune_preset.preset_cells("quick")
    assert [r["cell"] for r in rows] == [c.name for c in cells] and len(cells) == 15
    assert not any(r["reused"] for r in rows)
    saved = tomllib.loads(save.read_text())["quick"]
    finished = {r["cell"] for r in rows if r["best"] is not None}
    for cell in cells:
        entry, why = tuning.entry_for(saved.get(cell.defense, []), run, cell.eps, cell.defense,
                                      dict(cell.fixed))
        assert (entry is not None) == (cell.name in finished), (cell, why)
        if entry is not None:
            assert entry["command"] == tune_preset.cell_command(command, cell, None)
            assert f"--defense {cell.defense} " in entry["command"]
    assert "--eps 1 --grid lr=0.2,0.5 " in saved["dyn_d2p"][0]["command"]
    assert saved["defl_vp"][2]["fixed"] == {"eps_mode": "per_coordinate"}
    assert "epsilon" not in saved["sgp"][0]  # a non-private entry holds at every ε
    before = save.read_text()

    def fail(*_a, **_k):
        raise AssertionError("a finished cell was tuned again")

    monkeypatch.setattr(tuning, "tune", fail)
    again = tune_preset.tune_preset(run, "quick", out, command, test=False, save=save,
                                    progress=False)
    assert all(r["reused"] for r in again) and save.read_text() == before
    (out / "dpdl@eps8" / "tune.json").unlink()  # an interrupted run: that cell is missing
    monkeypatch.undo()
    monkeypatch.setattr(tune_preset, "TUNE_GRIDS", SMALL_GRIDS)
    third = tune_preset.tune_preset(run, "quick", out, command, test=False, save=save,
                                    progress=False)
    assert [r["cell"] for r in third if not r["reused"]] == ["dpdl@eps8"]
    assert tomllib.loads(save.read_text()) == tomllib.loads(before)


def test_tune_all_refuses_a_single_cells_options(capsys):
    assert main(["tune", "--all", "--defense", "sgp"]) == 2
    err = capsys.readouterr().err
    assert "--all tunes the preset's own cells" in err and "drop --defense" in err
