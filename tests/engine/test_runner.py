"""The typed records of a training run name every key its results.json holds."""

from __future__ import annotations

import json

from privbench.config import RunConfig, replace_checked
from privbench.engine.loop import EvalPoint, train
from privbench.engine.runner import AccuracyJSON, TimingJSON, TrainJSON, build, save_run
from privbench.testing import TINY_RUN


def _keys(td: type) -> set[str]:
    return set(td.__annotations__)  # postponed annotations: all keys, required or not


def test_results_json_holds_the_keys_its_types_declare(tmp_path):
    run = replace_checked(RunConfig(), {**TINY_RUN, "rounds": 2, "eval_every": 1,
                                        "max_per_node": 30}, where="run")
    built = build(run, "dp_sgp")
    save_run(built, train(built.trainer), tmp_path, extra={"tuned": None})
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result) == _keys(TrainJSON) - {"resumed_at"}  # trained in one go
    assert set(result["accuracy"]) == _keys(AccuracyJSON)
    assert set(result["timing"]) == _keys(TimingJSON)
    assert len(result["history"]) == 2
    assert all(set(h) == _keys(EvalPoint) for h in result["history"])
