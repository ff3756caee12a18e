"""The analytic first-layer inversion (attacks/analytic.py): exact on a batch-1 MLP gradient,
from the first layer alone, and "not applicable" where the first layer is not read."""

from __future__ import annotations

import dataclasses

import torch

from privbench.audit.inversion import synthetic_views
from privbench.metrics import image as im
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS

load_plugins()
CPU = torch.device("cpu")


def _psnr(rec, x) -> list[float]:
    out = []
    for k in range(x.shape[0]):
        r, c = im.match(rec.images[k], x[k])
        out.append(min(im.psnr(rec.images[k][i], x[k][j]) for i, j in zip(r.tolist(), c.tolist(),
                                                                          strict=True)))
    return out


def test_a_batch_1_first_layer_gradient_gives_the_image_exactly() -> None:
    views, fm, x, y = synthetic_views(3, 1, seed=0, model="mlp")
    rec = ATTACKS.get("analytic")().reconstruct(views, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert all(p >= 60 for p in _psnr(rec, x)), _psnr(rec, x)
    assert float(rec.loss.max()) < 1e-8  # one sample explains the whole first layer
    assert torch.equal(rec.labels, y)
    assert all(s.measured and s.reason.startswith("(labels: idlg") for s in rec.status)
    # the first layer alone (a PartPSP-1 view) is enough; labels are then not observed
    w, b = fm.specs[0], fm.specs[1]
    mask = torch.zeros(fm.d, dtype=torch.bool)
    mask[w.start:b.stop] = True
    part = [dataclasses.replace(v, kind="partial", mask=mask,
                                gradient=torch.where(mask, v.gradient, 0.0)) for v in views]
    rec = ATTACKS.get("analytic")().reconstruct(part, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert all(p >= 60 for p in _psnr(rec, x))
    assert all("labels: not observed" in s.reason for s in rec.status)


def test_noise_on_the_gradient_defeats_it() -> None:
    views, fm, x, _ = synthetic_views(3, 1, seed=1, model="mlp")
    g = torch.Generator().manual_seed(0)
    noisy = [dataclasses.replace(v, gradient=v.gradient + torch.randn(v.gradient.shape,
                                                                      generator=g))
             for v in views]
    rec = ATTACKS.get("analytic")().reconstruct(noisy, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert max(_psnr(rec, x)) < 20
    assert float(rec.loss.min()) > 0.1  # no single image explains a noisy first layer


def test_views_it_cannot_read_are_not_applicable() -> None:
    views, fm, _, _ = synthetic_views(2, 1, seed=0, model="lenet")  # conv first layer
    rec = ATTACKS.get("analytic")().reconstruct(views, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert all(s.not_applicable and "not a fully connected layer" in s.reason for s in rec.status)
    views, fm, _, _ = synthetic_views(2, 1, seed=0, model="mlp")
    signs = [dataclasses.replace(v, kind="sign") for v in views]
    rec = ATTACKS.get("analytic")().reconstruct(signs, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert all(s.not_applicable and "sign-only" in s.reason for s in rec.status)
    last = torch.zeros(fm.d, dtype=torch.bool)
    last[fm.specs[-2].start:] = True  # only the last layer shared
    part = [dataclasses.replace(v, kind="partial", mask=last) for v in views]
    rec = ATTACKS.get("analytic")().reconstruct(part, fm, (1, 8, 8), 10, CPU, torch.Generator())
    assert all(s.not_applicable and "does not observe the whole first layer" in s.reason
               for s in rec.status)
