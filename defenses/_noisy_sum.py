"""The Gaussian mechanism on a sum of clipped per-sample gradients, as the push-sum DP-SGD
defenses release it every round (DP-SGP, ADP-VRSGP's Algorithm 2, Dyn-D2P's Algorithm 1)."""

from __future__ import annotations

import torch
from torch import Tensor

from privbench.engine.grads import clipped_grad_sum
from privbench.engine.trainer import Context


def noisy_clipped_sum(ctx: Context, params: Tensor, x: Tensor, y: Tensor, mask: Tensor,
                      clip: Tensor | float, std: Tensor) -> Tensor:
    """sum_b clip_C(grad l(params_i; b)) + std_i N(0, I) for every node i (noise from the
    run's "noise" stream, one draw per round whatever std is).

    Args:
        params: (n, d) where each node's gradients are taken; x, y, mask: its batch (n, B', ...).
        clip: the L2 clip bound C (a scalar, or a 0-d tensor of a decaying schedule).
        std: (n, 1) the noise std on the clipped sum (noise multiplier times C).

    Returns:
        (n, d) the noisy clipped sum; the caller divides by its batch divisor.
    """
    sums, _ = clipped_grad_sum(ctx.fm, params, x, y, mask, clip)  # (n, d)
    u = torch.randn(sums.shape, generator=ctx.streams.get("noise"), device=ctx.device,
                    dtype=sums.dtype)  # (n, d)
    return sums + std * u
