"""The README stays user documentation: its size, its links and anchors, and its code blocks.

Every in-page link lands on one of its headings (GitHub's anchor rule); every relative link of
the README and of the write-ups under reports/ names a file that exists (and, with `#anchor`, a
heading of that file); every fenced code block of the README is either run or checked by a test
(`<!-- tested: tests/... -->` or `<!-- example-defense -->` right before it) or marked
`<!-- illustrative -->`. Every repository path they quote in backticks (`tests/...py`,
`privbench/...`) exists, unless git ignores it (a command's output folder such as
`reports/audit-quick/`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 600
# the marker the example-defense test reads its block after
TESTED_BY = {"example-defense": "tests/contracts/test_example_defense.py"}


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped
    (letters of any script kept), spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _outside_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchors(text: str) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", _outside_code(text), flags=re.M)}


def _documents() -> list[Path]:
    """The README and every write-up under reports/ (tables rendered by code aside)."""
    return [README, *sorted(p for p in (ROOT / "reports").rglob("*.md") if p.name != "table.md")]


def broken_links(doc: Path) -> list[str]:
    """The relative links of `doc` whose file is missing or whose #anchor names no heading."""
    text = _outside_code(doc.read_text(encoding="utf-8"))
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        missing = not file.exists()
        if missing or (anchor and file.suffix == ".md" and anchor not in _anchors(
                file.read_text(encoding="utf-8"))):
            bad.append(target)
    return bad


# a repository path quoted in backticks, optionally with a pytest node id (`file.py::test`)
QUOTED_PATH = re.compile(
    r"`((?:tests|privbench|attacks|defenses|reports|\.ci)/[\w./-]*)(?:::[\w\[\]-]+)?`")


def missing_paths(doc: Path, root: Path = ROOT) -> list[str]:
    """The repository paths `doc` quotes in backticks that neither exist nor are git-ignored
    outputs (an ignored path is where a command writes, so it may not exist yet)."""
    quoted = dict.fromkeys(QUOTED_PATH.findall(doc.read_text(encoding="utf-8")))
    absent = [q for q in quoted if not (root / q.rstrip("/")).exists()]
    if not absent:
        return []
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=root,
                             input="\n".join(absent), capture_output=True, text=True).stdout
    return [q for q in absent if q not in ignored.splitlines()]


def unmarked_blocks(text: str) -> list[str]:
    """The README's fenced code blocks not marked as tested (by an existing test that reads the
    README) or as illustrative, each named by its first line."""
    lines = text.splitlines()
    bad, inside = [], False
    for k, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if inside:
            inside = False
            continue
        inside = True
        marker = re.fullmatch(r"<!-- (.+?) -->", lines[k - 1].strip()) if k else None
        label = marker.group(1) if marker else ""
        if label == "illustrative":
            continue
        test = TESTED_BY.get(label) or label.removeprefix("tested: ")
        if label and test != label and (ROOT / test).is_file() and "README" in (
                ROOT / test).read_text(encoding="utf-8"):
            continue
        bad.append(f"line {k + 1}: {lines[k + 1] if k + 1 < len(lines) else ''}")
    return bad


def test_the_readme_stays_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; at most {MAX_LINES}"


def test_every_in_page_link_names_a_heading():
    text = README.read_text(encoding="utf-8")
    outside_code = _outside_code(text)
    anchors = _anchors(text)
    links = re.findall(r"\]\(#([^)]+)\)", outside_code)
    assert len(links) >= 10  # the contents line
    assert [x for x in links if x not in anchors] == []


def test_every_relative_link_of_the_readme_and_the_write_ups_resolves():
    docs = _documents()
    assert len(docs) > 10
    assert {d.name: broken_links(d) for d in docs if broken_links(d)} == {}


def test_a_broken_link_and_an_unmarked_block_are_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n[a](missing.md) [b](#title) [c](doc.md#nowhere) [d](https://x.org)\n")
    assert broken_links(doc) == ["missing.md", "doc.md#nowhere"]
    text = ("<!-- illustrative -->\n```bash\nok\n```\n\n```bash\nbare\n```\n"
            "<!-- tested: tests/nothing_here.py -->\n```bash\nnamed\n```\n")
    assert unmarked_blocks(text) == ["line 6: bare", "line 10: named"]


def test_every_readme_code_block_is_tested_or_marked_illustrative():
    text = README.read_text(encoding="utf-8")
    assert text.count("```") >= 8
    assert unmarked_blocks(text) == []


def test_every_path_the_readme_and_the_write_ups_quote_exists():
    bad = {str(d.relative_to(ROOT)): missing for d in _documents() if (missing := missing_paths(d))}
    assert not bad, f"quoted paths that do not exist: {bad}"


def test_a_quoted_path_that_does_not_exist_is_found(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text("")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/reports/*\n")
    doc = tmp_path / "README.md"
    doc.write_text("See `tests/test_real.py::test_a`, `tests/test_gone.py` and the output "
                   "`reports/run/index.html`.")
    assert missing_paths(doc, tmp_path) == ["tests/test_gone.py"]
