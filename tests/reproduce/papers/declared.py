"""Checks every paper's declaration must pass (used by the tests beside it): each job of each
scale configures a run and a defense this code builds, and the paper's own numbers agree with
the claims the reproduction judges."""

from __future__ import annotations

from privbench.config import replace_checked
from privbench.engine.runner import structure
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.reproduce import REPRODUCTIONS, load
from privbench.reproduce.runs import jobs, run_config
from privbench.reproduce.spec import Reproduction


def declaration(name: str) -> Reproduction:
    """The registered reproduction `name`."""
    load_plugins()
    load()
    return REPRODUCTIONS.get(name)


def built_structures(repro: Reproduction) -> dict[tuple[str, str, float | None], object]:
    """Per (scale, row, grid value): the run and defense configuration of its first seed's job
    (every field known, every value accepted), and the structure this code builds for it
    (`privbench.engine.runner.structure`: the model on the dataset), so that a misspelt field
    or a model that does not fit the data fails here rather than hours into a reproduction.
    Jobs of one dataset, model and defense share one build (the model is the slow part)."""
    out, built = {}, {}
    for scale in repro.scales:
        for job in jobs(repro.at(scale), scale.seeds[:1]):
            run = run_config(scale, job)
            defense = DEFENSES.get(job.method.defense)
            cfg = replace_checked(defense.Config(), job.overrides, where="defense")
            key = (run.dataset, run.model, job.method.defense)
            if key not in built:
                built[key] = structure(run, job.method.defense, job.overrides)
            out[(scale.name, job.method.label, job.eps)] = (run, cfg, built[key])
    return out


def ordering_breaks(repro: Reproduction) -> list[tuple[str, str, float]]:
    """(better, worse, grid value) where the paper's own numbers contradict a claimed ordering
    of two private rows (a non-private row is one number shown in every column)."""
    paper, private = dict(repro.paper), {m.label for m in repro.methods if m.private}
    breaks = []
    for better, worse in repro.orderings:
        if better not in private or worse not in private:
            continue
        for i, value in enumerate(repro.eps):
            a, b = paper.get(better, ())[i:i + 1], paper.get(worse, ())[i:i + 1]
            if a and b and a[0] is not None and b[0] is not None and not a[0] > b[0]:
                breaks.append((better, worse, value))
    return breaks


def check_declaration(repro: Reproduction) -> None:
    """`repro` is the registered reproduction of its name, every scale and row builds, and the
    paper's numbers agree with the claimed orderings."""
    assert declaration(repro.name) is repro
    built = built_structures(repro)
    assert {scale for scale, _, _ in built} == {s.name for s in repro.scales}
    assert {label for _, label, _ in built} == {m.label for m in repro.methods}
    assert ordering_breaks(repro) == []
