"""privbench.reproduce.papers.dpps: DPPS's table as declared: every job of every scale configures a
run and a defense this code builds, and the paper's own numbers agree with the orderings the
reproduction judges."""

from __future__ import annotations

from privbench.reproduce.papers import dpps
from tests.reproduce.papers.declared import check_declaration


def test_the_declaration_builds_and_agrees_with_the_papers_numbers() -> None:
    check_declaration(dpps.DPPS)
