"""Reproductions of the papers' tables on real data (`privbench reproduce NAME`).

A `Reproduction` is one paper's table: its methods (a defense with the paper's settings), its
epsilon grid, the paper's numbers, the qualitative orderings the paper claims, and the scales it
can be run at ("paper": the paper's setting; "reduced": a stated smaller one that a 2-core CPU
finishes in a session). `privbench.reproduce.runs` trains the grid and appends one JSON line per
run (config, seed, accuracy, both epsilons) to `runs.jsonl`; `privbench.reproduce.table` renders
the table from those lines alone, so a committed `runs.jsonl` re-renders its committed `table.md`
byte for byte without training.

One file per paper (`privbench/reproduce/<name>.py`) registers its `Reproduction` in
`REPRODUCTIONS`.
"""

from __future__ import annotations

from privbench.reproduce.spec import REPRODUCTIONS, Method, Reproduction, Scale

__all__ = ["REPRODUCTIONS", "Method", "Reproduction", "Scale", "load"]


def load() -> None:
    """Import the per-paper modules so that they register themselves."""
    from privbench.reproduce.papers import adp_vrsgp, defl_vp, dpdl, dpps, dyn_d2p  # noqa: F401
