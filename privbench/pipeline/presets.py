"""The audit presets of `privbench attack` (`--preset`) and the grids of `privbench tune --all`,
read from their data file (`privbench/presets/audit.toml`).

Plain data with no heavy import (no torch), so that `privbench attack --help` can show the
presets' run values without loading the sweep; `privbench.pipeline.sweep` reads them from here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from privbench.config import FieldValue

PRESETS_FILE = Path(__file__).parents[1] / "presets" / "audit.toml"


class AuditPreset(TypedDict):
    """One `[preset]` table of audit.toml (arrays as tuples)."""

    run: dict[str, FieldValue]  # RunConfig fields over the defaults
    eps: tuple[float, ...]
    attacks: tuple[str, ...]
    inversion_rounds: tuple[int, ...]
    reference_models: int
    inversion_batch_sizes: NotRequired[tuple[int, ...]]
    pool_victims: NotRequired[bool]
    attack_config: dict[str, dict[str, FieldValue]]  # per attack, its settings
    paper_settings: NotRequired[dict[str, dict[str, FieldValue]]]  # per defense, fixed values
    paper_readings: NotRequired[dict[str, dict[str, FieldValue]]]


def _frozen(value: Any) -> Any:
    """TOML arrays as tuples, inside tables too (presets are read, never changed)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _load(path: Path = PRESETS_FILE) -> dict[str, object]:
    with path.open("rb") as fh:
        return _frozen(tomllib.load(fh))


_DATA = _load()
TUNE_GRIDS = cast(dict[str, tuple[str, ...]], _DATA.pop("tune_grids"))
"""Per default defense, the `--grid` items `privbench tune --all` searches."""
# every other top-level table is a preset (the file's layout, kept by its tests)
PRESETS = cast(dict[str, AuditPreset], _DATA)
"""Per preset: its run settings (`run`), ε grid, attacks and their settings, inversion rounds
and batch sizes, reference models, pooled victims, and the paper's settings and readings."""
