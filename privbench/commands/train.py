"""`privbench train`: one defense trained, its results and message log written."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privbench.commands.common import (
    EXIT_DIVERGED,
    again_command,
    checkpoint_seconds,
    claim_folder,
    on_interrupt,
    run_config_from_args,
    tuned_entries_from_args,
)
from privbench.errors import PrivbenchError

if TYPE_CHECKING:
    from privbench.config import RunConfig
    from privbench.engine.loop import TrainResult
    from privbench.engine.runner import Built
    from privbench.pipeline.tuning import PrivacyCost, TunedUse
    from privbench.results.records import TrainedCell


def cmd_train(args: argparse.Namespace) -> int:
    """`privbench train`: train one defense, print accuracies, write results and messages.

    With `--backend distributed` this process is one rank of a torchrun launch: it runs its
    block of nodes, and rank 0 writes the merged output.
    """
    run, overrides = run_config_from_args(args)
    said = defaults_used(args, run)
    args.defense = args.defense or DEFAULT_DEFENSE
    if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 says it
        for line in said:
            print(line)
    run, overrides, tuned = _train_tuned(args, run, overrides)
    if args.backend == "local":
        return _train(args, run, overrides, None, None, tuned)
    if args.checkpoint_every is not None:
        raise PrivbenchError("--checkpoint-every: accepted with --backend local only (a rank "
                             "holds its own nodes' state alone)")
    from privbench.engine.comm import DistComm, partition, process_group

    if args.dist_timeout <= 0:
        raise PrivbenchError(f"--dist-timeout must be > 0 seconds, got {args.dist_timeout}")
    partition(run.nodes, int(os.environ.get("WORLD_SIZE", "1")))  # fail before joining
    with process_group(run.device, args.dist_timeout) as device:
        return _train(args, run, overrides, DistComm(run.nodes, device), device, tuned)


DEFAULT_DEFENSE = "sgp"


def defaults_used(args: argparse.Namespace, run: RunConfig) -> list[str]:
    """One line for each default that decides what the run means and that the user did not
    choose (`args.defense` None: no --defense given): the defense (not private unless chosen)
    and a private defense's ε."""
    from privbench import registry
    from privbench.config import RunConfig

    lines = []
    if args.defense is None:
        lines.append(f"defense: {DEFAULT_DEFENSE} (the default, not private; --defense chooses "
                     "one, `privbench list` marks the private ones)")
    name = args.defense or DEFAULT_DEFENSE
    private = name in registry.DEFENSES.names() and registry.DEFENSES.get(name).private
    if private and args.epsilon is None and run.epsilon == RunConfig.epsilon:
        lines.append(f"ε = {run.epsilon:g} per node (the default; --eps chooses)")
    return lines


def _train_tuned(args: argparse.Namespace, run: RunConfig, overrides: dict[str, object],
                 ) -> tuple[RunConfig, dict[str, object], TunedUse | None]:
    """Apply the committed tuned values (any preset's entry tuned for exactly these settings:
    dataset, model, nodes, rounds, batch size, partition, topology, at the run's own ε) to a
    `train` run; the user's flags, --set and --config win, --untuned ignores them. Says which
    entry was used, or why none applies (the run then keeps the untuned defaults)."""
    from privbench.pipeline.tuning import apply_tuned

    if args.untuned:
        return run, overrides, None
    mine = tuned_entries_from_args(args, overrides, every_preset=True).get(args.defense, [])
    keys = {k for e in mine for k in e.get("fixed", {})}
    fixed = {k: v for k, v in overrides.items() if k in keys}  # a paper setting set by --set
    run, tuned, used = apply_tuned(mine, run, run.epsilon, args.defense, fixed)
    if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 says it
        if used["entry"] is not None:
            values = " ".join(f"{k}={v}" for k, v in {**used["run"], **used["defense"]}.items())
            print(f"tuned values for {args.defense} from {used['source']}: {values} (entry "
                  f"{used['entry']}, chosen on a validation split of the members by "
                  f"`{used['command']}`; --untuned ignores them; tuning's privacy cost: "
                  f"{_cost_text(used['privacy_cost'])})")
        elif mine:
            print(f"{args.defense}: {used['reason']} ({_TUNED_FILE})")
    return run, {**tuned, **overrides}, used


_TUNED_FILE = "privbench/presets/tuned.toml"


def _cost_text(cost: PrivacyCost) -> str:
    """'not charged (30 candidates): the cell's ε covers ...' from `tuning.privacy_cost`."""
    k = cost.get("candidates")
    return f"{cost['rule']}{f' ({k} candidates)' if k else ''}: {cost['meaning']}"


def _train(args: argparse.Namespace, run: RunConfig, overrides: Mapping[str, object], comm: Any,
           device: Any, tuned: TunedUse | None = None) -> int:
    """Build, train, save (`comm` None: every node in this process)."""
    rank0 = comm is None or comm.rank == 0
    out = Path(args.out)
    on_interrupt(lambda: _train_kept(args, out))
    with contextlib.ExitStack() as stack:  # rank 0 holds the folder until it has written
        problem = claim_folder(stack, out, "results.json", args.overwrite) if rank0 else None
        agreed = comm.all_ok(problem is None) if comm is not None else problem is None
        if not agreed:  # every rank stops, not only rank 0
            raise problem or PrivbenchError(f"rank 0 cannot write the output folder {out}")
        return _train_into(args, run, overrides, comm, device, tuned, out)


def _train_into(args: argparse.Namespace, run: RunConfig, overrides: Mapping[str, object],
                comm: Any, device: Any, tuned: TunedUse | None, out: Path) -> int:
    """`_train` once `out` is claimed: build, train, write, print (rank 0)."""
    from privbench.engine.checkpoint import prepare
    from privbench.engine.loop import train
    from privbench.engine.messages import parse_record_spec
    from privbench.engine.runner import build, save_run
    from privbench.progress import Phase

    rank0 = comm is None or comm.rank == 0
    every = checkpoint_seconds(args.checkpoint_every, default=0.0)
    built = build(run, args.defense, overrides, policy=parse_record_spec(args.record, run.rounds),
                  comm=comm, device=device)
    start, so_far, saver = 0, None, None
    if every > 0:
        start, so_far, saver = prepare(
            out / "checkpoint.ckpt", built, _train_fingerprint(args, built), every,
            None if args.quiet else
            (lambda note: print(f"train {built.defense}: {note}", file=sys.stderr)))
    with Phase(f"train {args.defense}", run.rounds, "round", initial=start,
               enabled=not args.quiet and rank0) as bar:
        res = train(built.trainer, progress=bar.update, start=start, result=so_far,
                    after_round=saver)
    cell = save_run(built, res, out, extra={"tuned": tuned})
    if saver is not None:  # the run's results are written: its checkpoint has served
        saver.path.unlink(missing_ok=True)
    if rank0:
        _print_train(built, res, cell, out, comm)
    return 0 if res.diverged_round is None else EXIT_DIVERGED


def _train_fingerprint(args: argparse.Namespace, built: Any) -> str:
    """What determines a `privbench train` run's result, hashed: the key of its checkpoint
    (with the code and device, `checkpoint.prepare`): defense, both configurations, the
    `--record` rounds, the dataset, the privbench and torch versions and the thread count."""
    import torch

    from privbench import __version__
    from privbench.config import to_dict
    from privbench.results.fingerprint import dataset_identity, fingerprint

    run = built.ctx.run
    return fingerprint({"command": "train", "defense": built.defense,
                        "run": {k: v for k, v in to_dict(run).items() if k != "device"},
                        "defense_config": to_dict(built.trainer.cfg), "record": args.record,
                        "data": dataset_identity(run.dataset, run.data_root, run.download),
                        "versions": {"privbench": __version__, "torch": torch.__version__},
                        "threads": torch.get_num_threads()})["sha256"]


def _print_train(built: Built, res: TrainResult, cell: TrainedCell, out: Path,
                 comm: Any) -> None:
    from privbench.device import device_description
    from privbench.results.outcome import diverged_in
    from privbench.results.store import noise_feedback_text, privacy_line

    run = built.ctx.run
    if res.node_accuracy:
        nodes = " ".join(f"{a:.3f}" for a in res.node_accuracy)
        last = res.history[-1] if res.history else {}
        on = last.get("node_test_samples")
        where = (f" (on {on:,} test samples)" if on is not None
                 and on != last.get("test_samples") else "")
        print(f"per-node test accuracy{where}: {nodes}")
    where = f", {comm.world} ranks" if comm is not None else ""
    print(f"average-model test accuracy: {res.average_accuracy:.4f}  "
          f"({res.seconds:.1f} s, of which evaluation {res.eval_seconds:.1f} s; "
          f"device {device_description(built.ctx.device)}{where})")
    print(f"data: {run.dataset} from {built.data_source}")
    for rep in cell.privacy:
        if rep.get("node", 0) == 0:
            print(f"privacy (node 0): {privacy_line(rep)}")
    what = "the merged message log" if comm is not None else "the message log"
    print(f"wrote {out / 'results.json'}, models.safetensors and {what}")
    if res.diverged_round is not None:
        why = noise_feedback_text(cell.privacy)
        print(f"privbench: training diverged: {diverged_in(res.diverged_round, run.rounds)}"
              + (f"; {why}" if why else ""), file=sys.stderr)


def _train_kept(args: argparse.Namespace, out: Path) -> str:
    """`train` stopped: its checkpoint, if it saved one, else nothing of the run."""
    ckpt = out / "checkpoint.ckpt"
    if args.checkpoint_every is not None and ckpt.is_file():
        return f"kept: the checkpoint {ckpt}; `{again_command(args)}` continues from it"
    if args.checkpoint_every is not None:
        return (f"no checkpoint was saved yet, nothing of the run is kept; "
                f"`{again_command(args)}` starts again")
    return (f"nothing of the run is kept (results.json is written when it ends); "
            f"`{again_command(args, '--checkpoint-every')} MINUTES` saves checkpoints a stopped "
            "run continues from")
