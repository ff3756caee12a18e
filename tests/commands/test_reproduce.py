"""`privbench reproduce` (`privbench.commands.reproduce`): options that do not fit are a
one-line error, and a row label may hold a comma."""

from __future__ import annotations

import pytest

from privbench.cli import main
from privbench.reproduce import REPRODUCTIONS, load
from privbench.reproduce.runs import RUNS_FILE


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


def test_a_summary_of_nothing_or_of_one_paper_is_a_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "--summary", "--out", str(tmp_path)]) == 2
    assert main(["reproduce", "dpps", "--summary"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no runs.jsonl under" in err[0] and "--summary takes no paper" \
        in err[1]


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
