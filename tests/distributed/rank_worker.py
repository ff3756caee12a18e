"""One torchrun rank of the distributed tests: `privbench train --backend distributed` per defense.

    torchrun --standalone --nproc-per-node P tests/distributed/rank_worker.py OUT ITEM... \
        [-- TRAIN-OPTION...]

An ITEM is a defense name (written to OUT/NAME) or FOLDER=NAME@KEY=VALUE@... (written to
OUT/FOLDER, with those `--set` overrides).

The process group is joined once and every defense is trained through the real CLI entry point
(`privbench.cli.main`), which uses the open group, so one launch covers every defense. The
environment variable PRIVBENCH_TEST_DIE=RANK:ROUND makes that rank SIGKILL itself after that
round (the rank-death test).
"""

from __future__ import annotations

import os
import signal
import sys

import torch.distributed as dist

import privbench.engine.loop
from privbench.cli import main
from privbench.commands.common import EXIT_DIVERGED
from privbench.engine.comm import exit_process, process_group


def _die_after(rank: int, rnd: int) -> None:
    """Wrap the round loop so that `rank` kills itself after round `rnd`."""
    if dist.get_rank() != rank:
        return
    real = privbench.engine.loop.train

    def train(trainer, progress=None, **loop):
        done = [0]

        def tick(k: int) -> None:
            done[0] += k
            if done[0] > rnd:
                os.kill(os.getpid(), signal.SIGKILL)
            if progress is not None:
                progress(k)

        return real(trainer, progress=tick, **loop)  # the loop's other options as given

    privbench.engine.loop.train = train


def run() -> int:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    out, defenses = args[0], args[1:]
    with process_group("cpu", timeout_s=60):  # gloo, joined once for every defense
        if os.environ.get("PRIVBENCH_TEST_DIE"):
            rank, rnd = map(int, os.environ["PRIVBENCH_TEST_DIE"].split(":"))
            _die_after(rank, rnd)
        for item in defenses:
            head, sep, rest = item.partition("=")
            folder, spec = (head, rest) if sep and "@" not in head else ("", item)
            name, *sets = spec.split("@")
            folder = folder or name
            options = [a for kv in sets for a in ("--set", kv)]
            code = main(["train", "--backend", "distributed", "--defense", name, "--quiet",
                         "--out", os.path.join(out, folder), *extra, *options])
            if code not in (0, EXIT_DIVERGED):  # a diverged run is compared like any other
                return code
    return 0


if __name__ == "__main__":
    exit_process(run())  # as the CLI does after a distributed run
