"""`privbench reproduce`: the grid's raw lines, resuming, refusing mixed settings, the verdicts,
and the committed tables re-rendered byte for byte from their committed runs."""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.data import files as datafiles
from privbench.errors import ConfigError, PrivbenchError
from privbench.reproduce import REPRODUCTIONS, Scale, load
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE, read_runs, reproduce
from privbench.reproduce.table import UNTESTED, claim_verdict, render, summary_row, verdict_at
from privbench.results.provenance import code_provenance

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "reproduce"
# Lines of a committed table trained again by one code version on one kind of machine, kept
# apart from the tables the write-ups and the summary quote until they are whole.
REMAKES = REPORTS.parent / "remake"


def committed_runs_files() -> list[Path]:
    """Every committed runs.jsonl: the tables under reports/reproduce, then those under remake/."""
    return sorted(REPORTS.rglob(RUNS_FILE)) + sorted(REMAKES.rglob(RUNS_FILE))


def _tiny(lr: float = 0.2, rounds: int = 3):
    """Dyn-D2P's table on 4 digits nodes, 3 rounds, two epsilons (seconds on a CPU)."""
    load()
    r = REPRODUCTIONS.get("dyn_d2p")
    scale = Scale("reduced", (("dataset", "digits"), ("model", "mlp"), ("nodes", 4),
                              ("topology", "exponential"), ("rounds", rounds),
                              ("batch_size", 16), ("lr", lr), ("delta", 1e-4), ("holdout", 0.0),
                              ("eval_every", rounds)),
                  (0, 1), "a test's tiny setting")
    r = dataclasses.replace(r, scales=(scale,), eps=(1.0, 3.0),
                            paper=tuple((label, row[2:]) for label, row in r.paper))
    return r, scale


def test_grid_lines_resume_and_render(tmp_path, monkeypatch):
    repro, scale = _tiny()
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

    repro, scale = _tiny()
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
    repro, scale = _tiny()
    reproduce(repro, scale, (0,), tmp_path)
    before = (tmp_path / RUNS_FILE).read_bytes()
    repro2, scale2 = _tiny(lr=0.1)
    with pytest.raises(PrivbenchError, match=r"runs.jsonl holds Non-private seed 0 made with "
                                             r"another setting \(run.lr = 0.2 there, 0.1 now\)"):
        reproduce(repro2, scale2, (0,), tmp_path)
    assert (tmp_path / RUNS_FILE).read_bytes() == before


def test_a_long_run_says_how_far_it_is_while_it_trains(tmp_path, monkeypatch, capsys):
    """Progress: what is to train and what is reused first, then each running job's round
    and time left at most every HEARTBEAT_SECONDS (0 here: every round but the last), then its
    result; --quiet (no progress) prints nothing."""
    repro, head = _two_row_grid()
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
    repro, scale = _tiny()
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
    repro, scale = _tiny(rounds=4)
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
    repro, scale = _tiny(rounds=2)
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
    repro, scale = _tiny(rounds=4)
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


@pytest.mark.parametrize("value", ["x", "-1", "nan", "inf"])
def test_a_bad_checkpoint_interval_is_a_one_line_error(tmp_path, capsys, value):
    assert main(["reproduce", "dyn_d2p", f"--checkpoint-every={value}", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"privbench: error: --checkpoint-every {value!r}: accepted: minutes between "
                   "a running job's checkpoints, a number >= 0 (0: none)"]
    assert not any(tmp_path.iterdir())
    assert main(["reproduce", "dyn_d2p", "--render", "--checkpoint-every", "5", "--out",
                 str(tmp_path)]) == 2
    assert "--render takes no --checkpoint-every: it trains nothing" in capsys.readouterr().err


def test_verify_re_makes_committed_lines_and_names_what_moved(tmp_path):
    """--verify: the same code gives the same lines (exit 0); a line whose number is not what
    the code gives now is named with both values and the table lines it changes; a line of
    another machine is left out with why; nothing is written into the folder."""
    import json

    import torch

    from privbench.device import machine_kind
    from privbench.reproduce.verify import summary, verify

    repro, scale = _tiny()
    one = {"rows": ("Const-D2P", "Dyn-D2P"), "columns": (1.0,)}
    reproduce(repro, scale, (0,), tmp_path, **one)
    (tmp_path / "table.md").write_text(render(repro, scale, read_runs(tmp_path / RUNS_FILE)))
    assert {r["machine"] for r in read_runs(tmp_path / RUNS_FILE)} == {
        machine_kind(torch.device("cpu"))}  # each line names the kind of machine it ran on
    found = verify(repro, scale, tmp_path)
    assert [v.name for v in found.verdicts] == ["Const-D2P epsilon=1 seed 0",
                                                "Dyn-D2P epsilon=1 seed 0"]
    assert not found.stale and not found.table_diff and not found.skipped
    assert summary(found, tmp_path) == (f"verified 2 of the lines in {tmp_path / RUNS_FILE}: "
                                        "2 the same, 0 differ")
    # a committed number the code no longer gives, and a line of another thread count
    _rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "accuracy": r["accuracy"] + 0.125})
    lines = (tmp_path / RUNS_FILE).read_text().splitlines()
    other = json.loads(lines[1])
    other["fields"]["threads"], other["fingerprint"] = 64, "f" * 64  # made with 64 threads
    (tmp_path / RUNS_FILE).write_text(lines[0] + "\n" + json.dumps(other) + "\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    found = verify(repro, scale, tmp_path)
    (moved,) = found.verdicts
    assert moved.differences[0].startswith("accuracy ") and "(-12.50 points)" in \
        moved.differences[0]
    assert found.skipped == ["Dyn-D2P epsilon=1 seed 0 (threads = 64 there, "
                             f"{torch.get_num_threads()} now)"]
    assert found.stale and any(x.startswith("-| Const-D2P |") for x in found.table_diff)
    text = summary(found, tmp_path)
    assert "1 differ (accuracy in 1, by at most 12.50 points); 1 chosen made elsewhere" in text
    assert f"{tmp_path / 'table.md'} changes:" in text
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    with pytest.raises(PrivbenchError, match=r"no line of .* chosen can be retrained here: "
                                             r"Dyn-D2P epsilon=1 seed 0 \(threads = 64"):
        verify(repro, scale, tmp_path, rows=("Dyn-D2P",))


def test_a_verify_summary_names_the_fields_that_moved(tmp_path):
    from privbench.reproduce.verify import Verdict, Verification, summary

    then = {"accuracy": 0.5, "epsilon_calibrated": 1.25, "diverged_round": None,
            "machine": "cpu (AMD EPYC, AVX512)"}
    eps_only = Verdict("A seed 0", then, {**then, "epsilon_calibrated": 1.2500000001})
    same = Verdict("B seed 0", then, dict(then))
    assert eps_only.differences == ["epsilon_calibrated 1.25 then, 1.2500000001 now"]
    assert eps_only.line().startswith("A seed 0: differs: epsilon_calibrated 1.25 then, "
                                      "1.2500000001 now (made by code not recorded")
    assert eps_only.line().endswith("on cpu (AMD EPYC, AVX512); now code not recorded (the line "
                                    "names none) on cpu (AMD EPYC, AVX512))")
    assert same.line() == "B seed 0: the same (accuracy 0.5000)"
    rebuilt = Verdict("C seed 0", {**then, "structure": {"layers": [4848, 14528]}},
                      {**then, "structure": {"layers": [144, 19232]}})
    assert rebuilt.differences == ["structure {'layers': [4848, 14528]} then, "
                                   "{'layers': [144, 19232]} now"]
    assert summary(Verification([eps_only, same], [], []), tmp_path).splitlines() == [
        f"verified 2 of the lines in {tmp_path / RUNS_FILE}: 1 the same, 1 differ "
        "(epsilon_calibrated in 1)",
        f"with the retrained lines in place of the committed ones, {tmp_path / 'table.md'} "
        "reads the same"]
    # a difference on another kind of machine, or one a line does not name, may be the
    # machine's own (its kernels), and the summary says how many are
    avx2 = Verdict("D seed 0", {**then, "machine": "cpu (AMD EPYC, AVX2)"},
                   {**then, "accuracy": 0.4998})
    unnamed = Verdict("E seed 0", {k: v for k, v in then.items() if k != "machine"},
                      {**then, "accuracy": 0.5001})
    assert eps_only.same_machine and not avx2.same_machine and not unnamed.same_machine
    assert "made by code not recorded (the line names none) on cpu (AMD EPYC, AVX2);" \
        in avx2.line()
    assert "on a machine not recorded (the line names none);" in unnamed.line()
    assert summary(Verification([eps_only, avx2, unnamed], [], []), tmp_path).splitlines()[0] \
        .endswith("0 the same, 3 differ (accuracy in 2, by at most 0.02 points; "
                  "epsilon_calibrated in 1); 2 of the 3 made on another kind of machine or one "
                  "not recorded, where other kernels alone can move a number")


def test_verify_of_nothing_or_with_a_training_option_is_a_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "dyn_d2p", "--verify", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"privbench: error: {tmp_path / RUNS_FILE} holds no runs to verify"]
    assert main(["reproduce", "dyn_d2p", "--verify", "--checkpoint-every", "3", "--out",
                 str(tmp_path)]) == 2
    assert "--verify takes no --checkpoint-every: it retrains the folder's lines and writes " \
        "nothing" in capsys.readouterr().err
    assert main(["reproduce", "dyn_d2p", "--render", "--verify", "--out", str(tmp_path)]) == 2
    assert "--render takes no --verify" in capsys.readouterr().err


def test_a_foreign_line_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / RUNS_FILE).write_text('{"format": "something else"}\n')
    assert main(["reproduce", "dyn_d2p", "--render", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "line 1 is not a privbench reproduction run" in err and err.count("\n") == 1


def _two_row_grid():
    """_tiny narrowed to two rows at one epsilon (two runs per seed)."""
    repro, scale = _tiny()
    head = dataclasses.replace(scale, name="headline", rows=("Dyn-D2P", "Const-D2P"),
                               grid=(3.0,))
    return dataclasses.replace(repro, scales=(scale, head)), head


def _rewrite(path: Path, change) -> None:
    """Rewrite a runs file with `change(line) -> line` applied to its first line."""
    import json

    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0] = change(lines[0])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_runs_from_another_folder_or_machine_merge_once_and_render(tmp_path):
    repro, head = _two_row_grid()
    here, there = tmp_path / "here", tmp_path / "there"
    mine = reproduce(repro, head, (0,), here)
    theirs = reproduce(repro, head, (1, 2), there)
    # a GPU's torch build and thread count differ: the table says so, the merge allows it
    _rewrite(there / RUNS_FILE, lambda r: {**r, "device": "cuda:0", "fields": {
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
    repro, head = _two_row_grid()
    here, there = tmp_path / "here", tmp_path / "there"
    reproduce(repro, head, (0,), here)
    reproduce(repro, head, (0,), there)
    # good lines first: nothing of a refused merge is kept
    other = tmp_path / "more" / RUNS_FILE
    reproduce(repro, head, (1,), other.parent)
    _rewrite(there / RUNS_FILE, change)
    before = (here / RUNS_FILE).read_bytes()
    with pytest.raises(PrivbenchError, match=message):
        runs_mod.merge(repro, head, [other, there / RUNS_FILE], here)
    assert (here / RUNS_FILE).read_bytes() == before


def test_a_merge_names_a_twice_given_key_and_a_missing_file(tmp_path, capsys):
    repro, head = _two_row_grid()
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


def _counting_runs(monkeypatch) -> list[tuple]:
    """The keys of the jobs trained from now on, in order (each still trained for real)."""
    trained, real = [], runs_mod.run_job

    def count(r, s, job, *rest):
        trained.append(job.key)
        return real(r, s, job, *rest)
    monkeypatch.setattr(runs_mod, "run_job", count)
    return trained


def test_a_new_row_joins_lines_made_on_another_machine_without_retraining_them(
        tmp_path, monkeypatch, capsys):
    repro, head = _two_row_grid()
    first = dataclasses.replace(head, rows=("Dyn-D2P",))
    reproduce(dataclasses.replace(repro, scales=(first,)), first, (0, 1), tmp_path)
    # those lines came from a GPU: they cannot be resumed here
    for _ in range(2):  # each line: _rewrite changes the first, then it goes last
        _rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "fingerprint": "0" * 64, "fields": {
            **r["fields"], "versions.torch": "2.11.0+cu130"}})
        lines = (tmp_path / RUNS_FILE).read_text().splitlines()
        (tmp_path / RUNS_FILE).write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    before = (tmp_path / RUNS_FILE).read_text()
    with pytest.raises(PrivbenchError, match=r"versions.torch = '2.11.0\+cu130' there"):
        reproduce(repro, head, (0, 1), tmp_path)
    trained = _counting_runs(monkeypatch)
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
    repro, scale = _tiny()
    trained = _counting_runs(monkeypatch)
    two = ("Const-D2P", "Dyn-D2P")
    recs = reproduce(repro, scale, (0,), tmp_path, rows=two, columns=(3.0,))
    assert trained == [("Const-D2P", 3.0, 0), ("Dyn-D2P", 3.0, 0)]  # no non-private run
    assert [(r["method"], r["eps"]) for r in recs] == [("Const-D2P", 3.0), ("Dyn-D2P", 3.0)]
    # those lines came from a GPU: the next column is trained here beside them, unchecked
    _rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "fingerprint": "0" * 64, "fields": {
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
    repro, scale = _tiny()
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
    repro, scale = _tiny()
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


def test_verdicts():
    assert verdict_at([2.0, 3.0, 2.5]) == "holds"
    assert verdict_at([-2.0, -3.0, -2.5]) == "fails"
    assert verdict_at([5.0, -4.0, 1.0]) == "unresolved"
    assert verdict_at([9.0]) == "unresolved"
    # two pairs are never called, however far apart (the sd has one degree of freedom); a third
    # of the same size is
    assert verdict_at([3.0, 3.1]) == "unresolved"
    assert verdict_at([-3.0, -3.1]) == "unresolved"
    assert verdict_at([3.0, 3.1, 3.2]) == "holds"
    assert claim_verdict(["holds", "holds"]) == "reproduced"
    assert claim_verdict(["holds", "fails"]) == "partly"
    assert claim_verdict(["unresolved", "fails"]) == "refuted"
    assert claim_verdict(["unresolved", "unresolved"]) == "not resolved"
    # cells without runs are no evidence: the verdict is over the tested cells and says so
    assert claim_verdict(["holds", UNTESTED, "holds", UNTESTED]) == "reproduced (2 of 4 ε run)"
    assert claim_verdict(["holds", UNTESTED, "fails"]) == "partly (2 of 3 ε run)"
    assert claim_verdict(["fails", UNTESTED]) == "refuted (1 of 2 ε run)"
    assert claim_verdict([UNTESTED, UNTESTED]) == UNTESTED


def test_committed_tables_re_render_byte_for_byte(tmp_path, capsys):
    load()
    folders = [p.parent for p in committed_runs_files()]
    assert folders, f"no committed reproduction under {REPORTS}"
    for k, folder in enumerate(folders):
        out = tmp_path / str(k)
        out.mkdir()
        (out / RUNS_FILE).write_bytes((folder / RUNS_FILE).read_bytes())
        name = read_runs(folder / RUNS_FILE)[0]["reproduction"]
        assert main(["reproduce", name, "--render", "--out", str(out)]) == 0
        assert (out / "table.md").read_bytes() == (folder / "table.md").read_bytes(), folder
    capsys.readouterr()


@pytest.mark.skipif(datafiles.locate_idx("fashion-mnist", None) is None,
                    reason="Fashion-MNIST not found (apt-get install dataset-fashion-mnist)")
def test_every_committed_run_is_of_its_grid_as_the_code_declares_it_now(tmp_path):
    """A committed table is not stale: each of its lines passes `--merge`'s check, so it was
    made with the setting its reproduction's scale gives that run today (a step size or a
    defense value changed in the code without re-running fails here, naming the field)."""
    load()
    for k, path in enumerate(committed_runs_files()):
        lines = read_runs(path)
        repro = REPRODUCTIONS.get(lines[0]["reproduction"])
        scale = repro.scale(lines[0]["scale"])
        assert runs_mod.merge(repro, scale, [path], tmp_path / str(k)) == (len(lines), 0), path


def test_a_remake_holds_lines_of_a_committed_table_made_by_a_named_code_and_machine():
    """Lines trained again apart (reports/remake/PAPER[/SCALE]) are the same runs as their
    committed table's, key for key (the same fingerprint: configuration, data, seed), each line
    naming the code and the kind of machine that made it, all lines one code version and one kind
    of machine (what training them apart is for: two kinds of AVX-512 CPU give a sign run other
    bits), so that they can be compared and later replace the committed lines."""
    load()
    paths = sorted(REMAKES.rglob(RUNS_FILE))
    if not paths:
        pytest.skip(f"no lines trained again apart under {REMAKES}")
    for path in paths:
        lines = read_runs(path)
        repro = REPRODUCTIONS.get(lines[0]["reproduction"])
        scale = repro.scale(lines[0]["scale"])
        own = "" if scale == repro.scales[0] else scale.name
        assert path.parent == REMAKES / repro.name / own, path  # own "": the paper's folder
        committed = {(r["method"], r["eps"], r["seed"]): r["fingerprint"]
                     for r in read_runs(REPORTS / repro.name / own / RUNS_FILE)}
        for line in lines:
            key = (line["method"], line["eps"], line["seed"])
            assert committed.get(key) == line["fingerprint"], (path, key)
            assert line.get("code") and line.get("machine"), (path, key)
        made_by = {(r["code"]["revision"], r["machine"]) for r in lines}
        assert len(made_by) == 1, f"{path}: lines of several codes or machines: {made_by}"


def test_each_paper_write_up_quotes_its_committed_tables():
    """Each committed table.md appears whole (title, setting line, every table) in its paper's
    write-up, reports/reproduce/<paper>/README.md, so a write-up whose rows were updated but whose
    setting line (seeds, runs) was not fails."""
    folders = sorted(p.parent for p in REPORTS.rglob(RUNS_FILE))
    assert folders
    for folder in folders:
        paper = REPORTS / folder.relative_to(REPORTS).parts[0]
        write_up = (paper / "README.md").read_text(encoding="utf-8")
        table = (folder / "table.md").read_text(encoding="utf-8").rstrip("\n")
        stale = [ln for ln in table.splitlines() if ln and ln not in write_up]
        assert not stale, f"{paper}/README.md lacks {folder}'s table.md lines: {stale[:2]}"
        assert table in write_up, f"{paper}/README.md's copy of {folder}/table.md is not verbatim"


def test_the_summary_re_renders_from_the_committed_runs_and_the_write_ups_quote_it(
        tmp_path, monkeypatch, capsys):
    """`privbench reproduce --summary` over a copy of the committed runs files (their folders
    kept, from a copy of the repository's root) gives the committed summary.md and
    missing.md byte for byte, one entry per table; the reproductions' index
    (reports/reproduce/README.md) quotes both and the README the summary."""
    paths = sorted(REPORTS.rglob(RUNS_FILE))
    root = tmp_path / "reports" / "reproduce"
    for path in paths:
        copy = root / path.relative_to(REPORTS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--summary"]) == 0
    capsys.readouterr()
    assert main(["reproduce", "--missing"]) == 0  # the same list, printed
    assert capsys.readouterr().out == (root / "missing.md").read_text(encoding="utf-8")
    text = (root / "summary.md").read_text(encoding="utf-8")
    assert text == (REPORTS / "summary.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2 + len(paths)
    index = (REPORTS / "README.md").read_text(encoding="utf-8")
    assert text in index
    assert text in (REPORTS.parents[1] / "README.md").read_text(encoding="utf-8")
    # and what is not yet run: the index's list is the one the committed lines give
    lacking = (root / "missing.md").read_text(encoding="utf-8")
    assert lacking == (REPORTS / "missing.md").read_text(encoding="utf-8")
    assert lacking.count("**, scale '") == len(paths)
    assert lacking in index
    capsys.readouterr()


def test_the_missing_commands_train_exactly_the_missing_runs(tmp_path, monkeypatch, capsys):
    """`--missing` on a table with a seed complete and another with one run: its commands,
    run as printed (into another folder), train each missing run once and nothing else, and
    its merge line completes the table."""
    repro, scale = _tiny()
    repro = dataclasses.replace(repro, name="missing_test")
    monkeypatch.setitem(REPRODUCTIONS._items, "missing_test", repro)
    table, more = tmp_path / "table", tmp_path / "more"
    reproduce(repro, scale, (0,), table)
    reproduce(repro, scale, (1,), table, rows=("Dyn-D2P",), columns=(1.0,))
    grid = {j.key for j in runs_mod.jobs(repro.at(scale), scale.seeds)}
    have = {(r["method"], r["eps"], r["seed"]) for r in read_runs(table / RUNS_FILE)}
    assert main(["reproduce", "missing_test", "--missing", "--out", str(table)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(grid - have)} of {len(grid)} runs missing" in printed
    lines = [ln for ln in printed.splitlines() if ln.startswith(("OMP_", "privbench"))]
    assert len(lines) >= 3 and "--eps 3" in printed  # a partly run row gets its values only
    notes = [ln for ln in printed.splitlines() if ln.startswith("# ")]
    assert len(notes) == len(lines) - 1 and all(" min on cpu (" in n for n in notes)
    for line in lines[:-1]:  # as printed, less the env, the program and the side-by-side jobs
        argv = shlex.split(line)[2:]
        k = argv.index("--out")
        argv[k + 1] = str(more)
        if "--jobs" in argv:
            del argv[argv.index("--jobs"):argv.index("--jobs") + 2]
        assert main(argv) == 0, line
    trained = [(r["method"], r["eps"], r["seed"]) for r in read_runs(more / RUNS_FILE)]
    assert sorted(trained, key=str) == sorted(grid - have, key=str)  # each once, no other
    merge_argv = shlex.split(lines[-1])[1:]
    assert merge_argv[-2:] == ["--out", str(table)]  # into the table's folder, named
    merge_argv[merge_argv.index("--merge") + 1] = str(more / RUNS_FILE)
    assert main(merge_argv) == 0
    assert {(r["method"], r["eps"], r["seed"]) for r in read_runs(table / RUNS_FILE)} == grid
    capsys.readouterr()
    assert main(["reproduce", "missing_test", "--missing", "--out", str(table)]) == 0
    assert capsys.readouterr().out.strip() == \
        f"**missing_test**, scale 'reduced': complete ({len(grid)} runs)."
    assert main(["reproduce", "missing_test", "--missing", "--seeds", "1"]) == 2
    assert "--missing takes no --seeds: it reads the folder's runs.jsonl" in \
        capsys.readouterr().err


def test_a_summary_of_nothing_or_of_one_paper_is_a_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "--summary", "--out", str(tmp_path)]) == 2
    assert main(["reproduce", "dpps", "--summary"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no runs.jsonl under" in err[0] and "--summary takes no paper" \
        in err[1]


def test_the_summary_row_is_the_first_claim_and_tallies_them_all(tmp_path):
    repro, scale = _tiny()
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    table = repro.at(scale)
    row = summary_row(repro, scale, recs)
    first = render(repro, scale, recs).split("| paper's claim |")[1].splitlines()[2]
    better, worse = table.orderings[0]
    assert first.startswith(f"| {better} > {worse} | ")
    cells = first.split(" | ")[1:-1]
    verdict = first.split(" | ")[-1].rstrip(" |")
    assert row.startswith(f"| dyn_d2p | reduced | 2 | {better} > {worse} | ε=1: {cells[0]}; "
                          f"ε=3: {cells[1]} | {verdict} | {len(table.orderings)}: ")
    assert "judged on part" not in row
    half = reproduce(repro, scale, (0, 1), tmp_path / "half", columns=(1.0,))
    # the private rows at eps 1 only: every claim rests on one of its two columns, and says so
    assert summary_row(repro, scale, half).endswith(
        f"; {len(table.orderings)} judged on part of its columns |")


def _digits(name: str, eps: tuple[float, ...], **run) -> tuple:
    """A reproduction's table on 4 digits nodes, 2 rounds, a sub-grid (seconds on a CPU)."""
    load()
    r = REPRODUCTIONS.get(name)
    keep = [r.eps.index(e) for e in eps]
    base = {"dataset": "digits", "nodes": 4, "rounds": 2, "holdout": 0.0, "eval_every": 2,
            **run}
    scale = Scale("reduced", tuple(base.items()), (0, 1), "a test's tiny setting")
    r = dataclasses.replace(r, scales=(scale,), eps=eps,
                            paper=tuple((label, tuple(row[i] for i in keep))
                                        for label, row in r.paper))
    return r, scale


def test_a_row_reported_at_one_budget_runs_only_there(tmp_path):
    repro, scale = _digits("defl_vp", (1.0, 4.0), model="mlp", topology="random_out",
                           partition="dirichlet", alpha=0.3, batch_size=64)
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    # per seed: 4 non-private rows; at the card's and at the tuned sign step, DeFL-VP at both
    # eps and the ablations at eps 4 only (2 + 2 card, 2 + 3 tuned, w/o Comp tuned only)
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
    repro, scale = _digits("dpps", (1.0, 3.0), model="psp_mlp", topology="exponential",
                           partition="iid", batch_size=16, lr=0.1)
    recs = reproduce(repro, scale, (0,), tmp_path)
    assert len(recs) == 4 + 4 * 2  # NoDP rows once, private rows at each b
    b3 = [r for r in recs if r["eps"] == 3.0]
    assert b3 and all(r["config"]["defense"]["b"] == 3.0 for r in b3)
    assert all(r["config"]["run"]["epsilon"] == recs[0]["config"]["run"]["epsilon"]
               for r in recs)  # the run's epsilon is untouched by the b grid
    text = render(repro, scale, recs)
    assert "| method | b=1 | b=3 |" in text
    # PartPSP's nodes keep private layers: the table shows the mean node's accuracy (card
    # §1.6), not the average model's
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

    repro, scale = _digits("dpps", (1.0,), model="psp_mlp", topology="exponential",
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
    _rewrite(tmp_path / "old" / RUNS_FILE, lambda r: {k: v for k, v in r.items()
                                                       if k != "structure"})
    assert reproduce(repro, scale, (0,), tmp_path / "old", rows=("PartPSP-1",))[0]["seed"] == 0


def test_an_unknown_metric_is_refused():
    load()
    with pytest.raises(Exception, match="metric 'f1'; accepted: accuracy, node_accuracy_mean"):
        dataclasses.replace(REPRODUCTIONS.get("dpps"), metric="f1")


def test_an_ordering_with_no_shared_grid_value_is_refused():
    load()
    r = REPRODUCTIONS.get("defl_vp")
    with pytest.raises(Exception, match="no grid value where both rows are run"):
        dataclasses.replace(r, methods=tuple(dataclasses.replace(m, grid=(8.0,))
                                             if m.label == "DeFL-VP" else m
                                             for m in r.methods))


def test_a_reproduction_run_records_no_messages(tmp_path, monkeypatch):
    """A table needs accuracy and epsilon only; a 1,000-round DPDL run that logged its
    cross-gradients held over 20 GB and was killed for memory."""
    repro, scale = _tiny()
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


def test_a_diverged_run_renders_as_diverged_and_leaves_the_orderings(tmp_path):
    repro, scale = _tiny()
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    broken = [dict(r, accuracy=float("nan"), node_accuracy_mean=None, diverged_round=2)
              if r["method"] == "Const-D2P" and (r["eps"] == 3.0 or r["seed"] == 0) else r
              for r in recs]
    text = render(repro, scale, broken)
    row = next(ln for ln in text.splitlines() if ln.startswith("| Const-D2P |"))
    eps1, eps3 = row.removesuffix(" |").split(" | ")[1:]
    # eps 1: seed 1's accuracy alone, seed 0's divergence said; eps 3: no accuracy at all
    assert eps1.endswith("(1 of 2 seeds) (1 of 2 diverged, round 2)") and "nan" not in eps1
    assert eps3 == "diverged (2 of 2 runs, round 2)"
    claim = next(ln for ln in text.splitlines() if ln.startswith("| Dyn-D2P > Const-D2P |"))
    at1, at3 = claim.split(" | ")[1:3]
    # eps 1: one seed left to pair (unresolved); eps 3: none, both seeds diverged
    assert at1.endswith("/1) unresolved (1 seed diverged)")
    assert at3 == "– (2 seeds diverged)"


def test_a_cell_with_fewer_runs_than_the_table_has_seeds_says_so(tmp_path):
    repro, scale = _tiny()
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    some = [r for r in recs if not (r["method"] == "Dyn-D2P" and r["seed"] == 1)]
    cells: dict[str, list[str]] = {}  # each row's first table: accuracy
    for ln in render(repro, scale, some).splitlines():
        if ln.startswith("| "):
            cells.setdefault(ln.split(" | ")[0], ln.removesuffix(" |").split(" | ")[1:])
    assert all(c.endswith("(1 of 2 seeds)") for c in cells["| Dyn-D2P"])
    assert all("±" in c and "seeds" not in c for c in cells["| Const-D2P"])
    assert all("seeds" not in c for c in cells["| Non-private"])


def test_a_claim_is_judged_only_where_it_was_run(tmp_path):
    repro, scale = _tiny()
    recs = reproduce(repro, scale, (0, 1), tmp_path)
    claim = "| Dyn-D2P > Const-D2P |"
    full = next(ln for ln in render(repro, scale, recs).splitlines() if ln.startswith(claim))
    assert "ε run)" not in full  # every cell has runs: the verdict needs no count
    # the epsilon-3 runs are not there yet: that cell is no evidence, the verdict says what it
    # rests on instead of calling the claim "partly" (or "not resolved") for a missing run
    half = [r for r in recs if r["eps"] != 3.0]
    row = next(ln for ln in render(repro, scale, half).splitlines() if ln.startswith(claim))
    at1, at3, verdict = row.removesuffix(" |").split(" | ")[1:]
    assert at3 == "–"
    assert verdict == f"{claim_verdict([at1.rsplit(' ', 1)[-1]])} (1 of 2 ε run)"
    none = [r for r in recs if r["eps"] is None]
    row = next(ln for ln in render(repro, scale, none).splitlines() if ln.startswith(claim))
    assert row.endswith("| – | – | untested |")


def test_a_table_says_which_machines_its_runs_came_from(tmp_path):
    repro, scale = _tiny()
    recs = reproduce(repro, scale, (0,), tmp_path)
    assert "runs on" not in render(repro, scale, recs)  # all on this CPU: nothing to say
    assert f"seeds 0 ({len(recs)} runs)" in render(repro, scale, recs)
    assert "seeds 0 (1 run)" in render(repro, scale, recs[:1])
    moved = [dict(recs[0], device="cuda:0",
                  fields={**recs[0]["fields"], "versions.torch": "2.11.0+cu130"}), *recs[1:]]
    setting = next(ln for ln in render(repro, scale, moved).splitlines()
                   if ln.startswith("Setting:"))
    assert setting.endswith(f"; runs on cpu with torch {recs[1]['fields']['versions.torch']} "
                            f"({len(recs) - 1}), cuda with torch 2.11.0+cu130 (1).")


def test_jobs_side_by_side_write_the_lines_of_a_sequential_run(tmp_path, capsys):
    repro, scale = _tiny()
    one = reproduce(repro, scale, (0,), tmp_path / "one")
    two = reproduce(repro, scale, (0,), tmp_path / "two", workers=2)
    assert [r["fingerprint"] for r in two] == [r["fingerprint"] for r in one]
    assert [r["accuracy"] for r in two] == pytest.approx([r["accuracy"] for r in one], abs=1e-6)
    lines = read_runs(tmp_path / "two" / RUNS_FILE)  # one line per job, whatever the order
    assert sorted((r["method"], r["eps"] or 0.0) for r in lines) == \
        sorted((r["method"], r["eps"] or 0.0) for r in one)
    assert main(["reproduce", "dyn_d2p", "--jobs", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--jobs 0" in capsys.readouterr().err


def test_a_failed_job_among_parallel_ones_is_named_and_the_others_kept(tmp_path):
    from privbench.reproduce import Method

    repro, scale = _tiny()
    broken = Method("Broken", "const_d2p", (("no_such_field", 1.0),), grid=(1.0,))
    repro = dataclasses.replace(repro, methods=(*repro.methods[:2], broken), orderings=(),
                                paper=repro.paper[:2])
    with pytest.raises(PrivbenchError, match=r"1 of 4 runs failed .*Broken epsilon=1 seed 0"):
        reproduce(repro, scale, (0,), tmp_path, workers=2)
    kept = read_runs(tmp_path / RUNS_FILE)
    assert sorted((r["method"], r["eps"] or 0.0) for r in kept) == \
        [("Const-D2P", 1.0), ("Const-D2P", 3.0), ("Non-private", 0.0)]


_PARALLEL_CLI = """
import pickle, signal, sys
# as started from a terminal: a shell's background job (`cmd &`, CI launched so) starts with
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)
from privbench.cli import main
from privbench.reproduce import REPRODUCTIONS, load
load()
with open(sys.argv[1], "rb") as f:
    REPRODUCTIONS.add("slow_test", pickle.load(f))
sys.exit(main(["reproduce", "slow_test", "--jobs", "2", "--quiet", "--out", sys.argv[2]]))
"""


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc (None once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def _spawned_workers(parent: int) -> list[int]:
    """Live (not zombie) processes whose parent is `parent` and that run multiprocessing's
    spawn_main (the pool's workers; the resource tracker runs another entry point)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        state = _state_and_parent(pid)
        if state is None or state[0] == "Z" or state[1] != parent:
            continue
        try:
            if b"spawn_main" in (proc / "cmdline").read_bytes():
                found.append(pid)
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a mask from /proc")
def test_a_ctrl_c_while_the_workers_are_spawned_is_held_back_not_lost():
    """The pool spawned its workers with SIGINT ignored (so that they inherit it): a Ctrl-C in
    that window was lost, and the parent trained on for hours. Now it is held back and raised
    when the window ends, and what is spawned inside still never receives it."""
    import signal
    import subprocess
    import sys
    import threading

    from privbench.reproduce.runs import _held_back

    reached = False
    status = "print(open('/proc/self/status').read())"
    # Python's own Ctrl-C handler, as in a terminal (a background job starts ignoring SIGINT)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), _held_back(signal.SIGINT):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            child = subprocess.run([sys.executable, "-c", status], capture_output=True,
                                   text=True, check=True)
            reached = True
    finally:  # None: the previous handler was not set from Python
        signal.signal(signal.SIGINT, signal.SIG_DFL if old is None else old)
    assert reached
    blocked = next(ln for ln in child.stdout.splitlines() if ln.startswith("SigBlk:"))
    assert int(blocked.split()[1], 16) >> (signal.SIGINT - 1) & 1


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stopped_parallel_reproduction_stops_its_workers_too(tmp_path, how):
    """`kill PID` (SIGTERM, what a scheduler or `pkill` sends) used to end the parent alone: its
    workers went on training for hours with no one to keep their lines. Ctrl-C (SIGINT to the
    whole process group) ends with one line too, not a traceback per worker."""
    import pickle
    import signal
    import subprocess
    import sys
    import time

    repro, _ = _tiny(rounds=200_000)  # each run far longer than the test waits
    (tmp_path / "repro.pkl").write_bytes(pickle.dumps(repro))
    err_file = tmp_path / "stderr"  # a file, not a pipe: orphaned workers would hold a pipe open
    workers: list[int] = []
    with err_file.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _PARALLEL_CLI, str(tmp_path / "repro.pkl"),
                                 str(tmp_path / "out")], stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            workers = _spawned_workers(proc.pid)
        assert len(workers) == 2, f"the two workers never started (exit {proc.poll()})"
        time.sleep(1.0)  # past their start-up: they are importing or training
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            code, head = 128 + signal.SIGTERM, "privbench: stopped (SIGTERM); "
        else:  # a terminal's Ctrl-C: the foreground process group
            os.killpg(proc.pid, signal.SIGINT)
            code, head = 130, "privbench: interrupted; "
        assert proc.wait(timeout=60) == code, err_file.read_text()
        kept = f"kept: 0 runs in {tmp_path / 'out' / RUNS_FILE}; `privbench reproduce slow_test"
        lines = err_file.read_text().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(head + kept), err_file.read_text()
        deadline = time.monotonic() + 20
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "a worker outlived its stopped reproduction"
        assert not (tmp_path / "out" / RUNS_FILE).exists() or \
            read_runs(tmp_path / "out" / RUNS_FILE) == []
    finally:  # a failing run must not leave training processes behind
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_stopped_workers_leave_no_pool_thread_to_race_interpreter_exit():
    """`_stop_workers` returns once the pool's manager thread has ended: interpreter exit wakes
    every live manager through a pipe the manager closes as it ends, unguarded, and that race
    printed an OSError traceback after the one-line message about once in 50 stops."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(time.sleep, 600) for _ in range(3)]
    procs = list(pool._processes.values())
    manager = pool._executor_manager_thread
    runs_mod._stop_workers(pool)
    assert not manager.is_alive()
    assert not any(p.is_alive() for p in procs)
    assert all(f.done() for f in futures)  # cancelled, or failed as the pool broke


def test_a_row_label_holding_a_comma_is_one_row():
    from privbench.commands.reproduce import _row_labels

    load()
    repro = REPRODUCTIONS.get("defl_vp")
    head = repro.at(repro.scale("headline"))
    tuned = "DeFL-VP, η_sign 0.003"
    assert tuned in {m.label for m in head.methods}
    assert _row_labels([tuned], head) == (tuned,)
    assert _row_labels(["D-PSGD,DFL+VR", " D-PSGD+RR, η_sign 0.003"], head) == \
        ("D-PSGD", "DFL+VR", "D-PSGD+RR, η_sign 0.003")
    assert _row_labels(None, head) == ()
