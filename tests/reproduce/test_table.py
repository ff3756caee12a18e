"""`privbench.reproduce.table`: verdicts, claims judged where they were run, diverged and
partial cells, the summary row, and the machines a table's runs came from."""

from __future__ import annotations

from privbench.reproduce.runs import reproduce
from privbench.reproduce.table import UNTESTED, claim_verdict, render, summary_row, verdict_at
from tests.reproduce.grids import (
    tiny,
)


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


def test_the_summary_row_is_the_first_claim_and_tallies_them_all(tmp_path):
    repro, scale = tiny()
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


def test_a_diverged_run_renders_as_diverged_and_leaves_the_orderings(tmp_path):
    repro, scale = tiny()
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
    repro, scale = tiny()
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
    repro, scale = tiny()
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
    repro, scale = tiny()
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
