"""privbench.reproduce.papers.dpdl: DPDL's tables as declared: every job of every scale configures
a run and a defense this code builds, and the paper's own numbers agree with the orderings the
reproduction judges."""

from __future__ import annotations

from privbench.reproduce.papers import dpdl
from tests.reproduce.papers.declared import check_declaration


def test_the_declaration_builds_and_agrees_with_the_papers_numbers() -> None:
    check_declaration(dpdl.DPDL)
