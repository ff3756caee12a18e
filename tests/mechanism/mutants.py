"""Broken defenses for the mechanism audit's mutation tests (test code only, never the library).

Each mutant breaks a registered DP defense in one way while its ledger keeps the claim, by
patching what every defense shares (the "noise" streams' draws, the context's sampling path, the
clipped sum) or, for an unnoised message kind, by a subclass:

| mutant | break |
|---|---|
| noise x0.5 | every noise draw halved |
| clip x2 | per-sample clip bound doubled, the noise left at the old bound |
| rate x2 | Poisson batches drawn at twice the rate the ledger accounts |
| reused noise | the first round's noise drawn again in every round |
| node unnoised | node 0's noise rows zero |
| kind unnoised | the clean clipped gradient also sent, as a kind declared covered |

`python -m tests.mechanism.mutants [defense ...]` prints the mutation table (defense x ε x mutant
-> the rules that caught it, measured vs claimed) of the README's gate section.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch

from privbench.audit.mechanism import audit_mechanism
from privbench.commands.presets import PRESETS
from privbench.config import RunConfig, replace_checked
from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.trainer import Context
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.report import gate
from privbench.seeding import is_noise_generator

load_plugins()

# DP defenses whose ledger the audit recomposes (they declare `release_noise`) and that draw
# Poisson batches and clip through `privbench.engine.clipped_grad_sum`
AUDITED = ("dp_sgp", "adp_vrsgp", "dyn_d2p")
RULES = {"max_measured_ratio": 1.0, "require_mechanism": True, "require_sampling_rate": True}


@contextlib.contextmanager
def _noise_draws(change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    randn = torch.randn

    def patched(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = randn(*args, **kwargs)
        return change(out) if is_noise_generator(kwargs.get("generator")) else out

    with mock.patch("torch.randn", patched):
        yield


def scaled_noise(_: str) -> contextlib.AbstractContextManager[None]:
    return _noise_draws(lambda u: u * 0.5)


def reused_noise(_: str) -> contextlib.AbstractContextManager[None]:
    first: dict[tuple[int, ...], torch.Tensor] = {}
    return _noise_draws(lambda u: first.setdefault(tuple(u.shape), u).clone())


def node_unnoised(_: str) -> contextlib.AbstractContextManager[None]:
    def zero_first(u: torch.Tensor) -> torch.Tensor:
        u[0] = 0
        return u

    return _noise_draws(zero_first)


def doubled_rate(_: str) -> contextlib.AbstractContextManager[None]:
    draw = Context.draw

    def patched(self: Context, t: int, rates: torch.Tensor | None = None,
                batch_size: int | None = None) -> tuple[torch.Tensor, ...]:
        return draw(self, t, rates=None if rates is None else (2 * rates).clamp(max=1.0),
                    batch_size=batch_size)

    return mock.patch.object(Context, "draw", patched)


def doubled_clip(defense: str) -> contextlib.AbstractContextManager[None]:
    module = importlib.import_module(f"defenses.{defense}")
    clipped = module.clipped_grad_sum

    def patched(fm: Any, params: Any, x: Any, y: Any, mask: Any, bound: Any,
                *args: Any, **kwargs: Any) -> Any:
        return clipped(fm, params, x, y, mask, bound * 2, *args, **kwargs)

    return mock.patch.object(module, "clipped_grad_sum", patched)


def _leaky(cls: type) -> type:
    """`cls` that also sends each node's clean batch gradient, as a kind it declares covered."""

    class Leaky(cls):  # type: ignore[misc, valid-type]
        kinds = (*cls.kinds, MessageKind("clean_step", covered=True,
                                         description="the batch gradient without noise"))

        def round(self, t: int) -> None:
            ctx, at, seen = self.ctx, self.models().clone(), []
            own = vars(ctx).get("draw")  # an audit's hook on the context, if any
            draw = ctx.draw

            def grab(t: int, rates: Any = None, batch_size: Any = None) -> Any:
                seen.append(draw(t, rates=rates, batch_size=batch_size))
                return seen[-1]

            vars(ctx)["draw"] = grab
            try:
                cls.round(self, t)
            finally:
                if own is None:
                    del vars(ctx)["draw"]
                else:
                    vars(ctx)["draw"] = own
            x, y, mask = seen[0]
            ctx.bus.broadcast(t, "clean_step", batch_grads(ctx.fm, at, x, y, mask),
                              ctx.topology.adjacency(t))

    Leaky.__name__ = Leaky.__qualname__ = f"Leaky_{cls.__name__}"
    globals()[Leaky.__name__] = Leaky  # module level, so a copy of its state can be pickled
    return Leaky


def kind_unnoised(defense: str) -> contextlib.AbstractContextManager[Any]:
    leaky = _leaky(DEFENSES.get(defense))
    return mock.patch.dict(DEFENSES._items, {defense: leaky})  # type: ignore[attr-defined]


MUTANTS: dict[str, Callable[[str], contextlib.AbstractContextManager[None]]] = {
    "noise x0.5": scaled_noise, "clip x2": doubled_clip, "rate x2": doubled_rate,
    "reused noise": reused_noise, "node unnoised": node_unnoised,
    "kind unnoised": kind_unnoised,
}


def quick_run(eps: float, seed: int = 0) -> RunConfig:
    """The quick preset's run at ε (the shipped policy's setting)."""
    return replace_checked(RunConfig(), {**PRESETS["quick"]["run"], "device": "cpu",
                                         "epsilon": eps, "seed": seed}, where="run")


def cell(defense: str, eps: float, mechanism: dict[str, Any]) -> dict[str, Any]:
    """A results cell holding only the mechanism audit (what `privbench check` reads)."""
    return {"defense": defense, "epsilon": eps,
            "attacks": {"mechanism": {"status": "ok", "mechanism": mechanism}}}


def failed_rules(defense: str, eps: float, mutant: str | None, seed: int = 0
                 ) -> tuple[list[gate.Check], dict[str, Any]]:
    """The shipped mechanism rules that fail on the (mutated) defense's quick run."""
    ctx = MUTANTS[mutant](defense) if mutant else contextlib.nullcontext()
    with ctx:
        res = audit_mechanism(quick_run(eps, seed), defense, {})
    checks = gate.check_bound(RULES, cell(defense, eps, res))
    return [c for c in checks if not c.passed], res


def table(defenses: tuple[str, ...] = AUDITED) -> str:
    """The mutation table, markdown."""
    lines = ["| defense | ε | mutant | caught by | measured ε vs claimed |",
             "|---|---|---|---|---|"]
    for d in defenses:
        for eps in (1.0, 8.0):
            for mutant in (None, *MUTANTS):
                failed, res = failed_rules(d, eps, mutant)
                e = res["epsilon"]
                shown = (f"{gate._num(e['epsilon'])} vs {gate._num(e['claimed'])}"
                         if e.get("applicable") else "n/a")
                caught = ", ".join(c.name.split(" ", 1)[1] for c in failed) or "passes"
                lines.append(f"| {d} | {eps:g} | {mutant or 'correct'} | {caught} | {shown} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(tuple(sys.argv[1:]) or AUDITED))
