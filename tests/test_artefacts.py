"""Every committed leakage map under reports/ was made by a version whose layout the code at hand
writes: its format is the current one and it holds exactly the keys the current records declare
(a map of an older layout fails here until it is made again). The committed audits' results
round-trip through the current record (`tests/results/test_records.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_type_hints

import pytest

from privbench.audit.leakage import (
    LEAKAGE_FORMAT,
    LeakageCell,
    LeakageConfigDict,
    LeakageMap,
    LeakageRow,
    PlacementRecord,
)

REPORTS = Path(__file__).resolve().parent.parent / "reports"
LEAKAGE_MAPS = sorted(REPORTS.glob("*/leakage.json"))


def _keys(record: type) -> set[str]:
    return set(get_type_hints(record))


def layout_problems(doc: dict) -> list[str]:
    """What in a leakage map differs from the layout the current code writes."""
    problems = []
    if doc.get("format") != LEAKAGE_FORMAT:
        problems.append(f"format {doc.get('format')!r}, the code writes {LEAKAGE_FORMAT!r}")
    for where, obj, record in [("map", doc, LeakageMap),
                               ("config", doc.get("config", {}), LeakageConfigDict),
                               *[(f"placement {i}", p, PlacementRecord)
                                 for i, p in enumerate(doc.get("placements", []))],
                               *[(f"cell {c.get('defense')}", c, LeakageCell)
                                 for c in doc.get("cells", [])],
                               *[(f"row {c.get('defense')}/{r.get('placement')}", r, LeakageRow)
                                 for c in doc.get("cells", []) for r in c.get("rows", [])]]:
        if set(obj) != _keys(record):
            problems.append(f"{where}: keys {sorted(set(obj) ^ _keys(record))} differ from "
                            f"{record.__name__}")
    return problems


@pytest.mark.parametrize("path", LEAKAGE_MAPS, ids=[p.parent.name for p in LEAKAGE_MAPS])
def test_each_committed_leakage_map_has_the_current_layout(path):
    assert not layout_problems(json.loads(path.read_text(encoding="utf-8")))


def test_an_older_layout_is_found():
    doc = json.loads(LEAKAGE_MAPS[0].read_text(encoding="utf-8"))
    old = {k: v for k, v in doc.items() if k != "environment"}
    assert any("map: keys ['environment']" in p for p in layout_problems(old))
    assert layout_problems({**doc, "format": "privbench-leakage/0"})

