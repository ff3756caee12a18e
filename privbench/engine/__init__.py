"""What a defense is written against, in one import site.

A run is n nodes whose parameters are one `(n, d)` tensor. A defense is a `Trainer` that runs
one round as: local step (gradients and clipped sums from `grads`) -> messages out through the
bus (`push_sum` / `gossip` with a `Mixer`, or `ctx.bus` directly) -> combine. The round loop
(`train`) exists once. `GroundTruth` (what each node drew) is recorded by `Context.draw` and read
only when attacks are graded.

    from privbench.engine import Trainer, MessageKind, Mixer, gossip, clipped_grad_sum
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privbench.plugins import lazy_names

# name -> the module of privbench.engine that defines it; imported on first use, so that a
# light module of the engine (hostmem) does not load torch with the package
_WHERE = {
    "accuracy": "evaluation", "evaluate": "evaluation",
    "batch_grads": "grads", "clip_l1": "grads", "clip_l2": "grads",
    "clipped_grad_sum": "grads", "masked_sum": "grads", "per_sample_grads": "grads",
    "TrainResult": "loop", "all_finite": "loop", "train": "loop",
    "MessageBus": "messages", "MessageKind": "messages", "MessageLog": "messages",
    "RecordPolicy": "messages",
    "Mixer": "mixing", "gossip": "mixing", "push_sum": "mixing",
    "Context": "trainer", "Trainer": "trainer", "node_models": "trainer",
    "GroundTruth": "truth",
}
__all__ = [
    "Context", "GroundTruth", "MessageBus", "MessageKind", "MessageLog", "Mixer", "RecordPolicy",
    "TrainResult", "Trainer", "accuracy", "all_finite", "batch_grads", "clip_l1", "clip_l2",
    "clipped_grad_sum", "evaluate", "gossip", "masked_sum", "node_models", "per_sample_grads",
    "push_sum", "train",
]
__getattr__ = lazy_names(__name__, _WHERE)


if TYPE_CHECKING:
    from privbench.engine.evaluation import accuracy, evaluate
    from privbench.engine.grads import (
        batch_grads,
        clip_l1,
        clip_l2,
        clipped_grad_sum,
        masked_sum,
        per_sample_grads,
    )
    from privbench.engine.loop import TrainResult, all_finite, train
    from privbench.engine.messages import MessageBus, MessageKind, MessageLog, RecordPolicy
    from privbench.engine.mixing import Mixer, gossip, push_sum
    from privbench.engine.trainer import Context, Trainer, node_models
    from privbench.engine.truth import GroundTruth
