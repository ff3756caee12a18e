"""The repository documents the tool, not how it was built.

Its prose (README.md, the write-ups under reports/, and the code and tests of privbench/,
attacks/, defenses/ and tests/: docstrings, comments, messages, test names) names no issue
number, commit hash, GPU model, re-made result, dated measurement or development process; that
history belongs in commit messages. Data files (a run's JSON lines and fingerprints, which may
name the machine that made them) are not prose and are not read. The reader-facing documents
(README.md and reports/) also never speak of implementation "cards": they cite the papers.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()

# what a history word looks like, and why it is one
HISTORY = {
    "an issue number": r"(?i)\bissues? #?\d+",
    "an issue reference": r"(?<![\w&/:])#\d+\b(?![0-9a-fA-F])",
    "a commit hash": r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
    "a GPU model": r"\b(H100|H200|A100|V100|A10G|GH200|B200|L40S|RTX ?\d{3,4})\b",
    "a re-made result": r"(?i)\bre-(made|make|makes|making|measured)\b|\bremade\b",
    "a date": r"\b20\d\d-[01]\d-[0-3]\d\b",
    "a development process": r"(?i)\b(withdrawn|used to be|pre-fix|development machine|"
                             r"dev machine|not re-measured|this task|sitting)\b",
}
# reader-facing prose only: which CPU ran what, and the implementation notes the code cites
READER = {
    "a CPU model": r"\b(EPYC|Xeon|Ryzen)\b",
    "an implementation card": r"(?i)\bcards?\b",
}
# names that look like history but are data: torchvision's AlexNet weights file, the commit of
# ML Privacy Meter's research code that tests/cross_check/mlpm.py loads (a pinned version)
ALLOWED = (r"alexnet-owt-7be5be79", r'RESEARCH_COMMIT = "[0-9a-f]{40}"')
# a test that lists forbidden phrases as its data
EXEMPT = {HERE, ROOT / "tests" / "test_citations.py"}


def prose_files() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "reports").rglob("*.md"))]
    code = [p for folder in ("privbench", "attacks", "defenses", "tests")
            for p in sorted((ROOT / folder).rglob("*.py"))]
    return [p for p in docs + code if p not in EXEMPT]


def findings(path: Path, root: Path = ROOT) -> list[str]:
    """`path:line: what (the text)` for every history word of `path` (named from `root`)."""
    rules = dict(HISTORY, **(READER if path.suffix == ".md" else {}))
    out = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line
        for allowed in ALLOWED:
            text = re.sub(allowed, "", text)
        out += [f"{path.relative_to(root)}:{k}: {what} ({m.group(0)!r})"
                for what, pattern in rules.items() for m in re.finditer(pattern, text)]
    return out


def test_the_rules_catch_history_and_spare_data(tmp_path):
    (tmp_path / "x.md").write_text(
        "Fixed in issue 12 (#34) by e8c64fa, re-made on 2026-11-28 on an H200 and an AMD EPYC;\n"
        "the card's step.\nalexnet-owt-7be5be79.pth, 1e-5, sha256 0dbd349f is data? no.\n")
    (tmp_path / "y.py").write_text("# the AMD EPYC machine kind, css color:#777, 100 rounds\n")
    md = [f.split(": ", 1)[1] for f in findings(tmp_path / "x.md", tmp_path)]
    assert md == ["an issue number ('issue 12')", "an issue reference ('#34')",
                  "a commit hash ('e8c64fa')", "a GPU model ('H200')",
                  "a re-made result ('re-made')", "a date ('2026-11-28')",
                  "a CPU model ('EPYC')", "an implementation card ('card')",
                  "a commit hash ('0dbd349f')"]
    assert findings(tmp_path / "y.py", tmp_path) == []


def test_no_history_in_the_prose():
    files = prose_files()
    assert len(files) > 100 and ROOT / "README.md" in files
    found = [f for p in files for f in findings(p)]
    assert found == [], "history in the prose (put it in a commit message):\n" + "\n".join(
        found[:40])
