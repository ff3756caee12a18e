"""The round loop, which exists once: every defense's rounds run through `train`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import torch

from privbench.engine.evaluation import eval_count, evaluate
from privbench.engine.trainer import Trainer, node_models


class EvalPoint(TypedDict):
    """One evaluation of the round loop (a line of a result's `history`)."""

    round: int
    average_accuracy: float
    mean_node_accuracy: float
    test_samples: int  # of the average model's evaluation
    node_test_samples: int  # of each node's


@dataclass
class TrainResult:
    """Outcome of the round loop."""

    history: list[EvalPoint] = field(default_factory=list)
    node_accuracy: list[float] = field(default_factory=list)
    average_accuracy: float = float("nan")
    seconds: float = 0.0
    eval_seconds: float = 0.0
    diverged_round: int | None = None
    # rounds at which the loop continued a run from a checkpoint (`train`'s `start`); empty
    # for a run trained in one go
    resumed_at: list[int] = field(default_factory=list)


def all_finite(trainer: Trainer) -> bool:
    """Whether every node's current model is finite (one isfinite reduction over this rank's
    rows of the stacked (n, d) models; every rank gets the same answer)."""
    ctx = trainer.ctx
    z = trainer.models()  # (n, d)
    ok = bool(torch.isfinite(z[ctx.comm.mine(ctx.n, z.device)]).all())
    return ctx.comm.all_ok(ok) if ctx.comm.distributed else ok


def train(trainer: Trainer, progress: Callable[[int], None] | None = None,
          rounds: int | None = None, start: int = 0, result: TrainResult | None = None,
          after_round: Callable[[int, TrainResult], None] | None = None,
          before_round: Callable[[int], None] | None = None,
          evaluations: bool = True) -> TrainResult:
    """The round loop: rounds, periodic evaluation, a finiteness check after every round.

    A run whose models stop being finite stops at that round (`diverged_round`, 0-based).

    Intermediate evaluations use the run's fixed `eval_subset` of the test set; the last one
    evaluates the average model (the headline accuracy) on the whole test set and the n node
    models on the fixed subset (n whole-test-set passes of a CNN on Fashion-MNIST were most of
    the evaluation time); their time is kept apart (`eval_seconds`, included in `seconds`).

    Args:
        trainer: a built trainer.
        progress: called with 1 after every round (e.g. a tqdm bar's update).
        rounds: stop after this many of the configured rounds (None: all). The noise stays
            calibrated for the configured run: used to release the first rounds' messages of a
            run exactly as the full run would (the audit's inversion views).
        start, result: continue a run whose first `start` rounds are done, with the loop's
            result so far (`privbench.engine.checkpoint.load` restores both and the trainer); its
            seconds add up, and `start` is noted in `resumed_at`.
        after_round: called with the rounds done and the result so far after every round that
            did not diverge (a checkpoint's chance to save: `privbench.engine.checkpoint.Saver`).
        before_round: called with t before round t runs (the mechanism audit replays the
            round from this state: `privbench.audit.mechanism`).
        evaluations: False skips every evaluation (a run trained only for what it sends).
    """
    run = trainer.ctx.run
    result = result if result is not None else TrainResult()
    if start:
        result.resumed_at.append(start)
    before, tic0 = result.seconds, time.perf_counter()
    for t in range(start, run.rounds if rounds is None else min(rounds, run.rounds)):
        if before_round is not None:
            before_round(t)
        trainer.round(t)
        if progress is not None:
            progress(1)
        if not all_finite(trainer):
            result.diverged_round = t
            break
        last = t + 1 == run.rounds
        if evaluations and ((t + 1) % run.eval_every == 0 or last):
            z = node_models(trainer)  # (n, d), gathered once
            tic = time.perf_counter()
            subset = 0 if last else run.eval_subset
            node_acc, avg_acc = evaluate(trainer, z, subset, run.eval_subset)
            result.eval_seconds += time.perf_counter() - tic
            n_test = len(trainer.ctx.data.y_test)
            result.history.append({"round": t + 1, "average_accuracy": avg_acc,
                                   "mean_node_accuracy": float(node_acc.mean()),
                                   "test_samples": eval_count(subset, n_test),
                                   "node_test_samples": eval_count(run.eval_subset, n_test)})
            result.node_accuracy, result.average_accuracy = node_acc.tolist(), avg_acc
        if after_round is not None:
            result.seconds = before + time.perf_counter() - tic0
            after_round(t + 1, result)
    result.seconds = before + time.perf_counter() - tic0
    return result
