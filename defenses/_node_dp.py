"""Per-node Gaussian DP shared by the DPDL family (DPDL, DP-DPSGD, DP-CGA, MUFFLIATO): sample rates
and sampling per node, the checks of the clip bound and noise multiplier, noise multipliers
calibrated per node or to the worst node, and their reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from defenses._graph import WEIGHTS
from privbench.accounting import (
    INTEGER_RDP_ORDERS,
    AccountantOptions,
    EpsilonReport,
    GaussianEvent,
    PrivacyLedger,
    account,
)
from privbench.accounting import calibrate as calibration
from privbench.config import JSONObject
from privbench.engine.grads import clipped_grad_sum
from privbench.engine.planning import report_of, worst_node
from privbench.engine.privacy import PlanRequest
from privbench.engine.trainer import Context
from privbench.errors import ConfigError

RDP_OPTIONS = AccountantOptions(rdp_orders=INTEGER_RDP_ORDERS)


SAMPLING_MODELS = {"poisson": "poisson", "fixed": "fixed_without_replacement"}
"""Config `sampling` -> the accounting sampling model it is (privbench.accounting SAMPLINGS)."""


def calibrate_max_node(epsilon: float, delta: float, rounds: int, rates: Sequence[float],
                       ratios: Sequence[float], accountant: str,
                       options: AccountantOptions, sampling: str = "poisson") -> float:
    """`privbench.accounting.calibrate.calibrate_max_node` (sigma = max_i z*(q_i) / r_i) with
    the config's `sampling` ("poisson" or "fixed"), accounted as `SAMPLING_MODELS[sampling]`."""
    return calibration.calibrate_max_node(epsilon, delta, rounds, rates, ratios, accountant,
                                          options, SAMPLING_MODELS[sampling])


def calibrate_sigmas(sigma_rule: str, epsilon: float, delta: float, rounds: int,
                     rates: Sequence[float], ratios: Sequence[float], accountant: str,
                     options: AccountantOptions, sampling: str = "poisson") -> np.ndarray:
    """(n,) sigma_i for nodes whose release multiplier is z_i = sigma_i * ratios[i] and whose
    own noise alone covers them (DP-DPSGD, DP-CGA): "max" one sigma for all
    (`calibrate_max_node`), "per_node" each node's own smallest sigma (each distinct
    (rate, ratio) calibrated once)."""
    if sigma_rule == "max":
        return np.full(len(rates), calibrate_max_node(epsilon, delta, rounds, rates, ratios,
                                                      accountant, options, sampling))
    pairs = list(zip(rates, ratios, strict=True))
    cache = {key: calibrate_max_node(epsilon, delta, rounds, [key[0]], [key[1]], accountant,
                                     options, sampling) for key in set(pairs)}
    return np.array([cache[key] for key in pairs])


def sampling_rates(counts: Sequence[int], batch_size: int) -> tuple[float, ...]:
    """q_i = min(1, B / |D_i|) per node, as the privacy plans account them (DPDL, DP-CGA)."""
    return tuple(min(1.0, batch_size / max(c, 1)) for c in counts)


def node_rates(ctx: Context) -> tuple[Tensor, Tensor]:
    """(n,) member counts |D_i| and (n,) sampling rates q_i = min(1, B / |D_i|) (float64), on
    the run's device (DPDL, DP-DPSGD, DP-CGA, MUFFLIATO).

    torch divides a scalar by a tensor through a reciprocal, so a q_i here can differ from
    `sampling_rates` in the last bit (e.g. 100 / 600); kept so committed runs replay bit for bit.
    """
    counts = ctx.data.counts.to(ctx.device)
    return counts, (ctx.run.batch_size / counts.clamp(min=1).double()).clamp(max=1.0)


def sample_round(ctx: Context, t: int, sampling: str, rates: Tensor, counts: Tensor,
                 dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Round t's batches for every agent, recorded as ground truth (shared with DP-DPSGD).

    Args:
        sampling: "fixed" (B without replacement) or "poisson" (rates q_i).
        rates: (n,) Poisson rates q_i = B / |D_i|; counts: (n,) |D_i|.

    Returns:
        x (n, B', ...), y (n, B'), mask (n, B') and the divisors (n,): the realised batch size
        for "fixed", the expected size q_i |D_i| for "poisson".
    """
    if sampling == "fixed":
        x, y, mask = ctx.draw(t, batch_size=ctx.run.batch_size)
        denom = mask.sum(dim=1).clamp(min=1).to(dtype)  # B (|D_i| if smaller)
    else:
        x, y, mask = ctx.draw(t, rates=rates)  # (n, B')
        denom = (rates * counts).to(dtype)  # expected size q_i |D_i|
    return x, y, mask, denom


def check_gaussian_settings(name: str, clip: float, sigma: float | None,
                            momentum: float = 0.0) -> None:
    """A config's clip bound C > 0, noise multiplier sigma >= 0 (None: calibrated), momentum
    beta in [0, 1); C = inf (no clipping) bounds no sensitivity, so it needs sigma = 0.

    Raises:
        ConfigError: naming the defense `name`, the field and the accepted values.
    """
    if not clip > 0:
        raise ConfigError(f"{name} clip must be > 0, got {clip}")
    if not 0 <= momentum < 1:
        raise ConfigError(f"{name} momentum must be in [0, 1), got {momentum}")
    if sigma is not None and not sigma >= 0:
        raise ConfigError(f"{name} sigma must be >= 0, got {sigma}")
    if math.isinf(clip) and sigma != 0:
        raise ConfigError(f"{name} clip=inf has unbounded sensitivity: it needs sigma=0")


GAUSSIAN_CHOICES = {"accountant": ("rdp", "pld"), "sigma_rule": ("max", "per_node"),
                    "sampling": tuple(SAMPLING_MODELS), "weights": WEIGHTS}
"""The config choices of a gossip trainer with DP-SGD releases (DP-DPSGD, MUFFLIATO)."""


def node_sigmas(cfg: Any, ctx: Context, rates: Tensor, releases: int) -> Tensor:
    """(n,) noise multipliers: cfg.sigma when fixed, else calibrated so that `releases`
    subsampled Gaussians at the nodes' rates meet the run's (epsilon, delta) (cfg: sigma,
    sigma_rule, accountant, sampling)."""
    run = ctx.run
    if cfg.sigma is not None:
        sigma = [float(cfg.sigma)] * ctx.n
    else:
        sigma = calibrate_sigmas(cfg.sigma_rule, run.epsilon, run.delta, releases,
                                 rates.tolist(), [1.0] * ctx.n, cfg.accountant,
                                 reading_options(cfg.accountant),
                                 cfg.sampling).tolist()
    return torch.tensor(sigma, dtype=torch.float32, device=ctx.device)


def noisy_clipped_mean(ctx: Context, params: Tensor, t: int, cfg: Any, rates: Tensor,
                       counts: Tensor, sigma: Tensor) -> dict[str, Tensor]:
    """Round t's DP-SGD release of every node at params (n, d): "noisy" = (sum_b clip_C(g_b)
    + N(0, sigma_i^2 C^2 I)) / B_i, with its parts "sums", "noise" (n, d) and "denom" (n,)."""
    xb, yb, mask, denom = sample_round(ctx, t, cfg.sampling, rates, counts, params.dtype)
    sums, _ = clipped_grad_sum(ctx.fm, params, xb, yb, mask, cfg.clip)  # (n, d)
    noise = torch.zeros_like(sums)
    if bool((sigma > 0).any()):
        scale = (sigma * cfg.clip)[:, None]  # (n, 1)
        noise = torch.randn(sums.shape, generator=ctx.streams.get("noise"),
                            device=sums.device, dtype=sums.dtype) * scale
    return {"sums": sums, "noise": noise, "denom": denom, "noisy": (sums + noise) / denom[:, None]}


def gaussian_report(z: float, q: float, releases: int, delta: float, accountant: str, mode: str,
                    sampling: str, note: str, options: AccountantOptions, node: int = 0,
                    uncovered: tuple[str, ...] = ()) -> EpsilonReport:
    """Node `node`'s `releases` subsampled Gaussian releases of noise multiplier z at rate q
    (`sampling`: an accounting sampling model), read by `accountant`; z = 0 (no noise) is
    reported as epsilon = inf."""
    if z == 0:
        return EpsilonReport(math.inf, delta, accountant, mode, "sample-level", uncovered,
                             note="sigma = 0: no noise", sampling=sampling)
    ledger = PrivacyLedger(node=node, uncovered=uncovered).record(
        GaussianEvent(z, q, releases, sampling))
    return account(ledger, delta, accountant, mode=mode, note=note, options=options)


def reading_options(accountant: str) -> AccountantOptions:
    """RDP over the integer orders 2..256 (the DPDL family's RDP), else the defaults."""
    return RDP_OPTIONS if accountant == "rdp" else AccountantOptions()


def gaussian_node_reports(rates: list[float], sigmas: list[float], delta: float, releases: int,
                          accountant: str, sampling: str, note: str) -> list[dict[str, Any]]:
    """Per node i: `releases` Poisson/fixed-subsampled Gaussian releases of multiplier
    sigmas[i] at rate rates[i], read by RDP (the paper report) and by `accountant` (calibrated);
    sigma 0 is reported as epsilon = inf (shared by DP-DPSGD and MUFFLIATO)."""
    out = []
    model = SAMPLING_MODELS[sampling]
    for i, (q, sig) in enumerate(zip(rates, sigmas, strict=True)):
        for mode, acc in (("paper", "rdp"), ("calibrated", accountant)):
            rep = gaussian_report(sig, q, releases, delta, acc, mode, model, note,
                                  reading_options(acc), node=i)
            out.append({**rep.to_dict(), "node": i, "sigma": sig, "sample_rate": q})
    return out


def gaussian_release_plan(req: PlanRequest, cfg: Any, releases: int, note: str,
                          ) -> tuple[float, tuple[EpsilonReport, ...]]:
    """(sigma, [paper, calibrated] reports) of `releases` releases at the request's rate, as
    DP-DPSGD's and MUFFLIATO's trainers calibrate (`calibrate_sigmas`) and report
    (`gaussian_node_reports`)."""
    opts = RDP_OPTIONS if req.accountant == "rdp" else req.options
    sigma = float(calibrate_sigmas(cfg.sigma_rule, req.epsilon, req.delta, releases,
                                   [req.sample_rate], [1.0], req.accountant, opts,
                                   cfg.sampling)[0])
    reports = gaussian_node_reports([req.sample_rate], [sigma], req.delta, releases,
                                    req.accountant, cfg.sampling, note)
    return sigma, tuple(report_of(r) for r in reports)


def worst_node_readings(reports: list[JSONObject]) -> tuple[int, dict[str, JSONObject]]:
    """The node whose strict epsilon is largest, and its report under every reading (DPDL,
    DP-CGA: the node a request's graph plan describes)."""
    worst = worst_node(reports, "strict")
    return worst, {r["reading"]: r for r in reports if r["node"] == worst}
