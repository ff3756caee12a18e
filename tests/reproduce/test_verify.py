"""`privbench.reproduce.verify`: a folder's lines retrained, and what moved named."""

from __future__ import annotations

import pytest

from privbench.errors import PrivbenchError
from privbench.reproduce.runs import RUNS_FILE, read_runs, reproduce
from privbench.reproduce.table import render
from tests.reproduce.grids import (
    rewrite,
    tiny,
)


def test_verify_re_makes_committed_lines_and_names_what_moved(tmp_path):
    """--verify: the same code gives the same lines (exit 0); a line whose number is not what
    the code gives now is named with both values and the table lines it changes; a line of
    another machine is left out with why; nothing is written into the folder."""
    import json

    import torch

    from privbench.device import machine_kind
    from privbench.reproduce.verify import summary, verify

    repro, scale = tiny()
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
    rewrite(tmp_path / RUNS_FILE, lambda r: {**r, "accuracy": r["accuracy"] + 0.125})
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
