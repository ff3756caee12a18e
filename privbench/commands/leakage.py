"""`privbench leakage`: the leakage map from the command line."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from privbench.commands.common import (
    claim_folder,
    ends_kept,
    float_list,
    int_tuple,
    name_list,
    on_interrupt,
)


def cmd_leakage(args: argparse.Namespace) -> int:
    """`privbench leakage`: the leakage map (attacks by hop distance, network DP)."""
    from privbench.audit.leakage import config_from, run_leakage
    from privbench.data.files import check_data_root
    from privbench.report.leakage import (
        by_distance,
        markdown,
        render_leakage,
        terminal_summary,
    )
    from privbench.results.store import atomic_write_text, dumps

    check_data_root(args.data_root)
    from privbench.engine import threads

    threads.apply(threads.choose_threads(threads.machine(), None, args.threads)["threads"])
    defenses = name_list(args.defense)
    cfg = config_from({
        "dataset": args.dataset, "data_root": args.data_root, "model": args.model,
        "defenses": tuple(defenses) if defenses else None,
        "eps": tuple(e) if (e := float_list(args.eps_grid, "--eps")) else None,
        "nodes": args.nodes, "topology": args.topology, "rounds": args.rounds, "lr": args.lr,
        "members": args.members, "distances": int_tuple(args.distances, "--distances"),
        "sizes": int_tuple(args.sizes, "--sizes"), "victims": args.victims,
        "inversion_victims": args.inversion_victims,
        "inversion": args.inversion, "seed": args.seed})
    out = Path(args.out)
    target = out / "leakage.json"
    on_interrupt(lambda: ends_kept(args, target))
    with contextlib.ExitStack() as stack:  # the folder is this run's until it has written
        if (problem := claim_folder(stack, out, target.name, args.overwrite)) is not None:
            raise problem
        results = run_leakage(cfg, progress=None if args.quiet else
                              (lambda line: print(line, file=sys.stderr)))
        atomic_write_text(target, dumps(results))
        atomic_write_text(out / "leakage.html", render_leakage(results))
        atomic_write_text(out / "leakage.md", by_distance(results) + "\n" + markdown(results))
    print(terminal_summary(results))
    print(f"wrote {target}, {out / 'leakage.html'} and {out / 'leakage.md'}")
    return 0
