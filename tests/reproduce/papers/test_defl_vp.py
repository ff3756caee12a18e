"""privbench.reproduce.papers.defl_vp: DeFL-VP's Tables 1, 3 and 4 as declared: every job of every
scale configures a run and a defense this code builds, and the paper's own numbers agree with
the orderings the reproduction judges."""

from __future__ import annotations

from privbench.reproduce.papers import defl_vp
from tests.reproduce.papers.declared import built_structures, declaration, ordering_breaks


def test_every_job_of_every_scale_configures_and_builds() -> None:
    repro = declaration("defl_vp")
    assert repro is defl_vp.DEFL_VP
    built = built_structures(repro)
    assert {scale for scale, _, _ in built} == {s.name for s in repro.scales}
    assert {label for _, label, _ in built} == {m.label for m in repro.methods}


def test_the_papers_numbers_agree_with_the_claimed_orderings() -> None:
    assert ordering_breaks(declaration("defl_vp")) == []


def test_every_private_row_takes_the_papers_per_coordinate_epsilon() -> None:
    private = [m for m in defl_vp.DEFL_VP.methods if m.private]
    assert private and all(dict(m.overrides)["eps_mode"] == "per_coordinate" for m in private)
