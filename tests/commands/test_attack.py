"""`privbench attack` (`privbench.commands.attack`) end to end on a tiny grid: files, summary
table, resume, determinism."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.results.store import attack_metric, fmt_num

TINY = """
nodes = 4
rounds = 4
eval_every = 4
batch_size = 2
device = "cpu"
[audit]
inversion_rounds = [1]
[audit.attack_config.idlg]
adam_steps = 30
[audit.attack_config.geiping]
steps = 30
"""


def _audit(tmp_path: Path, out: Path, *extra: str) -> int:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    return main(["attack", "--config", str(cfg), "--defense", "sgp,d_psgd",
                 "--attack", "idlg,mia_threshold", "--out", str(out), "--quiet", *extra])


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    out = tmp / "run"
    assert _audit(tmp, out) == 0
    return tmp, out


def test_writes_results_and_report(audit_dir):
    _, out = audit_dir
    res = json.loads((out / "results.json").read_text())
    assert res["kind"] == "audit" and [c["defense"] for c in res["cells"]] == ["sgp", "d_psgd"]
    for cell in res["cells"]:
        assert set(cell["attacks"]) == {"idlg", "mia_threshold"}
        assert cell["epsilon"] is None  # non-private baselines run once
        inv = cell["attacks"]["idlg"]
        assert inv["status"] == "ok" or inv["status"].startswith("not applicable")
    html = (out / "index.html").read_text()
    assert "sgp" in html and "d_psgd" in html and "Message map" in html
    assert (out / "cells" / "sgp@none" / "idlg.json").is_file()


def test_summary_table_agrees_with_results(audit_dir, capsys):
    tmp, out = audit_dir
    assert _audit(tmp, out, "--resume") == 0  # nothing to recompute: prints the same table
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    rows = {line.split()[0]: line.split() for line in printed.splitlines()[1:]
            if line and line.split()[0] in ("sgp", "d_psgd")}
    for cell in res["cells"]:
        row = rows[cell["defense"]]
        assert row[2] == fmt_num(cell["accuracy"])
        assert row[3] == fmt_num(attack_metric(cell, "psnr"), missing="-")
        assert row[5] == fmt_num(attack_metric(cell, "auc"), missing="-")
    table = [line for line in printed.splitlines() if line.split()[:1] in (
        ["defense"], ["sgp"], ["d_psgd"])]
    assert len(table) == 3 and max(map(len, table)) <= 100  # the summary fits a terminal


def test_the_terminal_gives_each_defenses_verdict_as_the_report_does(audit_dir, capsys):
    from privbench.report.verdicts import verdicts

    tmp, out = audit_dir
    assert _audit(tmp, out, "--resume") == 0
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert "verdicts (per defense, its most severe cell; every finding in index.html):" in printed
    for name, v in verdicts(res).items():  # the non-private baselines: references
        assert f"\n  {name}: {v['title']} — {v['reasons'][0]}" in printed


def test_resume_recomputes_only_missing_cells_and_matches(audit_dir, tmp_path):
    tmp, out = audit_dir
    copy = tmp_path / "run"  # same run name, another folder
    shutil.copytree(out, copy)
    (copy / "cells" / "d_psgd@none" / "mia_threshold.json").unlink()
    (copy / "results.json").unlink()
    before = (copy / "cells" / "sgp@none" / "idlg.json").stat().st_mtime_ns
    assert _audit(tmp, copy, "--resume") == 0
    assert (copy / "cells" / "sgp@none" / "idlg.json").stat().st_mtime_ns == before
    assert (copy / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_same_seed_gives_byte_identical_results(audit_dir, tmp_path):
    tmp, out = audit_dir
    again = tmp_path / "run"
    assert _audit(tmp, again) == 0
    assert (again / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_report_command_reproduces_index_html(audit_dir, tmp_path):
    _, out = audit_dir
    target = tmp_path / "r.html"
    assert main(["report", str(out / "results.json"), "-o", str(target)]) == 0
    assert target.read_text() == (out / "index.html").read_text()


@pytest.mark.parametrize("args,needle", [
    (["--defense", "nope"], "unknown defense 'nope'"),
    (["--attack", "nope"], "unknown attack 'nope'"),
    (["--eps", "0"], "every --eps must be a finite number > 0"),
    (["--eps", "x"], "--eps must be numbers"),
    (["--threat", "god"], "unknown threat model 'god'"),
    (["--messages", "/nonexistent"], "not found"),
])
def test_bad_attack_arguments(args, needle, capsys, tmp_path):
    assert main(["attack", "--out", str(tmp_path / "o"), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_attack_a_saved_message_log(tmp_path, capsys):
    run = tmp_path / "train"
    assert main(["train", "--defense", "sgp", "--nodes", "4", "--rounds", "4", "--batch-size",
                 "2", "--device", "cpu", "--out", str(run), "--quiet", "--record", "all"]) == 0
    out = tmp_path / "audit"
    cfg = tmp_path / "a.toml"
    cfg.write_text("[audit.attack_config.idlg]\nadam_steps = 30\n")
    assert main(["attack", "--messages", str(run), "--attack", "idlg", "--config", str(cfg),
                 "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["cells"][0]["defense"] == "sgp"
    assert res["cells"][0]["attacks"]["idlg"]["status"] == "ok"


def _refuse_training(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr("privbench.pipeline.sweep.train", refuse)


def test_a_finished_audit_is_not_replaced_without_resume_or_overwrite(audit_dir, tmp_path,
                                                                      capsys, monkeypatch):
    tmp, out = audit_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = {p.name: p.read_bytes() for p in (copy / "results.json", copy / "index.html")}
    with monkeypatch.context() as m:
        _refuse_training(m)
        assert _audit(tmp, copy, "--seed", "1") == 2  # another config, no --resume
    err = capsys.readouterr().err
    assert err == (f"privbench: error: {copy} holds a finished audit (results.json and "
                   "index.html; a result is never replaced silently); pass --resume to reuse "
                   "its cells, --overwrite to replace it, or choose another --out\n")
    assert {p.name: p.read_bytes() for p in (copy / "results.json", copy / "index.html")} \
        == before
    assert _audit(tmp, copy, "--seed", "1", "--overwrite") == 0
    res = json.loads((copy / "results.json").read_text())
    assert res["config"]["run"]["seed"] == 1 and (copy / "results.json").read_bytes() \
        != before["results.json"]


def test_ctrl_c_says_how_many_cells_are_kept_and_the_command_continues(audit_dir, tmp_path,
                                                                       capsys, monkeypatch):
    import shlex

    from privbench.pipeline import sweep

    tmp, out = audit_dir
    real, calls = sweep.run_attack, []

    def stop_in_the_second_cell(built, attack, *args, **kwargs):
        calls.append(built.defense)
        if built.defense == "d_psgd":
            raise KeyboardInterrupt
        return real(built, attack, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_attack", stop_in_the_second_cell)
    stopped = tmp_path / "run"
    assert _audit(tmp, stopped) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    head = f"privbench: interrupted; kept: 1 of 2 cells finished in {stopped}; `"
    assert err.startswith(head) and err.endswith("` continues\n"), err
    command = shlex.split(err[len(head):-len("` continues\n")])
    assert command[0] == "privbench" and command[-1] == "--resume"
    monkeypatch.undo()
    assert main(command[1:]) == 0  # the command it names continues the audit
    assert "resume: reused 4 cell file(s), recomputed 2 (2 missing" in capsys.readouterr().out
    assert (stopped / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_long_phases_write_heartbeat_lines_to_a_log(tmp_path, capsys, monkeypatch):
    # stderr is not a terminal here: a line per HEARTBEAT_SECONDS names the cell, the phase
    # and its progress (the training's round, an attack's time)
    import time

    from privbench import progress
    from privbench.pipeline import sweep

    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.01)
    real_train, real_attack = sweep.train, sweep.run_attack

    def slow_train(trainer, progress=None, **kwargs):
        def step(n):
            time.sleep(0.03)
            if progress is not None:
                progress(n)

        return real_train(trainer, progress=step, **kwargs)

    def slow_attack(*args, **kwargs):
        time.sleep(0.1)
        return real_attack(*args, **kwargs)

    monkeypatch.setattr(sweep, "train", slow_train)
    monkeypatch.setattr(sweep, "run_attack", slow_attack)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    assert main(["attack", "--config", str(cfg), "--defense", "sgp", "--attack", "mia_threshold",
                 "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err.splitlines()
    train = [x for x in err if x.startswith("privbench: cell 1 of 1 (sgp no DP): train sgp: ")]
    assert train and all(" of 4, " in x and " so far" in x for x in train), err
    attack = "privbench: cell 1 of 1 (sgp no DP): attack mia_threshold (1 of 1): "
    assert any(x.startswith(attack) and x.endswith(" so far") for x in err), err


def test_resume_on_a_finished_audit_changes_no_file(audit_dir, capsys):
    tmp, out = audit_dir
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    stamps = {p: p.stat().st_mtime_ns for p in before}
    assert _audit(tmp, out, "--resume") == 0
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert {p: p.stat().st_mtime_ns for p in after} == stamps  # not even rewritten alike


def test_before_training_it_says_how_many_cells_and_about_how_long(audit_dir, capsys):
    """From the same cells computed earlier on this machine (a folder beside --out, same
    fingerprints); without such a run it says it has nothing to estimate from."""
    from privbench.pipeline.jobs import earlier_seconds

    tmp, out = audit_dir
    argv = ["attack", "--config", str(tmp / "tiny.toml"), "--defense", "sgp,d_psgd",
            "--attack", "idlg,mia_threshold", "--jobs", "1"]
    assert main([*argv, "--out", str(tmp / "again")]) == 0
    err = capsys.readouterr().err
    assert "2 cell(s) to compute on 1 process(es)" in err
    assert "from 2 of them computed earlier with the same settings" in err
    cell = out / "cells" / "sgp@none"
    spent = json.loads((cell / "timings.json").read_text())
    prints = {"train": json.loads((cell / "train.json").read_text())["fingerprint"]}
    shutil.copytree(cell, tmp / "only" / "run" / "cells" / "sgp@none")
    assert earlier_seconds(tmp / "only" / "new" / "cells" / "sgp@none", ["train"], prints) == \
        sum(v for v in spent.values() if isinstance(v, (int, float)))
    prints["train"] = {**prints["train"], "sha256": "0" * 64}  # other settings: not the same
    assert earlier_seconds(tmp / "only" / "new" / "cells" / "sgp@none", ["train"], prints) is None
    lone = tmp / "lone" / "deeper"
    lone.mkdir(parents=True)
    assert main([*argv, "--out", str(lone / "run")]) == 0
    assert "no earlier run of these cells on this machine" in capsys.readouterr().err
