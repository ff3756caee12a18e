"""privbench.threat.signals: the per-(model, sample) loss, confidence and LiRA logit of every
model row at once, against one forward pass per model (Carlini et al. 2022, Sec. IV-B)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from privbench.models import build_model
from privbench.threat.signals import Signals, model_signals


@pytest.fixture(scope="module")
def setting():
    gen = torch.Generator().manual_seed(0)
    fm = build_model("mlp", (1, 8, 8), 10)
    params = torch.stack([fm.init(gen) for _ in range(3)])  # (3, d): three models
    x = torch.rand(7, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (7,), generator=gen)
    return fm, params, x, y


@pytest.mark.parametrize("chunk", [512, 3])
def test_every_signal_matches_a_forward_pass_per_model(setting, chunk: int) -> None:
    fm, params, x, y = setting
    out = model_signals(fm, params, x, y, chunk=chunk)
    assert out.loss.shape == out.prob.shape == out.logit.shape == (3, 7)
    for m in range(3):
        z = fm.forward(params[m], x).double()  # (7, 10)
        loss = F.cross_entropy(z, y, reduction="none").numpy()
        p = torch.softmax(z, -1)[torch.arange(7), y].numpy()
        np.testing.assert_allclose(out.loss[m], loss, rtol=1e-6)
        np.testing.assert_allclose(out.prob[m], p, rtol=1e-6)
        np.testing.assert_allclose(out.logit[m], np.log(p / (1 - p)), rtol=1e-5)


def test_the_logit_stays_finite_where_the_confidence_rounds_to_one() -> None:
    fm = build_model("mlp", (1, 2, 2), 2)
    # every weight 0 and a last-layer bias of 60 on class 0: logits (60, 0) for any input, so
    # p_0 = 1 - e^-60 rounds to 1 in float64
    layers = {name: torch.zeros_like(p) for name, p in fm.module.named_parameters()}
    layers[list(layers)[-1]][0] = 60.0
    params = fm.flatten(layers)[None]  # (1, d)
    out = model_signals(fm, params, torch.zeros(2, 1, 2, 2), torch.tensor([0, 1]))
    assert out.prob[0, 0] == 1.0
    assert out.logit[0, 0] == pytest.approx(60.0) and out.logit[0, 1] == pytest.approx(-60.0)


def test_a_row_keeps_two_dimensions() -> None:
    s = Signals(np.arange(6.0).reshape(2, 3), np.ones((2, 3)), np.zeros((2, 3)))
    r = s.row(1)
    assert r.loss.shape == (1, 3) and r.loss.tolist() == [[3.0, 4.0, 5.0]]
