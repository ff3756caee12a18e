"""Image reconstruction metrics: pure functions of arrays (no files, no training code).

Image range: every function takes float images in **[0, 1]** (privbench's datasets are float32 in
[0, 1] and models see them unnormalised), shape (C, H, W) per image or (B, C, H, W) per batch.
Reconstructions are clamped to [0, 1] before scoring (the box every attack works in).

* `mse`, `psnr` (10 log10(1 / MSE), data range 1, per image, capped at
  100 dB), `ssim` (scikit-image
  `structural_similarity`, Gaussian window sigma 1.5 as in Wang et al. 2004, data_range 1;
  the window shrinks to the image side for images smaller than 7 px, e.g. 8x8 digits use 7x7).
* `lpips_distance`: LPIPS (Zhang et al. 2018, package `lpips`, AlexNet backbone, as breaching
  uses). Only when torchvision's AlexNet weights are already in the local torch hub cache:
  nothing is ever downloaded; otherwise `(None, "LPIPS unavailable: <reason>")`.
* `label_accuracy`: multiset overlap of recovered and true labels / number of true labels
  (order-free, as batch label inference is; equals plain accuracy for batch size 1).
* `match`: optimal one-to-one assignment of reconstructions to true images
  (`scipy.optimize.linear_sum_assignment` on the pairwise MSE matrix), rectangular allowed.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

IMAGE_RANGE = (0.0, 1.0)
ALEXNET_FILE = "alexnet-owt-7be5be79.pth"  # torchvision's AlexNet weights (what lpips loads)


def _np(x: Tensor | np.ndarray) -> np.ndarray:
    """float64 numpy copy clamped to the image range."""
    a = x.detach().cpu().double().numpy() if isinstance(x, Tensor) else np.asarray(x, np.float64)
    return np.clip(a, *IMAGE_RANGE)


def mse(rec: Tensor | np.ndarray, true: Tensor | np.ndarray) -> float:
    """Mean squared error of one image pair (C, H, W) in [0, 1]."""
    return float(np.mean((_np(rec) - _np(true)) ** 2))


def psnr(rec: Tensor | np.ndarray, true: Tensor | np.ndarray) -> float:
    """PSNR in dB of one image pair, data range 1, capped at 100 dB (MSE floored at 1e-10)."""
    return 10.0 * math.log10(1.0 / max(mse(rec, true), 1e-10))


def ssim(rec: Tensor | np.ndarray, true: Tensor | np.ndarray) -> float:
    """SSIM of one image pair (C, H, W) in [0, 1] (scikit-image, Gaussian weights, data range 1)."""
    from skimage.metrics import structural_similarity

    a, b = _np(rec), _np(true)
    side = min(a.shape[-2:])
    win = min(7, side if side % 2 == 1 else side - 1)
    return float(structural_similarity(a, b, data_range=1.0, channel_axis=0,
                                       gaussian_weights=win >= 7, sigma=1.5,
                                       use_sample_covariance=False, win_size=win))


def mse_matrix(rec: Tensor, true: Tensor) -> np.ndarray:
    """(R, T) pairwise MSE between reconstructions (R, C, H, W) and true images (T, C, H, W)."""
    a = torch.as_tensor(_np(rec)).flatten(1)
    b = torch.as_tensor(_np(true)).flatten(1)
    return ((a[:, None] - b[None]) ** 2).mean(-1).numpy()


def match(rec: Tensor, true: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Optimal one-to-one matching minimising total MSE (Hungarian algorithm).

    Args:
        rec: (R, C, H, W) reconstructions; true: (T, C, H, W) true images.

    Returns:
        (rec_idx, true_idx), each of length min(R, T): pair k is rec[rec_idx[k]] and
        true[true_idx[k]].
    """
    from scipy.optimize import linear_sum_assignment

    cost = mse_matrix(rec, true)
    # A non-finite reconstruction (a diverged attack) matches last; its metrics stay non-finite.
    cost = np.where(np.isfinite(cost), cost, np.finfo(np.float64).max / (cost.size + 1))
    r, t = linear_sum_assignment(cost)
    return r, t


def _ints(v: Sequence[int] | Tensor) -> list[int]:
    return [int(a) for a in (v.tolist() if isinstance(v, Tensor) else v)]


def label_accuracy(rec_labels: Sequence[int] | Tensor,
                   true_labels: Sequence[int] | Tensor) -> float:
    """|multiset(rec) ∩ multiset(true)| / |true| (order-free; plain accuracy for one label)."""
    rl, tl = _ints(rec_labels), _ints(true_labels)
    if not tl:
        return float("nan")
    return sum((Counter(rl) & Counter(tl)).values()) / len(tl)


def lpips_status() -> tuple[bool, str]:
    """Whether LPIPS can run without any download, and why not."""
    try:
        import lpips
    except ImportError as exc:
        return False, f"LPIPS unavailable: package lpips not importable ({exc})"
    hub = Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_FILE
    if not hub.is_file():
        return False, (f"LPIPS unavailable: torchvision's AlexNet weights ({ALEXNET_FILE}) are "
                       "not in the torch hub cache ($TORCH_HOME/hub/checkpoints/); privbench "
                       "never downloads them (reports/attacks/README.md: LPIPS offline)")
    lin = Path(os.path.dirname(lpips.__file__)) / "weights" / "v0.1" / "alex.pth"
    if not lin.is_file():
        return False, ("LPIPS unavailable: the lpips package lacks its own linear weights "
                       "(weights/v0.1/alex.pth); reinstall lpips")
    return True, "ok"


@lru_cache(maxsize=1)
def _lpips_net() -> Any:
    import lpips

    return lpips.LPIPS(net="alex", verbose=False).eval()


def lpips_distance(rec: Tensor, true: Tensor) -> tuple[list[float] | None, str]:
    """LPIPS (AlexNet) per pair for (N, C, H, W) batches in [0, 1], or (None, reason).

    Grey images are repeated to 3 channels; inputs are mapped to [-1, 1] as lpips expects.
    Images smaller than 16 px are upsampled (bilinear) to 32 px, because AlexNet's first layers
    need a minimum spatial size; that choice is part of the stated metric.
    """
    ok, why = lpips_status()
    if not ok:
        return None, why
    a = torch.as_tensor(_np(rec)).float()
    b = torch.as_tensor(_np(true)).float()
    if a.shape[1] == 1:
        a, b = a.repeat(1, 3, 1, 1), b.repeat(1, 3, 1, 1)
    if min(a.shape[-2:]) < 16:
        a = torch.nn.functional.interpolate(a, size=32, mode="bilinear", align_corners=False)
        b = torch.nn.functional.interpolate(b, size=32, mode="bilinear", align_corners=False)
    with torch.no_grad():
        d = _lpips_net()(a * 2 - 1, b * 2 - 1).flatten()
    return [float(v) for v in d], "ok"


def summarize(values: Sequence[float]) -> float | None:
    """Mean of the non-NaN values, or None when there are none."""
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None
