"""Composition: config -> data, model, graph, bus -> trainer -> training -> results on disk.

The only module (with the CLI) that imports `defenses/` and `attacks/`.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from privbench.config import JSONObject, RunConfig, replace_checked, to_dict
from privbench.data.datasets import NodeData, carve_validation, load_dataset, split_nodes
from privbench.device import device_description, machine_kind, resolve_device
from privbench.engine.comm import Comm
from privbench.engine.loop import TrainResult
from privbench.engine.messages import MessageBus, MessageLog, RecordPolicy
from privbench.engine.trainer import Context, Trainer, node_models
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError, PrivbenchError
from privbench.models import build_model
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.results import outcome
from privbench.results.provenance import code_provenance
from privbench.results.records import TrainedCell
from privbench.results.store import SCHEMA_VERSION, write_json
from privbench.seeding import Streams, derive_seed
from privbench.topology import build_topology

RUN_ONLY = ("run", "data_source", "diverged_round", "resumed_at", "seconds", "eval_seconds",
            "environment")
"""The details of a trained run that its own results.json holds (`run_file`) and an audit's
cell file leaves out (the audit records the run and environment once, timings apart)."""


@dataclass
class Built:
    """A trainer with its context, ready to train."""

    trainer: Trainer
    ctx: Context
    defense: str
    split_digest: str = ""
    data_source: str = "embedded"
    saved_privacy: list[JSONObject] | None = None  # the claims of a run loaded from disk

    def privacy(self) -> list[JSONObject]:
        """The run's privacy reports: those the trainer computes, or, for a saved run whose
        messages were loaded (`privbench attack --messages`), those it wrote."""
        if self.saved_privacy is not None:
            return self.saved_privacy
        return self.trainer.privacy()


def split_digest(data: NodeData) -> str:
    """SHA-256 of the member / non-member split (every node's member and held-out indices)."""
    from privbench.results.fingerprint import tensors_sha256

    return tensors_sha256((data.idx, data.counts, data.idx_out, data.counts_out), torch.int64)


def with_default_topology(run: RunConfig, cls: type[Trainer]) -> RunConfig:
    """`run` with topology "auto" replaced by the defense's default graph (recorded in the run
    it trains)."""
    return replace(run, topology=cls.default_topology) if run.topology == "auto" else run


@functools.lru_cache(maxsize=8)
def _inputs(dataset: str, root: str | None, download: bool) -> tuple[tuple[int, ...], int]:
    """(input shape, number of classes) of a dataset (loaded once per process)."""
    ds = load_dataset(dataset, root, download)
    return tuple(ds.input_shape), ds.num_classes


def structure(run: RunConfig, defense: str, overrides: Mapping[str, object] | None = None
              ) -> JSONObject:
    """What this code builds from a run's configuration (`Trainer.structure`: the model's
    parameter and layer counts, a split's shared coordinates), without its data or training:
    part of a result's fingerprint, so a code change that makes another model or split of the
    same configuration leaves old results stale instead of matching."""
    load_plugins()
    cls = DEFENSES.get(defense)
    cfg = replace_checked(cls.Config(), overrides or {}, where="defense")
    shape, classes = _inputs(run.dataset, run.data_root, run.download)
    return cls.structure(build_model(run.model, shape, classes), cfg)


def build(run: RunConfig, defense: str, overrides: Mapping[str, object] | None = None,
          policy: RecordPolicy | None = None, comm: Comm | None = None,
          device: torch.device | None = None, validation: float = 0.0) -> Built:
    """Build data, model, topology, bus and the named defense's trainer for `run`.

    Args:
        comm: where the nodes run (default: all in this process). With several ranks this
            rank keeps only its nodes' data, and the bus brings other ranks' messages.
        device: the device to use instead of resolving `run.device` (a rank's GPU).
        validation: > 0: carve this fraction of every node's members into a validation split
            that replaces the test set (tuning; `data.carve_validation`).
    """
    load_plugins()
    # the code's identity, read before anything trains (cached per process): a result written
    # at the end of an hour-long run names the code this process imported, not a later commit
    code_provenance()
    comm = comm or Comm()
    cls = DEFENSES.get(defense)
    cfg = replace_checked(cls.Config(), overrides or {}, where="defense")
    run = with_default_topology(run, cls)
    device = device or resolve_device(run.device)
    streams = Streams(run.seed, device)
    ds = load_dataset(run.dataset, run.data_root, run.download)
    data = split_nodes(ds, run.nodes, run.partition, run.alpha, run.holdout,
                       seed=derive_seed(run.seed, "data"), max_per_node=run.max_per_node)
    if validation > 0:
        data = carve_validation(ds, data, validation, derive_seed(run.seed, "validation"))
    fm = build_model(run.model, ds.input_shape, ds.num_classes).to(device)
    topo = build_topology(run.topology, run.nodes, streams.get("topology", device="cpu"),
                          k=run.out_degree, time_varying=run.time_varying,
                          symmetric=True if cls.mixing == "doubly" else None)
    if cls.mixing == "doubly" and not topo.undirected:
        raise ConfigError(f"defense {defense!r} gossips on an undirected graph; topology "
                          f"{run.topology!r} is directed (use ring, complete, two_hub, random_out)")
    digest = split_digest(data)  # of the whole network's split, before a rank keeps its part
    if comm.distributed:
        data = data.restrict(comm.mine(run.nodes))
    policy = policy or RecordPolicy()
    bus = MessageBus(cls.kinds, policy, comm=comm)
    ctx = Context(run, fm, data.to(device), topo, bus, GroundTruth(policy), streams, device, comm)
    ctx.truth.split_digest = digest
    return Built(cls(cfg, ctx), ctx, defense, digest, ds.source)


def check_split(built: Built, folder: str | Path) -> None:
    """Refuse a saved run whose member/non-member split, rebuilt from its results.json, differs
    from the digest stored with its ground truth (an edited config would grade attacks against
    the wrong split)."""
    from privbench.engine.truth import GroundTruth

    recorded = GroundTruth.load(folder).split_digest
    if recorded != built.split_digest:
        raise PrivbenchError(f"{folder}: the member/non-member split rebuilt from results.json "
                             "does not match the digest stored with the ground truth "
                             "(results.json was edited, or the log predates split digests); "
                             "refusing to grade attacks against it")


def environment(device: torch.device) -> dict[str, str]:
    """Versions, the code's commit and the device, for reproducibility sections of results and
    reports."""
    import numpy

    from privbench import __version__

    code = code_provenance()
    return {"privbench": __version__, "code": code["revision"], "code_sha256": code["sha256"],
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "device": device_description(device),
            "machine": machine_kind(device), "platform": platform.platform()}


def train_result(built: Built, res: TrainResult) -> TrainedCell:
    """The record of a training run (`run_file` is its results.json)."""
    trainer, ctx = built.trainer, built.ctx
    status = (outcome.OK if res.diverged_round is None
              else outcome.diverged_in(res.diverged_round, ctx.run.rounds))
    detail = {"node_accuracy": res.node_accuracy, "defense_config": to_dict(trainer.cfg),
              "history": res.history, "run": to_dict(ctx.run), "data_source": built.data_source,
              "diverged_round": res.diverged_round,
              **({"resumed_at": res.resumed_at} if res.resumed_at else {}),  # continued
              "seconds": res.seconds, "eval_seconds": res.eval_seconds,
              "environment": {**environment(ctx.device), "ranks": ctx.comm.world}}
    return TrainedCell(built.defense, ctx.run.epsilon if trainer.private else None, status,
                       res.average_accuracy, tuple(_node_reports(ctx.comm, trainer.privacy())),
                       tuple(k.to_dict() for k in trainer.kinds), detail)


def run_file(cell: TrainedCell) -> JSONObject:
    """A trained run's results.json (`privbench train`; `from_run_file` reads it back)."""
    d = cell.detail
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "train",
        "defense": cell.defense,
        "run": d["run"],  # `config.to_dict` of the RunConfig it trained
        "data_source": d["data_source"],
        "defense_config": d["defense_config"],
        "messages": list(cell.messages),  # the message kinds (`MessageKind.to_dict`)
        "privacy": list(cell.privacy),  # `Trainer.privacy`'s per-node reports
        "accuracy": {"average_model": cell.accuracy, "per_node": d["node_accuracy"]},
        "history": d["history"],
        "diverged_round": d["diverged_round"],
        **({"resumed_at": d["resumed_at"]} if "resumed_at" in d else {}),
        "seconds": d["seconds"],
        "timing": {"train_seconds": d["seconds"] - d["eval_seconds"],
                   "eval_seconds": d["eval_seconds"]},
        "environment": d["environment"],  # `environment` and the number of ranks
    }


def from_run_file(data: JSONObject, epsilon: float | None) -> TrainedCell:
    """The record of a trained run's results.json (`run_file`), calibrated for `epsilon` (None:
    not private); its status measured, or diverged. Keys an older file lacks read as empty."""
    detail = {"node_accuracy": data["accuracy"]["per_node"],
              "defense_config": data.get("defense_config", {}),
              "history": data.get("history", []),
              **{k: data[k] for k in ("run", "data_source", "diverged_round", "resumed_at",
                                      "seconds", "environment") if k in data}}
    if "timing" in data:
        detail["eval_seconds"] = data["timing"]["eval_seconds"]
    return TrainedCell(data["defense"], epsilon,
                       outcome.OK if data.get("diverged_round") is None else outcome.diverged(),
                       data["accuracy"]["average_model"], tuple(data.get("privacy", [])),
                       tuple(data["messages"]), detail)


def _node_reports(comm: Comm, reports: list[JSONObject]) -> list[JSONObject]:
    """Per-node privacy reports, each from the rank that runs its node (every rank builds the
    same list layout; a report without a node is the same on every rank)."""
    if not comm.distributed:
        return reports
    lists = comm.gather_objects(reports)
    owner = comm.owner.tolist()  # type: ignore[union-attr]
    return [lists[owner[rep["node"]]][k] if "node" in rep else rep
            for k, rep in enumerate(lists[0])]


def save_run(built: Built, res: TrainResult, out: str | Path,
             extra: Mapping[str, object] | None = None) -> TrainedCell:
    """Write results.json, the final models, the message log and the ground truth into `out`.

    With several ranks the ranks' logs and ground truths are merged on rank 0, which alone
    writes; every rank returns only once rank 0 has written (or raises if it could not), so no
    rank leaves the process group while another still uses it. Files are written into a hidden
    sibling folder first and moved in with results.json last, so a run that fails midway leaves
    no partial output.
    """
    ctx = built.ctx
    cell = train_result(built, res)
    result = {**run_file(cell), **(extra or {})}
    models = node_models(built.trainer).detach().cpu().contiguous()  # (n, d)
    log, truth = ctx.bus.log, ctx.truth
    if not ctx.comm.distributed:
        _write_folder(Path(out), result, models, log, truth)
        return cell
    parts = ctx.comm.gather_objects((log, truth), dst=0)  # [] on ranks other than 0
    problem = None
    if ctx.comm.rank == 0:
        try:
            _write_folder(Path(out), result, models, MessageLog.merge(p[0] for p in parts),
                          GroundTruth.merge(p[1] for p in parts))
        except PrivbenchError as exc:
            problem = exc
    if not ctx.comm.all_ok(problem is None):
        raise problem or PrivbenchError(f"rank 0 could not write the output folder {out}")
    return cell


def _write_folder(out: Path, result: JSONObject, models: torch.Tensor, log: MessageLog,
                  truth: GroundTruth) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        log.save(tmp)
        truth.save(tmp)
        save_file({"models": models}, str(tmp / "models.safetensors"))
        write_json(tmp / "results.json", result)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("messages.safetensors", "messages.json", "ground_truth.safetensors",
                     "models.safetensors", "results.json"):  # results.json last
            os.replace(tmp / name, out / name)
    except OSError as exc:
        raise PrivbenchError(f"cannot write {out}: {exc.strerror or exc}") from None
    except SafetensorError as exc:  # e.g. a full disk while saving tensors
        reason = str(exc).replace("\n", " ")
        raise PrivbenchError(f"cannot write {out}: {reason}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
