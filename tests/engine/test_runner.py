"""A training run has one record (`TrainedCell`): its results.json is the record's `run_file`,
and reads back into the same record."""

from __future__ import annotations

import json

from privbench.config import RunConfig, replace_checked
from privbench.engine.loop import EvalPoint, train
from privbench.engine.runner import RUN_ONLY, build, from_run_file, run_file, save_run
from privbench.results import outcome
from privbench.results.store import dumps
from privbench.testing import TINY_RUN


def test_results_json_is_the_run_record_and_reads_back(tmp_path):
    run = replace_checked(RunConfig(), {**TINY_RUN, "rounds": 2, "eval_every": 1,
                                        "max_per_node": 30}, where="run")
    built = build(run, "dp_sgp")
    cell = save_run(built, train(built.trainer), tmp_path, extra={"tuned": None})
    text = (tmp_path / "results.json").read_text()
    result = json.loads(text)
    assert text == dumps({**run_file(cell), "tuned": None})
    assert set(result) == {"schema_version", "kind", "defense", "run", "data_source",
                           "defense_config", "messages", "privacy", "accuracy", "history",
                           "diverged_round", "seconds", "timing", "environment", "tuned"}
    assert set(result["accuracy"]) == {"average_model", "per_node"}
    assert set(result["timing"]) == {"train_seconds", "eval_seconds"}
    assert len(result["history"]) == 2
    assert all(set(h) == set(EvalPoint.__annotations__) for h in result["history"])
    assert (cell.defense, cell.epsilon, cell.status) == ("dp_sgp", run.epsilon, outcome.OK)
    again = from_run_file(result, cell.epsilon)
    assert dumps(run_file(again)) == dumps({k: v for k, v in result.items() if k != "tuned"})
    # an audit's cell file holds the same record without the run's own details
    assert dumps(again.without(*RUN_ONLY).to_json()) == dumps(cell.without(*RUN_ONLY).to_json())
