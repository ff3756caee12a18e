"""Contract tests over every registered defense: builds, trains, declares its messages."""

from __future__ import annotations

import pytest
import torch

from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build, train_result
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES

load_plugins()
REPORT_KEYS = {"epsilon", "delta", "accountant", "mode", "unit", "uncovered"}


@pytest.mark.parametrize("name", DEFENSES.names())
def test_defense_contract(name):
    run = RunConfig(rounds=3, nodes=4, device="cpu", eval_every=3)
    built = build(run, name)
    res = train(built.trainer)
    z = built.trainer.models()
    assert z.shape == (4, built.ctx.fm.d) and torch.isfinite(z).all()
    assert res.diverged_round is None
    declared = {k.name for k in built.trainer.kinds}
    assert set(built.ctx.bus.log.kinds()) <= declared and built.ctx.bus.log.kinds()
    for rep in built.trainer.privacy():
        assert set(rep) >= REPORT_KEYS
    if built.trainer.private:
        modes = {rep["mode"] for rep in built.trainer.privacy()}
        assert {"paper", "calibrated"} <= modes or len(modes) >= 2
    result = train_result(built, res)
    assert result.defense == name and result.messages
    # the structure a reproduction line records: the model it trained, and a part it sends
    structure = built.trainer.structure(built.ctx.fm, built.trainer.cfg)
    assert structure["parameters"] == sum(structure["layers"]) == built.ctx.fm.d
    if "shared" in structure:
        sent = built.ctx.bus.log.get(0, "shared")
        assert sent.payload.shape[-1] == structure["shared"] <= built.ctx.fm.d
