"""Broken defenses for the mechanism audit's mutation tests (test code only, never the library).

Each mutant breaks a registered DP defense in one way while its ledger keeps the claim, by
patching what the defense calls (its noise draws, the context's sampling path, its clipping
function) or, for an unnoised message kind, by a subclass. A class is defined per mechanism
family (`MECHANISMS`: Gaussian, Laplace or randomized response):

* noise x0.5: Gaussian, every draw of `torch.randn` / `torch.normal` on a "noise" stream
  halved; Laplace, every exponential draw halved (the scale halved); randomized response, the
  flip probability halved (keep' = 1 - (1 - keep) / 2);
* clip x2: the bound the defense clips with doubled, the noise left at the old bound;
* rate x2: Poisson rates doubled, fixed-size batches doubled, the ledger's rate kept;
* reused noise: round 0's noise draws drawn again, in the same order, in every round;
* node unnoised: the first row of every noise draw noiseless (node 0's noise; for per-edge
  noise, the first edge's);
* kind unnoised: each node's clean batch gradient also sent, as a kind declared covered;
* block unnoised: the bias coordinates of every noise draw noiseless (202 of 17,226);
* clip x1.2: as clip x2, the bound x1.2;
* batch clipped: a per-sample clipped sum replaced by the batch's sum clipped as a whole;
* sized weights: push-sum weights sent in proportion to the node's dataset size (a kind declared
  data-independent that carries data).

A class that does not apply to a defense (no clip bound, no sampling amplification in the ledger,
a full local epoch each round, a batch already clipped as a whole, no message declared
data-independent) raises `NotApplicableError` with the reason, which the table prints.

`python -m tests.mechanism.mutants [defense ...] [--seeds N] [--out FILE]` prints the mutation
table (one row per defense and ε: each mutant caught by which rule, measured vs claimed) of the
README's gate section.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from privbench.audit.mechanism import audit_mechanism
from privbench.config import RunConfig, replace_checked
from privbench.engine.grads import batch_grads
from privbench.engine.messages import MessageKind
from privbench.engine.trainer import Context
from privbench.pipeline.presets import PRESETS
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.report import gate
from privbench.report.gate_mechanism import num
from privbench.seeding import Streams, is_noise_generator

load_plugins()

RULES = {"max_measured_ratio": 1.0, "require_mechanism": True, "require_sampling_rate": True}
EPSILONS = (1.0, 8.0)
SEED_EPSILONS = (1.0, 4.0, 8.0)  # the correct runs over seeds: no false alarm at any of them


class NotApplicableError(Exception):
    """A mutant class that does not apply to a defense; the message says why."""


@dataclass(frozen=True)
class Mechanism:
    """What a DP defense's mutants patch.

    Attributes:
        family: "gaussian", "laplace" or "rr" (randomized response): how its noise is drawn.
        clip: "module:function" the defense clips with (its bound argument is doubled), or
            None with `no_clip` the reason there is no clip bound to double.
        epoch: each round reads every member (a local epoch): no sampling rate to double.
        sampled: the ledger claims amplification by sampling (a node-level ledger does not:
            doubling the batch breaks no claim).
    """

    family: str
    clip: str | None
    no_clip: str = ""
    epoch: bool = False
    sampled: bool = True


_SIGN = ("the message is a randomized sign vector: its sensitivity is fixed by the sign, not "
         "by a clip bound")
_NODE_LAPLACE = ("no clip bound by default: the Laplace noise is scaled to the node-level "
                 "sensitivity S(t) ({}), not to a clip")
MECHANISMS: dict[str, Mechanism] = {
    "adp_vrsgp": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "const_d2p": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "d_psgd_rr": Mechanism("rr", None, _SIGN, epoch=True),
    "defl_vp": Mechanism("rr", None, _SIGN, epoch=True),
    "dp_cga": Mechanism("gaussian", "defenses.dp_cga:clip_l2"),  # batch-level clipping
    "dp_dfedsam": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "dp_dpsgd": Mechanism("gaussian", "defenses._node_dp:clipped_grad_sum"),
    "dp_sgp": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "dpdl": Mechanism("gaussian", "defenses.dpdl:clipped_grad_sum"),
    "dpps": Mechanism("laplace", "defenses.dpps:clip_l1", sampled=False),
    "dyn_c_d2p": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "dyn_d2p": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "dyn_mu_d2p": Mechanism("gaussian", "defenses._noisy_sum:clipped_grad_sum"),
    "muffliato": Mechanism("gaussian", "defenses._node_dp:clipped_grad_sum"),
    "partpsp": Mechanism("laplace", "defenses.dpps:clip_l1", sampled=False),
    "pedfl": Mechanism("laplace", None, _NODE_LAPLACE.format("the models' real distance"),
                       sampled=False),
}
DP_DEFENSES = tuple(sorted(MECHANISMS))


def dp_defenses() -> list[str]:
    """Every registered defense that claims privacy."""
    return [d for d in DEFENSES.names() if getattr(DEFENSES.get(d), "private", False)]


# ------------------------------------------------------------------ noise draws by family

# the patched call of each family: (owner, attribute); the draw is changed after it is made
_DRAWS: dict[str, tuple[tuple[Any, str], ...]] = {
    "gaussian": ((torch, "randn"), (torch, "normal")),
    "laplace": ((torch.Tensor, "exponential_"),),
    "rr": ((torch, "rand"),),
}


@contextlib.contextmanager
def noise_draws(family: str, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Every draw of `family` from a "noise" stream passed through `change` (in place for the
    in-place exponential draw)."""
    with contextlib.ExitStack() as stack:
        for owner, name in _DRAWS[family]:
            stack.enter_context(mock.patch.object(owner, name, _changed(
                getattr(owner, name), change, in_place=owner is torch.Tensor)))
        yield


def _changed(draw: Callable[..., torch.Tensor], change: Callable[[torch.Tensor], torch.Tensor],
             in_place: bool) -> Callable[..., torch.Tensor]:
    def patched(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = draw(*args, **kwargs)
        if not is_noise_generator(kwargs.get("generator")):
            return out
        new = change(out)
        return out.copy_(new) if in_place else new

    return patched


def _family(defense: str) -> str:
    return MECHANISMS[defense].family


def scaled_noise(defense: str) -> contextlib.AbstractContextManager[Any]:
    """Gaussian / Laplace noise scale x0.5; randomized response flips half as often."""
    if _family(defense) == "rr":
        module = importlib.import_module("defenses.defl_vp")
        respond = module.randomized_response

        def halved(s: torch.Tensor, keep_prob: float, gen: torch.Generator) -> torch.Tensor:
            return respond(s, 1 - (1 - keep_prob) / 2, gen)

        return mock.patch.object(module, "randomized_response", halved)
    return noise_draws(_family(defense), lambda u: u * 0.5)


@contextlib.contextmanager
def reused_noise(defense: str) -> Iterator[None]:
    """The k-th noise draw of every round is the k-th draw of the first round run."""
    first: list[torch.Tensor] = []
    at = [0]
    cls = DEFENSES.get(defense)
    play = cls.round

    def round_(self: Any, t: int) -> None:
        at[0] = 0
        play(self, t)

    def again(u: torch.Tensor) -> torch.Tensor:
        k, at[0] = at[0], at[0] + 1
        if k == len(first):
            first.append(u.clone())
        return first[k].clone() if first[k].shape == u.shape else u

    with mock.patch.object(cls, "round", round_), noise_draws(_family(defense), again):
        yield


@contextlib.contextmanager
def reseeded_noise(defense: str) -> Iterator[None]:
    """The defense's noise generator (`ctx.streams.get("noise")`) replaced, in every round, by
    one created and seeded alike at the start of the round, outside the run's streams: the same
    noise every round."""
    cls = DEFENSES.get(defense)
    play, get = cls.round, Streams.get
    own: list[torch.Generator] = []

    def round_(self: Any, t: int) -> None:
        own[:] = [torch.Generator(device=self.ctx.device).manual_seed(1234)]
        try:
            play(self, t)
        finally:
            own.clear()

    def get_(self: Streams, name: str, *sub: str | int, device: Any = None) -> torch.Generator:
        return own[0] if own and name == "noise" else get(self, name, *sub, device=device)

    with mock.patch.object(cls, "round", round_), mock.patch.object(Streams, "get", get_):
        yield


def node_unnoised(defense: str) -> contextlib.AbstractContextManager[None]:
    """The first row of every noise draw noiseless (a Laplace draw is a difference of two
    exponentials: both 1 there; a uniform 0 never flips a randomized response)."""
    silent = {"gaussian": 0.0, "laplace": 1.0, "rr": 0.0}[_family(defense)]

    def first_row(u: torch.Tensor) -> torch.Tensor:
        u = u.clone()
        u[0] = silent
        return u

    return noise_draws(_family(defense), first_row)


@contextlib.contextmanager
def _holding_context(defense: str) -> Iterator[dict[str, Any]]:
    """The defense's round patched to keep its running context in the yielded dict ("ctx"):
    the model layout and data of the run (or of an audit's replayed copy) it plays."""
    cls = DEFENSES.get(defense)
    play, held = cls.round, {}

    def round_(self: Any, t: int) -> None:
        held["ctx"] = self.ctx
        play(self, t)

    with mock.patch.object(cls, "round", round_):
        yield held


def block_unnoised(defense: str) -> contextlib.AbstractContextManager[None]:
    """The bias coordinates (every parameter tensor named "*bias": 202 of the CNN's 17,226) of
    every noise draw laid out as the model's parameters (all, or its first layers: a shared
    part) left noiseless (as `node_unnoised`)."""
    silent = {"gaussian": 0.0, "laplace": 1.0, "rr": 0.0}[_family(defense)]
    return bias_draws(defense, lambda u: torch.full_like(u, silent))


@contextlib.contextmanager
def bias_draws(defense: str, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """The bias coordinates of every noise draw laid out as the model's parameters passed
    through `change` (the rest of each draw kept)."""
    with _holding_context(defense) as held:
        def biases(u: torch.Tensor) -> torch.Tensor:
            fm = held["ctx"].fm if "ctx" in held else None
            if fm is None or u.shape[-1] not in {spec.stop for spec in fm.specs}:
                return u
            u = u.clone()
            for spec in fm.specs:
                if spec.name.endswith("bias") and spec.stop <= u.shape[-1]:
                    u[..., spec.start:spec.stop] = change(u[..., spec.start:spec.stop])
            return u

        with noise_draws(_family(defense), biases):
            yield


def scaled_rate(factor: float) -> Callable[[str], contextlib.AbstractContextManager[Any]]:
    """The mutant class "rate x`factor`": Poisson rates x`factor` (at most 1), fixed-size
    batches x`factor` (rounded); the ledger keeps its rate."""

    def mutant(defense: str) -> contextlib.AbstractContextManager[Any]:
        if MECHANISMS[defense].epoch:
            raise NotApplicableError("each round reads every member (a local epoch): no "
                                     "sampling rate to change")
        if not MECHANISMS[defense].sampled:
            raise NotApplicableError("the node-level ledger claims no amplification by "
                                     "sampling")
        draw = Context.draw

        def patched(self: Context, t: int, rates: torch.Tensor | None = None,
                    batch_size: int | None = None) -> tuple[torch.Tensor, ...]:
            if rates is not None:
                return draw(self, t, rates=(factor * rates).clamp(max=1.0))
            size = batch_size or self.run.batch_size
            return draw(self, t, batch_size=round(factor * size))

        return mock.patch.object(Context, "draw", patched)

    return mutant


doubled_rate = scaled_rate(2.0)


def _clip_function(defense: str) -> tuple[Any, str, Callable[..., Any]]:
    """(module, name, function) the defense clips with; `NotApplicableError` where it has no
    clip bound."""
    spec = MECHANISMS[defense]
    if spec.clip is None:
        raise NotApplicableError(spec.no_clip)
    path, name = spec.clip.split(":")
    module = importlib.import_module(path)
    return module, name, getattr(module, name)


def scaled_clip(factor: float) -> Callable[[str], contextlib.AbstractContextManager[Any]]:
    """The mutant class "clip x`factor`": the bound argument of the defense's clipping function
    multiplied by `factor` (its noise is drawn for the configured bound)."""

    def mutant(defense: str) -> contextlib.AbstractContextManager[Any]:
        module, name, clip = _clip_function(defense)
        signature = inspect.signature(clip)

        def patched(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.arguments["bound"] = bound.arguments["bound"] * factor
            return clip(*bound.args, **bound.kwargs)

        return mock.patch.object(module, name, patched)

    return mutant


doubled_clip = scaled_clip(2.0)


def batch_clipped(defense: str) -> contextlib.AbstractContextManager[Any]:
    """A per-sample clipped sum (`engine.clipped_grad_sum`) replaced by the batch's gradient sum
    clipped as a whole to the same bound (one sample can then move it by twice the bound)."""
    module, name, clip = _clip_function(defense)
    if name != "clipped_grad_sum":
        raise NotApplicableError("the defense already clips the batch as a whole (its ledger "
                                 "accounts the bound twice)")
    signature = inspect.signature(clip)

    def patched(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        a = signature.bind(*args, **kwargs).arguments
        mask = a["mask"]
        total = batch_grads(a["fm"], a["params"], a["x"], a["y"], mask) * \
            mask.sum(dim=1, keepdim=True).to(a["params"].dtype)  # (m, d) unclipped sums
        bound = torch.as_tensor(a["bound"], dtype=total.dtype, device=total.device)
        bound = bound.expand(mask.shape)[:, :1] if bound.dim() else bound  # (m, 1) or ()
        norms = total.norm(dim=1, keepdim=True)  # (m, 1)
        clipped = total * (bound / (norms + 1e-12)).clamp(max=1.0)
        return clipped, norms.expand(mask.shape)

    return mock.patch.object(module, name, patched)


def sized_weights(defense: str) -> contextlib.AbstractContextManager[Any]:
    """Push-sum weights sent in proportion to the node's dataset size |D_i| (the numerators
    scaled alike, so the de-biased models train as before): the `weight` kind, declared
    data-independent, carries each node's data size in the clear."""
    kinds = {k.name: k for k in DEFENSES.get(defense).kinds}
    if "weight" not in kinds or kinds["weight"].data_dependent:
        raise NotApplicableError("no push-sum weight message: the defense sends no message "
                                 "declared data-independent")
    return _sized_push_sum(defense)


@contextlib.contextmanager
def _sized_push_sum(defense: str) -> Iterator[None]:
    from privbench.engine import mixing

    push_sum = mixing.push_sum
    with _holding_context(defense) as held, contextlib.ExitStack() as stack:
        def sized(bus: Any, mixer: Any, t: int, x_half: torch.Tensor, w: torch.Tensor,
                  *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            counts = held["ctx"].data.counts.to(w)  # (n,) |D_i|
            size = counts / counts.mean()
            return push_sum(bus, mixer, t, x_half * size[:, None], w * size, *args, **kwargs)

        for module in [m for m in list(sys.modules.values())
                       if getattr(m, "push_sum", None) is push_sum]:
            stack.enter_context(mock.patch.object(module, "push_sum", sized))
        yield


def _leaky(cls: type) -> type:
    """`cls` that also sends each node's clean batch gradient (the first batch of a local
    epoch), as a kind it declares covered."""

    class Leaky(cls):  # type: ignore[misc, valid-type]
        kinds = (*cls.kinds, MessageKind("clean_step", covered=True,
                                         description="the batch gradient without noise"))

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.kinds = (*self.kinds, *([] if "clean_step" in {k.name for k in self.kinds}
                                         else [Leaky.kinds[-1]]))

        def round(self, t: int) -> None:
            ctx, at, seen = self.ctx, self.models().clone(), []
            hooks = {name: vars(ctx).get(name) for name in ("draw", "draw_epoch")}
            draw, draw_epoch = ctx.draw, ctx.draw_epoch

            def grab(t: int, rates: Any = None, batch_size: Any = None) -> Any:
                seen.append(draw(t, rates=rates, batch_size=batch_size))
                return seen[-1]

            def grab_epoch(t: int) -> Any:
                perm, members = draw_epoch(t)
                b = ctx.run.batch_size
                seen.append((*ctx.data.gather(perm[:, :b]), members[:, :b]))
                return perm, members

            vars(ctx).update(draw=grab, draw_epoch=grab_epoch)
            try:
                cls.round(self, t)
            finally:
                for name, own in hooks.items():  # an audit's hook on the context, if any
                    if own is None:
                        del vars(ctx)[name]
                    else:
                        vars(ctx)[name] = own
            if seen:  # a round that drew no batch releases nothing new
                x, y, mask = seen[0]
                ctx.bus.broadcast(t, "clean_step", batch_grads(ctx.fm, at, x, y, mask),
                                  ctx.topology.adjacency(t))

    Leaky.__name__ = Leaky.__qualname__ = f"Leaky_{cls.__name__}"
    globals()[Leaky.__name__] = Leaky  # module level, so a copy of its state can be pickled
    return Leaky


def kind_unnoised(defense: str) -> contextlib.AbstractContextManager[Any]:
    leaky = _leaky(DEFENSES.get(defense))
    return mock.patch.dict(DEFENSES._items, {defense: leaky})  # type: ignore[attr-defined]


MUTANTS: dict[str, Callable[[str], contextlib.AbstractContextManager[Any]]] = {
    "noise x0.5": scaled_noise, "clip x2": doubled_clip, "rate x2": doubled_rate,
    "reused noise": reused_noise, "node unnoised": node_unnoised,
    "kind unnoised": kind_unnoised, "block unnoised": block_unnoised,
    "clip x1.2": scaled_clip(1.2), "batch clipped": batch_clipped,
    "sized weights": sized_weights,
}
# ------------------------------------------------------------------ ledgers not held to the request

_PLANNED = ("privbench.engine.planning", "cached_plan")  # memoised plans: cleared around


@contextlib.contextmanager
def _replanned(target: str, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """`target.name` replaced by `wrap(original)`, with the memoised plans cleared on entry and
    exit (a plan made under the mutant is never reused by a correct run)."""
    module = importlib.import_module(target)
    cache = getattr(importlib.import_module(_PLANNED[0]), _PLANNED[1])
    cache.cache_clear()
    try:
        with mock.patch.object(module, name, wrap(getattr(module, name))):
            yield
    finally:
        cache.cache_clear()


def _calibrated(change: Callable[[tuple[Any, ...]], tuple[Any, ...]]
                ) -> contextlib.AbstractContextManager[None]:
    """The noise calibrated with `change`d (ε, δ, multipliers) arguments; the ledger composes
    the noise drawn honestly, at the run's δ over the rounds run."""
    def wrap(calibrate: Callable[..., float]) -> Callable[..., float]:
        def patched(epsilon: float, delta: float, multipliers: Any, *args: Any,
                    **kwargs: Any) -> float:
            return calibrate(*change((epsilon, delta, multipliers)), *args, **kwargs)
        return patched
    return _replanned("defenses.dp_sgp", "calibrate_noise_scale", wrap)


LOOSE_DELTA = 1e-3  # the δ the broken ledgers are calibrated or stated for (the run asks 1e-5)


def delta_calibration(defense: str) -> contextlib.AbstractContextManager[None]:
    """Noise calibrated for δ = 10⁻³, the ledger honest at the run's δ (it claims more than
    the ε asked)."""
    return _calibrated(lambda a: (a[0], LOOSE_DELTA, a[2]))


def half_rounds_calibration(defense: str) -> contextlib.AbstractContextManager[None]:
    """Noise calibrated over the first half of the rounds the run runs, the ledger composing
    every round honestly (it claims more than the ε asked)."""
    return _calibrated(lambda a: (a[0], a[1], a[2][: max(1, len(a[2]) // 2)]))


def delta_ledger(defense: str) -> contextlib.AbstractContextManager[None]:
    """δ = 10⁻³ in the calibration and in the ledger: the claim is the ε asked, at another δ."""
    def wrap(budgets: Callable[..., tuple[list[float], list[float]]]) -> Callable[..., Any]:
        def patched(*args: Any, **kwargs: Any) -> tuple[list[float], list[float]]:
            eps, deltas = budgets(*args, **kwargs)
            return eps, [LOOSE_DELTA] * len(deltas)
        return patched
    return _replanned("privbench.engine.planning", "node_budgets", wrap)


# each keeps the ledger honest about what it composed, or states it for another δ: only a gate
# that holds the run to what it asked (ε, δ, rounds) catches them
REQUEST_MUTANTS: dict[str, Callable[[str], contextlib.AbstractContextManager[Any]]] = {
    "calibrated at δ 1e-3": delta_calibration,
    "calibrated over half the rounds": half_rounds_calibration,
    "δ 1e-3 in calibration and ledger": delta_ledger,
}


def scaled_flips(factor: float) -> Callable[[str], contextlib.AbstractContextManager[Any]]:
    """Randomized response at `factor` times the claimed per-coordinate ε (the flip
    probability 1 / (1 + e^(factor ε_c))), the ledger's claim kept."""
    def mutant(defense: str) -> contextlib.AbstractContextManager[Any]:
        return flips_at(lambda coord, d: coord * factor)
    return mutant


def coordinate_flips(defense: str) -> contextlib.AbstractContextManager[Any]:
    """Randomized response at d times the claimed per-coordinate ε (d: the coordinates of one
    message), the ledger's claim kept."""
    return flips_at(lambda coord, d: coord * d)


def flips_at(weaker_eps: Callable[[float, int], float]) -> contextlib.AbstractContextManager[Any]:
    """Randomized response flipping at per-coordinate ε `weaker_eps(ε_c, d)`."""
    module = importlib.import_module("defenses.defl_vp")
    respond = module.randomized_response

    def weaker(s: torch.Tensor, keep_prob: float, gen: torch.Generator) -> torch.Tensor:
        coord = weaker_eps(math.log(keep_prob / (1 - keep_prob)), s.shape[-1])
        return respond(s, 1 / (1 + math.exp(-coord)), gen)

    return mock.patch.object(module, "randomized_response", weaker)


EXPECTED = {  # the rule each mutant of a Gaussian defense must fail, at least
    "noise x0.5": "max_measured_ratio", "clip x2": "max_measured_ratio",
    "rate x2": "require_sampling_rate", "reused noise": "require_mechanism",
    "node unnoised": "require_mechanism", "kind unnoised": "require_mechanism",
    "block unnoised": "require_mechanism", "clip x1.2": "max_measured_ratio",
    "batch clipped": "max_measured_ratio", "sized weights": "require_mechanism",
}


def expected_rule(defense: str, mutant: str) -> str | None:
    """The rule `mutant` of `defense` must fail (None: any rule, for the Laplace and
    randomized-response families, whose measured ε the audit reads differently)."""
    return EXPECTED[mutant] if MECHANISMS[defense].family == "gaussian" else None


def quick_run(eps: float, seed: int = 0) -> RunConfig:
    """The quick preset's run at ε (the shipped policy's setting)."""
    return replace_checked(RunConfig(), {**PRESETS["quick"]["run"], "device": "cpu",
                                         "epsilon": eps, "seed": seed}, where="run")


def cell(defense: str, eps: float, mechanism: dict[str, Any], paper: bool = False
         ) -> dict[str, Any]:
    """A results cell holding only the mechanism audit (what `privbench check` reads); `paper`:
    the paper's reading of ε (a paper setting asks for the paper's noise, not for ε)."""
    setting = {"setting": {"name": "paper-eps", "label": "paper", "overrides": {},
                           "composed_epsilon": None, "epsilon": eps}} if paper else {}
    return {"defense": defense, "epsilon": None if paper else eps, **setting,
            "attacks": {"mechanism": {"status": "ok", "mechanism": mechanism}}}


def amplified(res: dict[str, Any]) -> bool:
    """Whether a correct run's ledger claims amplification by sampling (a rate to double)."""
    return any("note" not in row for row in res.get("sampling", []))


def failed_rules(defense: str, eps: float, mutant: str | None, seed: int = 0
                 ) -> tuple[list[gate.Check], dict[str, Any]]:
    """The shipped mechanism rules that fail on the (mutated) defense's quick run; raises
    `NotApplicableError` where the mutant class does not apply to the defense."""
    checks, res = judged(defense, eps, mutant, seed)
    return [c for c in checks if not c.passed], res


def judged(defense: str, eps: float, mutant: str | None, seed: int = 0
           ) -> tuple[list[gate.Check], dict[str, Any]]:
    """Every shipped mechanism rule's check on the (mutated) defense's quick run (an
    INCONCLUSIVE one passes: the shipped policy warns)."""
    every = {**MUTANTS, **REQUEST_MUTANTS, "flips at d x ε per coordinate": coordinate_flips,
             "noise re-seeded each round": reseeded_noise}
    ctx = every[mutant](defense) if mutant else contextlib.nullcontext()
    with ctx:
        res = audit_mechanism(quick_run(eps, seed), defense, {})
    return gate.check_bound(RULES, cell(defense, eps, res)), res


# ------------------------------------------------------------------ the table

def rule_name(check: gate.Check) -> str:
    return check.name.split(" ", 1)[1]


def _g(x: Any) -> str:
    return num(x)


def measured(res: dict[str, Any]) -> str:
    """The measured ε [interval] vs claimed ε, or why there is none."""
    e = res.get("epsilon", {})
    if not res.get("applicable"):
        return f"audit n/a: {res.get('reason')}"
    if not e.get("applicable"):
        return f"ε not measured: {e.get('reason')}"
    lo, hi = e["interval"]
    sens = res.get("sensitivity")
    return (f"ε {_g(e['epsilon'])} [{_g(lo)}, {_g(hi)}] vs {_g(e['claimed'])}"
            + (f"; sensitivity x{_g(sens['measured_over_bound'])} of the bound" if sens else ""))


def _evidence(check: gate.Check, res: dict[str, Any]) -> str:
    """The measured quantity beside the claim, for the rule `check` names."""
    name = rule_name(check)
    if name == "max_measured_ratio":
        return measured(res)
    if name == "require_sampling_rate":
        bad = [r for r in res.get("sampling", []) if not r.get("consistent", True)]
        r = max(bad or res.get("sampling", [{}]),
                key=lambda r: abs((r.get("rate") or 0) - (r.get("ledger_rate") or 0)))
        return f"rate {_g(r.get('rate'))} vs {_g(r.get('ledger_rate'))}"
    found = res.get("findings", [])
    return (short(found[0]) + (f"; +{len(found) - 1} more" if len(found) > 1 else "")
            if found else check.detail)


_SHORTER = (
    (r"node (\d+)'s (\S+) message carries one sample's contribution without noise",
     r"node \1's \2 unnoised"),
    (r"(\S+) noise (reused across rounds|shared across nodes) \((.*): correlation ([\d.]+)\)",
     r"\1 noise \2 (\3: corr \4)"),
    (r"(\S+) noise on (\S+) \(([\d.]+ %) of the message\) is below the rest of the message's: "
     r"x([\d.]+) .*", r"\1 noise on \2 (\3) x\4"),
    (r"(\S+) messages, declared data-independent, change with the data: .*",
     r"\1 (declared data-independent) changes with the data"),
)


def short(finding: str) -> str:
    """A finding in fewer words, for a table cell."""
    for pattern, replacement in _SHORTER:
        finding = re.sub(pattern, replacement, finding)
    return finding


def verdict(failed: list[gate.Check], res: dict[str, Any], first: str | None) -> str:
    """One cell: the rules that failed, the `first` one (if among them) shown with its evidence,
    or "passes" with the measured ε."""
    if not failed:
        return f"passes ({measured(res)})"
    failed = sorted(failed, key=lambda c: rule_name(c) != first)
    head = f"{rule_name(failed[0])} ({_evidence(failed[0], res)})"
    more = [rule_name(c) for c in failed[1:]]
    return head + (f"; also {', '.join(more)}" if more else "")


def row(defense: str, eps: float, seed: int = 0) -> list[str]:
    """The table's cells for one defense and ε: the correct run, then each mutant."""
    failed, correct = failed_rules(defense, eps, None, seed)
    cells = [("FALSE ALARM: " + verdict(failed, correct, None)) if failed
             else verdict(failed, correct, None)]
    for mutant in MUTANTS:
        try:
            broken, res = failed_rules(defense, eps, mutant, seed)
        except NotApplicableError as why:
            cells.append(f"n/a: {why}")
            continue
        except Exception as err:  # a broken run is shown, not hidden
            cells.append(f"ERROR: {type(err).__name__}: {err}")
            continue
        text = verdict(broken, res, expected_rule(defense, mutant))
        alarms = {rule_name(c) for c in failed}
        cells.append("ESCAPES: " + text if not broken else "caught: " + text
                     if {rule_name(c) for c in broken} - alarms else
                     "not told apart (fails the correct run too): " + text)
    return cells


HEADER = ("| defense | ε | correct | " + " | ".join(MUTANTS) + " |\n"
          + "|---" * (3 + len(MUTANTS)) + "|")


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def seed_lines(defense: str, eps: float, seeds: int) -> str:
    """The correct defense's measured ε over seeds 0..seeds-1, and whether a rule failed or was
    INCONCLUSIVE (which the shipped policy warns)."""
    parts = []
    for seed in range(seeds):
        checks, res = judged(defense, eps, None, seed)
        failed = ", ".join(rule_name(c) for c in checks if not c.passed)
        undecided = ", ".join(rule_name(c) for c in checks if c.inconclusive)
        parts.append(f"seed {seed}: {measured(res)}" + (f" FAILS {failed}" if failed else "")
                     + (f" INCONCLUSIVE {undecided}" if undecided else ""))
    return f"| {defense} | {eps:g} | " + "; ".join(_cell(p) for p in parts) + " |"


SEEDS_HEADER = "| defense | ε | correct run over seeds 0..{last} |\n|---|---|---|"


def table(defenses: tuple[str, ...] = DP_DEFENSES, epsilons: tuple[float, ...] = EPSILONS,
          out: Callable[[str], None] = print) -> None:
    """The mutation table, markdown, one line at a time to `out`."""
    out(HEADER)
    for d in defenses:
        for eps in epsilons:
            out(f"| {d} | {eps:g} | " + " | ".join(_cell(c) for c in row(d, eps)) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mechanism.mutants",
                                     description="The mechanism audit's mutation table.")
    parser.add_argument("defenses", nargs="*", help=f"DP defenses (default: all: "
                                                    f"{' '.join(DP_DEFENSES)})")
    parser.add_argument("--eps", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--seeds", type=int, default=0,
                        help="also the correct runs' measured ε over seeds 0..N-1")
    parser.add_argument("--seed-eps", type=float, nargs="+", default=list(SEED_EPSILONS),
                        help="the ε of the correct runs over seeds (default: 1 4 8)")
    parser.add_argument("--out", type=Path, help="also append the table's lines to this file")
    parser.add_argument("--seeds-only", action="store_true",
                        help="only the seeds' lines (with --seeds), no header")
    args = parser.parse_args(argv)
    unknown = [d for d in args.defenses if d not in MECHANISMS]
    bad_eps = any(not (e > 0 and math.isfinite(e)) for e in args.eps + args.seed_eps)
    if unknown or args.seeds < 0 or bad_eps:
        what = (f"unknown DP defense {', '.join(unknown)} (accepted: {' '.join(DP_DEFENSES)})"
                if unknown else "--seeds must be >= 0 and --eps, --seed-eps finite and > 0")
        print(f"error: {what}", file=sys.stderr)
        return 2
    defenses, eps = tuple(args.defenses) or DP_DEFENSES, tuple(args.eps)

    def emit(line: str) -> None:
        print(line, flush=True)
        if args.out is not None:
            with args.out.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

    if not args.seeds_only:
        table(defenses, eps, emit)
    if args.seeds:
        if not args.seeds_only:
            emit(f"\n{SEEDS_HEADER.format(last=args.seeds - 1)}")
        for d in defenses:
            for e in args.seed_eps:
                emit(seed_lines(d, e, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
