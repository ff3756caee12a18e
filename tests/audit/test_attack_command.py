"""`privbench attack` end to end on a tiny grid: files, summary table, resume, determinism."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.results import attack_metric

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
        assert row[2] == f"{cell['accuracy']:.3f}"
        psnr = attack_metric(cell, "psnr")
        assert row[3] == ("-" if psnr is None else f"{psnr:.1f}")
        auc = attack_metric(cell, "auc")
        assert row[6] == ("-" if auc is None else f"{auc:.3f}")


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
