"""Evaluation: per-model accuracy in chunks, the fixed intermediate subset, the full final test
set, and evaluation time reported apart from training time."""

from __future__ import annotations

import torch

from privbench.config import RunConfig, replace_checked
from privbench.engine.evaluation import accuracy, eval_subset, evaluate
from privbench.engine.loop import train
from privbench.engine.runner import build, run_file, train_result
from privbench.models import build_model
from privbench.testing import TINY_RUN


def test_accuracy_matches_a_plain_forward_per_model(digits):
    fm = build_model("cnn", digits.input_shape, 10)
    gen = torch.Generator().manual_seed(0)
    params = torch.stack([fm.init(gen) for _ in range(3)])  # (3, d)
    x, y = digits.x_test[:150], digits.y_test[:150]
    want = torch.stack([(fm.forward(p, x).argmax(-1) == y).float().mean() for p in params])
    for chunk in (None, 7, 1000):
        assert torch.allclose(accuracy(fm, params, x, y, chunk=chunk), want)


def test_eval_subset_is_fixed_and_none_for_the_whole_set():
    a, b = eval_subset(10_000, 1000, torch.device("cpu")), eval_subset(10_000, 1000,
                                                                         torch.device("cpu"))
    assert torch.equal(a, b) and len(a) == 1000 and len(set(a.tolist())) == 1000
    assert torch.all(a[1:] > a[:-1]) and int(a.max()) < 10_000
    assert eval_subset(360, 0, torch.device("cpu")) is None
    assert eval_subset(360, 360, torch.device("cpu")) is None


def test_intermediate_rounds_use_the_subset_and_the_last_the_whole_test_set():
    run = replace_checked(RunConfig(), {**TINY_RUN, "rounds": 6, "eval_every": 2,
                                        "eval_subset": 100}, where="run")
    built = build(run, "sgp")
    res = train(built.trainer)
    assert [h["test_samples"] for h in res.history] == [100, 100, 360]
    # the n node models stay on the fixed subset at the end; the average model reads all 360
    assert [h["node_test_samples"] for h in res.history] == [100, 100, 100]
    node_acc, avg_acc = evaluate(built.trainer, subset=0, node_subset=100)
    assert res.node_accuracy == node_acc.tolist() and res.average_accuracy == avg_acc
    full_nodes, full_avg = evaluate(built.trainer, subset=0)
    assert full_avg == avg_acc and len(full_nodes) == len(node_acc)
    assert 0 < res.eval_seconds < res.seconds
    timing = run_file(train_result(built, res))["timing"]
    assert abs(timing["train_seconds"] + timing["eval_seconds"] - res.seconds) < 1e-9
