"""Image metrics: known values, ranges, matching and the LPIPS availability rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privbench.metrics import image as im


def test_mse_psnr_known_values() -> None:
    a = torch.zeros(1, 8, 8)
    b = torch.full((1, 8, 8), 0.1)
    assert im.mse(a, b) == pytest.approx(0.01)
    assert im.psnr(a, b) == pytest.approx(20.0)  # 10 log10(1 / 0.01)
    assert im.psnr(a, a) == pytest.approx(100.0)  # capped: MSE floored at 1e-10


def test_images_are_clamped_to_unit_range() -> None:
    a = torch.full((1, 4, 4), 2.0)  # out of range -> 1
    b = torch.ones(1, 4, 4)
    assert im.mse(a, b) == 0.0


def test_ssim_identity_and_noise() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.rand(1, 8, 8, generator=g)
    assert im.ssim(a, a) == pytest.approx(1.0)
    noisy = (a + 0.5 * torch.randn(1, 8, 8, generator=g)).clamp(0, 1)
    assert im.ssim(noisy, a) < 0.9
    big = torch.rand(3, 32, 32, generator=g)
    assert im.ssim(big, big) == pytest.approx(1.0)


def test_match_recovers_a_permutation() -> None:
    g = torch.Generator().manual_seed(1)
    true = torch.rand(5, 1, 8, 8, generator=g)
    perm = torch.tensor([3, 0, 4, 1, 2])
    rec = true[perm] + 0.01 * torch.randn(5, 1, 8, 8, generator=g)
    r, c = im.match(rec, true)
    assert dict(zip(r.tolist(), c.tolist(), strict=True)) == dict(enumerate(perm.tolist()))
    # rectangular: 2 reconstructions, 5 true images
    r2, c2 = im.match(rec[:2], true)
    assert len(r2) == 2 and sorted(c2.tolist()) == sorted(perm[:2].tolist())


def test_label_accuracy_is_a_multiset_overlap() -> None:
    assert im.label_accuracy([3], [3]) == 1.0
    assert im.label_accuracy([3], [4]) == 0.0
    assert im.label_accuracy([1, 1, 2], [1, 2, 2]) == pytest.approx(2 / 3)
    assert math.isnan(im.label_accuracy([], []))


def test_lpips_never_invents_a_value() -> None:
    ok, why = im.lpips_status()
    vals, status = im.lpips_distance(torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 8))
    if ok:
        assert vals is not None and len(vals) == 2 and all(np.isfinite(vals))
    else:
        assert vals is None and status.startswith("LPIPS unavailable") and status == why
