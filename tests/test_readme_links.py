"""The README's in-page links land on one of its headings (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped
    (letters of any script kept), spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_in_page_link_names_a_heading():
    text = README.read_text(encoding="utf-8")
    outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
    anchors = {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", outside_code, flags=re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", outside_code)
    assert len(links) >= 10  # the contents line
    assert [x for x in links if x not in anchors] == []
