"""One line of a reproduction's runs.jsonl, as `privbench.reproduce.runs` writes and reads it.

A `TypedDict`, not a dataclass: a line is read and written as the JSON object it is (its keys
sorted on writing), and a line of an older format lacks the keys added since (`NotRequired`),
which readers test with `in` / `.get`.
"""

# No `from __future__ import annotations` here: `RunLine.__required_keys__` must see
# `NotRequired` (string annotations hide it), and the tests compare lines with it.
from typing import NotRequired, TypedDict

from privbench.config import FieldValue, JSONObject


class CodeRecord(TypedDict):
    """The code that made a line (`privbench.results.provenance.code_provenance`)."""

    revision: str
    sha256: str


class LineConfig(TypedDict):
    """A line's full configuration: the run (`config.to_dict`) and the defense overrides."""

    run: JSONObject
    defense: dict[str, FieldValue]


class RunLine(TypedDict):
    """One (method, grid value, seed) run: what it was, what it gave, what determines it."""

    format: str
    reproduction: str
    scale: str
    method: str  # the table row's label
    defense: str
    eps: float | None  # the grid value (ε, or a defense field's); None: a non-private method
    seed: int
    accuracy: float
    node_accuracy_mean: NotRequired[float | None]
    epsilon_paper: NotRequired[float | None]
    epsilon_calibrated: NotRequired[float | None]
    diverged_round: int | None
    seconds: float
    resumed_at: NotRequired[list[int]]  # rounds it continued from a checkpoint at
    device: str
    machine: NotRequired[str]  # the kind of machine (`privbench.device.machine_kind`)
    code: NotRequired[CodeRecord]
    fingerprint: str  # the sha256 of `fields`
    structure: NotRequired[JSONObject]  # `Trainer.structure` of what was built
    config: NotRequired[LineConfig]
    fields: JSONObject  # the fingerprint's flattened fields, as hashed
