"""Composition: config -> data, model, graph, bus -> trainer -> training -> results on disk.

The only module (with the CLI) that imports `defenses/` and `attacks/`.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from privbench.config import RunConfig, replace_checked, to_dict
from privbench.data import load_dataset, split_nodes
from privbench.device import device_description, resolve_device
from privbench.engine import Context, Trainer, TrainResult
from privbench.errors import ConfigError
from privbench.messages import GroundTruth, MessageBus, RecordPolicy
from privbench.models import build_model
from privbench.registry import DEFENSES, load_plugins
from privbench.results import SCHEMA_VERSION, write_json
from privbench.seeding import Streams, derive_seed
from privbench.topology import build_topology


@dataclass
class Built:
    """A trainer with its context, ready to train."""

    trainer: Trainer
    ctx: Context
    defense: str


def build(run: RunConfig, defense: str, overrides: dict[str, Any] | None = None,
          policy: RecordPolicy | None = None) -> Built:
    """Build data, model, topology, bus and the named defense's trainer for `run`."""
    load_plugins()
    cls = DEFENSES.get(defense)
    cfg = replace_checked(cls.Config(), overrides or {}, where="defense")
    device = resolve_device(run.device)
    streams = Streams(run.seed, device)
    ds = load_dataset(run.dataset, run.data_root, run.download)
    data = split_nodes(ds, run.nodes, run.partition, run.alpha, run.holdout,
                       seed=derive_seed(run.seed, "data"), max_per_node=run.max_per_node)
    fm = build_model(run.model, ds.input_shape, ds.num_classes).to(device)
    topo = build_topology(run.topology, run.nodes, streams.get("topology", device="cpu"),
                          k=run.out_degree, time_varying=run.time_varying,
                          symmetric=True if cls.mixing == "doubly" else None)
    if cls.mixing == "doubly" and not topo.undirected:
        raise ConfigError(f"defense {defense!r} gossips on an undirected graph; topology "
                          f"{run.topology!r} is directed (use ring, complete, two_hub, random_out)")
    policy = policy or RecordPolicy()
    bus = MessageBus(cls.kinds, policy)
    ctx = Context(run, fm, data.to(device), topo, bus, GroundTruth(policy), streams, device)
    return Built(cls(cfg, ctx), ctx, defense)


def environment(device: torch.device) -> dict[str, str]:
    """Versions and device, for reproducibility sections of results and reports."""
    import numpy

    return {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "device": device_description(device),
            "platform": platform.platform()}


def train_result(built: Built, res: TrainResult) -> dict[str, Any]:
    """The results JSON of a training run."""
    trainer, ctx = built.trainer, built.ctx
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "train",
        "defense": built.defense,
        "run": to_dict(ctx.run),
        "defense_config": to_dict(trainer.cfg),
        "messages": [k.to_dict() for k in trainer.kinds],
        "privacy": trainer.privacy(),
        "accuracy": {"average_model": res.average_accuracy, "per_node": res.node_accuracy},
        "history": res.history,
        "diverged_round": res.diverged_round,
        "seconds": res.seconds,
        "environment": environment(ctx.device),
    }


def save_run(built: Built, res: TrainResult, out: str | Path) -> dict[str, Any]:
    """Write results.json, the message log and the ground truth into `out`."""
    out = Path(out)
    result = train_result(built, res)
    built.ctx.bus.log.save(out)
    built.ctx.truth.save(out)
    write_json(out / "results.json", result)
    return result
