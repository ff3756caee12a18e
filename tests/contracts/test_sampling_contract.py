"""Contract: every defense's ledger is accounted with the sampling its trainer actually draws.

A Gaussian ledger event names its sampling model (`privbench.accounting.SAMPLINGS`): "poisson"
(add/remove adjacency, sensitivity C) must be drawn with `NodeData.poisson` at the ledger's rate
q_i, and "fixed_without_replacement" (replace-one, sensitivity 2C) with `NodeData.sample` of
B = q_i |D_i| members. A spy on `NodeData` records what each trainer draws during two rounds;
`sampling_mismatches` compares it with every sample-level report of `privacy()`. Node-level
(pure-epsilon) mechanisms claim no subsampling amplification ("none") and draw as they like.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import defenses.dpdl as dpdl_module
from privbench.config import RunConfig
from privbench.data.datasets import NodeData
from privbench.engine.grads import clipped_grad_sum
from privbench.engine.runner import build
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES

load_plugins()
RUN = RunConfig(rounds=2, nodes=4, device="cpu", eval_every=2, batch_size=4, epsilon=4.0)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Record every (method, rate or batch size) drawn through NodeData."""
    draws: list[tuple[str, Any]] = []
    poisson, sample = NodeData.poisson, NodeData.sample

    def spy_poisson(self: NodeData, rate: Any, gen: torch.Generator) -> Any:
        draws.append(("poisson", rate))
        return poisson(self, rate, gen)

    def spy_sample(self: NodeData, batch_size: int, gen: torch.Generator) -> Any:
        draws.append(("sample", batch_size))
        return sample(self, batch_size, gen)

    monkeypatch.setattr(NodeData, "poisson", spy_poisson)
    monkeypatch.setattr(NodeData, "sample", spy_sample)
    return draws


def _rates(rate: Any, n: int) -> list[float]:
    if isinstance(rate, torch.Tensor):
        return [float(r) for r in rate.reshape(-1).tolist()] if rate.numel() > 1 else \
            [float(rate)] * n
    return [float(rate)] * n


def sampling_mismatches(built: Any, draws: list[tuple[str, Any]]) -> list[str]:
    """What the trainer drew vs what its sample-level reports were accounted with."""
    out: list[str] = []
    n = built.ctx.n
    counts = built.ctx.data.counts.tolist()
    for rep in built.trainer.privacy():
        model, node = rep.get("sampling", "none"), rep.get("node", 0)
        if rep["unit"] != "sample-level" or model == "none":
            continue
        q = rep.get("sample_rate")
        want = "poisson" if model == "poisson" else "sample"
        for kind, arg in draws:
            if kind != want:
                out.append(f"node {node}: ledger says {model}, trainer drew {kind}")
            elif q is not None and kind == "poisson":
                got = _rates(arg, n)[int(node)]
                if not math.isclose(got, q, rel_tol=1e-6):
                    out.append(f"node {node}: ledger rate {q}, trainer drew rate {got}")
            elif q is not None:
                got = min(1.0, arg / counts[int(node)])
                if not math.isclose(got, q, rel_tol=1e-6):
                    out.append(f"node {node}: ledger rate {q}, trainer drew {arg} of "
                               f"{counts[int(node)]}")
        if not draws:
            out.append(f"node {node}: ledger says {model}, trainer drew nothing")
    return out


def _draw(name: str, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Any, list[tuple[str, Any]]]:
    built = build(RUN, name, overrides)
    draws = _spy(monkeypatch)
    for t in range(RUN.rounds):
        built.trainer.round(t)
    return built, draws


@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_draws_the_sampling_its_ledger_composes(name, monkeypatch):
    built, draws = _draw(name, {}, monkeypatch)
    assert sampling_mismatches(built, draws) == []
    if built.trainer.private:
        models = {r.get("sampling") for r in built.trainer.privacy()}
        assert models and models <= {"poisson", "fixed_without_replacement", "none"}


@pytest.mark.parametrize(("name", "over"), [
    ("dp_dpsgd", {"sampling": "fixed"}),
    # without-replacement RDP costs ~1 s per evaluation in dp-accounting: opt-in
    pytest.param("dpdl", {"sampling": "fixed"}, marks=pytest.mark.slow),
    pytest.param("dyn_d2p", {"sampling": "one_sample"}, marks=pytest.mark.slow),
])
def test_fixed_size_batches_are_accounted_without_replacement(name, over, monkeypatch):
    built, draws = _draw(name, over, monkeypatch)
    assert {k for k, _ in draws} == {"sample"}
    reps = [r for r in built.trainer.privacy() if r["mode"] == "calibrated"]
    assert reps and all(r["sampling"] == "fixed_without_replacement" for r in reps)
    assert all(r["accountant"] == "rdp" for r in reps)  # PLD has no such event
    assert all(float(r["epsilon"]) <= RUN.epsilon * (1 + 1e-9) for r in reps)
    assert sampling_mismatches(built, draws) == []


def test_a_trainer_drawing_fixed_batches_under_a_poisson_ledger_is_caught(monkeypatch):
    # a DPDL whose ledger is wrong: fixed-size batches accounted as Poisson add/remove, bound C
    monkeypatch.setitem(dpdl_module.SAMPLING_MODELS, "fixed", "poisson")
    built, draws = _draw("dpdl", {"sampling": "fixed"}, monkeypatch)
    assert any("trainer drew sample" in m for m in sampling_mismatches(built, draws))


# ------------------------------------------------------------------- the one sampling path
def sampling_path_breaches(built: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Train two rounds; every NodeData draw must come from `Context.draw` / `draw_epoch` (the
    path that records ground truth), and exactly the rounds the trainer says draw
    (`samples_in`: every round, except e.g. MUFFLIATO's gossip steps) must draw and be
    recorded."""
    from privbench.engine.trainer import Context

    inside: list[bool] = []
    out: list[str] = []
    round_now: list[int] = [-1]
    drew: set[int] = set()  # rounds that drew (through the context or not)

    def guard(name: str, real: Any) -> Any:
        def call(self: Any, *a: Any, **k: Any) -> Any:
            drew.add(round_now[0])
            inside.append(True)
            try:
                return real(self, *a, **k)
            finally:
                inside.pop()
        return call

    for name in ("draw", "draw_epoch"):
        monkeypatch.setattr(Context, name, guard(name, getattr(Context, name)))
    for name in ("poisson", "sample"):
        real = getattr(NodeData, name)

        def spy(self: NodeData, *a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            drew.add(round_now[0])
            if not inside:
                out.append(f"NodeData.{_name} called outside Context.draw")
            return _real(self, *a, **k)

        monkeypatch.setattr(NodeData, name, spy)
    for t in range(RUN.rounds):
        round_now[0] = t
        built.trainer.round(t)
    want = {t for t in range(RUN.rounds) if built.trainer.samples_in(t)}
    missing = sorted(t for t in want | drew if t not in built.ctx.truth.batches)
    if missing:
        out.append(f"rounds {missing} drew no recorded batch (ground truth missing)")
    if drew - want:
        out.append(f"rounds {sorted(drew - want)} drew a batch the trainer says they do not")
    return out


@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_samples_through_the_context(name, monkeypatch):
    built = build(RUN, name, {"gradient": "G2"} if name == "defl_vp" else {})
    assert sampling_path_breaches(built, monkeypatch) == []


def test_a_trainer_bypassing_the_sampling_path_is_caught(monkeypatch):
    # a DP-SGP that samples its Poisson batches itself: it trains, but no ground truth is kept
    from defenses import dp_sgp

    class Bypass(dp_sgp.DPSGP):
        def round(self, t: int) -> None:
            ctx = self.ctx
            slots, mask = ctx.data.poisson(self.rates, ctx.streams.get("batch"))
            x, y = ctx.data.gather(slots)
            sums, _ = clipped_grad_sum(ctx.fm, self.models(), x, y, mask, self.cfg.clip)
            noise = torch.randn(self.x.shape, generator=ctx.streams.get("noise"))
            x_half = self.x - ctx.run.lr * (sums + self.noise_std(t) * noise) / ctx.run.batch_size
            self.x, self.w = dp_sgp.push_sum(ctx.bus, self.mixer, t, x_half, self.w)

    built = build(RUN, "dp_sgp")
    built.trainer.__class__ = Bypass
    breaches = sampling_path_breaches(built, monkeypatch)
    assert "NodeData.poisson called outside Context.draw" in breaches
    assert any("ground truth missing" in b for b in breaches)


def test_a_round_that_should_draw_but_does_not_is_caught(monkeypatch):
    # a MUFFLIATO (draws in its release rounds only) that claims every round draws: the gossip
    # round 1 has no batch; and one that claims no round draws: round 0's draw is flagged
    from defenses.muffliato import Muffliato

    class ClaimsAll(Muffliato):
        def samples_in(self, t: int) -> bool:
            return True

    class ClaimsNone(Muffliato):
        def samples_in(self, t: int) -> bool:
            return False

    built = build(RUN, "muffliato", {"gossip_steps": 2})
    built.trainer.__class__ = ClaimsAll
    assert "rounds [1] drew no recorded batch (ground truth missing)" in \
        sampling_path_breaches(built, monkeypatch)
    built = build(RUN, "muffliato", {"gossip_steps": 2})
    built.trainer.__class__ = ClaimsNone
    breaches = sampling_path_breaches(built, monkeypatch)
    assert any("drew a batch the trainer says they do not" in b for b in breaches)
