"""`privbench.reproduce.runs`: a grid's raw lines, resuming (lines and checkpoints), refusing
mixed settings, merging lines made elsewhere, and the rows and columns a scale or a selection
trains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.errors import ConfigError, PrivbenchError
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE, read_runs, reproduce
from privbench.reproduce.table import render
from privbench.results.provenance import code_provenance
from tests.reproduce.grids import (
    counting_runs,
    digits,
    rewrite,
    tiny,
    two_row_grid,
)


def test_grid_lines_resume_and_render(tmp_path, monkeypatch):
    repro, scale = tiny()
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    # 1 non-private + 4 private methods x 2 eps, per seed
    assert len(recs) == 2 * (1 + 4 * 2)
    lines = read_runs(tmp_path / RUNS_FILE)
    assert [(r["method"], r["eps"], r["seed"]) for r in lines] == \
        [(r["method"], r["eps"], r["seed"]) for r in recs]
    dyn = [r for r in lines if r["method"] == "Dyn-D2P" and r["eps"] == 1.0]
    assert all(r["epsilon_paper"] == pytest.approx(1.0, rel=1e-3) for r in dyn)
    # the paper's CLT calibration under-reports: the rigorous epsilon of its noise is larger
    assert all(r["epsilon_calibrated"] > r["epsilon_paper"] for r in dyn)
    assert all(r["epsilon_paper"] is None for r in lines if r["method"] == "Non-private")
    assert all(r["code"] == code_provenance() for r in lines)  # outside the fingerprint

    def boom(*_a, **_k):
        raise AssertionError("a finished run was trained again")
    monkeypatch.setattr(runs_mod, "run_job", boom)
    again = reproduce(repro, scale, (0, 1), tmp_path)
    assert [r["fingerprint"] for r in again] == [r["fingerprint"] for r in recs]
    text = render(repro, scale, again)
    assert text == render(repro, scale, read_runs(tmp_path / RUNS_FILE))
    assert "| Dyn-D2P > Const-D2P |" in text and "seeds 0, 1 (18 runs)" in text


def test_a_line_names_the_code_before_its_run_trains(tmp_path, monkeypatch):
    """A commit made while a job trains is not what its line names (`code` is read first)."""
    from privbench.engine import loop as engine

    repro, scale = tiny()
    state = {"trained": False}
    monkeypatch.setattr(runs_mod, "code_provenance", lambda: {"revision": "after" if
                        state["trained"] else "before", "sha256": "x"})
    real = engine.train

    def train_then_commit(*args, **kwargs):
        out = real(*args, **kwargs)
        state["trained"] = True
        return out

    monkeypatch.setattr(engine, "train", train_then_commit)
    job = runs_mod.jobs(repro.at(scale), (0,))[0]
    assert runs_mod.run_job(repro, scale, job)["code"]["revision"] == "before"
    assert state["trained"]


def test_another_setting_in_the_same_folder_is_refused(tmp_path):
    repro, scale = tiny()
    reproduce(repro, scale, (0,), tmp_path)
    before = (tmp_path / RUNS_FILE).read_bytes()
    repro2, scale2 = tiny(lr=0.1)
    with pytest.raises(PrivbenchError, match=r"runs.jsonl holds Non-private seed 0 made with "
                                             r"another setting \(run.lr = 0.2 there, 0.1 now\)"):
        reproduce(repro2, scale2, (0,), tmp_path)
    assert (tmp_path / RUNS_FILE).read_bytes() == before


def test_a_long_run_says_how_far_it_is_while_it_trains(tmp_path, monkeypatch, capsys):
    """Progress: what is to train and what is reused first, then each running job's round
    and time left at most every HEARTBEAT_SECONDS (0 here: every round but the last), then its
    result; --quiet (no progress) prints nothing."""
    repro, head = two_row_grid()
    reproduce(repro, head, (0,), tmp_path, rows=("Dyn-D2P",))
    monkeypatch.setattr(runs_mod, "HEARTBEAT_SECONDS", 0.0)
    lines: list[str] = []
    reproduce(repro, head, (0,), tmp_path, progress=lines.append)
    assert lines[0] == f"1 run to train, 1 already in {tmp_path / RUNS_FILE}"
    assert lines[1].startswith("[1/1] Const-D2P epsilon=3 seed 0: accuracy ")
    err = capsys.readouterr().err.splitlines()
    assert [x.split(", ")[0] for x in err] == \
        ["  Const-D2P epsilon=3 seed 0: round 1/3", "  Const-D2P epsilon=3 seed 0: round 2/3"]
    assert all(x.endswith(" left") for x in err)
    reproduce(repro, head, (1,), tmp_path)  # no progress callback: silent
    assert capsys.readouterr().err == ""


def test_an_interrupted_reproduction_keeps_its_finished_runs(tmp_path, monkeypatch):
    repro, scale = tiny()
    real, calls = runs_mod.run_job, []

    def stop_at_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(runs_mod, "run_job", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        reproduce(repro, scale, (0,), tmp_path)
    assert len(read_runs(tmp_path / RUNS_FILE)) == 2


def _killed_after_round(monkeypatch, at: int) -> None:
    """Every job's checkpoint saved after each round, and a kill after round `at`'s."""
    from privbench.engine import checkpoint

    class KilledAfter(checkpoint.Saver):
        def __call__(self, done, result):
            super().__call__(done, result)
            if done == at:
                raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint, "Saver", KilledAfter)


def test_a_stopped_job_continues_from_its_checkpoint_to_the_same_line(tmp_path, monkeypatch,
                                                                    capsys):
    repro, scale = tiny(rounds=4)
    one = {"rows": ("Const-D2P",), "columns": (1.0,)}
    whole = reproduce(repro, scale, (0,), tmp_path / "whole", **one)[0]
    assert whole["resumed_at"] == [] and not (tmp_path / "whole" / "checkpoints").exists()
    with monkeypatch.context() as m:
        _killed_after_round(m, 2)
        with pytest.raises(KeyboardInterrupt):
            reproduce(repro, scale, (0,), tmp_path, checkpoint_every=1e-9, **one)
    assert not (tmp_path / RUNS_FILE).exists()
    saved = tmp_path / "checkpoints" / f"{whole['fingerprint']}.ckpt"
    assert saved.is_file()
    capsys.readouterr()
    said: list[str] = []
    line = reproduce(repro, scale, (0,), tmp_path, progress=said.append, **one)[0]
    assert said[0] == (f"1 run to train (1 of them from a checkpoint in {tmp_path / 'checkpoints'})"
                       f", 0 already in {tmp_path / RUNS_FILE}")
    assert "  Const-D2P epsilon=1 seed 0: continues from round 2/4 (" in capsys.readouterr().err
    assert line["resumed_at"] == [2]
    for key in ("accuracy", "node_accuracy_mean", "epsilon_paper", "epsilon_calibrated",
                "fingerprint", "diverged_round"):
        assert line[key] == whole[key], key
    assert not (tmp_path / "checkpoints").exists()  # deleted with its line written


def test_checkpoints_of_runs_already_written_are_removed(tmp_path):
    """A checkpoint left beside its line (a kill between the two, a line merged meanwhile)
    is deleted when the table is run again; another job's checkpoint stays."""
    repro, scale = tiny(rounds=2)
    one = {"rows": ("Const-D2P",), "columns": (1.0,)}
    line = reproduce(repro, scale, (0,), tmp_path, **one)[0]
    saved = tmp_path / "checkpoints"
    saved.mkdir()
    left = saved / f"{line['fingerprint']}.ckpt"
    other = saved / f"{'0' * 64}.ckpt"
    left.write_bytes(b"state")
    other.write_bytes(b"state")
    said: list[str] = []
    again = reproduce(repro, scale, (0,), tmp_path, progress=said.append, **one)[0]
    assert again == line
    assert said == [f"removed 1 checkpoint of runs already in {tmp_path / RUNS_FILE}",
                    f"0 runs to train, 1 already in {tmp_path / RUNS_FILE}"]
    assert not left.exists() and other.exists()
    other.unlink()
    left.write_bytes(b"state")
    reproduce(repro, scale, (0,), tmp_path, **one)  # quietly, and the empty folder goes
    assert not saved.exists()


def test_a_checkpoint_of_other_code_is_not_resumed(tmp_path, monkeypatch, capsys):
    repro, scale = tiny(rounds=4)
    one = {"rows": ("Const-D2P",), "columns": (1.0,)}
    with monkeypatch.context() as m:
        _killed_after_round(m, 2)
        with pytest.raises(KeyboardInterrupt):
            reproduce(repro, scale, (0,), tmp_path, checkpoint_every=1e-9, **one)
    from privbench.engine import checkpoint

    other = {"revision": "git other", "sha256": "other"}
    for module in (runs_mod, checkpoint):  # the line's code and the checkpoint key's
        monkeypatch.setattr(module, "code_provenance", lambda: other)
    line = reproduce(repro, scale, (0,), tmp_path, progress=lambda _x: None, **one)[0]
    assert line["resumed_at"] == []
    err = capsys.readouterr().err
    assert "Const-D2P epsilon=1 seed 0: starts over: the checkpoint " in err
    assert "is not this run's: made with another code (" in err and ", other now)" in err


def test_runs_from_another_folder_or_machine_merge_once_and_render(tmp_path):
    repro, head = two_row_grid()
    here, there = tmp_path / "here", tmp_path / "there"
    mine = reproduce(repro, head, (0,), here)
    theirs = reproduce(repro, head, (1, 2), there)
    # a GPU's torch build and thread count differ: the table says so, the merge allows it
    rewrite(there / RUNS_FILE, lambda r: {**r, "device": "cuda:0", "fields": {
        **r["fields"], "versions.torch": "2.11.0+cu130", "threads": 16}})
    assert runs_mod.merge(repro, head, [there / RUNS_FILE], here) == (4, 0)
    lines = read_runs(here / RUNS_FILE)
    assert [(r["method"], r["seed"]) for r in lines] == \
        [(r["method"], r["seed"]) for r in mine + theirs]
    assert "seeds 0, 1, 2 (6 runs)" in render(repro, head, lines)
    before = (here / RUNS_FILE).read_bytes()
    # merging the same lines again (or the folder's own file) adds nothing
    assert runs_mod.merge(repro, head, [there / RUNS_FILE, here / RUNS_FILE], here) == (0, 10)
    assert (here / RUNS_FILE).read_bytes() == before
    # a resumed reproduction reuses the merged seeds instead of training them again
    assert reproduce(repro, head, (0, 1, 2), here) == lines


@pytest.mark.parametrize("change, message", [
    (lambda r: {**r, "accuracy": r["accuracy"] + 0.01},
     r"Const-D2P epsilon=3 seed 0 is already there with another result \(accuracy"),
    (lambda r: {**r, "fields": {**r["fields"], "run.lr": 0.5}},
     r"Const-D2P epsilon=3 seed 0 was made with another setting \(run.lr = 0.5 there, 0.2 now\)"),
    (lambda r: {**r, "eps": 1.0},
     r"Const-D2P epsilon=1 seed 0 is not a run of dyn_d2p's 'headline' grid"),
    (lambda r: {**r, "scale": "reduced"}, r"holds a run of 'dyn_d2p' at scale 'reduced'"),
])
def test_a_merge_that_would_mix_or_replace_results_writes_nothing(tmp_path, change, message):
    repro, head = two_row_grid()
    here, there = tmp_path / "here", tmp_path / "there"
    reproduce(repro, head, (0,), here)
    reproduce(repro, head, (0,), there)
    # good lines first: nothing of a refused merge is kept
    other = tmp_path / "more" / RUNS_FILE
    reproduce(repro, head, (1,), other.parent)
    rewrite(there / RUNS_FILE, change)
    before = (here / RUNS_FILE).read_bytes()
    with pytest.raises(PrivbenchError, match=message):
        runs_mod.merge(repro, head, [other, there / RUNS_FILE], here)
    assert (here / RUNS_FILE).read_bytes() == before


def test_a_merge_names_a_twice_given_key_and_a_missing_file(tmp_path, capsys):
    repro, head = two_row_grid()
    reproduce(repro, head, (0,), tmp_path / "a")
    twice = tmp_path / "twice.jsonl"
    text = (tmp_path / "a" / RUNS_FILE).read_text()
    twice.write_text(text + text.splitlines()[0].replace('"accuracy": ', '"accuracy": 1') + "\n")
    with pytest.raises(PrivbenchError,
                       match=r"twice.jsonl: Const-D2P epsilon=3 seed 0 is already there"):
        runs_mod.merge(repro, head, [twice], tmp_path / "b")
    assert not (tmp_path / "b" / RUNS_FILE).exists()
    out = str(tmp_path / "c")
    assert main(["reproduce", "dyn_d2p", "--merge", str(tmp_path / "nope.jsonl"),
                 "--out", out]) == 2
    assert main(["reproduce", "dyn_d2p", "--merge", str(twice), "--render", "--out", out]) == 2
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)))
    (tmp_path / "short.jsonl").write_text('{"format": "privbench-reproduce-run/1"}\n')
    for bad in ("bin.jsonl", "short.jsonl", "a"):
        assert main(["reproduce", "dyn_d2p", "--merge", str(tmp_path / bad), "--out", out]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("nope.jsonl: no such runs file") and len(err) == 5
    assert "--merge takes no --render: it trains nothing" in err[1]
    assert err[2].endswith("bin.jsonl (not UTF-8 text); a reproduction's runs file is expected")
    assert "short.jsonl line 1 lacks reproduction, scale, method" in err[3]
    assert err[4].endswith("a: a folder; give its runs.jsonl")
    assert not Path(out, RUNS_FILE).exists()


def test_a_new_row_joins_lines_made_on_another_machine_without_retraining_them(
        tmp_path, monkeypatch, capsys):
    repro, head = two_row_grid()
    first = dataclasses.replace(head, rows=("Dyn-D2P",))
    reproduce(dataclasses.replace(repro, scales=(first,)), first, (0, 1), tmp_path)
    # those lines came from a GPU: they cannot be resumed here
    for _ in range(2):  # each line: rewrite changes the first, then it goes last
        rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "fingerprint": "0" * 64, "fields": {
            **r["fields"], "versions.torch": "2.11.0+cu130"}})
        lines = (tmp_path / RUNS_FILE).read_text().splitlines()
        (tmp_path / RUNS_FILE).write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    before = (tmp_path / RUNS_FILE).read_text()
    with pytest.raises(PrivbenchError, match=r"versions.torch = '2.11.0\+cu130' there"):
        reproduce(repro, head, (0, 1), tmp_path)
    trained = counting_runs(monkeypatch)
    recs = reproduce(repro, head, (0, 1), tmp_path, rows=("Const-D2P",))
    assert trained == [("Const-D2P", 3.0, 0), ("Const-D2P", 3.0, 1)]
    assert [(r["method"], r["seed"]) for r in recs] == \
        [("Const-D2P", 0), ("Dyn-D2P", 0), ("Const-D2P", 1), ("Dyn-D2P", 1)]
    assert (tmp_path / RUNS_FILE).read_text().startswith(before)  # the GPU's lines untouched
    assert "| Dyn-D2P > Const-D2P |" in render(repro, head, recs)
    # the trained row's own lines are still checked: nothing of it is trained twice
    assert reproduce(repro, head, (0, 1), tmp_path, rows=("Const-D2P",)) == recs
    assert len(trained) == 2
    for bad in ("Non-private", "DP-SGD"):  # a row of the table but not of the scale; none
        with pytest.raises(PrivbenchError, match=rf"--rows '{bad}': not a row of dyn_d2p at "
                                                 r"scale 'headline'; accepted: 'Const-D2P', "
                                                 r"'Dyn-D2P'"):
            reproduce(repro, head, (0,), tmp_path, rows=(bad,))
    assert main(["reproduce", "dyn_d2p", "--render", "--rows", "Dyn-D2P", "--out",
                 str(tmp_path)]) == 2
    assert "--render takes no --rows: it trains nothing" in capsys.readouterr().err
    assert main(["reproduce", "dyn_d2p", "--render", "--seeds", "1", "--jobs", "2", "--eps",
                 "1", "--out", str(tmp_path)]) == 2  # once ignored, now named
    assert "--render takes no --seeds, --eps or --jobs: " in capsys.readouterr().err


def test_eps_trains_those_columns_only_and_leaves_the_others_lines_unchecked(
        tmp_path, monkeypatch, capsys):
    repro, scale = tiny()
    trained = counting_runs(monkeypatch)
    two = ("Const-D2P", "Dyn-D2P")
    recs = reproduce(repro, scale, (0,), tmp_path, rows=two, columns=(3.0,))
    assert trained == [("Const-D2P", 3.0, 0), ("Dyn-D2P", 3.0, 0)]  # no non-private run
    assert [(r["method"], r["eps"]) for r in recs] == [("Const-D2P", 3.0), ("Dyn-D2P", 3.0)]
    # those lines came from a GPU: the next column is trained here beside them, unchecked
    rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "fingerprint": "0" * 64, "fields": {
        **r["fields"], "versions.torch": "2.11.0+cu130"}})
    recs = reproduce(repro, scale, (0,), tmp_path, rows=two, columns=(1.0,))
    assert trained[2:] == [("Const-D2P", 1.0, 0), ("Dyn-D2P", 1.0, 0)]
    assert len(read_runs(tmp_path / RUNS_FILE)) == 4
    with pytest.raises(PrivbenchError, match=r"--eps 2, 8: not a grid value of dyn_d2p at "
                                             r"scale 'reduced'; accepted: 1, 3$"):
        reproduce(repro, scale, (0,), tmp_path, columns=(2.0, 1.0, 8.0))
    assert main(["reproduce", "dyn_d2p", "--eps", "1,x", "--out", str(tmp_path)]) == 2
    assert "--eps must be numbers (e.g. --eps 1,8), got 'x'" in capsys.readouterr().err


def test_a_headline_scale_runs_and_renders_only_its_rows_and_columns(tmp_path):
    repro, scale = tiny()
    head = dataclasses.replace(scale, name="headline", rows=("Dyn-D2P", "Const-D2P"),
                               grid=(3.0,), method_run=(("Dyn-D2P", (("lr", 0.1),)),))
    repro = dataclasses.replace(repro, scales=(scale, head))
    recs = reproduce(repro, head, (0, 1), tmp_path)
    assert {(r["method"], r["eps"]) for r in recs} == {("Dyn-D2P", 3.0), ("Const-D2P", 3.0)}
    lr = {r["method"]: r["config"]["run"]["lr"] for r in recs}
    assert lr == {"Dyn-D2P": 0.1, "Const-D2P": 0.2}  # the scale's step replaces the row's
    text = render(repro, head, recs)
    assert "| method | ε=3 |" in text and "ε=1" not in text
    assert "Non-private" not in text and "Dyn[C]-D2P" not in text
    assert "| Dyn-D2P > Const-D2P |" in text and "Dyn[C]-D2P > Dyn[mu]-D2P" not in text
    assert repro.at(scale) is repro  # a scale that narrows nothing is the whole table
    with pytest.raises(ConfigError, match=r"scale 'headline' names rows or grid values not in "
                                          r"the table: DP-SGD, 5\.0"):
        dataclasses.replace(repro, scales=(dataclasses.replace(head, rows=("DP-SGD",),
                                                               grid=(5.0,)),))


def test_a_step_per_grid_value_replaces_the_rows_own_at_that_value_only(tmp_path):
    repro, scale = tiny()
    head = dataclasses.replace(scale, name="headline", rows=("Dyn-D2P", "Const-D2P"),
                               grid=(3.0,), method_run=(("Dyn-D2P", (("lr", 0.1),)),))
    repro = dataclasses.replace(repro, scales=(scale, head))
    first = reproduce(repro, head, (0,), tmp_path)
    # the grid widened to epsilon 1 with a step tuned there: the epsilon-3 lines are reused
    wide = dataclasses.replace(head, grid=(1.0, 3.0), grid_run=(
        ("Dyn-D2P", 1.0, (("lr", 0.05),)), ("Const-D2P", 1.0, (("lr", 0.3),))))
    repro = dataclasses.replace(repro, scales=(scale, wide))
    recs = reproduce(repro, wide, (0,), tmp_path)
    lr = {(r["method"], r["eps"]): r["config"]["run"]["lr"] for r in recs}
    assert lr == {("Dyn-D2P", 3.0): 0.1, ("Const-D2P", 3.0): 0.2,
                  ("Dyn-D2P", 1.0): 0.05, ("Const-D2P", 1.0): 0.3}
    assert [r for r in recs if r["eps"] == 3.0] == first  # the same lines, not re-run
    assert len(read_runs(tmp_path / RUNS_FILE)) == 4
    with pytest.raises(ConfigError, match=r"not in the table: DP-SGD, 5\.0"):
        dataclasses.replace(repro, scales=(dataclasses.replace(
            wide, grid_run=(("DP-SGD", 1.0, (("lr", 1.0),)), ("Dyn-D2P", 5.0, ()))),))


def test_a_row_reported_at_one_budget_runs_only_there(tmp_path):
    repro, scale = digits("defl_vp", (1.0, 4.0), model="mlp", topology="random_out",
                           partition="dirichlet", alpha=0.3, batch_size=64)
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    # per seed: 4 non-private rows; at the default and at the tuned sign step, DeFL-VP at both
    # eps and the ablations at eps 4 only (2 + 2 default, 2 + 3 tuned, w/o Comp tuned only)
    assert len(recs) == 2 * (4 + 2 + 2 + 2 + 3)
    tuned = [r for r in recs if r["method"].endswith("η_sign 0.003")]
    assert tuned and all(r["config"]["defense"]["eta_sign"] == 0.003 for r in tuned)
    assert {r["eps"] for r in recs if r["method"] == "D-PSGD+RR"} == {4.0}
    text = render(repro, scale, recs)
    row = next(ln for ln in text.splitlines() if ln.startswith("| D-PSGD+RR |"))
    assert row.split(" | ")[1] == "not run" and "not run" not in row.split(" | ")[2]
    claim = next(ln for ln in text.splitlines() if ln.startswith("| DeFL-VP > D-PSGD+RR |"))
    assert claim.count("not run") == 1  # the verdict is over eps 4 alone
    # the paper's per-coordinate epsilon labels the cell; the run composes to d T eps
    rr = [r for r in recs if r["method"] == "DeFL-VP" and r["eps"] == 1.0]
    assert all(r["epsilon_paper"] == pytest.approx(1.0) for r in rr)
    assert all(r["epsilon_calibrated"] > 1e4 for r in rr)


def test_a_grid_of_a_defense_knob_sets_that_field_not_epsilon(tmp_path):
    repro, scale = digits("dpps", (1.0, 3.0), model="psp_mlp", topology="exponential",
                           partition="iid", batch_size=16, lr=0.1)
    recs = reproduce(repro, scale, (0,), tmp_path)
    assert len(recs) == 4 + 4 * 2  # NoDP rows once, private rows at each b
    b3 = [r for r in recs if r["eps"] == 3.0]
    assert b3 and all(r["config"]["defense"]["b"] == 3.0 for r in b3)
    assert all(r["config"]["run"]["epsilon"] == recs[0]["config"]["run"]["epsilon"]
               for r in recs)  # the run's epsilon is untouched by the b grid
    text = render(repro, scale, recs)
    assert "| method | b=1 | b=3 |" in text
    # PartPSP's nodes keep private layers: the table shows the mean node's accuracy, not the
    # average model's
    assert "Mean over nodes of each node's own model's test accuracy (%)" in text
    nodp = next(r for r in recs if r["method"] == "PartPSP-1 NoDP")
    assert nodp["node_accuracy_mean"] != nodp["accuracy"]
    row = next(ln for ln in text.splitlines() if ln.startswith("| PartPSP-1 NoDP |"))
    assert row.split(" | ")[1].startswith(f"{100 * nodp['node_accuracy_mean']:.1f} (1 run)")


def test_a_line_of_another_split_than_the_code_builds_now_is_refused(tmp_path, monkeypatch):
    """The fingerprint hashes the configuration, not what the code makes of it (PartPSP-1 on a
    ResNet once shared the stem convolution alone, `shared_layers = 1` unchanged): a line
    records the structure the code built, and a line of other code's structure is refused on
    resume and on merge; a line from before structures were recorded is checked as before."""
    from privbench.models import FlatModel

    repro, scale = digits("dpps", (1.0,), model="psp_mlp", topology="exponential",
                           partition="iid", batch_size=16, lr=0.1)
    now = reproduce(repro, scale, (0,), tmp_path / "now", rows=("PartPSP-1",))
    # psp_mlp on digits: Linear(64->10), Linear(10->64), Linear(64->10); PartPSP-1 sends the first
    assert now[0]["structure"] == {"parameters": 2004, "layers": [650, 704, 650], "shared": 650}
    layers = FlatModel.layers.fget
    with monkeypatch.context() as m:  # "older code": the first two Linears counted as one layer
        m.setattr(FlatModel, "layers", property(lambda fm: [layers(fm)[0] + layers(fm)[1],
                                                            *layers(fm)[2:]]))
        old = reproduce(repro, scale, (0,), tmp_path / "old", rows=("PartPSP-1",))
    assert old[0]["structure"]["shared"] == 1354
    assert old[0]["fingerprint"] == now[0]["fingerprint"]  # the same configuration
    refused = r"PartPSP-1 b=1 seed 0 was trained on another model or split than this code " \
              r"builds from its setting \(layers = \[1354, 650\] there, \[650, 704, 650\] now\)"
    with pytest.raises(PrivbenchError, match=refused):
        reproduce(repro, scale, (0,), tmp_path / "old", rows=("PartPSP-1",))
    with pytest.raises(PrivbenchError, match=refused):
        runs_mod.merge(repro, scale, [tmp_path / "old" / RUNS_FILE], tmp_path / "merged")
    assert not (tmp_path / "merged" / RUNS_FILE).exists() or \
        not (tmp_path / "merged" / RUNS_FILE).read_text()
    rewrite(tmp_path / "old" / RUNS_FILE, lambda r: {k: v for k, v in r.items()
                                                       if k != "structure"})
    assert reproduce(repro, scale, (0,), tmp_path / "old", rows=("PartPSP-1",))[0]["seed"] == 0


def test_a_reproduction_run_records_no_messages(tmp_path, monkeypatch):
    """A table needs accuracy and epsilon only; a 1,000-round DPDL run that logged its
    cross-gradients held over 20 GB and was killed for memory."""
    repro, scale = tiny()
    import privbench.engine.runner as runner

    seen = []
    real = runner.build

    def spy(*a, **k):
        built = real(*a, **k)
        seen.append(built.ctx.bus)
        return built
    monkeypatch.setattr(runner, "build", spy)
    reproduce(repro, scale, (0,), tmp_path)
    assert seen and all(len(bus.log.records) == 0 for bus in seen)
