"""Small reproduction grids the reproduction tests train (seconds on a CPU), the lines
they rewrite, and where the committed tables are."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from privbench.reproduce import REPRODUCTIONS, Scale, load
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "reproduce"


# Lines of a committed table trained again by one code version on one kind of machine, kept
# apart from the tables the write-ups and the summary quote until they are whole.
REMAKES = REPORTS.parent / "remake"


def committed_runs_files() -> list[Path]:
    """Every committed runs.jsonl: the tables under reports/reproduce, then those under remake/."""
    return sorted(REPORTS.rglob(RUNS_FILE)) + sorted(REMAKES.rglob(RUNS_FILE))


def tiny(lr: float = 0.2, rounds: int = 3):
    """Dyn-D2P's table on 4 digits nodes, 3 rounds, two epsilons (seconds on a CPU)."""
    load()
    r = REPRODUCTIONS.get("dyn_d2p")
    scale = Scale("reduced", (("dataset", "digits"), ("model", "mlp"), ("nodes", 4),
                              ("topology", "exponential"), ("rounds", rounds),
                              ("batch_size", 16), ("lr", lr), ("delta", 1e-4), ("holdout", 0.0),
                              ("eval_every", rounds)),
                  (0, 1), "a test's tiny setting")
    r = dataclasses.replace(r, scales=(scale,), eps=(1.0, 3.0),
                            paper=tuple((label, row[2:]) for label, row in r.paper))
    return r, scale


def two_row_grid():
    """tiny narrowed to two rows at one epsilon (two runs per seed)."""
    repro, scale = tiny()
    head = dataclasses.replace(scale, name="headline", rows=("Dyn-D2P", "Const-D2P"),
                               grid=(3.0,))
    return dataclasses.replace(repro, scales=(scale, head)), head


def rewrite(path: Path, change) -> None:
    """Rewrite a runs file with `change(line) -> line` applied to its first line."""
    import json

    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0] = change(lines[0])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def counting_runs(monkeypatch) -> list[tuple]:
    """The keys of the jobs trained from now on, in order (each still trained for real)."""
    trained, real = [], runs_mod.run_job

    def count(r, s, job, *rest):
        trained.append(job.key)
        return real(r, s, job, *rest)
    monkeypatch.setattr(runs_mod, "run_job", count)
    return trained


def digits(name: str, eps: tuple[float, ...], **run) -> tuple:
    """A reproduction's table on 4 digits nodes, 2 rounds, a sub-grid (seconds on a CPU)."""
    load()
    r = REPRODUCTIONS.get(name)
    keep = [r.eps.index(e) for e in eps]
    base = {"dataset": "digits", "nodes": 4, "rounds": 2, "holdout": 0.0, "eval_every": 2,
            **run}
    scale = Scale("reduced", tuple(base.items()), (0, 1), "a test's tiny setting")
    r = dataclasses.replace(r, scales=(scale,), eps=eps,
                            paper=tuple((label, tuple(row[i] for i in keep))
                                        for label, row in r.paper))
    return r, scale
