"""Comments a reader can follow: the code cites papers, never documents outside the repository.

Every line of privbench/, attacks/ and defenses/ (Python sources, Jinja templates, TOML files) is
checked for a citation of a document the reader does not have (an implementation card, a design
note, a reference note), an absolute path of a development machine, and an issue number (the
repository documents the tool, not how it was built). Cite the paper's section, equation,
algorithm line or theorem instead; state an open setting as a choice of this implementation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("privbench", "attacks", "defenses")
SUFFIXES = (".py", ".j2", ".toml")

FORBIDDEN = {
    "an implementation card's section": re.compile(r"\bcard\s*§", re.IGNORECASE),
    "an implementation card file": re.compile(r"\bcard-", re.IGNORECASE),
    "the design note": re.compile(r"\bDESIGN\.md\b"),
    "a reference note": re.compile(r"\breference(?:/|\s*§)"),
    "an absolute path of a machine": re.compile(r"(?<![\w.~-])/(?:home|work|root|Users)/"),
    "an issue number": re.compile(r"\bissues?\s*#?\s*\d", re.IGNORECASE),
}

# Files whose job is to recognise these patterns in text (they name them, they cite nothing).
EXEMPT = {
    "privbench/report/text.py": "strips outside references and home folders from report text",
}


def source_files(root: Path) -> list[Path]:
    """Every checked file under `root`'s folders, sorted."""
    return sorted(p for folder in FOLDERS for p in (root / folder).rglob("*")
                  if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts)


def violations(root: Path) -> list[str]:
    """'path:line: what (text)' for every forbidden citation under `root`."""
    out = []
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        if rel in EXEMPT:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    out.append(f"{rel}:{n}: {what} ({line.strip()[:80]})")
    return out


def test_the_checked_folders_hold_sources():
    files = source_files(ROOT)
    assert len(files) > 50, [p.as_posix() for p in files]
    assert any(p.suffix == ".j2" for p in files)


@pytest.mark.parametrize(("line", "what"), [
    ("loop below is the card's reconstruction (card §1.3)", "an implementation card's section"),
    ("Eqs. 4, 6 (card-dyn-d2p.md)", "an implementation card file"),
    ("Vectorized (DESIGN.md): every edge", "the design note"),
    ("summarised in reference/membership-inference-and-accounting.md §2.1", "a reference note"),
    ("the strongest canary in ML Privacy Meter's table, reference §3.6", "a reference note"),
    ("Reference: /work/shared/notes.md", "an absolute path of a machine"),
    ("copied from /home/alice/privbench", "an absolute path of a machine"),
    ("the faithful choice, documented for issue 10", "an issue number"),
    ("see issue #3", "an issue number"),
])
def test_each_pattern_catches_its_kind(line, what):
    assert FORBIDDEN[what].search(line)


@pytest.mark.parametrize("line", [
    'weights: str = "card"',  # a config value, not a citation
    "discard_created()",
    "Dyn-D2P paper, eqs. (4) and (6)",
    "DPPS paper, Sec. 5.4; Algorithm 2, Eqs. 22-25",
    "path = Path(__file__).parent / 'policy.toml'",
    "the reference code's defaults (mit-han-lab/dlg main.py)",
])
def test_paper_citations_and_code_pass(line):
    assert not any(p.search(line) for p in FORBIDDEN.values())


def test_no_citation_of_a_document_outside_the_repository():
    found = violations(ROOT)
    assert not found, "cite the paper instead:\n" + "\n".join(found)
